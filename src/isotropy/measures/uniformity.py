r"""Alignment and uniformity (Wang & Isola 2020, Eqs. 4-5) on L2-normalised rows.

With :math:`f(x) = x / \lVert x\rVert_2`:

.. math::

    \ell_\text{align} = \frac{1}{m}\sum_{i=1}^{m} \lVert f(x_i) - f(y_i)\rVert_2^{\alpha},
    \qquad
    \ell_\text{uniform} = \log \frac{2}{n(n-1)} \sum_{i<j} e^{-t\,\lVert f(x_i) - f(x_j)
    \rVert_2^2},

over the positive pairs :math:`(x_i, y_i)` (e.g. the two sentences of an STS-B or MRPC pair)
and over the distinct pairs of one cloud, with the paper's :math:`\alpha = 2`, :math:`t = 2`.
Lower is better for both: :math:`\ell_\text{align} \in [0, 2^\alpha]` (0 when every pair
points the same way), :math:`\ell_\text{uniform} \le 0` (0 when all points coincide).
Computed in float64; the pairs of the uniformity are visited in blocks of rows, so memory
stays :math:`O(\text{block} \cdot n)` (under autograd, the graph keeps every pair).

Both are differentiable (they are the paper's losses): the gradient reaches the input, in
its own dtype, e.g. ``loss = task_loss + uniformity(embeddings)``.

Streaming: alignment is a mean over pairs, so batches combine through ``reduction="sum"``
(the sum and the number of pairs). Uniformity has no finite sufficient statistic (it needs
every pair across batches): pass it the whole cloud.
"""

from __future__ import annotations

import math

import torch

from isotropy._validation import (
    ArrayLike,
    as_point_cloud,
    check_finite_float,
    masked_rows,
    result_dtype,
)

__all__ = ["alignment", "uniformity"]


def _normalised(X: ArrayLike, name: str, min_points: int = 1) -> torch.Tensor:
    """The rows divided by their norms, in float64, differentiable."""
    x = as_point_cloud(X, min_points=min_points, name=name).to(torch.float64)
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    if bool((norms.detach() == 0).any()):
        raise ValueError(f"{name} has a row of norm zero: it has no direction to normalise")
    return x / norms


def alignment(X: ArrayLike, Y: ArrayLike, *, alpha: float = 2.0,
              reduction: str = "mean") -> torch.Tensor | tuple[torch.Tensor, int]:
    r""":math:`\ell_\text{align}` of the positive pairs ``(X[i], Y[i])`` (module docstring).

    ``reduction="sum"`` returns ``(sum, number of pairs)`` to combine batches.
    Differentiable in ``X`` and ``Y`` (a loss).

    - **Reference:** Wang & Isola (2020), "Understanding contrastive representation learning
      through alignment and uniformity on the hypersphere".
    - **Input:** ``X`` and ``Y`` of the same shape ``(n_pairs, dim)``, at least 1 pair, row
      ``i`` of each a positive pair.
    - **Returns:** a 0-d tensor :math:`\ge 0`, float64 for float64 input and float32 otherwise
      (with ``reduction="sum"``, ``(sum, number of pairs)``).
    - **Bad input:** ``ValueError`` for clouds of different shapes, an array that is not 2-D,
      NaN or infinity, no pair, and a row of norm zero.

    >>> round(float(alignment(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 3.0]]))), 6)
    2.0
    """
    alpha = check_finite_float(alpha, "alpha", allow_bool=False)
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    x, y = _normalised(X, "X"), _normalised(Y, "Y")
    out = result_dtype(X)
    if x.shape != y.shape:
        raise ValueError(f"X and Y must have the same shape (pairs), got {tuple(x.shape)} "
                         f"and {tuple(y.shape)}")
    d = torch.linalg.vector_norm(x - y, dim=1).pow(alpha)
    if reduction == "mean":
        return d.mean().to(out)
    if reduction == "sum":
        return d.sum().to(out), int(d.shape[0])
    raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")


def uniformity(X: ArrayLike, *, t: float = 2.0, block: int = 1024,
               attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r""":math:`\ell_\text{uniform}` of the rows of ``X`` (module docstring; at least 2 rows).
    Differentiable in ``X`` (a loss).

    - **Reference:** Wang & Isola (2020), "Understanding contrastive representation learning
      through alignment and uniformity on the hypersphere".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor :math:`\le 0`, float64 for float64 input and float32 otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, and a row of norm zero.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> round(float(uniformity(torch.eye(3))), 6)  # every pair at squared distance 2: log e^-4
    -4.0
    """
    X = masked_rows(X, attention_mask, name="X")
    t = check_finite_float(t, "t", allow_bool=False)
    if t <= 0:
        raise ValueError(f"t must be > 0, got {t}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    x = _normalised(X, "X", min_points=2)
    out = result_dtype(X)
    n = x.shape[0]
    parts = []
    for start in range(0, n - 1, block):
        rows = x[start:start + block]
        # squared distances of unit vectors: 2 - 2 cos, to every later row
        sq = (2.0 - 2.0 * rows @ x[start + 1:].T).clamp(min=0.0)
        i = torch.arange(rows.shape[0])[:, None]
        j = torch.arange(sq.shape[1])[None, :]
        later = j >= i  # column j is row start + 1 + j: a pair i < j
        parts.append(torch.logsumexp((-t * sq)[later], dim=0))
    pairs = n * (n - 1) / 2
    return (torch.logsumexp(torch.stack(parts), dim=0) - math.log(pairs)).to(out)
