"""isotropy: measure and shape the geometry of transformer representations.

Point clouds are arrays of shape ``(n_points, dim)`` -- one row per point (the original
IsoScore code used the transpose). Functions accept torch tensors and NumPy arrays.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
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
    from isotropy.measures.layernorm_outliers import layernorm_outliers
    from isotropy.measures.outlier_result import Outliers
    from isotropy.measures.outliers import (
        OutlierStats,
        activation_outliers,
        activation_outliers_from_stats,
        cosine_contributions,
        cosine_contributions_from_stats,
        isoscore_without,
        massive_activations,
        massive_activations_from_stats,
        rogue_dimensions,
        top_variance_dimensions,
        variance_outliers,
        variance_outliers_from_stats,
    )
    from isotropy.measures.partition import partition_score
    from isotropy.measures.rank import (
        effective_rank,
        effective_rank_from_stats,
        rankme,
        rankme_from_stats,
    )
    from isotropy.measures.spectrum import anisotropy_spectrum
    from isotropy.measures.topology import h0_barcode, persistent_entropy, prominent_features
    from isotropy.measures.twonn import twonn
    from isotropy.measures.uniformity import alignment, uniformity
    from isotropy.models.mean_pooling import MeanPooledClassifier
    from isotropy.models.regularized import RegularizedModel
    from isotropy.models.shrinkage import (
        ShrinkageRefreshCallback,
        collect_covariance,
        estimate_shrinkage,
        refresh_shrinkage,
    )
    from isotropy.training.lightning_callbacks import LightningShrinkageRefresh
    from isotropy.training.monitor import (
        GeometryMonitor,
        LightningGeometryMonitor,
        measure_geometry,
    )
    from isotropy.training.regularized_trainer import RegularizedTrainer
    from isotropy.training.regularizer_logs import RegularizerLogMixin

try:  # the one place the version is read: the installed package's metadata (pyproject.toml)
    __version__ = _metadata.version("isotropy")
except _metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

# Every public name loads its module on first use, so that `import isotropy` (and the command
# line's start, where Ctrl-C must stay one line) does not wait for torch.
_LAZY = {
    **dict.fromkeys(["CosRegLoss", "IStarLoss", "PersistentEntropyLoss", "Regularizer",
                     "RegularizerOutput"], "isotropy.losses"),
    **dict.fromkeys(["avg_cosine_similarity", "cosine_regularization_term"],
                    "isotropy.measures.cosine"),
    "CovarianceStats": "isotropy.measures.covariance",
    **dict.fromkeys(["isoscore", "isoscore_from_covariance", "isoscore_star",
                     "participation_ratio", "participation_ratio_from_covariance"],
                    "isotropy.measures.isoscore"),
    **dict.fromkeys(["IsoScoreMetric", "isoscore_star_compute", "isoscore_star_update"],
                    "isotropy.measures.isoscore_metric"),
    "partition_score": "isotropy.measures.partition",
    **dict.fromkeys(["OutlierStats", "activation_outliers", "activation_outliers_from_stats",
                     "cosine_contributions", "cosine_contributions_from_stats",
                     "isoscore_without", "massive_activations",
                     "massive_activations_from_stats", "rogue_dimensions",
                     "top_variance_dimensions", "variance_outliers",
                     "variance_outliers_from_stats"], "isotropy.measures.outliers"),
    "layernorm_outliers": "isotropy.measures.layernorm_outliers",
    "Outliers": "isotropy.measures.outlier_result",
    "anisotropy_spectrum": "isotropy.measures.spectrum",
    **dict.fromkeys(["h0_barcode", "persistent_entropy", "prominent_features"],
                    "isotropy.measures.topology"),
    "twonn": "isotropy.measures.twonn",
    **dict.fromkeys(["effective_rank", "effective_rank_from_stats", "rankme",
                     "rankme_from_stats"], "isotropy.measures.rank"),
    **dict.fromkeys(["alignment", "uniformity"], "isotropy.measures.uniformity"),
    "RegularizedModel": "isotropy.models.regularized",
    "MeanPooledClassifier": "isotropy.models.mean_pooling",
    "RegularizedTrainer": "isotropy.training.regularized_trainer",
    "RegularizerLogMixin": "isotropy.training.regularizer_logs",
    "LightningShrinkageRefresh": "isotropy.training.lightning_callbacks",
    **dict.fromkeys(["GeometryMonitor", "LightningGeometryMonitor", "measure_geometry"],
                    "isotropy.training.monitor"),
    **dict.fromkeys(["refresh_shrinkage", "estimate_shrinkage", "collect_covariance",
                     "ShrinkageRefreshCallback"], "isotropy.models.shrinkage"),
}


_SUBPACKAGES = {"clouds", "cli", "data", "distributed", "io", "locking", "losses", "measures",
                "models", "paper", "probing", "progress", "reporting", "rundir", "runtime",
                "sweeps", "training"}


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:  # `import isotropy; isotropy.measures...` as before
        import importlib

        return importlib.import_module(f"isotropy.{name}")
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # loaded once
        return value
    raise AttributeError(f"module 'isotropy' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazily loaded ones, so that tab completion finds
    ``isotropy.RegularizedModel`` before its first use."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CosRegLoss",
    "CovarianceStats",
    "GeometryMonitor",
    "IStarLoss",
    "IsoScoreMetric",
    "LightningGeometryMonitor",
    "LightningShrinkageRefresh",
    "MeanPooledClassifier",
    "OutlierStats",
    "Outliers",
    "PersistentEntropyLoss",
    "RegularizedModel",
    "RegularizedTrainer",
    "Regularizer",
    "RegularizerLogMixin",
    "RegularizerOutput",
    "ShrinkageRefreshCallback",
    "activation_outliers",
    "activation_outliers_from_stats",
    "alignment",
    "anisotropy_spectrum",
    "avg_cosine_similarity",
    "collect_covariance",
    "cosine_contributions",
    "cosine_contributions_from_stats",
    "cosine_regularization_term",
    "effective_rank",
    "effective_rank_from_stats",
    "estimate_shrinkage",
    "h0_barcode",
    "isoscore",
    "isoscore_from_covariance",
    "isoscore_star",
    "isoscore_star_compute",
    "isoscore_star_update",
    "isoscore_without",
    "layernorm_outliers",
    "massive_activations",
    "massive_activations_from_stats",
    "measure_geometry",
    "participation_ratio",
    "participation_ratio_from_covariance",
    "partition_score",
    "persistent_entropy",
    "prominent_features",
    "rankme",
    "rankme_from_stats",
    "refresh_shrinkage",
    "rogue_dimensions",
    "top_variance_dimensions",
    "twonn",
    "uniformity",
    "variance_outliers",
    "variance_outliers_from_stats",
]
