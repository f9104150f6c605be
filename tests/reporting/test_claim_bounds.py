"""The one-sided bounds on a claim's mean effect (``claim_stats.effect_bound``,
``claim_bounds``): against scipy's one-sample t-test for one task, and against the stratified
formula worked by hand for several."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from isotropy.reporting import claim_bounds as cb
from isotropy.reporting.claim_stats import effect_bound
from isotropy.reporting.claim_summary import claim_rows
from isotropy.reporting.claim_tally import Tally


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0], [-0.5, 0.25, 0.1, -0.2, 0.3],
                                    [0.0, 0.0, 1.0], [-8.8, -6.1, -7.4]])
def test_one_task_is_scipys_one_sided_student_bound(values: list[float]) -> None:
    b = effect_bound([values])
    test = stats.ttest_1samp(values, 0.0, alternative="less")
    assert b.upper == pytest.approx(test.confidence_interval(0.95).high, rel=1e-12)
    test = stats.ttest_1samp(values, 0.0, alternative="greater")
    assert b.lower == pytest.approx(test.confidence_interval(0.95).low, rel=1e-12)
    assert (b.tasks, b.n, b.df) == (1, len(values), len(values) - 1)


def test_several_tasks_by_hand() -> None:
    # Task A: 1, 2, 3 (mean 2, s² 1, v = 1/3); task B: 2, 4 (mean 3, s² 2, v = 1).
    # Mean of means 2.5; se = √(1/3 + 1) / 2; ν = (4/3)² / ((1/3)²/2 + 1²/1) = 1.6842...
    b = effect_bound([[1.0, 2.0, 3.0], [2.0, 4.0]])
    se, nu = math.sqrt(4 / 3) / 2, (4 / 3) ** 2 / ((1 / 9) / 2 + 1)
    assert b.mean == pytest.approx(2.5)
    assert b.df == pytest.approx(nu)
    assert b.upper == pytest.approx(2.5 + stats.t.ppf(0.95, nu) * se)
    assert b.lower == pytest.approx(2.5 - stats.t.ppf(0.95, nu) * se)


def test_equal_spreads_and_seeds_give_the_pooled_students_bound() -> None:
    # Two tasks of n seeds with equal s²: ν = 2(n-1), se = s / √(2n), the pooled-variance t.
    a, b = np.array([0.1, 0.4, -0.2, 0.3]), np.array([1.1, 1.4, 0.8, 1.3])
    got = effect_bound([a, b])
    s2 = (np.var(a, ddof=1) + np.var(b, ddof=1)) / 2
    half = stats.t.ppf(0.95, 6) * math.sqrt(s2 / 8)
    assert got.df == pytest.approx(6)
    assert got.upper == pytest.approx((a.mean() + b.mean()) / 2 + half)


def test_no_honest_bound_without_seeds_or_spread() -> None:
    assert effect_bound([[0.3, 0.3, 0.3]]) is None  # a collapse: no spread
    assert effect_bound([[0.1, 0.2], [0.5]]) is None  # one seed of a task
    assert effect_bound([]) is None
    # one task without spread beside one with: the spread is the other task's
    assert effect_bound([[0.3, 0.3], [0.1, 0.2]]).upper == pytest.approx(
        0.225 + stats.t.ppf(0.95, 1) * math.sqrt(0.005 / 2) / 2)


def test_words() -> None:
    assert cb.bound_words(-0.4, 1.25) == ("a gain above 1.25 points is excluded; a loss beyond "
                                          "0.40 points is excluded")
    assert cb.bound_words(0.1, 0.9).endswith("any loss is excluded (the effect is above +0.10 "
                                             "points)")


def test_claim_rows_carry_the_bound_in_points_in_the_metric_direction() -> None:
    # C6's values are oriented as a loss (-Δ); the bound is on Δ itself, in points.
    c6 = Tally(["inconclusive"] * 2, [0.01, 0.02, 0.03, 0.02, 0.04, 0.03], [3, 3],
               ["sst2", "mrpc"])
    c1 = Tally(["inconclusive"], [-0.01, 0.00, 0.02], [3], ["sst2"])
    rows = {r.claim: r for r in claim_rows({"C6 λ = +1 hurts": c6, "C1 vs none": c1,
                                             "C3 centres": c1}, "C")}
    e = rows["C6 λ = +1 hurts"].effect_bound
    b = effect_bound([[-1.0, -2.0, -3.0], [-2.0, -4.0, -3.0]])
    assert (e["pooled"]["mean"], e["pooled"]["upper"]) == (pytest.approx(-2.5),
                                                           pytest.approx(b.upper))
    assert e["paper_mean"] is None and e["tasks"] == ["sst2", "mrpc"]
    e1 = rows["C1 vs none"].effect_bound
    assert e1["single_task"] and e1["paper_mean"] == pytest.approx(0.25)  # 92.65 - 92.40
    assert e1["paper_excluded"] is False  # [-1, 0, 2] points: the bounds hold +0.25
    assert rows["C3 centres"].effect_bound is None  # not a metric claim
    assert rows["C2"].effect_bound is None  # not run


def test_left_out_units_are_bounded_alone_and_not_pooled() -> None:
    t = Tally(["inconclusive"], [0.01, 0.02, 0.0], [3], ["sst2"])
    t.left_out_units = Tally(["contradicted"], [-0.29, -0.29, -0.29], [3], ["cola"])
    t.left_out = ["cola (one class)"]
    (row,) = [r for r in claim_rows({"C1 vs none": t}, "C") if r.claim == "C1 vs none"]
    e = row.effect_bound
    assert e["tasks"] == ["sst2"]
    cola = [u for u in e["per_task"] if u["task"] == "cola"][0]
    assert not cola["counted"] and cola["upper"] is None and "no spread" in cola["words"]
    lines = cb.bounds_markdown([row])
    assert any(line.startswith("| C1 vs none |") and "cola (left out) –" in line
               for line in lines)
