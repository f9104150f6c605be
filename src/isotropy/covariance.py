r"""Streaming, mergeable covariance statistics (Chan et al. parallel update, fp64 state).

State: count :math:`n`, mean :math:`\mu`, centred co-moment :math:`M = \sum (x-\mu)(x-\mu)^\top`.
Merging :math:`(n_a,\mu_a,M_a)` and :math:`(n_b,\mu_b,M_b)` with :math:`\delta = \mu_b - \mu_a`:
:math:`n = n_a+n_b`, :math:`\mu = \mu_a + \delta n_b/n`,
:math:`M = M_a + M_b + \delta\delta^\top n_a n_b/n`. Covariance :math:`M/(n-\text{ddof})`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from isotropy._validation import ArrayLike, as_tensor, check_finite
from isotropy.distributed import all_reduce_sum, is_distributed

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
    """Sufficient statistics of a covariance: ``count``, ``mean`` (d,), ``comoment`` (d, d).

    Held in float64. Rows are accumulated in batches; each batch's centred co-moment is
    computed with fp32 accumulation for fp32/fp16/bf16 input (fp64 for fp64 input) and merged
    in fp64.

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
        with torch.no_grad():
            r = rows.detach().to(acc)
            mean = r.mean(0)
            rc = r - mean
            comoment = rc.T @ rc
            # A NaN/inf in column j makes mean[j] or M[j, j] non-finite, and |M_ij| is bounded
            # by sqrt(M_ii M_jj): an O(d) check instead of a pass over the rows.
            finite = bool(torch.isfinite(mean).all()) and bool(
                torch.isfinite(torch.diagonal(comoment)).all()
            )
        if not finite:
            check_finite(rows, name="x")  # raises, with the count, for NaN / inf rows
            raise ValueError(
                f"x is too large for {acc} accumulation (the co-moment overflows); rescale it"
            )
        return cls(n, mean.double(), comoment.double())

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
