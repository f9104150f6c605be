r"""Outlier dimensions of a point cloud :math:`X` (``(n_points, dim)``), one published
definition per measure, never blended.

- **Variance outliers** (Rudman, Chen & Eickhoff 2023, "Outlier dimensions encode
  task-specific knowledge"): dimension :math:`j` is an outlier when its variance is at least
  5 times the mean variance of all dimensions, :math:`\operatorname{Var}(x_j) \ge 5\,
  \frac{1}{d}\sum_k \operatorname{Var}(x_k)` (the authors' code: ``np.var(states, axis=0) >=
  5 * mean``). The authors apply it to the last layer's sentence embeddings ([CLS], or the last
  position of a decoder); here it is applied to whatever cloud is given, every layer.
- **Activation outliers** (the 3σ rule of Kovaleva et al. 2021, "BERT busters", and Puccetti
  et al. 2022, "Outlier dimensions that disrupt transformers are driven by frequency", applied
  to activations): with :math:`m_j = \frac{1}{n}\sum_i |x_{ij}|` each dimension's mean
  magnitude, :math:`j` is an outlier when :math:`m_j - \bar m > 3\,s_m` (:math:`\bar m`,
  :math:`s_m`: mean and standard deviation, ``ddof=0``, of the :math:`d` values :math:`m_j`).
  Both papers state the 3σ rule on the output LayerNorm's weights, not on activations: that
  test is :func:`isotropy.measures.layernorm_outliers.layernorm_outliers`. The activation
  form, its one-sidedness (a dimension far *below* the mean magnitude is not counted) and the
  ``ddof`` are this library's choices.
- **Rogue dimensions** (Timkey & van Schijndel 2021, "All bark and no bite", Eq. 3): the
  contribution of dimension :math:`j` to the average cosine similarity,
  :math:`CC_j = \mathbb{E}_{a\ne b}[\hat x_{aj}\hat x_{bj}]` over pairs of unit rows
  :math:`\hat x = x/\lVert x\rVert`, so that :math:`\sum_j CC_j` is the average cosine. The
  authors estimate it from 500,000 random token pairs; here it is exact over all
  :math:`n(n-1)` ordered pairs of distinct rows, :math:`CC_j = (S_j^2 - Q_j)/(n(n-1))` with
  :math:`S_j = \sum_a \hat x_{aj}` and :math:`Q_j = \sum_a \hat x_{aj}^2`, in :math:`O(nd)`.
  The paper sets no threshold (it reports the top 1, 3 or 5 dimensions and calls rogue
  dimensions "often just 1-3"), so this measure gives each dimension's share
  :math:`CC_j / \sum_k CC_k` and no count.
- **Massive activations** (Sun, Chen, Kolter & Liu 2024, "Massive activations in large language
  models", §2): a single activation :math:`x_{ij}` with :math:`|x_{ij}| > 100` and
  :math:`|x_{ij}| \ge 1000\cdot\operatorname{median}_k |x_{ik}|` ("at least or around 1,000
  times", a loose cut in the paper; taken here as a hard one). The median is over the hidden
  state of the token :math:`i` (its :math:`d` values); the authors' plotting code takes it over
  a whole sequence. The unit is an activation, not a dimension: the measure counts them per
  dimension.

Every outlier measure returns an :class:`~isotropy.measures.outlier_result.Outliers`: the
dimensions found (``.dims``, most outlying first), the statistic that ranks them (``.scores``)
and how many (``.count``).

The post-hoc view :func:`isoscore_without` measures IsoScore with the :math:`k` dimensions of
largest variance removed or standardised, to show how much of a layer's anisotropy a handful
of dimensions carry.

Streaming: :class:`OutlierStats` holds sums over rows (count, :math:`\sum_i |x_{ij}|`,
:math:`S`, :math:`Q`, the per-dimension count of massive activations) that merge by addition
(and so all-reduce as sums); the variances come from
:class:`~isotropy.measures.covariance.CovarianceStats`. Everything is computed in float64
(half-precision input included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from isotropy._validation import (
    ArrayLike,
    as_point_cloud,
    check_finite_float,
    masked_rows,
    positional_options_deprecated,
    result_dtype,
)
from isotropy.distributed import all_reduce_sum, is_distributed
from isotropy.measures._gradients import detached_input
from isotropy.measures.cosine import _unit_rows  # fp64, extreme norms scaled first
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import _trace_and_frobenius
from isotropy.measures.outlier_result import Outliers

__all__ = [
    "MASSIVE_MIN_MAGNITUDE",
    "MASSIVE_RATIO",
    "OutlierStats",
    "Outliers",
    "activation_outliers",
    "activation_outliers_from_stats",
    "cosine_contributions",
    "cosine_contributions_from_stats",
    "isoscore_without",
    "massive_activations",
    "massive_activations_from_stats",
    "rogue_dimensions",
    "top_variance_dimensions",
    "variance_outliers",
    "variance_outliers_from_stats",
]

VARIANCE_FACTOR = 5.0
ACTIVATION_SIGMAS = 3.0
MASSIVE_MIN_MAGNITUDE = 100.0
MASSIVE_RATIO = 1000.0


def _cloud(X: ArrayLike, min_points: int = 1) -> torch.Tensor:
    return as_point_cloud(X, min_points=min_points).detach().to(torch.float64)


def _positive(value: float, name: str) -> float:
    v = check_finite_float(value, name, allow_bool=False)
    if v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _descending(dims: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """``dims`` ordered by ``score`` from largest to smallest (ties: lower index first)."""
    order = torch.sort(-score[dims], stable=True).indices
    return dims[order]


def _found(measure: str, dims: torch.Tensor, per_dim: torch.Tensor, score: str,
           dtype: torch.dtype, was: str = "dims") -> Outliers:
    """The :class:`Outliers` of ``measure``: ``dims`` with their values of ``per_dim`` (the
    statistic of every dimension) as ``dtype``."""
    return Outliers(measure, dims.to(torch.int64), per_dim[dims].to(dtype), score,
                    int(per_dim.shape[0]), was)  # type: ignore[arg-type]


# ------------------------------------------------------------------ variance (Rudman et al.)


def _variance_outliers(var: torch.Tensor, factor: float, dtype: torch.dtype) -> Outliers:
    mean = var.mean()
    if not bool(mean > 0):  # the ratio Var(x_j) / mean variance is 0/0 in every dimension
        raise ValueError("every dimension has zero variance: no dimension stands out")
    dims = _descending(torch.nonzero(var >= factor * mean).flatten(), var)
    return _found("variance_outliers", dims, var, "variance", dtype)


def variance_outliers(X: ArrayLike, *, factor: float = VARIANCE_FACTOR,
                      attention_mask: ArrayLike | None = None) -> Outliers:
    r"""Dimensions whose variance is at least ``factor`` (5) times the mean variance (Rudman
    et al. 2023; module doc), largest variance first. At least 2 points.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** Rudman, Chen & Eickhoff (2023), "Outlier dimensions encode task-specific
      knowledge".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices, largest variance first; empty when none), ``.scores`` (their variances,
      ``ddof=0``; float64 for float64 input and float32 otherwise), ``.count``.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, zero variance in every
      dimension (the ratio to the mean variance is then 0/0), and a ``factor`` that is not a
      positive number.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[0.0, 0, 0, 0, 0, 0, 0], [10, 1, 1, 1, 1, 1, 1]])
    >>> found = variance_outliers(X)  # variance 25 against a mean of 31/7
    >>> found.dims.tolist(), found.scores.tolist(), found.count
    ([0], [25.0], 1)
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "variance_outliers")
    return _variance_outliers(_variances(X), _positive(factor, "factor"), result_dtype(X))


