r"""TwoNN intrinsic dimension (Facco, d'Errico, Rodriguez & Laio 2017).

For every point let :math:`r_1 \le r_2` be the distances to its first and second nearest
neighbours and :math:`\mu = r_2 / r_1`. On a locally uniform :math:`d`-dimensional manifold
:math:`\mu` is Pareto distributed, :math:`F(\mu) = 1 - \mu^{-d}`, so

.. math::  -\log\bigl(1 - F(\mu)\bigr) = d \log\mu .

The estimate sorts the :math:`N` ratios, keeps the :math:`k = \lfloor N(1 - f)\rfloor` smallest
(``f`` = ``discard_fraction``, 0.1 as in Facco et al.), sets :math:`F_{emp}(\mu_{(i)}) = i/N`
and fits the line through the origin by least squares:

.. math::  \hat d = \frac{\sum_{i\le k} x_i y_i}{\sum_{i\le k} x_i^2},\qquad
           x_i = \log\mu_{(i)},\quad y_i = -\log(1 - i/N).

This is the estimator of ``skdim.id.TwoNN()`` (scikit-dimension) and gives the same value.
Points at distance zero from their nearest neighbour (duplicates, :math:`r_1 = 0`) have no
ratio; they are dropped with a warning and :math:`N` counts the remaining points.

The nearest neighbours are exact. Pairwise distances are computed in row blocks
(memory :math:`O(\text{chunk}\cdot n)`): candidates come from
:math:`\lVert y\rVert^2 - 2x^\top y` on mean-centred data in fp32 (fp64 for fp64 input), the
candidate distances are recomputed exactly in fp64 from coordinate differences, and a
rounding-error bound proves that no other point is closer; rows where it cannot are redone
with fp64 candidates, whose selection can only confuse points whose squared distances agree
to within fp64 rounding (about :math:`d\cdot 10^{-16}\lVert x\rVert^2`). The bound grows
with the largest norm, so the few rows of norm above twice the median (at most 32) are no
candidates: every row's distances to them are computed exactly from coordinate differences,
and one row of large norm no longer sends every row to the fp64 redo. The estimate is not
differentiable (sorting and nearest-neighbour selection).
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch

from isotropy._validation import (
    ZERO_VARIANCE,
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    masked_rows,
    max_abs,
    rescale_exponent,
    scale_pow2,
)
from isotropy.measures._gradients import detached_input
from isotropy.runtime import autocast_off

__all__ = ["RELIABLE_POINTS", "twonn", "two_nearest_distances"]

# Below this many points a TwoNN estimate is reported as unreliable. Measured with this
# estimator on Gaussian clouds of intrinsic dimension 2, 5 and 10 (200 seeds each), the
# estimate's standard deviation relative to the true dimension was 38-52% at N = 10, 19-26% at
# N = 30, 11-13% at N = 100 and 7-8% at N = 300: about 1.3 / sqrt(N), the order of the
# maximum-likelihood form's exact 1 / sqrt(N) (log mu is exponential with rate d).
RELIABLE_POINTS = 100

# candidates kept per row before the exact recomputation (at most n - 1)
_N_CANDIDATES = 8
# elements of one (chunk x n) block of the distance matrix when chunk_size is not given
_BLOCK_ELEMENTS = 1 << 24
# elements of the coordinate differences of candidate pairs held at once
_EXACT_ELEMENTS = 1 << 18
# rows of large norm whose distances are computed exactly, outside the candidate search (a
# row of large norm would otherwise widen every row's rounding bound)
_MAX_FAR = 32


def _far_rows(norms: torch.Tensor, m: int) -> torch.Tensor:
    """The rows of norm above twice the median (at most :data:`_MAX_FAR`, the largest): their
    distances to every row are computed exactly, so that the candidate bound of the other rows
    uses the largest norm among the rest. Empty where too few rows would be left to search."""
    n = norms.shape[0]
    far = torch.nonzero(norms > 2.0 * norms.median()).flatten()
    if len(far) > _MAX_FAR:
        far = far[torch.topk(norms[far], _MAX_FAR).indices]
    if n - 1 - len(far) <= m:
        return far[:0]
    return far


def _chunk_rows(n: int, chunk_size: int | None) -> int:
    if chunk_size is None:
        return max(1, min(n, _BLOCK_ELEMENTS // n))
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, numbers.Integral)
        or chunk_size < 1
    ):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    return min(int(chunk_size), n)


def _matmul_eps(dtype: torch.dtype) -> float:
    """Unit roundoff of a matrix product in ``dtype``, allowing for TF32/bf16 fp32 matmuls."""
    if dtype == torch.float32:
        # torch.set_float32_matmul_precision("high" | "medium") lets fp32 products use
        # TF32 (10-bit mantissa) or bf16 (7-bit) arithmetic
        precision = torch.get_float32_matmul_precision()
        return {"highest": torch.finfo(torch.float32).eps, "high": 2.0**-10}.get(precision, 2.0**-7)
    return torch.finfo(dtype).eps


def _candidate_search(
    work: torch.Tensor,
    minus_two_work: torch.Tensor,
    sq: torch.Tensor,
    x64: torch.Tensor,
    rows: torch.Tensor,
    m: int,
    err_scale: float,
    max_norm: float,
    far: torch.Tensor,
    norms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact squared (r1, r2) for ``rows`` and whether the candidate set is proven complete.
    The ``far`` rows (:func:`_far_rows`) are no candidates: their distances are exact, and
    ``max_norm`` is the largest norm of the other rows (``norms``: every row's distance from
    the mean, in ``x64``'s scale)."""
    block = work[rows] @ minus_two_work.T  # -2 x_i . x_j (scaling by -2 is exact)
    block.add_(sq)  # ||x_j||^2 - 2 x_i . x_j  (||x_i||^2 is constant in a row)
    block[torch.arange(len(rows), device=rows.device), rows] = math.inf  # never pick i itself
    if len(far):
        block[:, far] = math.inf
    approx, cand = torch.topk(block, m, dim=1, largest=False, sorted=True)
    del block
    # (rows, m) squared distances from coordinate differences, a few rows at a time so that
    # the (rows, m, d) differences stay small
    exact = torch.empty(cand.shape, dtype=torch.float64, device=rows.device)
    step = max(1, _EXACT_ELEMENTS // (m * x64.shape[1]))
    for start in range(0, len(rows), step):
        diff = x64[cand[start:start + step]] - x64[rows[start:start + step]].unsqueeze(1)
        exact[start:start + step] = (diff * diff).sum(-1)
    if len(far):
        # a far row can be among a row's two nearest only where the gap of their norms (from
        # the mean: a lower bound of their distance, less its rounding) is within the distance
        # of the row's second-nearest candidate; only those distances are computed
        second = torch.topk(exact, 2, dim=1, largest=False, sorted=True).values[:, 1:]
        n_rows, n_far = norms[rows].unsqueeze(1), norms[far].unsqueeze(0)
        gap = ((n_far - n_rows).abs() - 1e-12 * (n_far + n_rows)).clamp_min(0.0)
        maybe = (gap * gap <= second) & (rows.unsqueeze(1) != far.unsqueeze(0))
        to_far = torch.full(maybe.shape, math.inf, dtype=torch.float64, device=rows.device)
        for k, j in enumerate(far.tolist()):
            sel = torch.nonzero(maybe[:, k]).flatten()
            if len(sel):
                diff = x64[rows[sel]] - x64[j]
                to_far[sel, k] = (diff * diff).sum(1)
        exact = torch.cat([exact, to_far], 1)
    two, _ = torch.topk(exact, 2, dim=1, largest=False, sorted=True)
    if m == x64.shape[0] - 1:  # every other point is a candidate
        ok = torch.ones(len(rows), dtype=torch.bool, device=rows.device)
    else:
        # |approx - exact| <= err_scale * (||x_i|| + max_j ||x_j||)^2 for every j
        sq_i = sq[rows].to(torch.float64)
        worst = approx[:, -1].to(torch.float64) + sq_i
        bound = err_scale * (sq_i.sqrt() + max_norm) ** 2
        ok = worst - bound >= two[:, 1]
    return two[:, 0], two[:, 1], ok


def two_nearest_distances(
    X: ArrayLike, *, chunk_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Distances :math:`(r_1, r_2)` of every point to its two nearest other points (fp64).

    Exact (see the module docstring); a point's own index is excluded, so a duplicate point
    has :math:`r_1 = 0`. Memory is :math:`O(\text{chunk\_size}\cdot n)`; by default a block
    holds about :math:`2^{24}` distances. Not differentiable.

    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [3.0, 4.0]])
    >>> r1, r2 = two_nearest_distances(X)
    >>> r1
    tensor([1., 1., 2., 4.], dtype=torch.float64)
    >>> r2
    tensor([3.0000, 2.0000, 3.0000, 4.4721], dtype=torch.float64)
    """
    x = as_point_cloud(X, min_points=3).detach()
    n, d = x.shape
    rows_per_chunk = _chunk_rows(n, chunk_size)
    x64 = x.to(torch.float64)
    centred = x64 - x64.mean(0)
    # an exact power of two 2^-e brings the largest centred value near 1 before squaring
    e = rescale_exponent(max_abs(centred), accumulation_dtype(x))
    x64, centred = scale_pow2(x64, -e), scale_pow2(centred, -e)
    m = min(n - 1, _N_CANDIDATES)
    r1 = torch.empty(n, dtype=torch.float64, device=x.device)
    r2 = torch.empty_like(r1)

    levels = [torch.float64] if x.dtype == torch.float64 else [torch.float32, torch.float64]
    pending = torch.arange(n, device=x.device)
    norms = centred.norm(dim=1)
    far = _far_rows(norms, m)
    near = torch.ones(n, dtype=torch.bool, device=x.device)
    near[far] = False
    max_norm = float(norms[near].max())
    for level, dtype in enumerate(levels):
        work = centred.to(dtype)
        minus_two_work = -2.0 * work
        sq = (work * work).sum(1)
        # rounding of the cast, of ||x_j||^2, of x_i.x_j (length d) and of the sums, with margin
        err_scale = 2.0 * (d + 8) * _matmul_eps(dtype)
        last = level == len(levels) - 1
        failed = []
        for start in range(0, len(pending), rows_per_chunk):
            rows = pending[start : start + rows_per_chunk]
            a, b, ok = _candidate_search(
                work, minus_two_work, sq, x64, rows, m, err_scale, max_norm, far, norms
            )
            r1[rows], r2[rows] = a, b
            if not last:
                failed.append(rows[~ok])
        if last:
            break
        pending = torch.cat(failed)
        if len(pending) == 0:
            break
    return scale_pow2(r1.sqrt(), e), scale_pow2(r2.sqrt(), e)


def twonn(
    X: ArrayLike,
    *,
    discard_fraction: float = 0.1,
    chunk_size: int | None = None,
    method: str = "linear",
    attention_mask: ArrayLike | None = None,
) -> torch.Tensor:
    r"""TwoNN intrinsic dimension of ``X`` (``(n_points, dim)``, at least 3 points).

    ``method="linear"`` (default): Facco et al.'s least-squares slope through the origin of
    :math:`-\log(1 - i/N)` against :math:`\log\mu_{(i)}` over the
    :math:`\lfloor N(1-f)\rfloor` smallest ratios (module docstring).
    ``method="mle"``: the censored maximum-likelihood estimate
    :math:`(k-1)/(\sum_{i\le k}\log\mu_{(i)} + (N-k)\log\mu_{(k)})`.
    Both equal ``skdim.id.TwoNN(discard_fraction=f, method=...)``. Duplicate points
    (:math:`r_1 = 0`) are dropped with a ``UserWarning``. Returns a 0-d tensor (fp64 for fp64
    input, fp32 otherwise, on ``X``'s device), like every other score. Scale free: the
    distances are computed on ``X`` times an exact power of two. Not differentiable.

    - **Reference:** Facco, d'Errico, Rodriguez & Laio (2017), "Estimating the intrinsic
      dimension of datasets by a minimal neighborhood information".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 3 points, any real dtype.
    - **Returns:** a 0-d tensor, float64 for float64 input and float32 otherwise, on ``X``'s
      device.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 3 points, zero variance (all rows equal),
      and too few distinct points once duplicates are dropped.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> g = torch.Generator().manual_seed(0)
    >>> plane = torch.randn(2000, 2, generator=g) @ torch.randn(2, 10, generator=g)
    >>> round(float(twonn(plane)), 1)
    2.0
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "twonn")
    if method not in ("linear", "mle"):
        raise ValueError(f"method must be 'linear' or 'mle', got {method!r}")
    try:
        f = float(discard_fraction)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"discard_fraction must be a number in [0, 1), got {discard_fraction!r}"
        ) from err
    if not 0.0 <= f < 1.0:
        raise ValueError(f"discard_fraction must lie in [0, 1), got {discard_fraction!r}")
    x = as_point_cloud(X, min_points=3)
    with autocast_off():  # distances from products in our accumulation dtype
        r1, r2 = two_nearest_distances(x, chunk_size=chunk_size)
    r1, r2 = r1.cpu(), r2.cpu()
    return torch.tensor(
        _twonn_slope(r1, r2, f, method), dtype=accumulation_dtype(x), device=x.device
    )


