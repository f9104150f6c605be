r"""Average cosine similarity (Ethayarajh 2019) and the CosReg term (Gao et al. 2019).

With unit rows :math:`\hat x_i = x_i/\lVert x_i\rVert` and :math:`s = \sum_i \hat x_i`,

.. math::  \sum_{i\ne j}\hat x_i^\top\hat x_j = \lVert s\rVert^2 - \sum_i\lVert\hat x_i\rVert^2,

so every pairwise sum below costs :math:`O(nd)` instead of :math:`O(n^2 d)`. Both quantities
are differentiable in ``X`` and invariant to scaling rows (computed in fp64; a row whose
squares would under- or overflow is first scaled by an exact power of two). A row of norm
zero has no direction, so it is an error.
Point clouds have shape ``(n_points, dim)``.
"""

from __future__ import annotations

import numbers

import torch

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    masked_rows,
    scale_rows_pow2,
)

__all__ = ["avg_cosine_similarity", "cosine_regularization_term"]

_SAFE_NORM_LO, _SAFE_NORM_HI = 2.0**-480, 2.0**480


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length in fp64; ``ValueError`` for a zero row.

    A row whose norm is outside :math:`[2^{-480}, 2^{480}]` (its squares would lose precision
    or overflow) is first multiplied by a power of two bringing its largest entry near 1,
    which leaves its direction exactly as it is.
    """
    x64 = x.to(torch.float64)
    norms = torch.linalg.vector_norm(x64, dim=1)
    extreme = ~((norms >= _SAFE_NORM_LO) & (norms <= _SAFE_NORM_HI))
    if bool(extreme.any()):
        x64 = scale_rows_pow2(x64, extreme)
        norms = torch.linalg.vector_norm(x64, dim=1)
    zero = norms == 0
    if bool(zero.any()):
        idx = torch.nonzero(zero).flatten()
        shown = ", ".join(str(int(i)) for i in idx[:5]) + (", ..." if len(idx) > 5 else "")
        raise ValueError(
            f"X has {len(idx)} row(s) of norm zero (rows {shown}): their cosine similarity is "
            "undefined"
        )
    return x64 / norms.unsqueeze(1)


def _off_diagonal_cosine_sum(u: torch.Tensor) -> torch.Tensor:
    s = u.sum(0)
    return (s * s).sum() - (u * u).sum()


def avg_cosine_similarity(
    X: ArrayLike, *, n_pairs: int | None = None, seed: int | None = None,
    attention_mask: ArrayLike | None = None,
) -> torch.Tensor:
    r"""Mean cosine similarity of distinct pairs of rows of ``X`` (Ethayarajh 2019).

    Exact by default: :math:`\frac{1}{n(n-1)}\sum_{i\ne j}\hat x_i^\top\hat x_j
    = \frac{\lVert\sum_i\hat x_i\rVert^2 - n}{n(n-1)}`, the mean over all
    :math:`n(n-1)/2` unordered pairs, in :math:`O(nd)`. With ``n_pairs``, an unbiased
    estimate from that many pairs :math:`(i, j)`, :math:`i\ne j`, drawn uniformly with
    replacement (``seed`` makes it reproducible). Differentiable; at least 2 points, no row of
    norm zero. Accumulated in fp64, returned in fp64 for fp64 input and fp32 otherwise.

    - **Reference:** Ethayarajh (2019), "How contextual are contextualized word
      representations?".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor in :math:`[-1/(n-1), 1]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, and a row of norm zero.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    >>> avg_cosine_similarity(X)  # pairs: 0, 1/sqrt(2), 1/sqrt(2)
    tensor(0.4714)
    >>> float(avg_cosine_similarity(torch.ones(50, 4), n_pairs=10, seed=0))
    1.0
    """
    X = masked_rows(X, attention_mask, name="X")
    x = as_point_cloud(X, min_points=2)
    n = x.shape[0]
    u = _unit_rows(x)
    if n_pairs is None:
        value = _off_diagonal_cosine_sum(u) / (n * (n - 1))
        return value.to(accumulation_dtype(x))
    if isinstance(n_pairs, bool) or not isinstance(n_pairs, numbers.Integral) or n_pairs < 1:
        raise ValueError(f"n_pairs must be a positive integer or None, got {n_pairs!r}")
    n_pairs = int(n_pairs)
    gen = torch.Generator()
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(int(seed))
    i = torch.randint(0, n, (n_pairs,), generator=gen)
    j = torch.randint(0, n - 1, (n_pairs,), generator=gen)
    j = j + (j >= i).long()  # uniform over the n - 1 indices other than i
    i, j = i.to(x.device), j.to(x.device)
    value = (u[i] * u[j]).sum(1).mean()
    return value.to(accumulation_dtype(x))


def cosine_regularization_term(X: ArrayLike, *,
                               attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r"""The CosReg quantity :math:`\frac{1}{M^2}\sum_{i\ne j}\hat x_i^\top\hat x_j` of ``M`` rows.

    As in eq. 1 of the I-STAR paper (note :math:`1/M^2`, not :math:`1/(M(M-1))`, so it equals
    :math:`\frac{M-1}{M}` times :math:`\text{avg\_cosine\_similarity}`). Computed in
    :math:`O(Md)` as :math:`(\lVert\sum_i\hat x_i\rVert^2 - M)/M^2`; differentiable. One point
    gives the empty sum, 0. Rows of norm zero raise ``ValueError``.

    - **Reference:** Gao et al. (2019), "Representation degeneration problem in training natural
      language generation models", as eq. 1 of Rudman & Eickhoff (2024), "Stable anisotropic
      regularization" (ICLR).
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 1 point, any real dtype.
    - **Returns:** a 0-d tensor, float64 for float64 input and float32 otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, no point, and a row of norm zero.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    >>> cosine_regularization_term(X)  # 2 * (0 + 2 / sqrt(2)) / 9
    tensor(0.3143)
    """
    X = masked_rows(X, attention_mask, name="X")
    x = as_point_cloud(X, min_points=1)
    m = x.shape[0]
    u = _unit_rows(x)
    return (_off_diagonal_cosine_sum(u) / (m * m)).to(accumulation_dtype(x))
