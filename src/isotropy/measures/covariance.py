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
    check_binary_mask,
    check_finite,
    max_abs,
    pow2_tensor,
    rescale_exponent,
    scale_pow2,
    window,
)
from isotropy.distributed import all_reduce_sum, is_distributed
from isotropy.measures._gradients import detached_input
from isotropy.runtime import autocast_off

__all__ = ["CovarianceStats", "merge_packed", "packed_batch", "packed_dim"]


def _rows(x: ArrayLike, mask: ArrayLike | None) -> torch.Tensor:
    """Flatten ``x`` of shape ``(..., d)`` to rows, keeping those where ``mask`` (0/1 or
    boolean, :func:`~isotropy._validation.check_binary_mask`) is true."""
    t = as_tensor(x)
    if t.ndim < 2:
        raise ValueError(f"expected shape (..., dim) with at least 2 axes, got {tuple(t.shape)}")
    if mask is not None:
        m = torch.as_tensor(mask, device=t.device)
        if tuple(m.shape) != tuple(t.shape[:-1]):
            raise ValueError(
                f"mask shape {tuple(m.shape)} must equal the leading shape {tuple(t.shape[:-1])}"
            )
        check_binary_mask(m)
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
    Not differentiable: rows that require grad get a ``UserWarning``.

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

    def __post_init__(self) -> None:
        """Parts that belong together: a mean of shape (d,) and a co-moment of (d, d) (shapes
        only: no value is read, so no accelerator synchronises)."""
        m, c = self.mean, self.comoment
        if not (isinstance(m, torch.Tensor) and isinstance(c, torch.Tensor)) or m.ndim != 1 \
                or tuple(c.shape) != (m.shape[0], m.shape[0]):
            shapes = tuple(getattr(m, "shape", ())), tuple(getattr(c, "shape", ()))
            raise ValueError("CovarianceStats needs a mean of shape (d,) and a co-moment of "
                             f"shape (d, d), got {shapes[0]} and {shapes[1]}")

    @classmethod
    def empty(cls, dim: int, device: torch.device | str | None = None) -> CovarianceStats:
        """Statistics of zero rows in dimension ``dim``."""
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an integer, got {dim!r}")
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
        x = detached_input(x, "CovarianceStats")
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
        if not isinstance(other, CovarianceStats):
            raise TypeError(f"can merge CovarianceStats only, got {type(other).__name__}")
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


# ----------------------------------------------------------------------------- device route


def _times_pow2(t: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r""":math:`t\,2^k` for an integer tensor ``k``, exactly, in two normal factors."""
    half = torch.div(k, 2, rounding_mode="floor")
    return t * pow2_tensor(half, t.dtype) * pow2_tensor(k - half, t.dtype)


def packed_batch(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""The statistics of the rows of ``x`` (``(..., d)``) where ``mask`` is true, packed as
    one float64 vector ``[n, mu (d), M (d*d)]`` on ``x``'s device, with no host read of a
    value: :meth:`CovarianceStats.from_batch`'s arithmetic (fp32 accumulation of a
    power-of-two-scaled, first-row-shifted batch) with the row count, the scale and the first
    kept row found on the device. Masked-out rows are replaced by zeros before any
    arithmetic; a NaN or infinity in a kept row is not raised here but makes the statistics
    non-finite (the caller checks them when it reads them).

    >>> p = packed_batch(torch.tensor([[0.0, 0.0], [2.0, 0.0], [9.0, 9.0]]),
    ...                  torch.tensor([True, True, False]))
    >>> p.tolist()  # n = 2, mean (1, 0), M = [[2, 0], [0, 0]]
    [2.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0]
    """
    if x.ndim < 2:
        raise ValueError(f"expected shape (..., dim) with at least 2 axes, got {tuple(x.shape)}")
    d = x.shape[-1]
    rows = x.detach().reshape(-1, d)
    if mask is None:
        keep = torch.ones(rows.shape[0], dtype=torch.bool, device=x.device)
    else:
        if tuple(mask.shape) != tuple(x.shape[:-1]):
            raise ValueError(
                f"mask shape {tuple(mask.shape)} must equal the leading shape "
                f"{tuple(x.shape[:-1])}")
        check_binary_mask(mask)
        keep = mask.to(x.device).reshape(-1).bool()
    acc = torch.float64 if rows.dtype == torch.float64 else torch.float32
    with torch.no_grad(), autocast_off():
        kept = keep.unsqueeze(1)
        z = torch.where(kept, rows.to(acc), torch.zeros((), dtype=acc, device=x.device))
        n = keep.sum().to(torch.float64)
        e = torch.frexp(z.abs().amax() if z.numel() else z.new_zeros(())).exponent
        e = torch.where(e.abs() <= window(acc), torch.zeros_like(e), e)
        r = _times_pow2(z, -e)
        # (select / narrow rather than [] indexing, which a fake CUDA tensor refuses in tests)
        first = (r.index_select(0, keep.to(torch.int8).argmax().reshape(1)).select(0, 0)
                 if r.shape[0] else r.new_zeros(d))
        y = torch.where(kept, r - first, torch.zeros((), dtype=acc, device=x.device))
        shift = y.sum(0) / n.clamp(min=1.0).to(acc)
        y = torch.where(kept, y - shift, torch.zeros((), dtype=acc, device=x.device))
        comoment = _times_pow2(_times_pow2((y.T @ y).double(), e), e)
        mean = _times_pow2(first.double() + shift.double(), e)
    return torch.cat([n.reshape(1), mean, comoment.reshape(-1)])


def packed_dim(packed: torch.Tensor) -> int:
    """The ``d`` of packed statistics ``[n, mu (d), M (d*d)]``: it solves ``1 + d + d^2 =
    len``."""
    return int(round((-1.0 + (4.0 * packed.numel() - 3.0) ** 0.5) / 2.0))


def merge_packed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""The merge of two packed statistics (:func:`packed_batch`), Chan et al.'s update of
    :meth:`CovarianceStats.merge` on the device: no host read; an empty side returns the
    other's values exactly.

    >>> a = packed_batch(torch.tensor([[0.0, 0.0], [2.0, 0.0]]))
    >>> b = packed_batch(torch.tensor([[0.0, 2.0], [2.0, 2.0]]))
    >>> merge_packed(a, b).tolist()  # n = 4, mean (1, 1), M = 4 I
    [4.0, 1.0, 1.0, 4.0, 0.0, 0.0, 4.0]
    """
    if a.shape != b.shape:
        raise ValueError(f"cannot merge packed statistics of shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    d = packed_dim(a)
    b = b.to(a.device)
    na, nb = a.narrow(0, 0, 1), b.narrow(0, 0, 1)
    n = na + nb
    safe = torch.where(n > 0, n, torch.ones_like(n))
    ma, mb = a.narrow(0, 1, d), b.narrow(0, 1, d)
    delta = mb - ma
    mean = torch.where(na > 0, ma + delta * (nb / safe), mb)
    comoment = (a.narrow(0, 1 + d, d * d).reshape(d, d) + b.narrow(0, 1 + d, d * d).reshape(d, d)
                + torch.outer(delta, delta) * (na * nb / safe))
    return torch.cat([n.reshape(1), mean, comoment.reshape(-1)])
