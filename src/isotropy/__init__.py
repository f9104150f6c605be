"""isotropy: measure and shape the geometry of transformer representations.

Point clouds are arrays of shape ``(n_points, dim)`` -- one row per point (the original
IsoScore code used the transpose).
"""

from isotropy.covariance import CovarianceStats
from isotropy.isoscore import (
    isoscore,
    isoscore_from_covariance,
    isoscore_star,
    participation_ratio,
    participation_ratio_from_covariance,
)

__version__ = "0.1.0"

__all__ = [
    "CovarianceStats",
    "isoscore",
    "isoscore_from_covariance",
    "isoscore_star",
    "participation_ratio",
    "participation_ratio_from_covariance",
]