def variance_outliers_from_stats(stats: CovarianceStats, *,
                                 factor: float = VARIANCE_FACTOR) -> Outliers:
    """:func:`variance_outliers` of the rows summarised by ``stats`` (at least 2).
    Not differentiable (statistics hold no gradient).

    - **Reference:** Rudman, Chen & Eickhoff (2023), "Outlier dimensions encode task-specific
      knowledge".
    - **Input:** ``stats``, the :class:`~isotropy.measures.covariance.CovarianceStats` of at
      least 2 rows.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices, largest variance first; empty when none), ``.scores`` (their variances,
      ``ddof=0``, float64), ``.count``.
    - **Bad input:** ``TypeError`` for anything but a
      :class:`~isotropy.measures.covariance.CovarianceStats`; ``ValueError`` for statistics of
      fewer than 2 rows, zero variance in every dimension, and a ``factor`` that is not a
      positive number.

    >>> s = CovarianceStats.from_batch(torch.tensor([[0.0, 0, 0, 0, 0, 0, 0]]))
    >>> s = s.merge(CovarianceStats.from_batch(torch.tensor([[10.0, 1, 1, 1, 1, 1, 1]])))
    >>> variance_outliers_from_stats(s).dims.tolist()
    [0]
    """
    stats = _stats_of(CovarianceStats, stats, "variance_outliers_from_stats")
    return _variance_outliers(_variances(stats), _positive(factor, "factor"), torch.float64)


