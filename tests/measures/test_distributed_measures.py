"""Two real processes (``gloo`` on localhost): the global-batch IsoScore*, its gradient
convention under DDP, all-reduced covariance statistics and the metric's sync.

Every rank holds part of one float64 batch; the parent compares what the ranks report with an
eigenvalue route (``eigvalsh`` + autograd) on the concatenated batch in one process.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _distributed import RunResults, guarded, require_gloo

from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore_star
from isotropy.measures.isoscore_metric import IsoScoreMetric

pytestmark = pytest.mark.slow  # spawns ranks: Python processes that import torch

WORLD = 2
F64 = torch.float64

# name: (rows per rank, dim, zeta, given Sigma_S)
CASES = {
    "n>d shrinkage": ((7, 12), 5, 0.2, True),
    "n>d plain": ((7, 12), 5, 0.0, False),
    "n<d shrinkage": ((2, 3), 8, 0.3, True),
    "n<d plain": ((2, 3), 8, 0.0, False),
    "one rank empty": ((6, 0), 4, 0.5, False),
}
D_IN = 4  # input width of the shared linear layer in the DDP check


def eig_route(x: torch.Tensor, zeta: float, s: torch.Tensor | None) -> torch.Tensor:
    """IsoScore* of Algorithm 1 via ``eigvalsh`` (differentiable), on one process."""
    n, d = x.shape
    xc = x - x.mean(0)
    cov = xc.T @ xc / (n - 1)
    sigma = (1 - zeta) * cov + zeta * (torch.eye(d, dtype=F64) if s is None else s)
    lam = torch.linalg.eigvalsh(sigma)
    sd = math.sqrt(d)
    lam_hat = sd * lam / torch.linalg.vector_norm(lam)
    delta = torch.linalg.vector_norm(lam_hat - 1) / math.sqrt(2 * (d - sd))
    phi = (d - delta**2 * (d - sd)) ** 2 / d**2
    return (d * phi - 1) / (d - 1)


def make_payload() -> dict:
    rng = np.random.default_rng(0)
    cases = {}
    for name, (sizes, d, zeta, given_s) in CASES.items():
        n = sum(sizes)
        x = rng.standard_normal((n, d)) @ (rng.standard_normal((d, d)) * rng.exponential(size=d))
        a = rng.standard_normal((d, 2 * d))
        s = torch.tensor(a @ a.T / (2 * d)) if given_s else None
        cases[name] = {
            "x": torch.tensor(x + 3.0),
            "sizes": sizes,
            "zeta": zeta,
            "s": s,
            "x_in": torch.tensor(rng.standard_normal((n, D_IN))),
            "w": torch.tensor(rng.standard_normal((d, D_IN))),
            "b": torch.tensor(rng.standard_normal(d)),
        }
    return cases


def _local(case: dict, rank: int) -> slice:
    start = sum(case["sizes"][:rank])
    return slice(start, start + case["sizes"][rank])


def _score(case: dict, rank: int) -> dict:
    """The score of the global batch and the gradient of this rank's rows."""
    x = case["x"][_local(case, rank)].clone().requires_grad_(True)
    value = isoscore_star(x, zeta=case["zeta"], shrinkage=case["s"], sync_dist=True)
    value.backward()
    return {"value": float(value.detach()), "grad": x.grad.clone()}


def _ddp(case: dict, rank: int) -> dict:
    """A shared linear layer under DDP: the averaged parameter gradients."""
    lin = torch.nn.Linear(D_IN, case["w"].shape[0], dtype=F64)
    with torch.no_grad():
        lin.weight.copy_(case["w"])
        lin.bias.copy_(case["b"])
    ddp = torch.nn.parallel.DistributedDataParallel(lin)
    x_in = case["x_in"][_local(case, rank)]
    isoscore_star(ddp(x_in), zeta=case["zeta"], shrinkage=case["s"], sync_dist=True).backward()
    return {"w_grad": lin.weight.grad.clone(), "b_grad": lin.bias.grad.clone()}


def _stats(case: dict, rank: int) -> tuple:
    stats = CovarianceStats.from_batch(case["x"][_local(case, rank)]).all_reduce()
    return stats.count, stats.mean, stats.covariance()


def _metric(case: dict, rank: int) -> dict:
    """The streaming metric: global score, then synced state (also computed with sync_dist)."""
    metric = IsoScoreMetric(case["zeta"], case["s"], dim=case["x"].shape[1])
    for chunk in torch.split(case["x"][_local(case, rank)], 4):
        metric.update(chunk)
    global_value = float(metric.compute(sync_dist=True))
    metric.sync()
    synced = (metric.stats.count, float(metric.compute()), float(metric.compute(sync_dist=True)))
    metric.unsync()
    # torchmetrics' own sync, the default (Lightning's route): gather the packed states, merge
    tm = IsoScoreMetric(case["zeta"], case["s"], dim=case["x"].shape[1])
    tm.update(case["x"][_local(case, rank)])
    torchmetrics_value = float(tm.compute())
    local = IsoScoreMetric(case["zeta"], case["s"], sync_on_compute=False)
    local_value = None
    if case["sizes"][rank] > 1:
        local.update(case["x"][_local(case, rank)])
        local_value = float(local.compute())
    # no dim on a rank without rows: every rank raises the same error, none hangs
    no_dim = IsoScoreMetric(case["zeta"], case["s"] if case["s"] is not None else None)
    if case["sizes"][rank]:
        no_dim.update(case["x"][_local(case, rank)])
    try:
        no_dim_value: float | str = float(no_dim.compute())
    except ValueError as err:
        no_dim_value = str(err)
    return {"global": global_value, "synced": synced, "local_count": metric.stats.count,
            "torchmetrics": torchmetrics_value, "torchmetrics_count": tm.stats.count,
            "local": local_value, "no_dim": no_dim_value}


