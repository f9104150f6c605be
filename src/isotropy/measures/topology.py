r"""0-dimensional persistence of point clouds, persistent entropy and prominent features.

For a point cloud :math:`X \in \mathbb{R}^{n \times d}` the 0-dimensional Vietoris--Rips
barcode has :math:`n` bars born at 0; one never dies and the other :math:`n - 1` die at the
lengths of the edges of a Euclidean minimum spanning tree (MST) of :math:`X` (single-linkage
merge heights). The barcode is returned as those :math:`n - 1` death times, longest first.

The persistent entropy of bars :math:`\ell_1, \dots, \ell_k \ge 0` is

.. math::  H = -\sum_i p_i \log p_i, \qquad p_i = \ell_i / \textstyle\sum_j \ell_j,
           \qquad 0 \le H \le \log k.

:func:`prominent_features` splits a barcode into features and noise with the persistent-entropy
scan of Atienza, Gonzalez-Diaz and Rucco (arXiv 1701.07857) in the variant used for the
"shrink the longest" regularizer; see its docstring for the cases that the original
description leaves open.

Point clouds have shape ``(n_points, dim)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform

try:  # the C routine behind linkage(y, "single"), without its per-call input checks
    from scipy.cluster._hierarchy import mst_single_linkage as _mst_single_linkage
except ImportError:  # pragma: no cover - depends on the scipy build
    _mst_single_linkage = None

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    as_tensor,
    check_finite,
    masked_rows,
    max_abs,
    pow2_exponent,
    rescale_exponent,
    scale_pow2,
)
from isotropy.runtime import autocast_off

__all__ = ["h0_barcode", "persistent_entropy", "prominent_features"]

# Relative tolerance of the "S went up" test in prominent_features: ratios within rounding of
# 1 (for example a barcode of equal bars, where every S is the same number) count as "no rise".
_RATIO_RTOL = 1e-12


def _prim_edges(sq_dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges ``(a, b)`` of a minimum spanning tree of a dense symmetric weight matrix (Prim)."""
    n = sq_dist.shape[0]
    best = sq_dist[0].copy()  # cheapest known connection of each vertex to the tree
    parent = np.zeros(n, dtype=np.int64)
    in_tree = np.zeros(n, dtype=sq_dist.dtype)  # +inf once a vertex is in the tree
    in_tree[0] = np.inf
    best[0] = np.inf
    a = np.empty(n - 1, dtype=np.int64)
    b = np.empty(n - 1, dtype=np.int64)
    for k in range(n - 1):
        j = int(best.argmin())
        a[k] = parent[j]
        b[k] = j
        in_tree[j] = np.inf
        best[j] = np.inf
        row = sq_dist[j] + in_tree
        closer = row < best
        np.minimum(best, row, out=best)
        np.putmask(parent, closer, j)
    return a, b


# Up to this many points the tree comes from scipy's single-linkage (one C call) instead of the
# Python-level Prim loop; above it Prim is faster.
_LINKAGE_MAX_POINTS = 128