@positional_options_deprecated("k", cloud_was="cloud")
def top_variance_dimensions(X: ArrayLike | CovarianceStats, *, k: int,
                            attention_mask: ArrayLike | None = None) -> Outliers:
    """The ``k`` dimensions of largest variance of a cloud or its statistics, largest first.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** the dimensions Rudman, Chen & Eickhoff (2023), "Outlier dimensions encode
      task-specific knowledge" find to carry the anisotropy.
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers` of ``k`` dimensions:
      ``.dims`` (int64 indices, largest variance first), ``.scores`` (their variances,
      ``ddof=0``; float64 for float64 input or statistics, float32 otherwise), ``.count``.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, and ``k`` outside :math:`[0,
      d]`.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> top_variance_dimensions(torch.tensor([[0.0, 0, 0], [1, 3, 2]]), k=2).dims.tolist()
    [1, 2]
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "top_variance_dimensions")
    var = _variances(X)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= var.shape[0]:
        raise ValueError(f"k must be an integer in [0, {var.shape[0]}], got {k!r}")
    dims = _descending(torch.arange(var.shape[0], device=var.device), var)[:k]
    dtype = torch.float64 if isinstance(X, CovarianceStats) else result_dtype(X)
    return _found("top_variance_dimensions", dims, var, "variance", dtype)


def _variances(cloud: ArrayLike | CovarianceStats) -> torch.Tensor:
    """Per dimension, the variance (``ddof=0``) of a cloud or of the rows its statistics
    summarise (the co-moment's diagonal over the count); at least 2 rows; float64."""
    if isinstance(cloud, CovarianceStats):
        if cloud.count < 2:
            raise ValueError(f"the variance needs at least 2 rows, have {cloud.count}")
        return cloud.comoment.diagonal().to(torch.float64) / cloud.count
    return _cloud(cloud, min_points=2).var(0, unbiased=False)


# ------------------------------------------------------------------ activation (3 sigma)


def _activation_outliers(mean_abs: torch.Tensor, sigmas: float, dtype: torch.dtype) -> Outliers:
    # defined at zero spread (all m_j equal, a constant cloud included): none exceeds the mean
    centre, spread = mean_abs.mean(), mean_abs.std(unbiased=False)
    dims = _descending(torch.nonzero(mean_abs - centre > sigmas * spread).flatten(), mean_abs)
    return _found("activation_outliers", dims, mean_abs, "mean_abs", dtype)


def activation_outliers(X: ArrayLike, *, sigmas: float = ACTIVATION_SIGMAS,
                        attention_mask: ArrayLike | None = None) -> Outliers:
    r"""Dimensions whose mean magnitude :math:`m_j` exceeds the mean of all :math:`m_k` by more
    than ``sigmas`` (3) standard deviations (module doc), largest first.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** the 3σ rule of Kovaleva et al. (2021), "BERT busters", and Puccetti et al.
      (2022), "Outlier dimensions that disrupt transformers are driven by frequency", applied to
      activations.
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 1 point, any real dtype.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices, largest mean magnitude first; empty when none, a constant cloud included),
      ``.scores`` (their mean magnitudes; float64 for float64 input and float32 otherwise),
      ``.count``.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, no point, and a ``sigmas`` that is not a positive
      number.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.ones(4, 20); X[:, 7] = 50.0
    >>> found = activation_outliers(X)
    >>> found.dims.tolist(), found.scores.tolist()
    ([7], [50.0])
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "activation_outliers")
    return _activation_outliers(_cloud(X).abs().mean(0), _positive(sigmas, "sigmas"),
                                result_dtype(X))


# ------------------------------------------------------------------ rogue (Timkey & van Schijndel)


def _contributions(s: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    if n < 2:
        raise ValueError(f"the cosine contributions need at least 2 rows, have {n}")
    return (s * s - q) / (n * (n - 1))


def cosine_contributions(X: ArrayLike, *, attention_mask: ArrayLike | None = None) -> torch.Tensor:
    r"""Each dimension's exact contribution :math:`CC_j` to the average cosine similarity over
    all pairs of distinct rows (module doc); they sum to
    :func:`~isotropy.measures.cosine.avg_cosine_similarity`. Shape ``(dim,)``, computed in
    float64 (float64 for float64 input, float32 for any other).
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** Timkey & van Schijndel (2021), "All bark and no bite: rogue dimensions in
      transformer language models obscure representational quality".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 1-D tensor of shape ``(dim,)`` that sums to
      :func:`~isotropy.measures.cosine.avg_cosine_similarity`, float64 for float64 input and
      float32 otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, and a row of norm zero.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> cosine_contributions(torch.tensor([[1.0, 1.0], [1.0, -1.0]]))  # cos = 0 = 1/2 - 1/2
    tensor([ 0.5000, -0.5000])
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "cosine_contributions")
    u = _unit_rows(_cloud(X, min_points=2))
    cc = _contributions(u.sum(0), (u * u).sum(0), u.shape[0])
    return cc.to(result_dtype(X))


