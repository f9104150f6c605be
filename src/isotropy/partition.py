r"""Partition isotropy score (Mu, Bhat & Viswanath 2017, "All-but-the-top").

With the partition function :math:`Z(c) = \sum_{x\in X}\exp(c^\top x)`,

.. math::  I(X) = \frac{\min_{c\in C} Z(c)}{\max_{c\in C} Z(c)} \in (0, 1],

where :math:`C` holds the unit eigenvectors of :math:`X^\top X` (raw, not centred). An
eigenvector is defined only up to sign and :math:`Z(c) \ne Z(-c)` in general, so :math:`C`
contains both :math:`\pm v` for each eigenvector :math:`v`; the score then does not depend on
the sign convention of the eigensolver. It is evaluated in the log domain,
:math:`I = \exp(\min_c \log Z(c) - \max_c \log Z(c))` with :math:`\log Z` a log-sum-exp, so
rows of norm :math:`10^4` do not overflow. With repeated eigenvalues the eigenvectors are not
unique and neither is the score. Not differentiable (the result carries no gradient).
"""

from __future__ import annotations

import torch

from isotropy._validation import ArrayLike, accumulation_dtype, as_point_cloud

__all__ = ["partition_score"]

# elements of one (rows x 2d) block of projections
_BLOCK_ELEMENTS = 1 << 22


def partition_score(X: ArrayLike, *, log: bool = False) -> torch.Tensor:
    r"""Partition isotropy score :math:`\min_c Z(c)/\max_c Z(c)` of ``X`` (``(n_points, dim)``).

    :math:`c` ranges over :math:`\pm` the eigenvectors of :math:`X^\top X`; see the module
    docstring. With ``log=True`` returns :math:`\log I(X) \le 0`, which stays informative when
    :math:`I(X)` itself underflows to 0 (very large norms). Computed in fp64.

    >>> X = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    >>> partition_score(X)  # Z(e2) / Z(e1) = (cosh 1 + 1) / (cosh 2 + 1)
    tensor(0.5340)
    >>> X = torch.tensor([[1.0, 0.0], [2.0, 0.0]])  # Z(e1) = e + e^2, Z(-e1) = 1/e + 1/e^2
    >>> round(float(partition_score(X, log=True)), 12)  # log Z(-e1) - log Z(e1)
    -3.0
    """
    x = as_point_cloud(X, min_points=1).detach()
    x64 = x.to(torch.float64)
    _, vecs = torch.linalg.eigh(x64.T @ x64)
    directions = torch.cat([vecs, -vecs], dim=1)  # (d, 2d)
    rows = max(1, _BLOCK_ELEMENTS // directions.shape[1])
    log_z = torch.stack(
        [torch.logsumexp(x64[s : s + rows] @ directions, dim=0) for s in range(0, len(x64), rows)]
    ).logsumexp(dim=0)
    log_score = log_z.min() - log_z.max()
    out = log_score if log else torch.exp(log_score)
    return out.to(accumulation_dtype(x))
