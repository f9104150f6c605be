"""Fine-tuning harness: ``isotropy train`` on the Hugging Face ``Trainer``.

Data (task registry, local files) -> tokenised features -> ``AutoModelFor...`` wrapped in a
:class:`~isotropy.models.regularized.RegularizedModel` ->
``Trainer`` with the Sigma_S refresh and the
regularizer logs -> a self-describing run directory.
"""

from isotropy.training.config import REGULARIZERS, IsotropyArguments, TrainArguments
from isotropy.training.presets import TRAIN_PRESETS
from isotropy.training.run import TrainResult, run_training
from isotropy.training.settings import parse_train_args

__all__ = [
    "TRAIN_PRESETS",
    "REGULARIZERS",
    "IsotropyArguments",
    "TrainArguments",
    "TrainResult",
    "parse_train_args",
    "run_training",
]