def _shares(cc: torch.Tensor, n: int) -> torch.Tensor:
    total = cc.sum()
    d = cc.shape[0]
    floor = 3.0 * (2.0 / (d * n * (n - 1))) ** 0.5
    if not bool(total > floor):
        raise ValueError(
            f"the average cosine similarity ({float(total):.3g}) does not exceed 3 standard "
            f"deviations ({floor:.3g}) of its value for {n} random directions in {d} "
            "dimensions, 0: the shares of a total that is noise or negative are no measure "
            "of which dimensions make the cloud anisotropic")
    return cc / total


@positional_options_deprecated("k")
def rogue_dimensions(X: ArrayLike | OutlierStats, *, k: int = 3,
                     attention_mask: ArrayLike | None = None,
                     ) -> Outliers:
    r"""The ``k`` dimensions contributing most to the average cosine similarity (Timkey &
    van Schijndel 2021), largest first, and their shares :math:`CC_j/\sum_k CC_k` (module doc),
    of a cloud or of its :class:`OutlierStats`.

    A share exceeds 1 when other dimensions contribute negatively. The shares are undefined
    (``ValueError``) unless the average cosine exceeds 3 times its standard deviation under
    :math:`n` independent uniformly random directions, :math:`\sqrt{2/(d\,n(n-1))}` (a
    one-sided test): near 0 they are ratios of noise, and below 0 (a centred simplex,
    say) no dimension makes the cloud anisotropic (this floor is this library's choice).
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** Timkey & van Schijndel (2021), "All bark and no bite: rogue dimensions in
      transformer language models obscure representational quality".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers` of ``k`` dimensions:
      ``.dims`` (int64 indices, largest contribution first), ``.scores`` (their shares;
      float64 for float64 input or statistics, float32 otherwise), ``.count``.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, a row of norm zero, ``k``
      outside :math:`[1, d]`, and an average cosine that does not exceed its 3σ floor (above).

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[3.0, 1.0], [3.0, -1.0]]).repeat(3, 1)
    >>> found = rogue_dimensions(X, k=1)
    >>> found.dims.tolist(), round(float(found.scores[0]), 4)  # dimension 1 pulls it down
    ([0], 1.0227)
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "rogue_dimensions")
    if isinstance(X, OutlierStats):
        cc, n = X.cosine_contributions(), X.count
        out = torch.float64  # statistics are float64
    else:
        x = _cloud(X, min_points=2)
        cc, n = cosine_contributions(x), x.shape[0]
        out = result_dtype(X)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= cc.shape[0]:
        raise ValueError(f"k must be an integer in [1, {cc.shape[0]}], got {k!r}")
    share = _shares(cc, n)
    dims = _descending(torch.arange(cc.shape[0], device=cc.device), cc)[:k]
    return _found("rogue_dimensions", dims, share, "share", out, was="dims_and_scores")


# ------------------------------------------------------------------ massive (Sun et al.)


def _massive_mask(x: torch.Tensor, min_magnitude: float, ratio: float) -> torch.Tensor:
    mag = x.abs()
    # The lower median for even d, read off a sort: ``median(dim=...)`` also returns indices,
    # for which CUDA has no deterministic kernel (it stops a run under full determinism).
    mid = (mag.shape[1] - 1) // 2
    median = mag.sort(dim=1).values[:, mid : mid + 1]
    return (mag > min_magnitude) & (mag >= ratio * median)


def massive_activations(X: ArrayLike, *, min_magnitude: float = MASSIVE_MIN_MAGNITUDE,
                        ratio: float = MASSIVE_RATIO,
                        attention_mask: ArrayLike | None = None,
) -> Outliers:
    r"""The dimensions holding massive activations (Sun et al. 2024: :math:`|x_{ij}| > 100`
    and :math:`\ge 1000` times the median magnitude of row :math:`i`; module doc), most first,
    with how many each holds. For an even ``dim`` the median is the lower of the two middle
    values, as ``torch.median`` gives (read off a sort: deterministic on CUDA too).
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** Sun, Chen, Kolter & Liu (2024), "Massive activations in large language
      models".
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 1 point, any real dtype.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices of the dimensions holding at least one massive activation, most first; ties:
      lower index first), ``.scores`` (how many each holds, int64), ``.count`` (how many
      dimensions; ``int(.scores.sum())`` is how many activations); ``.per_dimension()`` gives
      the counts of all ``dim`` dimensions.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, no point, and thresholds that are not positive
      numbers.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.ones(3, 5); X[0, 2] = 2000.0; X[1, 2] = 500.0
    >>> found = massive_activations(X)  # 500 is not 1000 times the median 1
    >>> found.dims.tolist(), found.scores.tolist(), found.per_dimension().tolist()
    ([2], [1], [0, 0, 1, 0, 0])
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "massive_activations")
    counts = _massive_mask(_cloud(X), _positive(min_magnitude, "min_magnitude"),
                           _positive(ratio, "ratio")).sum(0)
    return _massive_found(counts)


