r"""Streamed token-cloud statistics, and undefined measures as ``None`` with a reason.

:class:`TokenCloudStats` streams what the covariance-based measures and the average cosine of
a token cloud need without keeping the tokens: covariance statistics
(:class:`~isotropy.measures.covariance.CovarianceStats`), the coordinate-wise minima and
maxima, and the outlier-dimension sums (:class:`~isotropy.measures.outliers.OutlierStats`),
among them the sum :math:`s = \sum_i x_i/\lVert x_i\rVert` of unit rows, from which the
average cosine over all :math:`n(n-1)` ordered pairs is :math:`(\lVert s\rVert^2 - n)/(n(n-1))`.

A cloud whose points are all identical up to float32 rounding (every coordinate's range
:math:`\max_i x_{ij} - \min_i x_{ij}` within :math:`8\epsilon_{32}` of the largest
:math:`|x_{ij}|`) has zero variance (:func:`constant_reason`): the variance-based measures are
undefined there although the library's functions would score the rounding noise.
:func:`safe_measure` turns an undefined measure (a known reason, a ``ValueError`` /
``RuntimeError``, or a non-finite value) into ``None`` and a line in an error list.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.outlier_result import Outliers
from isotropy.measures.outliers import OutlierStats
from isotropy.measures.twonn import twonn

__all__ = [
    "ZERO_VARIANCE",
    "TokenCloudStats",
    "constant_reason",
    "is_constant",
    "safe_measure",
    "spectrum_from_moment",
    "twonn_of_distinct",
]

ZERO_VARIANCE = "zero variance: all points identical"
# Hidden states are kept in float32: coordinates that agree to a few float32 roundings of the
# cloud's largest |x| are the same number computed along different paths.
_CONSTANT_RTOL = 8 * torch.finfo(torch.float32).eps


class TokenCloudStats:
    """Streamed statistics of one token cloud (see the module doc); rows of norm zero are
    counted in ``n_zero_norm`` (their cosine is undefined) and left out of the unit sum."""

    def __init__(self, dim: int) -> None:
        self.stats = CovarianceStats.empty(dim)
        self.outliers = OutlierStats.empty(dim)
        # coordinate-wise minima and maxima, kept where the rows are (no copy to the host per
        # batch); read on the host through ``lo`` and ``hi``
        self._lo = torch.full((dim,), float("inf"))
        self._hi = torch.full((dim,), float("-inf"))

    @property
    def lo(self) -> torch.Tensor:
        """The coordinate-wise minima of the rows so far (float32, on the CPU)."""
        return self._lo.cpu()

    @lo.setter
    def lo(self, value: torch.Tensor) -> None:
        self._lo = value

    @property
    def hi(self) -> torch.Tensor:
        """The coordinate-wise maxima of the rows so far (float32, on the CPU)."""
        return self._hi.cpu()

    @hi.setter
    def hi(self, value: torch.Tensor) -> None:
        self._hi = value

    @property
    def count(self) -> int:
        return self.stats.count

    @property
    def unit_sum(self) -> torch.Tensor:
        r""":math:`s = \sum_i x_i/\lVert x_i\rVert` over the rows of nonzero norm."""
        return self.outliers.unit_sum

    @property
    def n_zero_norm(self) -> int:
        return self.outliers.n_zero_norm

    def update(self, rows: torch.Tensor) -> None:
        """Add the rows of ``rows`` (``(n, dim)``)."""
        if rows.shape[0] == 0:
            return
        self.stats.update(rows)
        self._lo = torch.minimum(self._lo.to(rows.device), rows.amin(0).float())
        self._hi = torch.maximum(self._hi.to(rows.device), rows.amax(0).float())
        if self.outliers.abs_sum.device != rows.device:  # the sums stay where the rows are
            self.outliers = self.outliers.to(rows.device)
        self.outliers.update(rows)

    def merge(self, other: TokenCloudStats) -> TokenCloudStats:
        """The statistics of the union of both clouds (a new object)."""
        out = TokenCloudStats(self.stats.dim)
        out.stats = self.stats.merge(other.stats)
        out.outliers = self.outliers.merge(other.outliers)
        out.lo = torch.minimum(self.lo, other.lo)
        out.hi = torch.maximum(self.hi, other.hi)
        return out

    def reason(self) -> str | None:
        """Why the variance-based measures are undefined on the cloud, or ``None``."""
        if self.count < 2:
            return f"{self.count} point(s): at least 2 are needed"
        return constant_reason(self.lo, self.hi)

    def avg_cosine(self) -> float:
        r"""Average cosine :math:`(\lVert s\rVert^2 - n)/(n(n-1))` over all pairs of rows;
        ``ValueError`` for fewer than 2 rows or a row of norm zero."""
        n = self.count
        if self.n_zero_norm:
            raise ValueError(
                f"{self.n_zero_norm} token vector(s) have norm zero: cosine similarity is "
                "undefined"
            )
        if n < 2:
            raise ValueError(f"the average cosine needs at least 2 points, have {n}")
        s = self.unit_sum
        return float(((s * s).sum() - n) / (n * (n - 1)))


def is_constant(lo: torch.Tensor, hi: torch.Tensor) -> bool:
    r"""Whether a cloud with coordinate-wise minima ``lo`` and maxima ``hi`` is one point:
    :math:`\max_j (hi_j - lo_j) \le 8\,\epsilon_{32} \max_j \max(|lo_j|, |hi_j|)`."""
    scale = float(torch.maximum(lo.abs(), hi.abs()).max())
    return float((hi - lo).max()) <= _CONSTANT_RTOL * scale


def constant_reason(lo: torch.Tensor, hi: torch.Tensor) -> str | None:
    """:data:`ZERO_VARIANCE` when the cloud is one point (:func:`is_constant`), else ``None``."""
    return ZERO_VARIANCE if is_constant(lo, hi) else None


def _finite(value: Any) -> bool:
    if isinstance(value, Outliers):
        return _finite(value.scores)
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return value is None or math.isfinite(value)


def safe_measure(errors: list[str], where: str, fn: Callable[[], Any],
                 reason: str | None = None) -> Any:
    """``fn()``, or ``None`` with ``"<where>: <reason>"`` appended to ``errors`` when a known
    ``reason`` makes it undefined, when it raises ``ValueError``/``RuntimeError``, or when
    its value is not finite (warnings inside ``fn`` are silenced)."""
    if reason is not None:
        errors.append(f"{where}: {reason}")
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = fn()
    except (ValueError, RuntimeError) as err:
        errors.append(f"{where}: {err}")
        return None
    if not _finite(value):
        errors.append(f"{where}: the value is not finite ({value})")
        return None
    return value


def spectrum_from_moment(moment: torch.Tensor, k: int) -> list[float]:
    """Top-``k`` shares ``lambda_i / sum(lambda)`` of a second-moment matrix (= sigma_i^2 share)."""
    eig = torch.linalg.eigvalsh((moment + moment.T) / 2).flip(0).clamp(min=0.0)
    total = float(torch.trace(moment))
    if total <= 0.0:
        raise ValueError("the cloud has zero energy: the anisotropy spectrum is undefined")
    return (eig[:k] / total).tolist()


def twonn_of_distinct(x: torch.Tensor) -> float:
    """TwoNN (:func:`isotropy.measures.twonn.twonn`) of the distinct rows of ``x``
    (duplicates have no nearest-neighbour ratio)."""

    return float(twonn(torch.unique(x, dim=0)))
