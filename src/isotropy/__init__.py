"""isotropy: measure and shape the geometry of transformer representations.

Point clouds are arrays of shape ``(n_points, dim)`` -- one row per point (the original
IsoScore code used the transpose). Functions accept torch tensors and NumPy arrays.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import Any

from isotropy.losses import (
    CosRegLoss,
    IStarLoss,
    PersistentEntropyLoss,
    Regularizer,
    RegularizerOutput,
)
from isotropy.measures.cosine import avg_cosine_similarity, cosine_regularization_term
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import (
    isoscore,
    isoscore_from_covariance,
    isoscore_star,
    participation_ratio,
    participation_ratio_from_covariance,
)
from isotropy.measures.isoscore_metric import (
    IsoScoreMetric,
    isoscore_star_compute,
    isoscore_star_update,
)
from isotropy.measures.partition import partition_score
from isotropy.measures.spectrum import anisotropy_spectrum
from isotropy.measures.topology import h0_barcode, persistent_entropy, prominent_features
from isotropy.measures.twonn import twonn

try:  # the one place the version is read: the installed package's metadata (pyproject.toml)
    __version__ = _metadata.version("isotropy")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

# Names whose modules import transformers: loaded on first use to keep `import isotropy` light.
_LAZY = {
    "RegularizedModel": "isotropy.models.regularized",
    "refresh_shrinkage": "isotropy.models.shrinkage",
    "estimate_shrinkage": "isotropy.models.shrinkage",
    "collect_covariance": "isotropy.models.shrinkage",
    "ShrinkageRefreshCallback": "isotropy.models.shrinkage",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'isotropy' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazily loaded ones, so that tab completion finds
    ``isotropy.RegularizedModel`` before its first use."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CosRegLoss",
    "CovarianceStats",
    "IStarLoss",
    "IsoScoreMetric",
    "PersistentEntropyLoss",
    "RegularizedModel",
    "Regularizer",
    "RegularizerOutput",
    "ShrinkageRefreshCallback",
    "anisotropy_spectrum",
    "avg_cosine_similarity",
    "collect_covariance",
    "cosine_regularization_term",
    "estimate_shrinkage",
    "h0_barcode",
    "isoscore",
    "isoscore_from_covariance",
    "isoscore_star",
    "isoscore_star_compute",
    "isoscore_star_update",
    "participation_ratio",
    "participation_ratio_from_covariance",
    "partition_score",
    "persistent_entropy",
    "prominent_features",
    "refresh_shrinkage",
    "twonn",
]
