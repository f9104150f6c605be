"""The streaming IsoScore* metric against the authors' package and an eigenvalue route on the
concatenation of all batches, and against ``isoscore_star`` on the concatenation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore_star
from isotropy.measures.isoscore_metric import (
    IsoScoreMetric,
    isoscore_star_compute,
    isoscore_star_update,
)

ref = pytest.importorskip("IsoScore.IsoScore")


def eig_route(x: np.ndarray, zeta: float, s: np.ndarray | None) -> float:
    """Algorithm 1 with eigenvalues of the shrunk covariance (NumPy)."""
    d = x.shape[1]
    cov = (1 - zeta) * np.cov(x, rowvar=False) + zeta * (np.eye(d) if s is None else s)
    lam = np.linalg.eigvalsh(cov)
    lam_hat = math.sqrt(d) * lam / np.linalg.norm(lam)
    delta = np.linalg.norm(lam_hat - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    phi = (d - delta**2 * (d - math.sqrt(d))) ** 2 / d**2
    return float((d * phi - 1) / (d - 1))


def ref_star(x: np.ndarray, zeta: float, s: np.ndarray | None) -> float:
    c0 = torch.eye(x.shape[1], dtype=torch.float64) if s is None else torch.tensor(s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(ref.IsoScore_star(x, c0, zeta))


def batches(sizes: list[int], d: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) * rng.exponential(size=d)
    return [rng.standard_normal((k, d)) @ mix + 2.0 for k in sizes]


def spd(d: int, seed: int = 1) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((d, 2 * d))
    return a @ a.T / (2 * d)


@pytest.mark.parametrize("zeta", [0.0, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("given_s", [False, True])
def test_metric_over_batches_equals_score_of_concatenation(zeta, given_s):
    d = 6
    parts = batches([3, 1, 17, 0, 9], d)
    s = spd(d) if given_s else None
    metric = IsoScoreMetric(zeta, s)
    for b in parts:
        metric.update(torch.tensor(b))
    value = float(metric.compute())
    x = np.concatenate(parts)
    assert value == pytest.approx(eig_route(x, zeta, s), abs=1e-10)
    assert value == pytest.approx(ref_star(x, zeta, s), abs=1e-6)
    assert value == pytest.approx(float(isoscore_star(torch.tensor(x), zeta=zeta, shrinkage=s)),
                                  abs=1e-12)


def test_functional_form():
    parts = batches([5, 8, 4], 5, seed=2)
    stats = isoscore_star_update(torch.tensor(parts[0]))
    for b in parts[1:]:
        stats = stats.merge(isoscore_star_update(b))
    assert isinstance(stats, CovarianceStats)
    x = np.concatenate(parts)
    for zeta in (0.0, 0.3):
        got = isoscore_star_compute(stats, zeta, spd(5))
        assert got.dtype == torch.float64
        assert float(got) == pytest.approx(eig_route(x, zeta, spd(5)), abs=1e-10)


def test_padding_is_excluded():
    rng = np.random.default_rng(4)
    h = rng.standard_normal((3, 7, 4)) * [1.0, 2.0, 0.5, 3.0]
    mask = rng.random((3, 7)) < 0.7
    h_pad = h.copy()
    h_pad[~mask] = 1e6  # padding rows: must not count
    metric = IsoScoreMetric(0.2)
    for i in range(3):
        metric.update(torch.tensor(h_pad[i : i + 1]), torch.tensor(mask[i : i + 1]))
    assert metric.stats.count == int(mask.sum())
    assert float(metric.compute()) == pytest.approx(eig_route(h[mask], 0.2, None), abs=1e-10)


def test_forward_returns_the_batch_score_and_accumulates():
    parts = batches([10, 12], 4, seed=5)
    metric = IsoScoreMetric(0.4)
    for b in parts:
        assert float(metric(torch.tensor(b))) == pytest.approx(eig_route(b, 0.4, None), abs=1e-10)
    assert float(metric.compute()) == pytest.approx(
        eig_route(np.concatenate(parts), 0.4, None), abs=1e-10
    )


def test_float32_batches():
    parts = batches([100, 150], 8, seed=6)
    metric = IsoScoreMetric(0.2)
    for b in parts:
        metric.update(torch.tensor(b, dtype=torch.float32))
    x = np.concatenate([b.astype(np.float32).astype(np.float64) for b in parts])
    assert float(metric.compute()) == pytest.approx(eig_route(x, 0.2, None), abs=1e-6)


def test_merge_reset_and_stats():
    parts = batches([6, 9, 5], 3, seed=7)
    a, b = IsoScoreMetric(0.1), IsoScoreMetric(0.1)
    a.update(parts[0])
    b.update(parts[1])
    b.update(parts[2])
    assert a.merge(b) is a
    assert a.stats.count == 20
    expected = eig_route(np.concatenate(parts), 0.1, None)
    assert float(a.compute()) == pytest.approx(expected, abs=1e-10)
    c = IsoScoreMetric(0.1)
    c.merge(isoscore_star_update(parts[0])).merge(IsoScoreMetric(0.1, dim=3))
    assert float(c.compute()) == pytest.approx(eig_route(parts[0], 0.1, None), abs=1e-10)
    a.reset()
    with pytest.raises(ValueError, match="at least 2 accumulated rows, have 0"):
        a.compute()  # the dimension seen before is kept
    with pytest.raises(ValueError, match="no rows yet and no dim"):
        IsoScoreMetric().compute()
    with pytest.raises(TypeError, match="cannot merge a ndarray"):
        a.merge(parts[0])  # type: ignore[arg-type]


def test_sync_without_distributed():
    parts = batches([6, 9], 3, seed=8)
    m = IsoScoreMetric(0.3)
    m.update(parts[0])
    expected = eig_route(parts[0], 0.3, None)
    assert float(m.compute(sync_dist=True)) == pytest.approx(expected, abs=1e-10)
    assert m.sync() is m and m.synced
    assert float(m.compute()) == pytest.approx(expected, abs=1e-10)
    with pytest.raises(RuntimeError, match="already synced"):
        m.sync()
    with pytest.raises(RuntimeError, match="synced: call unsync"):
        m.update(parts[1])
    m.unsync()
    with pytest.raises(RuntimeError, match="not synced"):
        m.unsync()
    m.update(parts[1])
    expected = eig_route(np.concatenate(parts), 0.3, None)
    assert float(m.compute()) == pytest.approx(expected, abs=1e-10)


def test_state_moves_with_the_data():
    m = IsoScoreMetric(0.2, torch.eye(4, dtype=torch.float32))
    assert m.shrinkage.dtype == torch.float64
    m.update(torch.randn(8, 4, dtype=torch.float16))
    assert m.stats.comoment.dtype == torch.float64
    assert "zeta=0.2" in repr(m) and "rows=8" in repr(m)


def test_bad_input():
    with pytest.raises(ValueError, match=r"zeta must lie in \[0, 1\]"):
        IsoScoreMetric(1.2)
    asym = spd(3)
    asym[0, 2] += 1.0
    with pytest.raises(ValueError, match="shrinkage is not symmetric"):
        IsoScoreMetric(0.2, asym)
    with pytest.raises(ValueError, match="at least 2 x 2"):
        IsoScoreMetric(0.2, np.ones((1, 1)))
    with pytest.raises(ValueError, match="dim=4 but shrinkage"):
        IsoScoreMetric(0.2, np.eye(3), dim=4)
    m = IsoScoreMetric(0.2, np.eye(3))
    with pytest.raises(ValueError, match="the rows have dimension 4, the metric 3"):
        m.update(torch.randn(5, 4))
    with pytest.raises(ValueError, match="at least 2 accumulated rows, have 0"):
        m.compute()
    m.update(torch.randn(1, 3))
    with pytest.raises(ValueError, match="at least 2 accumulated rows, have 1"):
        m.compute()
    with pytest.raises(ValueError, match=r"x contains 1 NaN"):
        m.update(torch.tensor([[0.0, float("nan"), 1.0]]))
    z = IsoScoreMetric()
    z.update(torch.ones(5, 3))
    with pytest.raises(ValueError, match="zero variance"):
        z.compute()
    one = IsoScoreMetric()
    one.update(torch.randn(5, 1))
    with pytest.raises(ValueError, match="dimension >= 2"):
        one.compute()
    with pytest.raises(ValueError, match=r"shrinkage has shape \(4, 4\) but the rows"):
        isoscore_star_compute(isoscore_star_update(torch.randn(5, 3)), 0.5, np.eye(4))
    with pytest.raises(TypeError, match="must be a CovarianceStats"):
        isoscore_star_compute(torch.randn(5, 3))  # type: ignore[arg-type]


def test_identical_rows_over_batches_raise_zero_variance():
    m = IsoScoreMetric()
    for _ in range(3):
        m.update(torch.full((4, 5), 0.1))
    with pytest.raises(ValueError, match=r"zero variance \(all points identical\)"):
        m.compute()


def test_shrinkage_that_is_not_psd_is_refused_where_it_enters():
    bad = 2 * torch.ones(6, 6) - torch.eye(6)  # eigenvalues 11 and -1
    with pytest.raises(ValueError, match="smallest eigenvalue is -1 "):
        IsoScoreMetric(zeta=0.5, shrinkage=bad)
    stats = isoscore_star_update(torch.randn(10, 6))
    with pytest.raises(ValueError, match="smallest eigenvalue is -1 "):
        isoscore_star_compute(stats, 0.5, bad)


def test_a_torchmetrics_metric_in_a_collection_and_merge_state():
    """A torchmetrics.Metric: MetricCollection's update / compute / forward and
    Metric.merge_state give the scores of the eigenvalue route."""
    from torchmetrics import Metric, MetricCollection

    parts = batches([7, 9], 4, seed=9)
    x = np.concatenate(parts)
    coll = MetricCollection({"iso": IsoScoreMetric(0.2), "iso0": IsoScoreMetric(0.0)})
    assert isinstance(coll["iso"], Metric)
    for b in parts:
        coll.update(torch.tensor(b))
    out = coll.compute()
    assert float(out["iso"]) == pytest.approx(eig_route(x, 0.2, None), abs=1e-10)
    assert float(out["iso0"]) == pytest.approx(eig_route(x, 0.0, None), abs=1e-10)
    coll.reset()
    batch = coll(torch.tensor(parts[1]))
    assert float(batch["iso"]) == pytest.approx(eig_route(parts[1], 0.2, None), abs=1e-10)
    a, b = IsoScoreMetric(0.2, dim=4), IsoScoreMetric(0.2, dim=4)
    a.update(parts[0])
    b.update(parts[1])
    a.merge_state(b)
    assert a.stats.count == len(x)
    assert float(a.compute()) == pytest.approx(eig_route(x, 0.2, None), abs=1e-10)

