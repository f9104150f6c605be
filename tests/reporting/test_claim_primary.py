"""The confirmatory plan's primary test applied to a report's metric claims
(``claim_primary``): ``claims.json``'s ``primary`` field re-derived by an independent route
(scipy's exact permutation test, scipy's Student-t, Holm's adjustment by hand), on made-up
tallies and on every committed report of the runs already seen (exploratory)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from _reference import holm
from scipy import stats

from isotropy.reporting.claim_summary import claim_rows
from isotropy.reporting.claim_tally import Tally

ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted((ROOT / "docs" / "results" / "report" / "sweeps").glob("*/claims.json"))
# claim -> (+1 a claimed direction / 0 "does not rise" / 2 "on par", factor back to method
# minus reference), as the plan and the papers state them
METRIC = {"C1 vs none": (1, 1), "C1 vs CosReg": (1, 1), "C6 λ = +1 hurts": (1, -1),
          "C7 CosReg no gain": (0, 1), "P2": (1, 1), "P3 metric": (1, 1),
          "P4 all bars on par": (2, 1)}
# I-STAR paper, Table 1 (BERT), method minus reference, points per task
PAPER = {"C1 vs none": {"sst2": 0.25, "rte": 0.29, "mrpc": 0.25, "cola": 0.38, "stsb": 0.29},
         "C1 vs CosReg": {"sst2": 0.64, "rte": 1.01, "mrpc": 1.47, "cola": 1.70, "stsb": 0.14},
         "C7 CosReg no gain": {"sst2": -0.39, "rte": -0.72, "mrpc": -1.22, "cola": -1.32,
                               "stsb": 0.15}}


def _scipy_p(groups: list[list[float]], alternative: str) -> float:
    """The stratified mean of task means under scipy's exact sign flips of one sample."""
    task = np.concatenate([[i] * len(g) for i, g in enumerate(groups)])
    data = np.concatenate([np.asarray(g, dtype=float) for g in groups])

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([np.mean(x[..., task == i], axis=axis) for i in range(len(groups))],
                       axis=0)

    return float(stats.permutation_test((data,), statistic, permutation_type="samples",
                                        alternative=alternative, n_resamples=np.inf,
                                        vectorized=True).pvalue)


def _bounds(groups: list[list[float]]) -> tuple[float, float] | None:
    """One-sided 95% bounds: one task by scipy's one-sample t-test, several by Welch's
    stratified standard error (the plan's equivalence reading)."""
    if any(len(g) < 2 for g in groups) or all(np.ptp(g) == 0 for g in groups):
        return None
    if len(groups) == 1:
        t = stats.ttest_1samp(groups[0], 0.0)
        return (t.confidence_interval(0.90).low, t.confidence_interval(0.90).high)
    v = [np.var(g, ddof=1) / len(g) for g in groups]
    df = sum(v) ** 2 / sum(x ** 2 / (len(g) - 1) for x, g in zip(v, groups, strict=True))
    mean = float(np.mean([np.mean(g) for g in groups]))
    half = stats.t.ppf(0.95, df) * math.sqrt(sum(v)) / len(groups)
    return mean - half, mean + half


def _expected(claim: str, groups: list[list[float]], tasks: list[str], p_holm: float) -> str:
    sign, factor = METRIC[claim]
    s = float(np.mean([np.mean(g) for g in groups]))
    if sign == 1:
        word = ("inconclusive" if p_holm >= 0.05 or s == 0 else
                "supported" if s > 0 else "contradicted")
    else:
        word = "contradicted" if p_holm < 0.05 else "not contradicted"
    b = _bounds(groups)
    if claim in PAPER and b is not None:
        paper = np.mean([PAPER[claim][t] for t in tasks])
        lo, hi = sorted((factor * b[0], factor * b[1]))  # in Δ
        if (factor * paper > b[1]) if sign == 1 else not lo <= paper <= hi:
            word += ", the paper's effect excluded"
    return word


def _rederive(claims: dict) -> dict[str, dict]:
    """Each metric claim's primary test from ``claims.json``'s units alone: every unit (left
    out or not), values in points, two-sided p (``does not rise``: the p of a rise)."""
    found = {}
    for claim, (sign, factor) in METRIC.items():
        units = [u for u in claims["units"] if u["claim"] == claim and u["values"]]
        if not units:
            continue
        groups = [[100 * v for v in u["values"]] for u in units]
        p = _scipy_p(groups, "greater" if sign == 0 else "two-sided")
        found[claim] = {"groups": groups, "tasks": [u["task"] for u in units], "p": p,
                        "s": factor * float(np.mean([np.mean(g) for g in groups]))}
    for (claim, f), a in zip(found.items(), holm([f["p"] for f in found.values()]),
                             strict=True):
        f["p_holm"] = a
        f["verdict"] = _expected(claim, f["groups"], f["tasks"], a)
    return found


