"""``RegularizedTrainer``: the Hugging Face ``Trainer`` for a
:class:`~isotropy.models.regularized.RegularizedModel`, with every mixin of this package.

>>> from transformers import Trainer
>>> issubclass(RegularizedTrainer, Trainer)
True
"""

from __future__ import annotations

from transformers import Trainer

from isotropy.training.exact_cycle import ExactCycleMixin
from isotropy.training.peft_checkpoints import PeftCheckpointMixin

__all__ = ["RegularizedTrainer"]


class RegularizedTrainer(ExactCycleMixin, PeftCheckpointMixin, Trainer):
    """``transformers.Trainer`` with the regularizers' values in its logs
    (:class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`), the
    persistent-entropy loss's exact objective under gradient accumulation
    (:class:`~isotropy.training.exact_cycle.ExactCycleMixin`), and resume / best-model
    loading of a PEFT model inside the wrapper
    (:class:`~isotropy.training.peft_checkpoints.PeftCheckpointMixin`)."""