def _linkage_edges(sq_dist: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """MST edges from the single-linkage merge heights, or ``None`` if they are ambiguous.

    The merge heights of single linkage are the weights of a minimum spanning tree. When
    exactly ``n - 1`` pairs have a weight among them, every one of those pairs is a tree edge
    (each height ``v`` of multiplicity ``m`` needs at least ``m`` pairs of weight ``v``), so they
    are the edges of that tree. Otherwise (tied weights) ``None`` is returned.
    """
    n = sq_dist.shape[0]
    cond = squareform(sq_dist, checks=False).astype(np.float64)
    heights = _single_linkage_heights(cond, n)
    pos = np.searchsorted(heights, cond)
    np.minimum(pos, n - 2, out=pos)
    idx = np.flatnonzero(heights[pos] == cond)
    if len(idx) != n - 1:
        return None
    rows, cols = _triu_indices(n)
    return rows[idx], cols[idx]


def _single_linkage_heights(cond: np.ndarray, n: int) -> np.ndarray:
    """Ascending merge heights of single linkage on a finite condensed float64 matrix."""
    if _mst_single_linkage is not None:
        try:
            return np.asarray(_mst_single_linkage(cond, n))[:, 2]
        except TypeError:  # pragma: no cover - a scipy with another private signature
            pass
    return linkage(cond, "single")[:, 2]


_TRIU_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _triu_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, 1)`` (the order of a condensed distance vector), cached."""
    out = _TRIU_CACHE.get(n)
    if out is None:
        out = np.triu_indices(n, 1)
        _TRIU_CACHE[n] = out
    return out


class _EdgeLengths(torch.autograd.Function):
    """Lengths ``||x[lo] - x[hi]||`` sorted longest first, with the end points in that order.

    The differences are multiplied by :math:`2^{-e}` before their norms are taken and the
    norms by :math:`2^{e}` after (both exact), so no square under- or overflows. The gradient
    of a length with respect to ``x[lo]`` is the unit vector ``(x[lo] - x[hi])/l`` (and its
    negative for ``x[hi]``); a zero-length edge has zero gradient. The backward pass is itself
    differentiable (double backward).
    """

    @staticmethod
    def forward(ctx, x, lo, hi, e):  # type: ignore[override]
        diff = scale_pow2(x.index_select(0, lo) - x.index_select(0, hi), -e)
        scaled = torch.linalg.vector_norm(diff, dim=1)
        lengths = scale_pow2(scaled, e)
        if lengths.device.type == "cpu":  # small 1-D work: numpy has less per-call overhead
            ln = lengths.numpy()
            order_np = np.argsort(-ln, kind="stable")  # ties keep their original order
            order = torch.from_numpy(order_np)
            out = torch.from_numpy(ln[order_np]), lo[order], hi[order]
        else:
            order = torch.argsort(lengths, descending=True, stable=True)
            out = lengths[order], lo[order], hi[order]
        unit = diff * _safe_reciprocal(scaled).unsqueeze(1)
        ctx.e = e
        ctx.save_for_backward(x, lo, hi, order, unit)
        ctx.mark_non_differentiable(out[1], out[2])
        return out

    @staticmethod
    def backward(ctx, grad, _glo, _ghi):  # type: ignore[override]
        x, lo, hi, order, unit = ctx.saved_tensors
        # back from the sorted order to the order of lo, hi and unit
        grad = torch.empty_like(grad).index_copy_(0, order, grad)
        if torch.is_grad_enabled():  # create_graph: build the gradient from differentiable ops
            diff = scale_pow2(x.index_select(0, lo) - x.index_select(0, hi), -ctx.e)
            scaled = torch.linalg.vector_norm(diff, dim=1)
            contrib = diff * (grad * _safe_reciprocal(scaled)).unsqueeze(1)
            gx = torch.zeros_like(x).index_add(0, lo, contrib).index_add(0, hi, -contrib)
            return gx, None, None, None
        contrib = unit * grad.unsqueeze(1)
        gx = torch.zeros_like(x)
        gx.index_add_(0, lo, contrib)
        gx.index_add_(0, hi, contrib, alpha=-1)
        return gx, None, None, None


def _safe_reciprocal(t: torch.Tensor) -> torch.Tensor:
    """``1/t`` where ``t > 0``, else 0."""
    return torch.where(t > 0, t, 1.0).reciprocal() * (t > 0)


def h0_barcode(
    X: ArrayLike, *, return_pairs: bool = False,
    attention_mask: ArrayLike | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    r"""Death times of the finite 0-dimensional Vietoris--Rips bars of ``X``, longest first.

    These are the :math:`n - 1` edge lengths :math:`\lVert x_a - x_b\rVert` of a Euclidean
    minimum spanning tree (all births are 0; the infinite bar is omitted). The tree is chosen
    without gradient on squared distances from the Gram matrix of the centred cloud, in fp64
    for fp64 input and fp32 otherwise (scipy's single-linkage routine for small clouds, dense
    Prim for large ones or tied weights); the chosen lengths are then recomputed
    from ``X`` so the result is differentiable in ``X`` (twice). Both steps work on ``X`` times
    an exact power of two, so ``h0_barcode(s * X)`` is ``s`` times ``h0_barcode(X)``. A
    zero-length bar (duplicate points) has zero gradient. With ``return_pairs`` the
    ``(n - 1, 2)`` long tensor of edge end points (row indices of ``X``, smaller index first)
    is returned too, in the same order.

    - **Reference:** the 0-dimensional Vietoris--Rips barcode that Kudriashov et al. (2025),
      "Shrink the longest: improving latent space isotropy with simplicial geometry"
      regularizes.
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a descending 1-D tensor of the :math:`n - 1` bar lengths, float64 for float64
      input and float32 otherwise (with ``return_pairs``, also an ``(n - 1, 2)`` int64 tensor).
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, and fewer than 2 points.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> h0_barcode(torch.tensor([[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]]))  # sides 3, 4, 5
    tensor([4., 3.])
    >>> h0_barcode(torch.tensor([[0.0], [1.0], [3.0], [7.0]]), return_pairs=True)
    (tensor([4., 2., 1.]), tensor([[2, 3],
            [1, 2],
            [0, 1]]))
    """
    X = masked_rows(X, attention_mask, name="X")
    with autocast_off():  # the Gram matrix in our accumulation dtype, never half precision
        return _h0_barcode(X, return_pairs)


def _h0_barcode(X: ArrayLike, return_pairs: bool
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    if isinstance(X, np.ndarray):
        X = np.ascontiguousarray(X)  # torch cannot wrap negative strides (a[::-1])
    x = as_point_cloud(X, name="X", min_points=2, check_values=False)
    acc = accumulation_dtype(x)
    xa = x.to(acc)
    with torch.no_grad():
        xs = xa.detach()
        xs = xs - xs.mean(dim=0, keepdim=True)
        # squared distances of the cloud times 2^-e (exact): no square under- or overflows
        e = rescale_exponent(max_abs(xs), acc)
        xs = scale_pow2(xs, -e)
        gram = (xs @ xs.T).cpu().numpy()
        sq_norm = np.diagonal(gram)
        if not np.isfinite(sq_norm).all():  # NaN/inf in X reach the norms
            check_finite(x, name="X")
            raise ValueError(f"X is too large: squared distances overflow in {acc}")
        sq_np = sq_norm[:, None] + sq_norm[None, :]
        sq_np -= 2.0 * gram
        np.maximum(sq_np, 0.0, out=sq_np)
        n = sq_np.shape[0]
        edges = _linkage_edges(sq_np) if 2 < n <= _LINKAGE_MAX_POINTS else None
        if edges is None:
            a_np, b_np = _prim_edges(sq_np)
            edges = np.minimum(a_np, b_np), np.maximum(a_np, b_np)
        lo = torch.from_numpy(edges[0]).to(x.device)
        hi = torch.from_numpy(edges[1]).to(x.device)
    lengths, lo, hi = _EdgeLengths.apply(xa, lo, hi, e)
    if return_pairs:
        return lengths, torch.stack([lo, hi], dim=1)
    return lengths


def _as_bars(bars: ArrayLike, *, name: str = "bars") -> torch.Tensor:
    """Validate a 1-D barcode of lengths: non-empty, finite, non-negative."""
    if isinstance(bars, np.ndarray):
        bars = np.ascontiguousarray(bars)  # torch cannot wrap negative strides (a[::-1])
    t = as_tensor(bars, name=name)
    if t.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D tensor of bar lengths, got shape {tuple(t.shape)}; "
            "for (birth, death) pairs pass death - birth"
        )
    if t.numel() == 0:
        raise ValueError(f"{name} is empty: at least one bar is needed")
    lo, hi = torch.aminmax(t.detach())
    if not (float(lo) >= 0.0 and float(hi) < math.inf):  # NaN fails both comparisons
        td = t.detach()
        finite = torch.isfinite(td)
        if not bool(finite.all()):
            raise ValueError(f"{name} contains {int((~finite).sum())} NaN or infinite length(s)")
        raise ValueError(
            f"{name} contains {int((td < 0).sum())} negative length(s); bar lengths must be >= 0"
        )
    return t


def persistent_entropy(bars: ArrayLike) -> torch.Tensor:
    r"""Persistent entropy :math:`H = -\sum_i p_i \log p_i`, :math:`p_i = \ell_i/\sum_j \ell_j`.

    ``bars`` is a 1-D tensor of lengths :math:`\ell_i \ge 0`; :math:`0 \le H \le \log k` for
    :math:`k` bars, with equality on the right iff all bars are equal. Zero-length bars add 0
    (the convention :math:`0 \log 0 = 0`) and receive the finite gradient
    :math:`(1 - H)/\sum_j \ell_j`. Differentiable; fp64 stays fp64, other floats use fp32.

    - **Reference:** Kudriashov et al. (2025), "Shrink the longest: improving latent space
      isotropy with simplicial geometry", after Chintakunta et al. (2015), "An entropy-based
      persistence barcode".
    - **Input:** ``bars``, a 1-D tensor of bar lengths :math:`\ge 0` (at least one), e.g. from
      :func:`h0_barcode`.
    - **Returns:** a 0-d tensor in :math:`[0, \log k]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 1-D, no bar, a negative length, NaN
      or infinity, and bars that are all of length zero.

    >>> persistent_entropy(torch.tensor([1.0, 1.0, 1.0, 1.0]))  # log 4
    tensor(1.3863)
    >>> persistent_entropy(torch.tensor([2.0, 0.0, 0.0]))
    tensor(0.)
    """
    b = _as_bars(bars)
    return _Entropy.apply(b.to(accumulation_dtype(b)))


class _Entropy(torch.autograd.Function):
    r"""Persistent entropy of validated lengths, with the gradient
    :math:`-(\log p_k + H)/S` (:math:`(1 - H)/S` for a zero bar) in one step.

    The lengths are first multiplied by :math:`2^{-e}` (exact) so that the longest lies in
    :math:`[1/2, 1)`: the sum :math:`S` cannot overflow, and :math:`H` is scale free. The
    backward pass is itself differentiable (double backward).
    """

    @staticmethod
    def forward(ctx, lengths):  # type: ignore[override]
        e = pow2_exponent(max_abs(lengths))
        scaled = scale_pow2(lengths, -e)
        total = scaled.sum()
        if not float(total) > 0.0:
            raise ValueError(
                "all bars have zero length (all points coincide): persistent entropy is undefined"
            )
        p = scaled / total
        h = 0.0 - torch.xlogy(p, p).sum()  # 0 log 0 = 0; 0 - x rather than -x: no "-0."
        ctx.e = e
        ctx.save_for_backward(lengths, p, total, h)
        return h

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        lengths, p, total, h = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: build the gradient from differentiable ops
            scaled = scale_pow2(lengths, -ctx.e)
            total = scaled.sum()
            p = scaled / total
            h = 0.0 - torch.xlogy(p, p).sum()
        # log(1) = 0 stands in for log(0) at a zero bar; dH/dl = 2^-e dH/d(scaled)
        neg_log_p = torch.where(p > 0, p, 1.0).log().neg()
        return scale_pow2((torch.where(p > 0, neg_log_p, 1.0) - h) * (grad / total), -ctx.e)


def _entropy_np(lengths: np.ndarray) -> float:
    """Persistent entropy of non-negative fp64 lengths (0 for an all-zero array)."""
    total = float(lengths.sum())
    if total <= 0.0:
        return 0.0
    p = lengths / total
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _q_coefficient(alpha: float) -> float:
    r""":math:`\alpha(\alpha - 1 - \ln\alpha)/(\alpha - 1)^2` on :math:`[0, 1]`, with its limits."""
    if alpha <= 0.0:
        return 0.0  # alpha * ln(alpha) -> 0
    t = alpha - 1.0
    if abs(t) < 1e-4:  # (t - log1p t)/t^2 = 1/2 - t/3 + t^2/4 - t^3/5 + ...
        return alpha * (0.5 - t / 3.0 + t * t / 4.0 - t**3 / 5.0)
    log_alpha = math.log1p(t) if alpha > 0.5 else math.log(alpha)
    return alpha * (t - log_alpha) / (t * t)


def _scan(L: np.ndarray) -> int:
    """Step 2: the first ``i`` in ``1 .. m-3`` where S rises, else ``m - 3``."""
    m = len(L)
    s = float(L.sum())
    for i in range(1, m - 2):
        s_prev = s
        tail = L[i:]
        total = float(tail.sum())
        s = total + i * total / math.exp(_entropy_np(tail))
        # S_prev / S < 1, with 0/0 (an all-zero barcode) read as 1 and ties within rounding
        # read as "no rise".
        if s > 0.0 and s_prev < s * (1.0 - _RATIO_RTOL):
            return i
    return m - 3


def _selection_index(desc: np.ndarray) -> int:
    """Index ``i`` such that the features are ``desc[:i + 1]`` (``desc`` sorted descending)."""
    n = len(desc)
    if n <= 3:
        return n - 1
    L = np.concatenate([desc[1:], desc[:1]])
    longest, shortest = float(L[-1]), float(L[-2])
    alpha = 1.0 if longest == 0.0 else shortest / longest
    coef = _q_coefficient(alpha)
    i = _scan(L)
    while True:
        q = math.ceil(coef * len(L))
        if not q < i:
            return i
        L = np.concatenate([L[:i], L[-2:]])
        if len(L) < 4:
            return i
        i = _scan(L)


def prominent_features(bars: ArrayLike) -> tuple[torch.Tensor, torch.Tensor, int]:
    r"""Split a barcode into prominent features and noise by a persistent-entropy scan.

    With the bars sorted :math:`b_0 \ge b_1 \ge \dots \ge b_{n-1}`, returns
    ``(features, noise, i)`` where ``features`` is :math:`(b_0, \dots, b_i)` and ``noise`` is
    :math:`(b_{i+1}, \dots, b_{n-1})`, both slices of the sorted input (gradients flow through
    them; the choice of ``i`` is not differentiated). The index ``i`` comes from:

    1. :math:`L = (b_1, \dots, b_{n-1}, b_0)`, :math:`\alpha = b_{n-1}/b_0`.
    2. With :math:`m = |L|` and :math:`S_0 = \sum L`, for :math:`i = 1, \dots, m-3`:
       :math:`S_i = T_i + i\,T_i/e^{H(L[i:])}` with :math:`T_i = \sum L[i:]`; stop at the first
       :math:`i` with :math:`S_{i-1}/S_i < 1`, else :math:`i = m - 3`.
    3. :math:`Q = \lceil \alpha m (\alpha - 1 - \ln\alpha)/(\alpha - 1)^2 \rceil`; if
       :math:`Q < i`, set :math:`L = L[:i] + L[-2:]` and go to 2, else stop.

    Cases the scan leaves open are defined as follows: :math:`n \le 3` makes every bar a
    feature (:math:`i = n - 1`); :math:`\alpha = 1` (equal bars) uses the limit
    :math:`Q = \lceil m/2 \rceil`; :math:`\alpha = 0` (a zero shortest bar) uses the limit
    :math:`Q = 0`, so rescans continue down to :math:`i = 1`; an all-zero barcode is treated as
    equal bars (:math:`\alpha = 1`, every :math:`0/0` ratio read as 1, i.e. no rise); ratios
    within :math:`10^{-12}` of 1 count as no rise; a rescan with :math:`m < 4` has no
    :math:`i` to scan and keeps the current :math:`i`. The result is invariant to scaling.
    Differentiable in ``bars`` (the returned bars are slices of them).

    - **Reference:** the persistent-entropy scan of Atienza, Gonzalez-Diaz & Rucco (2019),
      "Persistent entropy for separating topological features from noise in Vietoris-Rips
      complexes", in the variant of Kudriashov et al. (2025), "Shrink the longest: improving
      latent space isotropy with simplicial geometry".
    - **Input:** ``bars``, a 1-D tensor of bar lengths :math:`\ge 0` (at least one).
    - **Returns:** ``(features, noise, i)``: two 1-D tensors, slices of the bars sorted longest
      first, and the index of the last feature.
    - **Bad input:** ``ValueError`` for an array that is not 1-D, no bar, a negative length, and
      NaN or infinity.

    >>> f, noise, i = prominent_features(torch.tensor([2.0, 2.0, 10.0, 2.0, 9.0, 2.0, 2.0, 2.0]))
    >>> f, noise, i
    (tensor([10.,  9.,  2.]), tensor([2., 2., 2., 2., 2.]), 2)
    """
    b = _as_bars(bars)
    desc = torch.sort(b, descending=True, stable=True).values
    desc_np = desc.detach().to(torch.float64).cpu().numpy()
    i = _selection_index(np.ldexp(desc_np, -pow2_exponent(float(desc_np[0]))))  # exact
    return desc[: i + 1], desc[i + 1 :], i
