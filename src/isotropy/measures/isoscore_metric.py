r"""IsoScore* as a streaming metric over many batches (an evaluation metric, not a loss).

The state is the sufficient statistics of the covariance (:class:`CovarianceStats`: count
:math:`n`, mean :math:`\mu`, co-moment :math:`M`), so the score of all rows seen so far is
exact whatever the batching:

.. math::  \Sigma_X = \frac{M}{n-1}, \qquad
           \Sigma_\zeta = (1-\zeta)\Sigma_X + \zeta\Sigma_S, \qquad
           \mathrm{IsoScore}^\star = \frac{(\operatorname{tr}\Sigma_\zeta)^2 /
           \lVert\Sigma_\zeta\rVert_F^2 - 1}{d - 1}.

Functional form: :func:`isoscore_star_update` (a batch's statistics) and
:func:`isoscore_star_compute` (the score of statistics); module form: :class:`IsoScoreMetric`,
a ``torchmetrics.Metric`` (``update`` / ``compute`` / ``reset`` / ``merge`` / ``sync``), so it
works in a ``MetricCollection`` and with Lightning's ``self.log``. Its one state packs
:math:`(n, \mu, M)`; states of several ranks or batches are merged exactly (Chan et al.'s
pairwise update, :meth:`CovarianceStats.merge`), never as raw sums of :math:`x x^\top`. Under
``torch.distributed`` the statistics are all-reduced, giving the score of the union of every
rank's rows. Computed in float64; no gradient flows (use
:func:`isotropy.measures.isoscore.isoscore_star` for a differentiable score).
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

from isotropy._validation import (
    ArrayLike,
    as_covariance,
    as_square_matrix,
    as_tensor,
    check_zeta,
)
from isotropy.measures._gradients import detached_input
from isotropy.measures.covariance import (
    CovarianceStats,
    merge_packed,
    packed_batch,
    packed_dim,
)
from isotropy.measures.isoscore import _trace_and_frobenius, warn_identity_shrinkage

__all__ = ["IsoScoreMetric", "isoscore_star_compute", "isoscore_star_update"]


def isoscore_star_update(x: ArrayLike, mask: ArrayLike | None = None) -> CovarianceStats:
    r"""Sufficient statistics :math:`(n, \mu, M)` of the rows of ``x`` (shape ``(..., d)``)
    where ``mask`` (shape ``x.shape[:-1]``) is true; combine batches with
    :meth:`CovarianceStats.merge`.
    Not differentiable: an input that requires grad gets a ``UserWarning``.

    >>> h = torch.arange(12.0).reshape(1, 3, 4)  # (batch, seq, dim)
    >>> isoscore_star_update(h, mask=torch.tensor([[1, 1, 0]])).count
    2
    """
    x = detached_input(x, "isoscore_star_update")
    return CovarianceStats.from_batch(x, mask)


def _shrinkage(shrinkage: ArrayLike | None, *, copy: bool) -> torch.Tensor | None:
    r"""The validated :math:`\Sigma_S` in float64 (a copy with ``copy``, made before the checks
    so that the stored tensor is the one whose positive semi-definiteness is remembered)."""
    if shrinkage is None:
        return None
    s = as_square_matrix(shrinkage, name="shrinkage")
    if s.shape[0] < 2:
        raise ValueError("shrinkage must be at least 2 x 2 (IsoScore* needs dimension >= 2)")
    if s.requires_grad:
        s = s.detach()
    s = s.to(torch.float64)  # the same object when already fp64: its PSD check is remembered
    if copy:
        s = s.clone()
    return as_covariance(s, name="shrinkage")


def isoscore_star_compute(
    stats: CovarianceStats, zeta: float = 0.0, shrinkage: ArrayLike | None = None
) -> torch.Tensor:
    r"""IsoScore* of accumulated statistics: :math:`\iota((1-\zeta)M/(n-1) + \zeta\Sigma_S)`.

    ``shrinkage`` (:math:`\Sigma_S`, ``(d, d)``) defaults to the identity; it must be symmetric
    positive semi-definite (checked, once per tensor; ``ValueError`` naming the smallest
    eigenvalue otherwise). With the identity, :math:`\zeta > 0` makes the score depend on the
    scale of the rows; this low-level step does not warn (``isoscore_star`` and
    :class:`IsoScoreMetric` do). Returns a float64 scalar tensor.
    Not differentiable (statistics hold no gradient).

    >>> s = isoscore_star_update(torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]]))
    >>> isoscore_star_compute(s)  # equal variances in both dimensions
    tensor(1., dtype=torch.float64)
    >>> # Sigma_X = (4/3) I, so Sigma_zeta = diag(7/6, 2/3): PR = 121/65, iota = 56/65
    >>> isoscore_star_compute(s, zeta=0.5, shrinkage=torch.diag(torch.tensor([1.0, 0.0])))
    tensor(0.8615, dtype=torch.float64)
    """
    z = check_zeta(zeta)
    if not isinstance(stats, CovarianceStats):
        raise TypeError(f"stats must be a CovarianceStats, got {type(stats).__name__}")
    d = stats.dim
    if d < 2:
        raise ValueError("IsoScore* needs dimension >= 2 (it is undefined for d = 1)")
    if stats.count < 2:
        raise ValueError(f"IsoScore* needs at least 2 accumulated rows, have {stats.count}")
    s = _shrinkage(shrinkage, copy=False)
    if s is not None and s.shape[0] != d:
        raise ValueError(f"shrinkage has shape {tuple(s.shape)} but the rows have dimension {d}")
    sigma = stats.covariance(ddof=1) * (1.0 - z)
    if z > 0:
        if s is None:
            sigma.diagonal().add_(z)
        else:
            sigma.add_(s.to(sigma.device), alpha=z)
    tr, fro, _ = _trace_and_frobenius(
        sigma, name="the shrunk covariance of the accumulated rows", psd=False
    )
    return (tr * tr / fro - 1.0) / (d - 1)


def _pack(stats: CovarianceStats) -> torch.Tensor:
    """``[n, mu (d), M (d*d)]`` as one float64 vector (the metric's state)."""
    return torch.cat([stats.mean.new_tensor([float(stats.count)]), stats.mean,
                      stats.comoment.reshape(-1)])


def _unpack(packed: torch.Tensor) -> CovarianceStats:
    """The statistics of a vector made by :func:`_pack`: ``d`` solves ``1 + d + d^2 = len``."""
    d = packed_dim(packed)
    return CovarianceStats(int(round(float(packed[0]))), packed[1:1 + d].clone(),
                           packed[1 + d:].reshape(d, d).clone())


def _merge_packed(stacked: torch.Tensor) -> torch.Tensor:
    """The merge of stacked packed states (``(k, 1 + d + d^2)``): torchmetrics' reduction of the
    state across ranks (``sync``) and across batches (``forward``, ``merge_state``).

    >>> a = CovarianceStats.from_batch(torch.tensor([[0.0, 0.0], [2.0, 0.0]]))
    >>> b = CovarianceStats.from_batch(torch.tensor([[0.0, 2.0], [2.0, 2.0]]))
    >>> _unpack(_merge_packed(torch.stack([_pack(a), _pack(b)]))).covariance()
    tensor([[1.3333, 0.0000],
            [0.0000, 1.3333]], dtype=torch.float64)
    """
    merged = stacked[0]
    for row in stacked[1:]:
        merged = merge_packed(merged, row)
    return merged


class IsoScoreMetric(Metric):
    r"""IsoScore* of every row passed to :meth:`update`, exact across batches and ranks.

    ``update(x, mask)`` adds the rows of ``x`` (``(..., d)``, e.g. ``(batch, seq, d)`` token
    states with a ``(batch, seq)`` attention mask) to the statistics; ``compute()`` returns
    :math:`\iota(\Sigma_\zeta)` of all of them; ``forward(x, mask)`` does both for one batch
    and returns that batch's own score. ``dim`` (optional; implied by ``shrinkage``) lets a
    rank that saw no rows take part in ``compute(sync_dist=True)``. ``shrinkage`` is checked
    once, here: symmetric positive semi-definite (``ValueError`` naming its smallest
    eigenvalue otherwise). Without it, :math:`\zeta > 0` shrinks toward the identity and the
    score depends on the scale of the rows (a ``UserWarning`` at construction).

    ``eager_checks``: ``True`` checks every batch's values at once (a host read per
    ``update``); ``False`` accumulates on the device with no host read
    (:func:`~isotropy.measures.covariance.packed_batch`), and ``compute`` raises if a kept
    row held NaN or infinity; ``None`` (default): eager on CPU, on the device elsewhere.

    A ``torchmetrics.Metric``: other keyword arguments go to it. Under ``torch.distributed``,
    ``compute()`` scores the rows of every rank (``sync_on_compute=True``, torchmetrics'
    default, which Lightning's logging of a metric object relies on; a rank that saw no rows
    then needs ``dim``); ``sync_on_compute=False`` scores this rank's rows unless asked
    (``compute(sync_dist=True)`` or :meth:`sync`).

    Not differentiable (``is_differentiable = False``, as torchmetrics declares it): rows
    that require grad get a ``UserWarning`` from ``update`` and ``forward``.

    >>> g = torch.Generator().manual_seed(0)
    >>> metric = IsoScoreMetric(zeta=0.0)
    >>> for _ in range(4):
    ...     metric.update(torch.randn(500, 3, generator=g) * torch.tensor([1.0, 1.0, 0.0]))
    >>> round(float(metric.compute()), 3)  # two of three dimensions used: (2-1)/(3-1)
    0.5
    >>> metric.stats.count
    2000
    """

    is_differentiable = False
    higher_is_better = None
    full_state_update = False
    packed: torch.Tensor

    def __init__(
        self, zeta: float = 0.0, shrinkage: ArrayLike | None = None, *, dim: int | None = None,
        eager_checks: bool | None = None, **kwargs: object,
    ) -> None:
        if eager_checks is not None and not isinstance(eager_checks, bool):
            raise TypeError(f"eager_checks must be True, False or None, got {eager_checks!r}")
        self.eager_checks = eager_checks
        kwargs.setdefault("sync_on_compute", True)  # torchmetrics' default: every rank's rows
        kwargs.setdefault("compute_with_cache", False)  # compute(sync_dist=...) differs per call
        super().__init__(**kwargs)
        self.zeta = check_zeta(zeta)
        self.shrinkage = _shrinkage(shrinkage, copy=True)
        if self.shrinkage is None:
            warn_identity_shrinkage(self.zeta, "IsoScoreMetric", stacklevel=3)
        if self.shrinkage is not None:
            if dim is not None and dim != self.shrinkage.shape[0]:
                raise ValueError(f"dim={dim} but shrinkage has shape {tuple(self.shrinkage.shape)}")
            dim = self.shrinkage.shape[0]
        if dim is not None and dim < 2:
            raise ValueError(f"dim must be >= 2, got {dim}")
        self.dim = dim
        self.add_state("packed", default=self._empty(), dist_reduce_fx=_merge_packed)
        self._local: torch.Tensor | None = None  # the rank's own state while synced

    def _empty(self) -> torch.Tensor:
        d = self.dim
        if d is None:  # no dimension yet: the first update fixes it
            return torch.zeros(0, dtype=torch.float64)
        return _pack(CovarianceStats.empty(d))

    @property
    def stats(self) -> CovarianceStats:
        """The accumulated statistics (empty ones of dimension ``dim`` before any update)."""
        if self.packed.numel() == 0:
            raise ValueError(
                "IsoScoreMetric has no rows yet and no dim: call update() first, or pass dim "
                "or shrinkage to the constructor"
            )
        return _unpack(self.packed)

    @property
    def synced(self) -> bool:
        """True between :meth:`sync` and :meth:`unsync` (ours, or torchmetrics' own around a
        ``compute`` with ``sync_on_compute``)."""
        return self._local is not None or bool(getattr(self, "_is_synced", False))

    def _add(self, stats: CovarianceStats) -> None:
        self._add_packed(_pack(stats), stats.dim, self.packed.device)

    def _add_packed(self, batch: torch.Tensor, dim: int, device: torch.device) -> None:
        """Merge a batch's packed statistics into the state, kept on ``device``
        (:func:`merge_packed`, Chan et al.'s update: no host read)."""
        if self.synced:
            raise RuntimeError("IsoScoreMetric is synced: call unsync() or reset() before adding")
        if self.dim is not None and dim != self.dim:
            raise ValueError(f"the rows have dimension {dim}, the metric {self.dim}")
        if self.dim is None:
            self.dim = dim
            self._defaults["packed"] = self._empty()
            self.packed = self._empty()
        self.packed = merge_packed(self.packed.to(device), batch)

    def update(self, x: ArrayLike, mask: ArrayLike | None = None) -> None:
        r"""Add the rows of ``x`` (``(..., d)``) where ``mask`` is true (padding excluded).

        >>> m = IsoScoreMetric()
        >>> m.update(torch.ones(2, 5, 4), mask=torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]))
        >>> m.stats.count
        4
        """
        x = detached_input(x, "IsoScoreMetric")
        if self._device_route(x):
            self._add_on_device(x, mask)
        else:
            self._add(isoscore_star_update(x, mask))

    def _device_route(self, x: ArrayLike) -> bool:
        """Whether :meth:`update` takes the route without host reads: ``eager_checks=False``,
        or ``None`` (the default) with ``x`` off the CPU."""
        if self.eager_checks is not None:
            return not self.eager_checks
        return isinstance(x, torch.Tensor) and x.device.type != "cpu"

    def _add_on_device(self, x: ArrayLike, mask: ArrayLike | None) -> None:
        """Merge the batch's statistics into the state on the device (:func:`packed_batch`):
        shape checks only; NaN or infinity is raised by ``compute``."""
        if self.synced:
            raise RuntimeError("IsoScoreMetric is synced: call unsync() or reset() before adding")
        t = as_tensor(x, name="x")
        if t.ndim < 2:
            raise ValueError(f"expected shape (..., dim) with at least 2 axes, got "
                             f"{tuple(t.shape)}")
        if self.dim is not None and t.shape[-1] != self.dim:
            raise ValueError(f"the rows have dimension {t.shape[-1]}, the metric {self.dim}")
        m = None if mask is None else torch.as_tensor(mask, device=t.device)
        self._add_packed(packed_batch(t, m), t.shape[-1], t.device)

    def compute(
        self, sync_dist: bool = False, process_group: object | None = None
    ) -> torch.Tensor:
        r"""IsoScore* of all accumulated rows (float64 scalar).

        With ``sync_dist=True`` under ``torch.distributed``: of the rows of every rank (the
        state is left as it is; every rank must call it).

        >>> m = IsoScoreMetric(zeta=1.0, shrinkage=torch.eye(3))
        >>> m.update(torch.randn(10, 3))
        >>> m.compute()
        tensor(1., dtype=torch.float64)
        """
        if not bool(torch.isfinite(self.packed).all()):
            raise ValueError("the accumulated statistics are not finite: an update received "
                             "NaN or infinity in a kept row (or values too large for float64)")
        stats = self.stats
        if sync_dist and not self.synced:
            stats = stats.all_reduce(process_group)
        return isoscore_star_compute(stats, self.zeta, self.shrinkage)

    def forward(self, x: ArrayLike, mask: ArrayLike | None = None) -> torch.Tensor:
        r"""Add the rows (as :meth:`update`) and return IsoScore* of this batch alone.

        >>> m = IsoScoreMetric()
        >>> m(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        tensor(1., dtype=torch.float64)
        """
        x = detached_input(x, "IsoScoreMetric")
        batch = isoscore_star_update(x, mask)
        self._add(batch)
        self._update_count += 1
        return isoscore_star_compute(batch, self.zeta, self.shrinkage)

    def reset(self) -> None:
        """Forget every row (and leave the synced state); the dimension seen is kept.

        >>> m = IsoScoreMetric(dim=2)
        >>> m.update(torch.randn(4, 2))
        >>> m.reset()
        >>> m.stats.count
        0
        """
        super().reset()
        self._local = None

    def merge(self, other: IsoScoreMetric | CovarianceStats) -> IsoScoreMetric:
        r"""Add the rows of ``other`` (a metric or statistics) to this metric; returns ``self``.

        >>> a, b = IsoScoreMetric(), IsoScoreMetric()
        >>> a.update(torch.randn(3, 2))
        >>> b.update(torch.randn(5, 2))
        >>> a.merge(b).stats.count
        8
        """
        stats = other.stats if isinstance(other, IsoScoreMetric) else other
        if not isinstance(stats, CovarianceStats):
            raise TypeError(f"cannot merge a {type(other).__name__} into an IsoScoreMetric")
        if stats.count:
            self._add(stats)
            self._update_count += 1
        return self

    def sync(self, process_group: object | None = None, *,  # type: ignore[override]
             dist_sync_fn: object | None = None, should_sync: bool | None = None,
             distributed_available: object | None = None) -> IsoScoreMetric | None:
        r"""Replace the state by the statistics of all ranks' rows (all-reduce); returns ``self``.

        Every rank must call it. The rank's own statistics are kept for :meth:`unsync`;
        :meth:`update` is refused until then (so no rows are counted twice). Without
        ``torch.distributed`` the state is unchanged. (Called by torchmetrics itself, with
        ``should_sync``, it is ``torchmetrics.Metric.sync``.)

        >>> m = IsoScoreMetric()
        >>> m.update(torch.randn(6, 3))
        >>> m.sync().synced, m.unsync().synced
        (True, False)
        """
        if should_sync is not None:
            if self._local is not None:  # synced by sync() already: the state is global
                return None
            try:
                super().sync(dist_sync_fn=dist_sync_fn,  # type: ignore[arg-type]
                             process_group=process_group, should_sync=should_sync,
                             distributed_available=distributed_available)  # type: ignore[arg-type]
            except RuntimeError as err:  # every rank gets here: the gather itself succeeded
                if "equal size" not in str(err):
                    raise
                raise ValueError(
                    "IsoScoreMetric: a rank that saw no rows has no dimension to sync: pass "
                    "dim= (or shrinkage=) to the constructor") from err
            return None
        if self.synced:
            raise RuntimeError("IsoScoreMetric is already synced: call unsync() first")
        local = self.packed
        self.packed = _pack(self.stats.all_reduce(process_group)).to(local.device)
        self._local = local
        return self

    def unsync(self, should_unsync: bool | None = None) -> IsoScoreMetric | None:  # type: ignore[override]
        """Return to this rank's own statistics after :meth:`sync`; returns ``self``. (Called by
        torchmetrics itself, with ``should_unsync``, it is ``torchmetrics.Metric.unsync``.)"""
        if should_unsync is not None:
            super().unsync(should_unsync=should_unsync)
            return None
        if not self.synced:
            raise RuntimeError("IsoScoreMetric is not synced")
        assert self._local is not None
        self.packed, self._local = self._local, None
        return self

    def extra_repr(self) -> str:
        s = "identity" if self.shrinkage is None else f"{tuple(self.shrinkage.shape)}"
        n = 0 if self.packed.numel() == 0 else int(round(float(self.packed[0])))
        return f"zeta={self.zeta}, shrinkage={s}, dim={self.dim}, rows={n}"
