"""Regularizers to add to a task loss: I-STAR, CosReg and persistent entropy."""

from isotropy.losses.base import Regularizer, RegularizerOutput
from isotropy.losses.cosreg import CosRegLoss
from isotropy.losses.entropy import PersistentEntropyLoss
from isotropy.losses.istar import IStarLoss

__all__ = [
    "CosRegLoss",
    "IStarLoss",
    "PersistentEntropyLoss",
    "Regularizer",
    "RegularizerOutput",
]
