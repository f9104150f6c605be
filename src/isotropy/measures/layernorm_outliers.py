r"""Outlier dimensions of the output LayerNorm's weights (Kovaleva et al. 2021, "BERT busters";
Puccetti et al. 2022, "Outlier dimensions that disrupt transformers are driven by frequency").

The definition as the second paper's code applies it (``outliersvsfreq/parameter_access.py``,
``check_out_of_sigma`` and ``pinpoint_outliers_by_type``): stack the output LayerNorm's scale
:math:`\gamma` (or, separately, its bias :math:`\beta`) of the :math:`L` layers into an
:math:`L\times d` matrix :math:`W`. Dimension :math:`j` is flagged in layer :math:`l` when
:math:`|W_{lj} - \bar W_l| > 3\,s_l`, with :math:`\bar W_l` and :math:`s_l` the mean and the
standard deviation (``ddof=1``, torch's default there) of that layer's :math:`d` values; it is
an outlier dimension of the model when it is flagged in more than 3 layers (the code's
``j > 3``, for 12-layer models; the count is a parameter here, ``min_layers=4``). Scales and
biases are tested separately. Kovaleva et al. describe the same 3σ criterion in words
("fall out of the three sigma range") without fixing the number of layers; the code also runs
with 2.5σ and 2σ.

>>> W = torch.ones(5, 20); W[:, 3] = 10.0
>>> found = layernorm_outliers(W)
>>> found.dims.tolist(), found.scores.tolist()  # dimension 3, flagged in all 5 layers
([3], [5])
"""

from __future__ import annotations

import torch

from isotropy._validation import ArrayLike, as_tensor, check_finite, check_finite_float
from isotropy.measures._gradients import detached_input
from isotropy.measures.outlier_result import Outliers

__all__ = ["layernorm_flags", "layernorm_outliers"]


def _matrix(weights: ArrayLike) -> torch.Tensor:
    w = as_tensor(weights, name="weights").detach().to(torch.float64)
    if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 2:
        raise ValueError(f"weights must have shape (layers, dim) with dim >= 2, got "
                         f"{tuple(w.shape)}")
    check_finite(w, name="weights")
    return w


def layernorm_flags(weights: ArrayLike, *, sigmas: float = 3.0) -> torch.Tensor:
    r"""``(layers, dim)`` booleans: :math:`|W_{lj} - \bar W_l| > \sigma\,s_l` (module doc).
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    >>> layernorm_flags(torch.tensor([[1.0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9]])).nonzero().tolist()
    [[0, 10]]
    """
    weights = detached_input(weights, "layernorm_flags")
    sigmas = check_finite_float(sigmas, "sigmas", allow_bool=False)
    if sigmas <= 0:
        raise ValueError(f"sigmas must be > 0, got {sigmas}")
    w = _matrix(weights)
    centre = w.mean(1, keepdim=True)
    spread = w.std(1, keepdim=True)
    return (w - centre).abs() > sigmas * spread


def layernorm_outliers(weights: ArrayLike, *, sigmas: float = 3.0,
                       min_layers: int = 4) -> Outliers:
    """The dimensions flagged by :func:`layernorm_flags` in at least ``min_layers`` layers,
    most often flagged first (ties: lower index first).
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** the 3σ rule on the LayerNorm weights of Kovaleva et al. (2021), "BERT
      busters", and Puccetti et al. (2022), "Outlier dimensions that disrupt transformers are
      driven by frequency".
    - **Input:** ``weights`` of shape ``(layers, dim)``, ``dim`` at least 2: the output
      LayerNorm weights of every layer, stacked
      (:func:`isotropy.models.layernorms.output_layernorm_weights` reads them from a model).
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices, most often flagged first; empty when none), ``.scores`` (in how many layers
      each is flagged, int64), ``.count``.
    - **Bad input:** ``ValueError`` for another shape, NaN or infinity, a ``sigmas`` that is not
      a positive number, and a ``min_layers`` that is not a positive integer.
    """
    weights = detached_input(weights, "layernorm_outliers")
    if isinstance(min_layers, bool) or not isinstance(min_layers, int) or min_layers < 1:
        raise ValueError(f"min_layers must be a positive integer, got {min_layers!r}")
    counts = layernorm_flags(weights, sigmas=sigmas).sum(0)
    dims = torch.nonzero(counts >= min_layers).flatten()
    dims = dims[torch.sort(-counts[dims], stable=True).indices]
    return Outliers("layernorm_outliers", dims, counts[dims].to(torch.int64), "layers_flagged",
                    int(counts.shape[0]))