def _massive_found(counts: torch.Tensor) -> Outliers:
    dims = _descending(torch.nonzero(counts).flatten(), counts)
    return _found("massive_activations", dims, counts, "massive_count", torch.int64,
                  was="per_dimension")


# ------------------------------------------------------------------ the post-hoc view


@positional_options_deprecated("k", cloud_was="cloud")
def isoscore_without(X: ArrayLike | CovarianceStats, *, k: int | None = None,
                     dims: Sequence[int] | torch.Tensor | Outliers | None = None,
                     how: str = "remove",
                     attention_mask: ArrayLike | None = None,
) -> torch.Tensor:
    r"""IsoScore of a cloud (or its statistics) with some dimensions taken out of its
    anisotropy: the ``k`` of largest variance, or the given ``dims`` (indices, or the
    :class:`~isotropy.measures.outlier_result.Outliers` an outlier measure found).

    ``how="remove"`` drops them (IsoScore of the remaining :math:`d - k` dimensions, i.e. of
    the covariance's principal submatrix); ``how="standardise"`` rescales each of them to the
    mean variance of the other dimensions (:math:`x_j \mapsto x_j\,\sqrt{\bar v/v_j}`, so
    :math:`\Sigma \mapsto D\Sigma D` with :math:`D` diagonal), keeping :math:`d`. ``k = 0``
    (or ``dims=[]``) gives the IsoScore itself. The rescaling target is this library's
    choice; none of the outlier papers defines one.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    - **Reference:** IsoScore (Rudman, Gillman, Rayne & Eickhoff (2022), "IsoScore: measuring
      the uniformity of embedding space utilization") without the dimensions of largest variance
      of Rudman, Chen & Eickhoff (2023), "Outlier dimensions encode task-specific knowledge";
      the post-hoc view is this library's.
    - **Input:** ``X`` of shape ``(n_points, dim)``, at least 2 points, any real dtype.
    - **Returns:** a 0-d tensor in :math:`[0, 1]`, float64 for float64 input and float32
      otherwise.
    - **Bad input:** ``ValueError`` for an array that is not 2-D (hidden states take
      ``attention_mask``), NaN or infinity, fewer than 2 points, ``k`` or ``dims`` that leave
      fewer than 2 dimensions, and a covariance that is zero without them.

    ``attention_mask`` (0/1, shape ``X.shape[:-1]``): measure the real tokens' rows
    of ``(batch, seq, dim)`` hidden states, ``X[attention_mask.bool()]``.

    >>> X = torch.tensor([[0.0, 0, 0], [10, 1, 0], [0, 0, 1], [10, 1, 1]])
    >>> round(float(isoscore_without(X, k=1)), 4)  # without dimension 0: two equal variances
    1.0
    """
    X = masked_rows(X, attention_mask, name="X")
    X = detached_input(X, "isoscore_without")
    if how not in ("remove", "standardise"):
        raise ValueError(f"how must be 'remove' or 'standardise', got {how!r}")
    cov = _covariance(X)
    d = cov.shape[0]
    if (k is None) == (dims is None):
        raise ValueError("give exactly one of k and dims")
    if dims is None:
        chosen = top_variance_dimensions(X, k=k).dims  # type: ignore[arg-type]
    else:
        given = dims.dims if isinstance(dims, Outliers) else torch.as_tensor(dims)
        if given.numel() == 0:  # no dimension, as k = 0
            given = given.to(torch.long)
        if given.is_floating_point() or given.dtype == torch.bool or given.is_complex():
            raise ValueError(f"dims must be integer dimension indices, got {given.tolist()}")
        chosen = given.to(torch.long).flatten()
        if chosen.numel() and (int(chosen.min()) < 0 or int(chosen.max()) >= d):
            raise ValueError(f"dims must lie in [0, {d - 1}], got {chosen.tolist()}")
        if torch.unique(chosen).numel() != chosen.numel():
            raise ValueError(f"dims must not repeat, got {chosen.tolist()}")
    keep = torch.ones(d, dtype=torch.bool, device=cov.device)
    keep[chosen.to(cov.device)] = False
    if int(keep.sum()) < 2:
        raise ValueError(f"{int(keep.sum())} dimension(s) would remain: IsoScore needs 2")
    # statistics are float64; a cloud's result is float64 for float64 rows, else float32
    out = torch.float64 if isinstance(X, CovarianceStats) else result_dtype(X)
    if how == "remove":
        return _iota(cov[keep][:, keep]).to(out)
    var = cov.diagonal()
    target = var[keep].mean()
    scale = torch.ones(d, dtype=cov.dtype, device=cov.device)
    if not bool((var[~keep] > 0).all()):
        raise ValueError("a dimension to standardise has zero variance")
    scale[~keep] = torch.sqrt(target / var[~keep])
    return _iota(cov * scale[:, None] * scale[None, :]).to(out)