@pytest.mark.parametrize("path", REPORTS, ids=[p.parent.name for p in REPORTS])
def test_every_committed_metric_claim_carries_the_plans_primary_test(path: Path) -> None:
    claims = json.loads(path.read_text(encoding="utf-8"))
    found = _rederive(claims)
    assert found, f"{path} has no metric claim with values"
    rows = {r["claim"]: r for r in claims["claims"]}
    for claim, f in found.items():
        primary = rows[claim]["primary"]
        assert "not the plan's two primary tests: exploratory on runs seen before" in \
            primary["reading"]
        assert primary["n"] == sum(len(g) for g in f["groups"])  # left-out units counted
        assert primary["statistic"] == pytest.approx(f["s"], abs=1e-9)
        assert primary["p_decide"] == pytest.approx(f["p"], abs=1e-12)
        assert primary["p_holm"] == pytest.approx(f["p_holm"], abs=1e-12)
        assert primary["verdict"] == f["verdict"], claim
        b = _bounds(f["groups"])
        if b is None:
            assert primary["lower"] is None
        else:
            factor = METRIC[claim][1]
            assert sorted((primary["lower"], primary["upper"])) == pytest.approx(
                sorted((factor * b[0], factor * b[1])), abs=1e-9)
    others = [r["claim"] for r in claims["claims"]
              if r["primary"] is not None and r["claim"] not in found]
    assert not others, f"a primary test on claims that are not metric claims: {others}"


def test_the_primary_field_on_a_made_up_tally() -> None:
    # C1 vs none on two tasks (values: the metric's fractions, > 0 the claimed way) and a
    # left-out task: counted by the plan
    counted = Tally([], [])
    counted.add("inconclusive", [0.010, -0.004, 0.006], "sst2")
    counted.add("inconclusive", [0.020, 0.012, 0.0], "mrpc")
    left = Tally([], [])
    left.add("contradicted", [-0.30, -0.25, -0.28], "cola")
    counted.left_out = ["cola (one class on every seed)"]
    counted.left_out_units = left
    cosreg = Tally([], [])
    cosreg.add("inconclusive", [0.002, -0.001, 0.001], "sst2")
    rows = {r.claim: r for r in claim_rows({"C1 vs none": counted, "C7 CosReg no gain": cosreg},
                                           papers="C")}
    groups = [[1.0, -0.4, 0.6], [2.0, 1.2, 0.0], [-30.0, -25.0, -28.0]]
    p = rows["C1 vs none"].primary
    assert p["n"] == 9 and p["tasks"] == ["sst2", "mrpc", "cola"]
    assert p["statistic"] == pytest.approx(np.mean([np.mean(g) for g in groups]))
    assert p["p_two_sided"] == pytest.approx(_scipy_p(groups, "two-sided"), abs=1e-12)
    c7 = rows["C7 CosReg no gain"].primary
    assert c7["p_decide"] == pytest.approx(_scipy_p([[0.2, -0.1, 0.1]], "greater"), abs=1e-12)
    adjusted = holm([p["p_two_sided"], c7["p_decide"]])
    assert (p["p_holm"], c7["p_holm"]) == (pytest.approx(adjusted[0]), pytest.approx(adjusted[1]))
    lo, hi = _bounds(groups)
    assert (p["lower"], p["upper"]) == (pytest.approx(lo), pytest.approx(hi))
    # the paper's +0.29 average gain on these tasks lies above the upper bound
    assert hi < np.mean([0.25, 0.25, 0.38])
    assert p["verdict"] == _expected("C1 vs none", groups, ["sst2", "mrpc", "cola"],
                                     p["p_holm"])
    assert p["verdict"].endswith("the paper's effect excluded")
    assert rows["C3 centres"].primary is None  # not a metric claim


def test_a_claim_beyond_the_exact_enumeration_says_why() -> None:
    t = Tally([], [])
    for task in ("sst2", "rte", "mrpc", "cola", "stsb"):
        t.add("inconclusive", [0.01 * i for i in range(9)], task)  # 45 values
    (row,) = [r for r in claim_rows({"C1 vs none": t}, papers="C") if r.claim == "C1 vs none"]
    assert row.primary["why_none"].startswith("45 values") and "p_holm" not in row.primary