def _twonn_slope(r1: torch.Tensor, r2: torch.Tensor, f: float, method: str) -> float:
    """The TwoNN estimate from the two nearest-neighbour distances (see :func:`twonn`)."""
    dup = r1 == 0
    if bool(dup.any()):
        warnings.warn(
            f"TwoNN: dropping {int(dup.sum())} point(s) at zero distance from their nearest "
            "neighbour (duplicate points)",
            UserWarning,
            stacklevel=3,
        )
    if bool(dup.all()) and bool((r2 == 0).all()):
        raise ValueError(f"TwoNN: X has {ZERO_VARIANCE}, so no point has a nearest neighbour")
    mu = torch.sort(r2[~dup] / r1[~dup]).values
    n = len(mu)
    k = int(n * (1 - f))
    if k < 2:
        raise ValueError(
            f"TwoNN: only {k} ratio(s) left after removing duplicates and discarding "
            f"{f:g} of {n}; at least 2 are needed"
        )
    log_mu = torch.log(mu[:k])
    if method == "mle":
        denom = log_mu.sum() + (n - k) * log_mu[-1]
        if float(denom) <= 0.0:
            raise ValueError("TwoNN: every kept ratio r2/r1 equals 1 (e.g. a regular grid)")
        return float((k - 1) / denom)
    if k == n:
        raise ValueError(
            "TwoNN (linear): discard_fraction keeps every ratio, so the largest has F = 1 and "
            "-log(1 - F) is infinite; use discard_fraction > 0 or method='mle'"
        )
    sxx = float((log_mu * log_mu).sum())
    if sxx == 0.0:
        raise ValueError("TwoNN: every kept ratio r2/r1 equals 1 (e.g. a regular grid)")
    y = -torch.log1p(-torch.arange(1, k + 1, dtype=torch.float64) / n)
    return float((log_mu * y).sum()) / sxx
