"""The summary's statistics (``isotropy.reporting.claim_summary``): Holm's adjustment
(``claim_stats.holm``) against statsmodels, the task-level test, constant predictors left
out, and ``claims.json``."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path

import numpy as np
import pytest
from _runs import make_run

from isotropy.reporting import claim_summary as cs
from isotropy.reporting.cells import collect_runs, group_cells
from isotropy.reporting.claim_stats import holm
from isotropy.reporting.claim_tally import Tally
from isotropy.reporting.claims import claims_report
from isotropy.reporting.discovery import expand_inputs


def test_holm_matches_statsmodels(monkeypatch: pytest.MonkeyPatch) -> None:
    multipletests = pytest.importorskip("statsmodels.stats.multitest").multipletests
    # multipletests calls gc.collect() on every call: 0.2-0.7 s each in a full test session
    monkeypatch.setattr(gc, "collect", lambda *args, **kwargs: 0)
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 7, 15, 40):
        for _ in range(20):
            p = rng.uniform(0, 1, m) ** 3  # many small ones
            p[rng.integers(0, m)] = p[0]  # a tie
            expected = multipletests(p, alpha=0.05, method="holm")[1]
            np.testing.assert_allclose(holm(p.tolist()), expected, rtol=0, atol=1e-14)


def test_holm_known_cases() -> None:
    # Holm (1979)'s rule by hand: sorted p₍ᵢ₎ times (m - i + 1), made non-decreasing, capped.
    assert holm([0.01]) == [0.01]
    assert holm([0.04, 0.01]) == [0.04, 0.02]  # 2·0.01 = 0.02; 1·0.04
    assert holm([0.02, 0.03, 0.001, 0.5]) == [0.06, 0.06, 0.004, 0.5]
    # 15 tests at the smallest p of 6 sign-test values, 1/64: 15/64 = 0.234
    assert holm([1 / 64] * 15) == [pytest.approx(15 / 64)] * 15
    with pytest.raises(ValueError, match="p-values in"):
        holm([0.1, float("nan")])
    with pytest.raises(ValueError, match="p-values in"):
        holm([1.5])


def test_task_level_test_takes_one_mean_per_task() -> None:
    # Task A: +0.3, -0.1, -0.1 (mean +0.033); B: -0.2 ×3; C, D, E: +0.1 ×3. Pooled: 10 of 15
    # > 0; per task: 4 of 5 means > 0, p = (C(5,4) + 1) / 32 = 6/32.
    values = [0.3, -0.1, -0.1, *[-0.2] * 3, *[0.1] * 9]
    t = Tally(["inconclusive"] * 5, values, [3] * 5, list("ABCDE"))
    (row,) = [r for r in cs.claim_rows({"C1 vs none": t}, "C") if r.claim == "C1 vs none"]
    assert (row.k, row.n) == (10, 15)
    assert (row.task_k, row.task_n, row.task_p) == (4, 5, pytest.approx(6 / 32))
    assert row.p == pytest.approx(sum(math.comb(15, j) for j in range(10, 16)) / 2**15)


def _mrpc_and_rte(root: Path, rte_majority: float | None) -> None:
    """I-STAR below the base run on MRPC and above it on RTE in every seed; RTE's I-STAR
    cell predicts one class on every seed when ``rte_majority`` is 1."""
    for task, lam, zeta, delta in (("mrpc", -1.0, 0.6, -0.02), ("rte", -1.0, 0.8, 0.03)):
        for seed in range(3):
            m = 0.6 + 0.01 * seed
            make_run(root, task=task, seed=seed, metric=m, majority=0.7)
            make_run(root, task=task, reg="istar", lam=lam, zeta=zeta, seed=seed,
                     metric=m + delta + 0.001 * seed,
                     majority=rte_majority if task == "rte" else 0.7)


def _report(root: Path) -> tuple[str, dict]:
    runs, _ = collect_runs(expand_inputs([str(root)]))
    lines, data, why = claims_report(group_cells(runs))
    assert why is None
    return "\n".join(lines), data


def test_a_constant_predictor_is_shown_but_left_out(tmp_path: Path) -> None:
    _mrpc_and_rte(tmp_path / "flat", rte_majority=1.0)
    out, data = _report(tmp_path / "flat")
    row = next(line for line in out.splitlines() if line.startswith("| C1 vs none |"))
    # only MRPC counts: 0 of 3, and RTE is listed
    assert "| 1 | 0 of 3 |" in row
    assert "rte (istar λ=-1 ζ=0.8: one class on every seed)" in row
    assert "| rte | istar λ=-1 ζ=0.8 |" in out  # still in the table
    assert "(left out: constant predictor)" in out
    assert "Cells that predicted one class for the whole dev set" in out
    assert data["constant_predictors"] == ["rte: istar λ=-1 ζ=0.8"]
    (c1,) = [r for r in data["claims"] if r["claim"] == "C1 vs none"]
    assert (c1["k"], c1["n"], c1["tasks"]) == (0, 3, 1)
    # with RTE counted: MRPC's 3 below, RTE's 3 above
    assert (c1["counted_k"], c1["counted_n"]) == (3, 6)
    assert row.endswith(f"| 3 of 6, Holm p {c1['counted_p_holm']:.3g}: inconclusive |")
    rte = [u for u in data["units"] if u["claim"] == "C1 vs none" and u["task"] == "rte"]
    assert [u["counted"] for u in rte] == [False] and len(rte[0]["values"]) == 3
    # not constant: both tasks count
    _mrpc_and_rte(tmp_path / "varied", rte_majority=0.9)
    out, data = _report(tmp_path / "varied")
    (c1,) = [r for r in data["claims"] if r["claim"] == "C1 vs none"]
    assert (c1["k"], c1["n"], c1["tasks"], c1["left_out"]) == (3, 6, 2, [])
    assert "Cells that predicted one class" not in out


def test_constant_predictor_needs_every_seed() -> None:
    class R:
        def __init__(self, share: float | None) -> None:
            self.share = share

        def value(self, name: str, which: str = "final") -> float | None:
            assert (name, which) == ("majority_fraction", "final")
            return self.share

    assert cs.constant_predictor([R(1.0), R(1.0)])
    assert not cs.constant_predictor([R(1.0), R(0.99)])
    assert not cs.constant_predictor([R(None)])  # a regression task
    assert not cs.constant_predictor([])


def test_claims_json_is_the_summary_as_data(tmp_path: Path) -> None:
    from isotropy.reporting.write import write_report
    _mrpc_and_rte(tmp_path / "runs", rte_majority=0.9)
    write_report([str(tmp_path / "runs")], tmp_path / "report", figures=False)
    data = json.loads((tmp_path / "report" / "claims.json").read_text())
    md = (tmp_path / "report" / "claims.md").read_text()
    assert data["generated_by"] == "isotropy report" and data["alpha"] == 0.05
    for row in data["claims"]:
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {row['claim']} |"))
        assert f"| {row['verdict']} |" in line or f"| {row['verdict']} (unadjusted" in line
        assert f"| {row['k']} of {row['n']} |" in line
    units = [u for u in data["units"] if u["claim"] == "C1 vs none"]
    assert {u["task"] for u in units} == {"mrpc", "rte"}
    assert all(len(u["values"]) == 3 for u in units)
    # MRPC: I-STAR - base = -0.02 + 0.001·seed: mean -0.019, Student's interval by hand
    (mrpc,) = [u for u in units if u["task"] == "mrpc"]
    half = 4.302652729749464 * 0.001 / math.sqrt(3)  # t₀.₉₇₅(2) · s / √3, s = 0.001
    assert mrpc["mean"] == pytest.approx(-0.019)
    assert mrpc["interval"] == [pytest.approx(-0.019 - half), pytest.approx(-0.019 + half)]
    # a report of runs with no claim removes both of an earlier report's files
    make_run(tmp_path / "other", task="mrpc", seed=0)
    write_report([str(tmp_path / "other")], tmp_path / "report", figures=False)
    assert not (tmp_path / "report" / "claims.json").exists()
    assert not (tmp_path / "report" / "claims.md").exists()


def test_a_claims_json_not_written_by_report_is_kept(tmp_path: Path) -> None:
    from isotropy.reporting.write import write_report
    make_run(tmp_path / "runs", task="mrpc", seed=0)
    (tmp_path / "report").mkdir()
    mine = tmp_path / "report" / "claims.json"
    mine.write_text('{"my": "notes"}')
    with pytest.raises(ValueError, match=r"holds 1 file\(s\) that isotropy report did not "
                                         r"write \(claims.json\)"):
        write_report([str(tmp_path / "runs")], tmp_path / "report", figures=False)
    assert mine.read_text() == '{"my": "notes"}'