def _iota(cov: torch.Tensor) -> torch.Tensor:
    r""":math:`\iota(C) = (\mathrm{PR}(C) - 1)/(d - 1)` of a principal submatrix or a
    congruence :math:`DCD` of a covariance made from rows: positive semi-definite by
    construction, so not proved again (which would also push the proofs worth remembering,
    such as a :math:`\Sigma_S`'s, out of :func:`isotropy._validation.check_psd`'s memory)."""
    tr, fro, d = _trace_and_frobenius(cov, name="the covariance without the chosen dimensions",
                                      psd=False)
    return (tr * tr / fro - 1.0) / (d - 1)


def _covariance(cloud: ArrayLike | CovarianceStats) -> torch.Tensor:
    if isinstance(cloud, CovarianceStats):
        return cloud.covariance()
    return CovarianceStats.from_batch(_cloud(cloud, min_points=2)).covariance()


# ------------------------------------------------------------------ streaming


@dataclass
class OutlierStats:
    r"""Sums over rows that the activation, rogue and massive measures need (module doc):
    ``count``, ``abs_sum`` :math:`\sum_i|x_{ij}|`, ``unit_sum`` :math:`S_j`, ``unit_sq_sum``
    :math:`Q_j`, ``massive`` (massive activations per dimension, at the thresholds given to
    :meth:`empty`) and ``n_zero_norm`` (rows of norm zero, left out of :math:`S` and :math:`Q`).
    Float64; merging is addition. Not differentiable: rows that require grad get a
    ``UserWarning``.

    >>> s = OutlierStats.empty(2).update(torch.tensor([[1.0, 1.0]]))
    >>> s.update(torch.tensor([[1.0, -1.0]])).cosine_contributions()
    tensor([ 0.5000, -0.5000], dtype=torch.float64)
    """

    count: int
    abs_sum: torch.Tensor
    unit_sum: torch.Tensor
    unit_sq_sum: torch.Tensor
    massive: torch.Tensor
    n_zero_norm: int = 0
    min_magnitude: float = MASSIVE_MIN_MAGNITUDE
    ratio: float = MASSIVE_RATIO

    @classmethod
    def empty(cls, dim: int, device: torch.device | str | None = None, *,
              min_magnitude: float = MASSIVE_MIN_MAGNITUDE,
              ratio: float = MASSIVE_RATIO) -> OutlierStats:
        """Statistics of zero rows in dimension ``dim``."""
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")

        def z() -> torch.Tensor:
            return torch.zeros(dim, dtype=torch.float64, device=device)

        return cls(0, z(), z(), z(), z(), 0, _positive(min_magnitude, "min_magnitude"),
                   _positive(ratio, "ratio"))

    @property
    def dim(self) -> int:
        return self.abs_sum.shape[0]

    def update(self, rows: ArrayLike) -> OutlierStats:
        """Add the rows of ``rows`` (``(n, dim)``, finite) in place; returns ``self``."""
        rows = detached_input(rows, "OutlierStats")
        x = as_point_cloud(rows, min_points=0).detach().to(torch.float64)
        if x.shape[1] != self.dim:
            raise ValueError(f"rows have dimension {x.shape[1]}, the statistics {self.dim}")
        if x.shape[0] == 0:
            return self
        x = x.to(self.abs_sum.device)
        self.count += x.shape[0]
        self.abs_sum += x.abs().sum(0)
        self.massive += _massive_mask(x, self.min_magnitude, self.ratio).sum(0)
        zero = (x == 0).all(1)
        n_zero = int(zero.sum())
        if n_zero:
            self.n_zero_norm += n_zero
            x = x[~zero]
        u = _unit_rows(x) if x.shape[0] else x
        self.unit_sum += u.sum(0)
        self.unit_sq_sum += (u * u).sum(0)
        return self

    def merge(self, other: OutlierStats) -> OutlierStats:
        """The statistics of both samples (a new object)."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge dimension {self.dim} with {other.dim}")
        if (other.min_magnitude, other.ratio) != (self.min_magnitude, self.ratio):
            raise ValueError("cannot merge statistics of different massive-activation cuts")
        dev = self.abs_sum.device
        return OutlierStats(
            self.count + other.count, self.abs_sum + other.abs_sum.to(dev),
            self.unit_sum + other.unit_sum.to(dev), self.unit_sq_sum + other.unit_sq_sum.to(dev),
            self.massive + other.massive.to(dev), self.n_zero_norm + other.n_zero_norm,
            self.min_magnitude, self.ratio)

    def all_reduce(self, group: object | None = None) -> OutlierStats:
        """The statistics of every rank of ``torch.distributed`` (sums; a new object)."""
        if not is_distributed(group):
            return self.merge(OutlierStats.empty(self.dim, self.abs_sum.device,
                                                 min_magnitude=self.min_magnitude,
                                                 ratio=self.ratio))
        flat = torch.cat([self.abs_sum.new_tensor([self.count, self.n_zero_norm]),
                          self.abs_sum, self.unit_sum, self.unit_sq_sum, self.massive])
        flat = all_reduce_sum(flat, group)
        d = self.dim
        parts = flat[2:].split(d)
        return OutlierStats(int(round(float(flat[0]))), *parts[:4],
                            int(round(float(flat[1]))), self.min_magnitude, self.ratio)

    def to(self, device: torch.device | str) -> OutlierStats:
        """The same statistics with their tensors on ``device`` (a new object)."""
        return OutlierStats(self.count, self.abs_sum.to(device), self.unit_sum.to(device),
                            self.unit_sq_sum.to(device), self.massive.to(device),
                            self.n_zero_norm, self.min_magnitude, self.ratio)

    def activation_outliers(self, *, sigmas: float = ACTIVATION_SIGMAS) -> Outliers:
        """:func:`activation_outliers` of the rows so far (scores float64)."""
        if self.count < 1:
            raise ValueError("the statistics hold no row")
        return _activation_outliers(self.abs_sum / self.count, _positive(sigmas, "sigmas"),
                                    torch.float64)

    def cosine_contributions(self) -> torch.Tensor:
        """:func:`cosine_contributions` of the rows so far (``ValueError`` if a row had norm
        zero)."""
        if self.n_zero_norm:
            raise ValueError(f"{self.n_zero_norm} row(s) have norm zero: their cosine "
                             "similarity is undefined")
        return _contributions(self.unit_sum, self.unit_sq_sum, self.count)

    def massive_activations(self) -> Outliers:
        """:func:`massive_activations` of the rows so far."""
        return _massive_found(self.massive.round().to(torch.int64))


# ------------------------------------------------------------------ the streaming twins
#
# One streaming style for every outlier measure: a module-level ``*_from_stats`` function of
# the statistics, as ``variance_outliers_from_stats`` (the methods of OutlierStats are the same
# computations).


_Stats = TypeVar("_Stats")


def _stats_of(kind: type[_Stats], stats: object, measure: str) -> _Stats:
    """``stats`` if it is a ``kind`` (the statistics ``measure`` streams from), else a
    ``TypeError`` that names the cloud form of ``measure``."""
    if not isinstance(stats, kind):
        raise TypeError(f"{measure} takes {kind.__name__}, got {type(stats).__name__}; "
                        f"for a cloud, call {measure.removesuffix('_from_stats')}")
    return stats


def activation_outliers_from_stats(stats: OutlierStats, *,
                                   sigmas: float = ACTIVATION_SIGMAS) -> Outliers:
    """:func:`activation_outliers` of the rows summarised by ``stats`` (at least 1).

    - **Reference:** the 3σ rule of Kovaleva et al. (2021), "BERT busters", and Puccetti et al.
      (2022), "Outlier dimensions that disrupt transformers are driven by frequency", applied to
      activations.
    - **Input:** ``stats``, the :class:`OutlierStats` of at least 1 row.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (int64
      indices, largest mean magnitude first; empty when none), ``.scores`` (their mean
      magnitudes, float64), ``.count``.
    - **Bad input:** ``TypeError`` for anything but an :class:`OutlierStats`; ``ValueError`` for
      statistics of no row and a ``sigmas`` that is not a positive number.

    >>> X = torch.ones(4, 20); X[:, 7] = 50.0
    >>> activation_outliers_from_stats(OutlierStats.empty(20).update(X)).dims.tolist()
    [7]
    """
    return _stats_of(OutlierStats, stats, "activation_outliers_from_stats").activation_outliers(
        sigmas=sigmas)


def cosine_contributions_from_stats(stats: OutlierStats) -> torch.Tensor:
    """:func:`cosine_contributions` of the rows summarised by ``stats`` (at least 2, none of
    norm zero); float64.

    - **Reference:** Timkey & van Schijndel (2021), "All bark and no bite: rogue dimensions in
      transformer language models obscure representational quality".
    - **Input:** ``stats``, the :class:`OutlierStats` of at least 2 rows, none of norm zero.
    - **Returns:** a float64 tensor of shape ``(dim,)`` that sums to the average cosine
      similarity.
    - **Bad input:** ``TypeError`` for anything but an :class:`OutlierStats`; ``ValueError`` for
      statistics of fewer than 2 rows or with a row of norm zero.

    >>> X = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    >>> cosine_contributions_from_stats(OutlierStats.empty(2).update(X)).tolist()
    [0.7071067811865475, 0.0]
    """
    return _stats_of(OutlierStats, stats, "cosine_contributions_from_stats").cosine_contributions()


def massive_activations_from_stats(stats: OutlierStats) -> Outliers:
    """:func:`massive_activations` of the rows summarised by ``stats``, at the thresholds
    given to :meth:`OutlierStats.empty`.

    - **Reference:** Sun, Chen, Kolter & Liu (2024), "Massive activations in large language
      models".
    - **Input:** ``stats``, the :class:`OutlierStats` of any number of rows (none gives zeros);
      its thresholds are those given to :meth:`OutlierStats.empty`, because each row's test
      needs that row's median, which the sums cannot give back.
    - **Returns:** an :class:`~isotropy.measures.outlier_result.Outliers`: ``.dims`` (the
      dimensions holding at least one massive activation, most first), ``.scores`` (how many
      each holds, int64), ``.count``; ``.per_dimension()`` gives the counts of all dimensions.
    - **Bad input:** ``TypeError`` for anything but an :class:`OutlierStats`.

    >>> X = torch.ones(3, 5); X[0, 2] = 2000.0
    >>> massive_activations_from_stats(OutlierStats.empty(5).update(X)).per_dimension().tolist()
    [0, 0, 1, 0, 0]
    """
    return _stats_of(OutlierStats, stats, "massive_activations_from_stats").massive_activations()