def _bad_input(rank: int) -> list[str]:
    """NaN on rank 1, then one row in all: every rank raises, none hangs."""
    errors = []
    bad = torch.randn(5, 3, dtype=F64)
    if rank == 1:
        bad[2, 1] = float("nan")
    for x in (bad, torch.randn(1 - rank, 3, dtype=F64)):
        try:
            isoscore_star(x, zeta=0.2, sync_dist=True)
            errors.append("")
        except ValueError as err:
            errors.append(str(err))
    return errors


PARTS = {"score": _score, "ddp": _ddp, "stats": _stats, "metric": _metric}


def _worker(rank: int, payload: dict) -> dict:
    out: dict = {
        name: {part: guarded(f"{name}/{part}", fn, case, rank) for part, fn in PARTS.items()}
        for name, case in payload.items()
    }
    out["errors"] = guarded("bad input", _bad_input, rank)
    return out


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    require_gloo()
    outdir = tmp_path_factory.mktemp("ddp")
    payload = make_payload()
    return payload, RunResults.run(_worker, payload, world_size=WORLD, out_dir=outdir)


@pytest.mark.parametrize("name", list(CASES))
def test_global_score_and_gradient_convention(ranks, name):
    payload, results = ranks
    case = payload[name]
    x = case["x"].clone().requires_grad_(True)
    expected = eig_route(x, case["zeta"], case["s"])
    expected.backward()
    for rank in range(WORLD):
        r = results.value(rank, name, "score")
        assert r["value"] == pytest.approx(float(expected.detach()), abs=1e-10)
        # each rank's local-row gradient = world_size x the single-process gradient there
        want = WORLD * x.grad[_local(case, rank)]
        assert r["grad"].shape == want.shape
        assert torch.allclose(r["grad"], want, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_ddp_parameter_gradient_equals_single_process(ranks, name):
    payload, results = ranks
    case = payload[name]
    w = case["w"].clone().requires_grad_(True)
    b = case["b"].clone().requires_grad_(True)
    eig_route(case["x_in"] @ w.T + b, case["zeta"], case["s"]).backward()
    for rank in range(WORLD):
        r = results.value(rank, name, "ddp")
        assert torch.allclose(r["w_grad"], w.grad, rtol=1e-8, atol=1e-12)
        assert torch.allclose(r["b_grad"], b.grad, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_all_reduced_statistics_and_metric(ranks, name):
    payload, results = ranks
    case = payload[name]
    x = case["x"].numpy()
    expected = float(eig_route(case["x"], case["zeta"], case["s"]))
    for rank in range(WORLD):
        count, mean, cov = results.value(rank, name, "stats")
        assert count == x.shape[0]
        np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(cov.numpy(), np.cov(x, rowvar=False), rtol=1e-12, atol=1e-12)
        m = results.value(rank, name, "metric")
        synced_count, synced_value, synced_value_sync_dist = m["synced"]
        assert m["global"] == pytest.approx(expected, abs=1e-10)
        assert synced_count == x.shape[0]
        assert synced_value == pytest.approx(expected, abs=1e-10)
        # synced state + sync_dist: the rows are not all-reduced a second time
        assert synced_value_sync_dist == pytest.approx(expected, abs=1e-10)
        assert m["local_count"] == case["sizes"][rank]
        assert m["torchmetrics"] == pytest.approx(expected, abs=1e-10)
        assert m["torchmetrics_count"] == case["sizes"][rank]  # unsynced after compute
        if m["local"] is not None:  # sync_on_compute=False: this rank's rows alone
            mine = case["x"][_local(case, rank)]
            assert m["local"] == pytest.approx(float(eig_route(mine, case["zeta"], case["s"])),
                                               abs=1e-10)
        if case["s"] is None and 0 in case["sizes"]:  # a rank with no rows and no dim
            assert "pass dim=" in m["no_dim"]
        else:
            assert m["no_dim"] == pytest.approx(expected, abs=1e-10)


def test_bad_input_on_one_rank_raises_everywhere(ranks):
    _, results = ranks
    nan0, few0 = results.value(0, "errors")
    nan1, few1 = results.value(1, "errors")
    assert "another rank" in nan0
    assert "X contains 1 NaN or infinite value(s)" in nan1
    assert "at least 2 points, got 1" in few0 and "at least 2 points, got 1" in few1
