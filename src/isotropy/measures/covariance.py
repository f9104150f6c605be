r"""Streaming, mergeable covariance statistics (Chan et al. parallel update, fp64 state).

State: count :math:`n`, mean :math:`\mu`, centred co-moment :math:`M = \sum (x-\mu)(x-\mu)^\top`.
Merging :math:`(n_a,\mu_a,M_a)` and :math:`(n_b,\mu_b,M_b)` with :math:`\delta = \mu_b - \mu_a`:
:math:`n = n_a+n_b`, :math:`\mu = \mu_a + \delta n_b/n`,
:math:`M = M_a + M_b + \delta\delta^\top n_a n_b/n`. Covariance :math:`M/(n-\text{ddof})`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from isotropy._validation import (
    ArrayLike,
    as_tensor,
    check_finite,
    max_abs,
    rescale_exponent,
    scale_pow2,
)
from isotropy.distributed import all_reduce_sum, is_distributed
from isotropy.runtime import autocast_off

__all__ = ["CovarianceStats"]


def _rows(x: ArrayLike, mask: ArrayLike | None) -> torch.Tensor:
    """Flatten ``x`` of shape ``(..., d)`` to rows, keeping those where ``mask`` is true."""
    t = as_tensor(x)
    if t.ndim < 2:
        raise ValueError(f"expected shape (..., dim) with at least 2 axes, got {tuple(t.shape)}")
    if mask is not None:
        m = torch.as_tensor(mask, device=t.device)
        if tuple(m.shape) != tuple(t.shape[:-1]):
            raise ValueError(
                f"mask shape {tuple(m.shape)} must equal the leading shape {tuple(t.shape[:-1])}"
            )
        t = t[m.bool()]
    return t.reshape(-1, t.shape[-1])


@dataclass
class CovarianceStats:
    r"""Sufficient statistics of a covariance: ``count``, ``mean`` (d,), ``comoment`` (d, d).

    Held in float64. Rows are accumulated in batches; each batch's centred co-moment is
    computed with fp32 accumulation for fp32/fp16/bf16 input (fp64 for fp64 input) on the rows
    times a power of two :math:`2^{-e}` that brings the largest value near 1 (exact), then
    converted to fp64, multiplied by :math:`2^{2e}` and merged in fp64. So the statistics of
    :math:`sX` are :math:`s` and :math:`s^2` times those of :math:`X` for any fp32 input, and
    for fp64 input wherever the co-moment is a normal fp64 number (:math:`|x|` within about
    :math:`10^{\pm 150}`). The batch mean is taken relative to the batch's first row, so rows
    that are all equal give a co-moment of exactly 0 (no residue of a rounded mean).

    >>> s = CovarianceStats.empty(2)
    >>> _ = s.update(torch.tensor([[0.0, 0.0], [2.0, 0.0]]))
    >>> _ = s.update(torch.tensor([[0.0, 2.0], [2.0, 2.0]]))
    >>> s.covariance()
    tensor([[1.3333, 0.0000],
            [0.0000, 1.3333]], dtype=torch.float64)
    """

    count: int
    mean: torch.Tensor
    comoment: torch.Tensor

    @classmethod
    def empty(cls, dim: int, device: torch.device | str | None = None) -> CovarianceStats:
        """Statistics of zero rows in dimension ``dim``."""
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        z = torch.zeros(dim, dtype=torch.float64, device=device)
        return cls(0, z, torch.zeros(dim, dim, dtype=torch.float64, device=device))

    @classmethod
    def from_batch(cls, x: ArrayLike, mask: ArrayLike | None = None) -> CovarianceStats:
        """Statistics of the rows of ``x`` (shape ``(..., d)``) where ``mask`` is true.

        Masked-out rows are never read (padding may hold anything); a NaN or infinity in a
        kept row raises ``ValueError``.

        >>> mask = torch.tensor([[1, 0, 0], [1, 1, 0]])  # (batch, seq)
        >>> CovarianceStats.from_batch(torch.ones(2, 3, 4), mask).count
        3
        """
        rows = _rows(x, mask)
        d = rows.shape[1]
        n = rows.shape[0]
        if n == 0:
            return cls.empty(d, rows.device)
        acc = torch.float64 if rows.dtype == torch.float64 else torch.float32
        m = max_abs(rows)
        if not math.isfinite(m):
            check_finite(rows, name="x")  # raises, with the count, for NaN / inf rows
        with torch.no_grad(), autocast_off():  # an evaluation loop may run under autocast
            e = rescale_exponent(m, acc)
            r = scale_pow2(rows.detach().to(acc), -e)
            # shifted by the first row: a constant column is exactly 0 after centring
            y = r - r[0]
            shift = y.mean(0)
            y.sub_(shift)
            comoment = scale_pow2((y.T @ y).double(), 2 * e)
            mean = scale_pow2(r[0].double() + shift.double(), e)
        if not bool(torch.isfinite(torch.diagonal(comoment)).all()):
            raise ValueError(
                "x is too large for float64 statistics (the co-moment overflows); rescale it"
            )
        return cls(n, mean, comoment)

    @property
    def dim(self) -> int:
        """The dimension ``d`` of the rows."""
        return self.mean.shape[0]

    def merge(self, other: CovarianceStats) -> CovarianceStats:
        """Statistics of the union of both samples (a new object)."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge dimension {self.dim} with {other.dim}")
        if other.count == 0:
            return CovarianceStats(self.count, self.mean.clone(), self.comoment.clone())
        if self.count == 0:
            return CovarianceStats(other.count, other.mean.clone(), other.comoment.clone())
        n = self.count + other.count
        delta = other.mean.to(self.mean.device) - self.mean
        mean = self.mean + delta * (other.count / n)
        comoment = (
            self.comoment
            + other.comoment.to(self.comoment.device)
            + torch.outer(delta, delta) * (self.count * other.count / n)
        )
        return CovarianceStats(n, mean, comoment)

    def update(self, x: ArrayLike, mask: ArrayLike | None = None) -> CovarianceStats:
        """Add the rows of ``x`` (where ``mask`` is true) in place; returns ``self``."""
        merged = self.merge(CovarianceStats.from_batch(x, mask))
        self.count, self.mean, self.comoment = merged.count, merged.mean, merged.comoment
        return self

    def covariance(self, ddof: int = 1) -> torch.Tensor:
        """The covariance ``comoment / (count - ddof)`` (float64)."""
        if self.count - ddof <= 0:
            raise ValueError(
                f"covariance needs more than {ddof} row(s) (ddof={ddof}), have {self.count}"
            )
        return self.comoment / (self.count - ddof)

    def all_reduce(self, group: object | None = None) -> CovarianceStats:
        r"""Statistics of the union over all ranks of ``torch.distributed`` (a new object).

        A sum of statistics: :math:`n = \sum n_r`, :math:`\mu = \sum n_r\mu_r / n`,
        :math:`M = \sum_r [M_r + n_r(\mu_r-\mu)(\mu_r-\mu)^\top]`.
        """
        if not is_distributed(group):
            return CovarianceStats(self.count, self.mean.clone(), self.comoment.clone())
        head = torch.cat([self.mean.new_tensor([float(self.count)]), self.mean * self.count])
        head = all_reduce_sum(head, group)
        n = int(round(float(head[0])))
        if n == 0:
            return CovarianceStats.empty(self.dim, self.mean.device)
        mean = head[1:] / n
        delta = self.mean - mean
        local = self.comoment + torch.outer(delta, delta) * self.count
        return CovarianceStats(n, mean, all_reduce_sum(local, group))
