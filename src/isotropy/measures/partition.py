r"""Partition isotropy score (Mu, Bhat & Viswanath 2017, "All-but-the-top").

With the partition function :math:`Z(c) = \sum_{x\in X}\exp(c^\top x)`,

.. math::  I(X) = \frac{\min_{c\in C} Z(c)}{\max_{c\in C} Z(c)} \in (0, 1],

where :math:`C` holds the unit eigenvectors of :math:`X^\top X` (raw, not centred), i.e. the
right singular vectors of :math:`X`. When :math:`d > n` the thin SVD of :math:`X` gives the
:math:`n` singular vectors that span its rows; the other :math:`d - n` eigenvectors of
:math:`X^\top X` (eigenvalue 0) are orthogonal to every row, so each of them has
:math:`Z(c) = n` exactly: :math:`\log Z = \log n` stands in for all of them, and the
:math:`d \times d` matrix is never formed (:math:`O(n^2 d)` instead of :math:`O(d^3)`). An
eigenvector is defined only up to sign and :math:`Z(c) \ne Z(-c)` in general, so :math:`C`
contains both :math:`\pm v` for each eigenvector :math:`v`; the score then does not depend on
the sign convention of the eigensolver. It is evaluated in the log domain,
:math:`I = \exp(\min_c \log Z(c) - \max_c \log Z(c))` with :math:`\log Z` a log-sum-exp, so
rows of norm :math:`10^4` do not overflow. With repeated eigenvalues the eigenvectors are not
unique and neither is the score. The directions are computed from :math:`X` times an exact
power of two that brings its largest entry near 1 (they do not depend on scale; the score
itself does). Not differentiable (the result carries no gradient).
"""

from __future__ import annotations

import math

import torch

from isotropy._validation import (
    ArrayLike,
    accumulation_dtype,
    as_point_cloud,
    masked_rows,
    max_abs,
    pow2_exponent,
    scale_pow2,
)
from isotropy.measures._gradients import detached_input

__all__ = ["partition_score"]

# elements of one (rows x 2d) block of projections
_BLOCK_ELEMENTS = 1 << 22


def _directions(x64: torch.Tensor) -> torch.Tensor:
    """Unit right singular vectors of ``x64`` as columns: ``d`` of them (eigenvectors of
    :math:`X^\top X`) when ``n >= d``, else the ``n`` of the thin SVD."""
    xs = scale_pow2(x64, -pow2_exponent(max_abs(x64)))
    n, d = xs.shape
    if n >= d:
        return torch.linalg.eigh(xs.T @ xs)[1]
    return torch.linalg.svd(xs, full_matrices=False)[2].T


def partition_score(X: ArrayLike, *, log: bool = False,
                    attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r"""Partition isotropy score :math:`\min_c Z(c)/\max_c Z(c)` of ``X`` (``(n_points, dim)``).

    :math:`c` ranges over :math:`\pm` the eigenvectors of :math:`X^\top X`; when
    ``dim > n_points`` these are the ``n_points`` right singular vectors of the thin SVD of
    ``X`` together with its null space (where :math:`Z = n`); see the module docstring.
    With ``log=True`` returns :math:`\log I(X) \le 0`, which stays informative when
    :math:`I(X)` itself underflows to 0 (very large norms). Computed in fp64.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** Mu, Bhat & Viswanath (2017), "All-but-the-top: simple and effective
      postprocessing for word representations".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 1 point, any real dtype.
    - **Returns:** a 0-d tensor in :math:`(0, 1]` (its log, :math:`\le 0`, with ``log=True``),
      float64 for float64 input and float32 otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, and no point.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    >>> partition_score(X)  # Z(e2) / Z(e1) = (cosh 1 + 1) / (cosh 2 + 1)
    tensor(0.5340)
    >>> X = torch.tensor([[1.0, 0.0], [2.0, 0.0]])  # Z(e1) = e + e^2, Z(-e1) = 1/e + 1/e^2
    >>> round(float(partition_score(X, log=True)), 12)  # log Z(-e1) - log Z(e1)
    -3.0
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "partition_score")
    x = as_point_cloud(X, min_points=1).detach()
    x64 = x.to(torch.float64)
    vecs = _directions(x64)
    directions = torch.cat([vecs, -vecs], dim=1)  # (d, 2r)
    rows = max(1, _BLOCK_ELEMENTS // directions.shape[1])
    log_z = torch.stack(
        [torch.logsumexp(x64[s : s + rows] @ directions, dim=0) for s in range(0, len(x64), rows)]
    ).logsumexp(dim=0)
    if vecs.shape[1] < x64.shape[1]:  # the null space of X: Z(c) = n
        log_z = torch.cat([log_z, log_z.new_tensor([math.log(x64.shape[0])])])
    log_score = log_z.min() - log_z.max()
    out = log_score if log else torch.exp(log_score)
    return out.to(accumulation_dtype(x))
