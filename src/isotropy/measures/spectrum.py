r"""Anisotropy spectrum (Razzhigaev et al. 2024).

For the singular values :math:`\sigma_1 \ge \sigma_2 \ge \dots` of a point cloud
:math:`X` (``(n_points, dim)``), raw or mean-centred, the :math:`k`-th score is

.. math::  a_k = \frac{\sigma_k^2}{\sum_i \sigma_i^2},\qquad \sum_k a_k = 1,

the share of the energy :math:`\lVert X\rVert_F^2` along the :math:`k`-th principal direction.
The squared singular values are the eigenvalues of the smaller Gram matrix
(:math:`X^\top X` when :math:`n \ge d`, else :math:`XX^\top`), computed in fp64 on ``X``
times an exact power of two that brings its largest entry near 1 (the scores are scale free);
no SVD is needed. Centring subtracts the mean relative to the first row, so a cloud of
identical points centres to exactly zero.
"""

from __future__ import annotations

import numbers

import torch

from isotropy._validation import (
    ZERO_VARIANCE,
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    masked_rows,
    max_abs,
    positional_options_deprecated,
    rescale_exponent,
    scale_pow2,
)

__all__ = ["anisotropy_spectrum"]


@positional_options_deprecated("k")
def anisotropy_spectrum(
    X: ArrayLike, *, k: int | None = None, center: bool = False,
    attention_mask: ArrayLike | None = None,
) -> torch.Tensor:
    r"""Top-``k`` scores :math:`\sigma_i^2/\sum_j\sigma_j^2` of ``X`` (``X - mean`` if ``center``).

    Returns a descending vector of length ``k`` (all :math:`\min(n, d)` scores if ``k`` is
    None), with ``1 <= k <= min(n, d)``. Differentiable where the singular values are distinct.
    Raises ``ValueError`` when :math:`\lVert X\rVert_F = 0` (after centring: zero variance,
    all points identical, e.g. a single point with ``center=True``).

    - **Reference:** Razzhigaev et al. (2024), "The shape of learning: anisotropy and intrinsic
      dimensions in transformer-based models".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 1 point, any real dtype.
    - **Returns:** a descending 1-D tensor of length ``k`` that sums to at most 1, float64 for
      float64 input and float32 otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, no point, ``k`` outside :math:`[1, \min(n, d)]`, and
      :math:`\lVert X\rVert_F = 0` (after centring).

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-3.0, 0.0]])
    >>> anisotropy_spectrum(X)  # sigma^2 = 18 and 2
    tensor([0.9000, 0.1000])
    >>> anisotropy_spectrum(X + 5.0, k=1, center=True)
    tensor([0.9000])
    """
    X = masked_rows(X, attention_mask, name="X")
    x = as_point_cloud(X, min_points=1)
    n, d = x.shape
    r = min(n, d)
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= r:
            raise ValueError(
                f"k must be an integer in [1, min(n_points, dim)] = [1, {r}] or None, got {k!r}"
            )
        k = int(k)
    x64 = x.to(torch.float64)
    if center:
        y = x64 - x64[0]  # relative to the first row: identical rows centre to exactly 0
        x64 = y - y.mean(0)
    x64 = scale_pow2(x64, -rescale_exponent(max_abs(x64), torch.float64))
    total = (x64 * x64).sum()
    if float(total.detach()) == 0.0:
        what = f"X has {ZERO_VARIANCE}" if center else "X is all zeros"
        raise ValueError(f"{what}: the anisotropy spectrum is undefined")
    gram = x64.T @ x64 if n >= d else x64 @ x64.T
    eig = torch.linalg.eigvalsh(gram).flip(0).clamp(min=0.0)
    scores = eig / total
    if k is not None:
        scores = scores[:k]
    return scores.to(accumulation_dtype(x))
