"""Trainer checkpoints of a PEFT model (LoRA, ...) inside a
:class:`~isotropy.models.regularized.RegularizedModel`.

Saving needs nothing: the wrapper saves what the wrapped model saves, so a PEFT model's
checkpoints and ``save_model`` hold its adapter (``adapter_model.safetensors``,
``adapter_config.json``), which ``PeftModel.from_pretrained(base, path)`` loads. Loading is
where the ``Trainer`` goes wrong: it recognises a PEFT model by its class, so through the
wrapper it looks for a whole model's ``model.safetensors`` and ``resume_from_checkpoint`` and
``load_best_model_at_end`` fail. :class:`PeftCheckpointMixin` (in
:class:`~isotropy.training.regularized_trainer.RegularizedTrainer`) hands the ``Trainer`` the
PEFT model itself for those two loads, and changes nothing for any other model.

>>> from transformers import Trainer
>>> class MyTrainer(PeftCheckpointMixin, Trainer):
...     pass
>>> peft_model_inside(torch.nn.Linear(2, 2)) is None
True
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from isotropy.models.regularized import find_regularized

__all__ = ["PeftCheckpointMixin", "peft_model_inside"]


def peft_model_inside(model: Any) -> torch.nn.Module | None:
    """The PEFT model a :class:`~isotropy.models.regularized.RegularizedModel` wraps (through
    DDP or ``torch.compile`` wrappers), or ``None`` (no wrapper, another model inside, or
    ``peft`` not installed)."""
    wrapper = find_regularized(model)
    peft = sys.modules.get("peft")  # a PEFT model exists only once peft is imported
    if wrapper is None or peft is None:
        return None
    inner = wrapper.model
    return inner if isinstance(inner, peft.PeftModel | peft.PeftMixedModel) else None


class PeftCheckpointMixin:
    """Resume and best-model loading for a PEFT model inside a :class:`RegularizedModel`
    (module docstring). Put it before ``Trainer`` in the bases. Under FSDP, DeepSpeed or
    SageMaker model parallelism the ``Trainer`` saves and loads the wrapped training model
    itself, so nothing is changed there."""

    def _peft_to_load(self, model: torch.nn.Module | None) -> torch.nn.Module | None:
        from transformers.utils import is_sagemaker_mp_enabled

        if (getattr(self, "is_fsdp_enabled", False) or getattr(self, "is_deepspeed_enabled", False)
                or is_sagemaker_mp_enabled()):
            return None
        return peft_model_inside(self.model if model is None else model)  # type: ignore[attr-defined]

    def _load_from_checkpoint(self, resume_from_checkpoint: str,
                              model: torch.nn.Module | None = None) -> None:
        inner = self._peft_to_load(model)
        super()._load_from_checkpoint(  # type: ignore[misc]
            resume_from_checkpoint, model=inner if inner is not None else model)

    def _load_best_model(self) -> None:
        inner = self._peft_to_load(None)
        if inner is None:
            super()._load_best_model()  # type: ignore[misc]
            return
        wrapper = self.model  # type: ignore[attr-defined]
        self.model = inner  # the Trainer reads the model to load into from self.model
        try:
            super()._load_best_model()  # type: ignore[misc]
        finally:
            self.model = wrapper
