"""The papers' claims on a report's runs (``isotropy.reporting.claims``): seed pairing, the
Student-t interval, the per-task and per-claim verdict rules, and one protocol at a time."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _runs import make_run
from scipy import stats

from isotropy.reporting import claims
from isotropy.reporting.cells import collect_runs, group_cells
from isotropy.reporting.discovery import expand_inputs


def _claims_of(*roots: Path) -> tuple[str, str | None]:
    runs, _ = collect_runs(expand_inputs([str(r) for r in roots]))
    lines, why = claims.claims_markdown(group_cells(runs))
    return "\n".join(lines), why


class _Run:
    def __init__(self, seed: int, value: float | None) -> None:
        self.seed, self.v = seed, value


def _value(r: _Run) -> float | None:
    return r.v


def test_paired_matches_seeds_and_skips_missing() -> None:
    a = [_Run(0, 0.50), _Run(1, 0.60), _Run(2, 0.70), _Run(3, None)]
    b = [_Run(2, 0.71), _Run(0, 0.55), _Run(3, 0.9), _Run(4, 0.1)]
    d = claims.paired(a, b, _value)
    # seeds 0 and 2 pair; seed 1 has no b, seed 3 no value in a, seed 4 no a
    assert d.n == 2
    assert d.mean == pytest.approx(((0.55 - 0.50) + (0.71 - 0.70)) / 2)
    assert claims.paired(a, [_Run(9, 1.0)], _value) is None


def test_interval_of_three_seeds_is_students() -> None:
    # d = 0.01, 0.02, 0.06: mean 0.03, s² = (0.02² + 0.01² + 0.03²) / 2 = 0.0007, and the
    # two-sided 95% quantile of Student's t with 2 degrees of freedom is 4.3027 (tables; in
    # closed form, its CDF 1/2 + t / (2 sqrt(2 + t²)) = q solves to t = a sqrt(2 / (1 - a²)),
    # a = 2q - 1, q = 0.975). Every seed is above 0, yet the interval includes it.
    q = 0.975
    t = (2 * q - 1) * np.sqrt(2 / (1 - (2 * q - 1) ** 2))
    assert t == pytest.approx(4.302652729749464, rel=1e-12)
    half = t * np.sqrt(0.0007) / np.sqrt(3)
    a = [_Run(s, 0.0) for s in range(3)]
    b = [_Run(s, x) for s, x in enumerate([0.01, 0.02, 0.06])]
    d = claims.paired(a, b, _value)
    assert (d.low, d.high, d.n) == (pytest.approx(0.03 - half), pytest.approx(0.03 + half), 3)
    assert d.mean == pytest.approx(0.03)
    assert d.verdict(+1) == "inconclusive"
    # three seeds close together decide it: 0.029, 0.030, 0.031 give 0.030 ± 0.0025
    d = claims.paired(a, [_Run(s, x) for s, x in enumerate([0.029, 0.030, 0.031])], _value)
    assert d.low == pytest.approx(0.03 - t * 0.001 / np.sqrt(3))
    assert d.verdict(+1) == "supported" and d.verdict(-1) == "contradicted"


def test_interval_covers_the_mean_95_times_in_100_with_three_seeds() -> None:
    # Normal per-seed differences: the 95% interval of 3 seeds holds the true mean in about 95%
    # of 4,000 draws (binomial sd 0.0034), unlike the range of the 3 (75%).
    rng = np.random.default_rng(7)
    draws = rng.normal(0.02, 0.01, size=(4000, 3))
    hits = [d.low <= 0.02 <= d.high for d in map(claims.mean_interval, draws)]
    assert np.mean(hits) == pytest.approx(0.95, abs=0.012)
    in_range = (draws.min(axis=1) <= 0.02) & (draws.max(axis=1) >= 0.02)
    assert np.mean(in_range) == pytest.approx(0.75, abs=0.02)


def test_one_seed_has_no_interval() -> None:
    d = claims.mean_interval([0.3])
    assert np.isnan(d.low) and d.verdict(+1) == "inconclusive" and d.text() == "+0.3000 (n=1)"
    with pytest.raises(ValueError, match="non-empty"):
        claims.mean_interval([])


def test_differences_equal_but_for_rounding_have_no_interval() -> None:
    # 0.7 - 0.68 and 0.72 - 0.70 differ in the last bits: not a spread to build an interval
    # on (it would be ~1e-16 wide and decide any sign).
    diffs = [0.7 - 0.68, 0.72 - 0.70, 0.71 - 0.69]
    assert np.ptp(diffs) > 0
    d = claims.mean_interval(diffs)
    assert np.isnan(d.low) and d.verdict(+1) == "inconclusive"
    assert d.text() == "+0.0200 (n=3, no spread)"


@pytest.mark.slow
def test_spearman_permutation_p_of_one_seed_is_scipys_exact_test() -> None:
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=5), rng.normal(size=5)
    pts = [(0, float(a), float(b)) for a, b in zip(x, y, strict=True)]
    p_low, p_high, seeds = claims.spearman_permutation_p(pts)

    def rho(u: np.ndarray, v: np.ndarray) -> float:
        return float(stats.spearmanr(u, v).statistic)

    for alternative, got in (("less", p_low), ("greater", p_high)):
        ref = stats.permutation_test((x, y), rho, permutation_type="pairings",
                                     alternative=alternative, n_resamples=np.inf)
        assert got == pytest.approx(ref.pvalue)
    assert seeds == 1


def test_spearman_permutation_p_of_three_seeds_with_ties_is_the_brute_force_count() -> None:
    # Every combination of one order per seed (4! ** 2 * 3! = 3,456), counted directly.
    pts = [(0, 0.1, 0.5), (0, 0.2, 0.5), (0, 0.3, 0.7), (0, 0.4, 0.6),
           (1, 0.3, 0.9), (1, 0.1, 0.8), (1, 0.2, 0.1), (1, 0.5, 0.2),
           (2, 0.1, 0.3), (2, 0.2, 0.1), (2, 0.3, 0.2)]
    groups = [[(x, y) for s, x, y in pts if s == seed] for seed in range(3)]
    rhos = [[float(stats.spearmanr([x for x, _ in g], [g[i][1] for i in order]).statistic)
             for order in itertools.permutations(range(len(g)))] for g in groups]
    observed = sum(float(stats.spearmanr(*zip(*g, strict=True)).statistic) for g in groups)
    sums = [sum(c) for c in itertools.product(*rhos)]
    p_low = np.mean([t <= observed + 1e-9 for t in sums])
    p_high = np.mean([t >= observed - 1e-9 for t in sums])
    assert claims.spearman_permutation_p(pts) == (pytest.approx(p_low), pytest.approx(p_high),
                                                  3)
    with pytest.raises(ValueError, match="at most 8"):
        claims.spearman_permutation_p([(0, float(i), float(-i)) for i in range(9)])


@pytest.mark.parametrize(("low", "high", "n", "sign", "expected"), [
    (0.01, 0.03, 3, +1, "supported"),
    (0.01, 0.03, 3, -1, "contradicted"),
    (-0.03, -0.01, 3, -1, "supported"),
    (-0.01, 0.03, 3, +1, "inconclusive"),
    (0.01, 0.03, 1, +1, "inconclusive"),  # one seed never decides
    (float("nan"), float("nan"), 3, +1, "inconclusive"),
])
def test_verdict_rule(low: float, high: float, n: int, sign: int,
                      expected: str) -> None:
    assert claims.Diff(0.02, low, high, n).verdict(sign) == expected


def test_one_protocol_at_a_time(tmp_path: Path) -> None:
    # Both phases have a run without a regularizer on MRPC, under different learning rates:
    # pooled, which is the base run? Refused; each on its own, each is its phase's base.
    a, b = tmp_path / "istar", tmp_path / "entropy"
    for seed, (m_a, m_b) in enumerate([(0.80, 0.70), (0.82, 0.72)]):
        make_run(a, task="mrpc", seed=seed, metric=m_a, training={"learning_rate": 1e-4})
        make_run(a, task="mrpc", reg="cosreg", seed=seed, metric=m_a + 0.01,
                 training={"learning_rate": 1e-4})
        make_run(b, task="mrpc", seed=seed, metric=m_b, training={"learning_rate": 2e-5},
                 evals=[(10, m_b - 0.1), (90, m_b), (100, m_b)], global_step=100)
        make_run(b, task="mrpc", reg="entropy", seed=seed, metric=m_b + 0.02,
                 training={"learning_rate": 2e-5},
                 evals=[(10, m_b), (90, m_b + 0.02), (100, m_b + 0.02)], global_step=100)
    out_a, why_a = _claims_of(a)
    out_b, why_b = _claims_of(b)
    assert why_a is None and why_b is None
    assert "| mrpc | none | 0.8100 ± 0.0141 (n=2) |" in out_a  # phase A: final metric
    assert "| mrpc | none | 0.7100 ± 0.0141 (n=2) |" in out_b  # phase B: last-30% mean
    # the same +0.02 on both seeds: no spread, so no interval and no verdict
    assert "| mrpc | entropy β=1 | 0.7300 ± 0.0141 (n=2) | +0.0200 (n=2, no spread) | " \
        "inconclusive |" in out_b
    assert "## Persistent entropy" not in out_a and "## I-STAR" not in out_b
    out, why = _claims_of(a, b)
    assert out == "" and why is not None and "mrpc differ in settings" in why


@pytest.mark.parametrize(("k", "n"), [(6, 6), (5, 6), (12, 15), (11, 15), (3, 3), (0, 4)])
def test_sign_test_is_the_binomial_tail(k: int, n: int) -> None:
    # The exact tail P(X >= k), X ~ Bin(n, 1/2), summed by hand.
    from math import comb
    values = [1.0] * k + [-1.0] * (n - k)
    got_k, got_n, p_for, p_against = claims.sign_test(values)
    assert (got_k, got_n) == (k, n)
    assert p_for == pytest.approx(sum(comb(n, i) for i in range(k, n + 1)) / 2 ** n)
    assert p_against == pytest.approx(sum(comb(n, i) for i in range(0, k + 1)) / 2 ** n)


def test_sign_test_keeps_a_tie_in_n_for_neither_side() -> None:
    # 12 above, 3 below, 1 tie of 16: P(X >= 12) and P(X >= 3), X ~ Bin(16, 1/2), by hand
    from math import comb
    k, n, p_for, p_against = claims.sign_test([1.0] * 12 + [-1.0] * 3 + [0.0])
    assert (k, n) == (12, 16)
    assert p_for == pytest.approx(sum(comb(16, i) for i in range(12, 17)) / 2 ** 16)
    assert p_against == pytest.approx(sum(comb(16, i) for i in range(3, 17)) / 2 ** 16)


@pytest.mark.parametrize(("values", "sign", "expected"), [
    ([], +1, "not run"),
    ([0.1] * 6, +1, "supported"),  # 1/64: two tasks, every seed
    ([0.1] * 5 + [-0.1], +1, "inconclusive"),  # 7/64
    ([0.1] * 12 + [-0.1] * 3, +1, "supported"),  # 576/32768 = 0.018
    ([0.1] * 11 + [-0.1] * 4, +1, "inconclusive"),  # 0.059
    ([-0.1] * 6, +1, "contradicted"),
    ([0.1] * 3, +1, "inconclusive"),  # one task, 3 seeds: 1/8 can never decide
    # ties stay in n, for neither side: 6 of 8, p = (28 + 8 + 1) / 256, two-sided 0.289
    ([0.1, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1, 0.1], +1, "inconclusive"),
    ([0.1] * 8 + [0.0], +1, "supported"),  # 8 of 9: p = 10/512, two-sided 0.039
    ([-0.1] * 8 + [0.0], 0, "not contradicted"),  # a tie is no rise either
    ([0.1] * 6, 0, "contradicted"),  # "no rise": a significant rise
    ([0.1] * 5 + [-0.1], 0, "not contradicted"),
])
def test_claim_verdict(values: list[float], sign: int,
                       expected: str) -> None:
    assert claims.claim_verdict(values, sign) == expected


def _row(out: str, key: str) -> str:
    """Claim ``key``'s row of the summary table (the bounds' table after it has one too)."""
    summary = out[out.index("## Summary"):]
    table = summary.split("\n\n|", 1)[1].split("\n\n", 1)[0]
    (line,) = [x for x in ("|" + table).splitlines() if x.startswith(f"| {key} |")]
    return line


def _tables_are_rectangular(md: str) -> None:
    """Every markdown table's separator and rows have as many cells as its header."""
    width = None
    for line in md.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = line.count("|")
        if width is None:
            width = cells
        assert cells == width, line


def test_summary_of_phase_b(tmp_path: Path) -> None:
    # Two tasks, 3 seeds. Selected bars lower the raw top-1 share in every seed on both tasks
    # (P1 held down: 6 of 6) and lower the metric in every seed (P2: 0 of 6, contradicted).
    # All bars raise the metric and lower the share too: counted only in P3 (selected minus
    # all bars), never in P1 or P2, which would then read 12 values. Without a regularizer the
    # raw share grows on MRPC and falls on CoLA in every run: 3 of 6, inconclusive. Every
    # difference varies a little with the seed (e), so that Student's interval has a spread.
    root = tmp_path / "entropy"
    for task in ("mrpc", "cola"):
        grow = 0.2 if task == "mrpc" else -0.2
        for seed in range(3):
            m, e = 0.6 + 0.01 * seed, 0.002 * seed
            for reg, select, metric, top1 in (("none", True, m, 0.5 + grow),
                                              ("entropy", True, m - 0.02 - e, 0.25 + e),
                                              ("entropy", False, m + 0.03 + e, 0.2 - e)):
                spectrum = [(10, [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]),
                            (100, [top1 + 0.001 * seed, 0.1, 0.1, 0.2 + e, 0.1, 0.1])]
                make_run(root, task=task, reg=reg, select=select, seed=seed, metric=metric,
                         spectrum=spectrum, evals=[(50, metric), (100, metric)],
                         global_step=100)
    out, why = _claims_of(root)
    assert why is None
    _tables_are_rectangular(out)
    # MRPC's raw growth 0.200, 0.201, 0.202: 0.201 ± t₀.₉₇₅(2) 0.001 / √3 = 0.201 ± 0.0025
    assert "| mrpc | raw | 3 | +0.2010 ± 0.0010 | [+0.1985, +0.2035] | supported |" in out
    # Nine claims tested: six decide at the two-sided p = 2/64 (6 of 6 one way: P1 held down,
    # P2, P1's centred growth, P3 metric, P3 spectrum, and P4: all bars above the base run),
    # P1's raw growth at 2 · 42/64 > 1, and the two centred top-1 comparisons at 1 (every run
    # has the same centred share: 6 ties, in n). Holm: the six become 9 · 2/64 = 0.281, the rest 1:
    # no verdict survives the adjustment. Task level: 2 tasks, p 1/4 at best.
    held = "| 6 of 6 | 0.0156 | 0.0312 | 0.281 | 2 of 2 | 0.25 | 2 / 0 / 0 | – |"
    against = "| 0 of 6 | 1 | 0.0312 | 0.281 | 0 of 2 | 1 | 0 / 2 / 0 | – |"
    assert _row(out, "P1 held down").endswith(
        f"| 2 {held} inconclusive (unadjusted: supported) | – |")
    assert _row(out, "P2").endswith(f"| 2 {against} inconclusive (unadjusted: contradicted) | – |")
    assert _row(out, "P1 grows, raw").endswith(
        "| 2 | 3 of 6 | 0.656 | 1 | 1 | 1 of 2 | 0.75 | 1 / 1 / 0 | – | inconclusive | – |")
    up = "inconclusive (unadjusted: supported) | – |"
    down = "inconclusive (unadjusted: contradicted) | – |"
    assert _row(out, "P1 grows, centred").endswith(f"{held} {up}")
    assert _row(out, "P3 metric").endswith(f"{against} {down}")
    # selected (0.25) minus all bars (0.2) is a rise of the share: the other way
    assert _row(out, "P3 spectrum").endswith(f"{against} {down}")
    for key in ("P1 held down, centred", "P3 spectrum, centred"):
        # six ties stay in n, for neither side: 0 of 6, and both task means 0 (0 of 2)
        assert _row(out, key).endswith("| 2 | 0 of 6 | 1 | 1 | 1 | 0 of 2 | 1 | 0 / 0 / 2 | – | "
                                       "inconclusive | – |")
    # all bars 0.03 above the base run on every seed: "on par" contradicted per task, and
    # before the adjustment
    assert _row(out, "P4 all bars on par").endswith(
        "| 2 | 6 of 6 | 0.0156 | 0.0312 | 0.281 | 2 of 2 | 0.25 | 0 / 2 / 0 | – | not contradicted "
        "(unadjusted: contradicted) | – |")
    summary = out[out.index("## Summary"):]
    assert "| C1 vs none |" not in summary  # no I-STAR cell: its claims are not listed


def test_summary_of_phase_a(tmp_path: Path) -> None:
    # Two tasks at their paper's (λ, ζ), 3 seeds. I-STAR is below base and above CosReg in
    # every seed; CosReg raises IsoScore* by 0.01 on seeds 0-1 and lowers it on seed 2 (no
    # rise: 4 of 6 rises, not contradicted) while its last layer's IsoScore* rises on every seed
    # (6 of 6: the claim's primary measure), and centres in every seed (mean |activation|
    # -0.5); the paper's λ lowers TwoNN in every seed, λ = +1 raises it on one task only.
    # Every difference varies a little with the seed (e): Student's interval needs a spread.
    root = tmp_path / "istar"
    for task, (lam, zeta) in (("mrpc", (-1.0, 0.6)), ("cola", (-1.0, 0.8))):
        for seed in range(3):
            m, e = 0.7 + 0.01 * seed, 0.002 * seed
            cos_iso = 0.2 + (0.01 if seed < 2 else -0.01)
            up = (1.0 if task == "mrpc" else -1.0) * (1 + e)
            for reg, lam_, metric, iso, shift in (("none", 1.0, m, 0.2, 0.0),
                                                  ("cosreg", 1.0, m - 0.05, cos_iso, -0.5 - e),
                                                  ("istar", lam, m - 0.02 - e, 0.01, -2.0 - e),
                                                  ("istar", 1.0, m - 0.01, 0.5, up)):
                last = 0.3 + e if reg == "cosreg" else 0.1
                make_run(root, task=task, reg=reg, lam=lam_, zeta=zeta, seed=seed,
                         metric=metric, iso=iso, layer_shift=shift, twonn=8.0 + shift,
                         iso_last=last)
    out, why = _claims_of(root)
    assert why is None
    _tables_are_rectangular(out)
    # Eleven claims tested: C3's no rise of the last layer decides at the one-sided p of a rise,
    # 1/64; seven at the two-sided 2/64 (C1 twice, C2, C3 centres, C4 paper's λ, C6, C8); C3's
    # union at P(≥ 4 of 6 rises) = 22/64, C4 λ = +1 at 2 · 42/64 > 1 and C7 at 1. Holm: 11/64 =
    # 0.172, then the seven at 10 · 2/64 = 0.3125 (9 · 2/64 and below are raised to it), then
    # 3 · 22/64 > 1: the rest 1.
    one_way = "| 6 of 6 | 0.0156 | 0.0312 | 0.312 | 2 of 2 | 0.25 | 2 / 0 / 0 | – |"
    assert _row(out, "C1 vs none").endswith(
        "| 2 | 0 of 6 | 1 | 0.0312 | 0.312 | 0 of 2 | 1 | 0 / 2 / 0 | – | inconclusive "
        "(unadjusted: contradicted) | – |")
    assert _row(out, "C1 vs CosReg").endswith(f"| 2 {one_way} inconclusive (unadjusted: "
                                              "supported) | – |")
    # the last layer (primary) rises 6 of 6: not "not contradicted" before the adjustment
    assert _row(out, "C3 no rise").endswith(
        "| 6 of 6 | 0.0156 | 0.0156 | 0.172 | 2 of 2 | 0.25 | 0 / 2 / 0 | – | not contradicted "
        "(unadjusted: contradicted) | – |")
    assert _row(out, "C3 no rise, union").endswith(
        "| 4 of 6 | 0.344 | 0.344 | 1 | 2 of 2 | 0.25 | 0 / 0 / 2 | – | not contradicted | – |")
    up = "inconclusive (unadjusted: supported) | – |"
    assert _row(out, "C3 centres").endswith(f"{one_way} {up}")
    assert _row(out, "C4 paper's λ").endswith(f"{one_way} {up}")
    assert _row(out, "C4 λ = +1").endswith(
        "| 3 of 6 | 0.656 | 1 | 1 | 1 of 2 | 0.75 | 1 / 1 / 0 | – | inconclusive | – |")
    # λ = +1 is 0.01 below the base run on every seed (no spread: no per-task verdict)
    assert _row(out, "C6 λ = +1 hurts").endswith(
        "| 2 | 6 of 6 | 0.0156 | 0.0312 | 0.312 | 2 of 2 | 0.25 | 0 / 0 / 2 | – | inconclusive "
        "(unadjusted: supported) | – |")
    # CosReg 0.05 below the base run: no rise
    assert _row(out, "C7 CosReg no gain").endswith(
        "| 2 | 0 of 6 | 1 | 1 | 1 | 0 of 2 | 1 | 0 / 0 / 2 | – | not contradicted | – |")
    # TwoNN against the metric over λ ∈ {-1, 0, +1}: ρ = +0.5 on MRPC's seeds (ranks 1, 2, 3
    # against 1, 3, 2) and +1 on CoLA's (exact p of 3 · +1: 1/216, contradicted)
    assert _row(out, "C8").endswith(
        "| 2 | 0 of 6 | 1 | 0.0312 | 0.312 | 0 of 2 | 1 | 0 / 1 / 1 | – | inconclusive "
        "(unadjusted: contradicted) | – |")
    # no layer-1 IsoScore* in these runs
    assert "| C9 early layers |" in out and _row(out, "C9 early layers").endswith(
        "not run: needs I-STAR at λ = +1 (the paper's ζ) and a base run, same seeds | – |")
    assert _row(out, "C4 λ = -0.3").endswith(
        "| 0 | 0 of 0 | – | – | – | 0 of 0 | – | 0 / 0 / 0 | – | not run: needs I-STAR at λ = -0.3 "
        "(the paper's ζ) and a base run, same seeds | – |")
    assert _row(out, "C5").endswith(
        "| 0 | 0 of 0 | – | – | – | 0 of 0 | – | 0 / 0 / 0 | – | not run: needs I-STAR at "
        "λ = -1 with ζ = 0 and with ζ in (0, 1), same seeds | – |")
    assert "| P2 |" not in out[out.index("## Summary"):]
    # C2: per seed, IsoScore* 0.01 < 0.2 < 0.5 (λ = -1, base, +1) against metric ranks 1, 3, 2:
    # ρ = +0.5. Under no association each seed's ρ is 1, 0.5, 0.5, -0.5, -0.5 or -1 (6 orders);
    # the sum of 3 reaches 1.5 in 1 + 6 + 6 + 12 + 8 = 33 of 216 combinations (1,1,1; 1,1,0.5;
    # 1,1,-0.5; 1,0.5,0.5; 0.5,0.5,0.5), and exceeds it in 19. Over all 9 runs, scipy's ρ.
    iso = [0.2, 0.01, 0.5] * 3
    metric = [v for seed in range(3) for m, e in [(0.7 + 0.01 * seed, 0.002 * seed)]
              for v in (m, m - 0.02 - e, m - 0.01)]
    pooled = stats.spearmanr(iso, metric).statistic
    assert (f"| mrpc | 9 | {pooled:+.3f} | +0.500, +0.500, +0.500 | "
            f"{(216 - 19) / 216:.3g}, {33 / 216:.3g} | inconclusive |") in out


def test_summary_refuses_a_claim_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="C4 λ<0"):
        claims.summary({"C4 λ<0": claims.Tally(["supported"], [1.0])})


def test_report_writes_claims_md_or_says_why_not(tmp_path: Path) -> None:
    from isotropy.reporting.write import write_report
    runs = tmp_path / "runs"
    for seed in range(2):
        make_run(runs, task="mrpc", seed=seed, metric=0.8)
        make_run(runs, task="mrpc", reg="cosreg", seed=seed, metric=0.81)
    out = tmp_path / "report"
    res = write_report([str(runs)], out, figures=False)
    assert out / "claims.md" in res["files"]
    text = (out / "claims.md").read_text()
    assert "| mrpc | cosreg λ=1 | 0.8100 ± 0.0000 (n=2) | +0.0100 (n=2, no spread) |" in text
    assert "[`claims.md`](claims.md)" in (out / "report.md").read_text()
    # Another learning rate next to them: no claims, the reason in report.md, and the earlier
    # claims.md (of other runs) is not left behind.
    make_run(runs, task="mrpc", seed=0, metric=0.7, training={"learning_rate": 1e-4})
    res = write_report([str(runs)], out, figures=False)
    assert not (out / "claims.md").exists()
    assert "Not measured: the runs of mrpc differ in settings" in (out / "report.md").read_text()


def _claims_lines(root: Path, **kwargs: Any) -> tuple[str, str | None]:
    runs, _ = collect_runs(expand_inputs([str(root)]))
    lines, why = claims.claims_markdown(group_cells(runs), **kwargs)
    return "\n".join(lines), why


def test_best_evaluation_is_read_for_every_value(tmp_path: Path) -> None:
    import json
    for reg in ("none", "cosreg"):
        d = make_run(tmp_path, task="mrpc", reg=reg, seed=0, metric=0.8, iso=0.1, twonn=10.0)
        res = json.loads((d / "results.json").read_text())
        res["best"].update(eval_isoscore_star_union=0.3 if reg == "cosreg" else 0.2,
                           eval_twonn_cls_last=20.0, step=100)
        (d / "results.json").write_text(json.dumps(res))
    final, _ = _claims_lines(tmp_path)
    best, _ = _claims_lines(tmp_path, which="best")
    # the CosReg row's verdict column is C7's (no gain), inconclusive on one seed
    assert ("| mrpc | cosreg λ=1 | 0.8000 (n=1) | +0.0000 (n=1) | inconclusive | 0.1000 (n=1) |"
            in final)
    # best: metric 0.81 (make_run's best), IsoScore* 0.3 against 0.2, TwoNN 20
    assert ("| mrpc | cosreg λ=1 | 0.8100 (n=1) | +0.0000 (n=1) | inconclusive | 0.3000 (n=1) | "
            "+0.1000 (n=1) | 20.0000 (n=1) |") in best
    assert "the I-STAR claims read the best evaluation of each run" in best


def test_isoscore_of_different_measurement_zeta_is_not_compared(tmp_path: Path) -> None:
    for seed in range(2):
        make_run(tmp_path, task="mrpc", seed=seed, iso=0.1, measured_zeta=0.2)
        make_run(tmp_path, task="mrpc", reg="cosreg", seed=seed, iso=0.3, measured_zeta=0.8)
    out, why = _claims_lines(tmp_path)
    assert why is None
    assert "IsoScore\\* not compared on mrpc" in out
    assert _row(out, "C3 no rise").endswith(
        "| 0 | 0 of 0 | – | – | – | 0 of 0 | – | 0 / 0 / 0 | – | not run: needs CosReg (λ = 1) and "
        "a base run, same seeds | – |")


def test_only_the_cells_of_a_claim_open_it(tmp_path: Path) -> None:
    # CosReg at λ = 0.5 and the entropy loss in its old window mode: no claim compares them.
    make_run(tmp_path, task="mrpc", seed=0)
    make_run(tmp_path, task="mrpc", reg="cosreg", cos_lam=0.5, seed=0)
    make_run(tmp_path, task="mrpc", reg="entropy", accumulation=None, seed=0)
    out, why = _claims_lines(tmp_path)
    assert out == "" and why is not None and "CosReg λ = 1" in why


def test_a_claim_tested_without_values_is_inconclusive(tmp_path: Path) -> None:
    # C2 needs 4 runs with IsoScore* and the metric: 2 here, so the task is "inconclusive",
    # and so is the claim (not "not run"). Other cells are listed as compared by no claim.
    make_run(tmp_path, task="mrpc", seed=0)
    make_run(tmp_path, task="mrpc", reg="istar", lam=-1.0, zeta=0.6, seed=0)
    make_run(tmp_path, task="mrpc", reg="cosreg", cos_lam=0.5, seed=0)
    out, _ = _claims_lines(tmp_path)
    assert "| mrpc | 2 | fewer than 4 runs with both values | | | inconclusive |" in out
    assert _row(out, "C2").endswith(
        "| 1 | 0 of 0 | – | – | – | 0 of 0 | – | 0 / 0 / 1 | – | inconclusive | – |")
    assert "Cells no claim compares: mrpc: cosreg λ=0.5." in out
    assert "Seeds per cell: 1 (one seed" in out


def test_spectrum_left_out_when_formats_differ(tmp_path: Path) -> None:
    spectrum = [(10, [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]), (100, [0.6, 0.1, 0.1, 0.2, 0.1, 0.1])]
    for reg in ("none", "entropy"):
        make_run(tmp_path, task="mrpc", reg=reg, seed=0, spectrum=spectrum, global_step=100)
    out, _ = _claims_lines(tmp_path, spectrum=False)
    assert "The training [CLS] spectrum is not compared" in out
    assert _row(out, "P1 held down").endswith(
        "| 0 | 0 of 0 | – | – | – | 0 of 0 | – | 0 / 0 / 0 | – | not run: needs the entropy loss "
        "(selected bars) and a base run, same seeds | – |")


def test_a_claims_md_not_written_by_report_is_kept(tmp_path: Path) -> None:
    from isotropy.reporting.write import write_report
    runs, out = tmp_path / "runs", tmp_path / "report"
    make_run(runs, task="mrpc", seed=0)
    out.mkdir()
    (out / "claims.md").write_text("# my notes\n")
    with pytest.raises(ValueError, match=r"holds 1 file\(s\) that isotropy report did not "
                                         r"write \(claims.md\)"):
        write_report([str(runs)], out, figures=False)
    assert (out / "claims.md").read_text() == "# my notes\n"
    assert sorted(p.name for p in out.iterdir()) == ["claims.md"]


def test_a_claim_needs_two_seeds_of_each_task() -> None:
    one_seed = claims.Tally(["inconclusive"] * 6, [0.1] * 6, [1] * 6)  # 6 of 6, p = 1/64
    three = claims.Tally(["supported"] * 2, [0.1] * 6, [3, 3])
    rows = claims.summary({"C4 λ = +1": one_seed, "C1 vs none": three}, "C")
    (c4,) = [r for r in rows if r.startswith("| C4 λ = +1 |")]
    (c1,) = [r for r in rows if r.startswith("| C1 vs none |")]
    assert c4.endswith("| 6 of 6 | 0.0156 | 0.0312 | – | 6 of 6 | 0.0156 | 0 / 0 / 6 | – | "
                       "inconclusive (a task with fewer than 2 seeds) | – |")
    # the only claim tested: Holm leaves its two-sided p, 2/64, as it is; 2 task means of 0.1:
    # p = 1/4
    assert c1.endswith("| 6 of 6 | 0.0156 | 0.0312 | 0.0312 | 2 of 2 | 0.25 | 2 / 0 / 0 | – | "
                       "supported | – |")


def test_early_layers_claim_compares_the_rise_of_layer_1_with_the_last(tmp_path: Path) -> None:
    # λ = +1 raises layer 1's IsoScore* by 0.2 + 0.01·seed and the last layer's by 0.01: the
    # difference of the rises is 0.19 + 0.01·seed, 0.20 ± t₀.₉₇₅(2) · 0.01 / √3 per task.
    for task, zeta in (("mrpc", 0.6), ("cola", 0.8)):
        for seed in range(3):
            make_run(tmp_path, task=task, seed=seed, iso_first=0.1, iso_last=0.05)
            make_run(tmp_path, task=task, reg="istar", lam=1.0, zeta=zeta, seed=seed,
                     iso_first=0.3 + 0.01 * seed, iso_last=0.06)
    out, why = _claims_lines(tmp_path)
    assert why is None
    half = stats.t.ppf(0.975, 2) * 0.01 / np.sqrt(3)
    assert (f"| mrpc | +0.2100 [{0.21 - half:+.4f}, {0.21 + half:+.4f}] (n=3) | "
            f"+0.0100 (n=3, no spread) | +0.2000 [{0.2 - half:+.4f}, {0.2 + half:+.4f}] (n=3) | "
            "supported |") in out
    assert _row(out, "C9 early layers").startswith("| C9 early layers |")
    assert "| 2 | 6 of 6 | 0.0156 |" in _row(out, "C9 early layers")


def test_the_authors_padding_protocol_is_read_as_the_papers_cells(tmp_path: Path) -> None:
    # every I-STAR and CosReg cell with padding: the claims compare them, and say so
    padded, plain = tmp_path / "padded", tmp_path / "plain"
    for root, pad in ((padded, True), (plain, None)):
        for seed in range(2):
            make_run(root, task="mrpc", seed=seed, metric=0.80, padding=pad)
            make_run(root, task="mrpc", reg="cosreg", seed=seed, metric=0.81, padding=pad)
            make_run(root, task="mrpc", reg="istar", lam=-1.0, zeta=0.6, seed=seed,
                     metric=0.78 - 0.01 * seed, padding=pad)
    out, why = _claims_of(padded)
    assert why is None
    assert "Protocol: the authors' padding. Every I-STAR and CosReg cell" in out
    same, _ = _claims_of(plain)
    assert "Protocol:" not in same
    # the same numbers under either protocol: the tables and the summary agree line for line
    assert [x for x in out.splitlines() if not x.startswith("Protocol:")] == same.splitlines()
    assert "| mrpc | istar λ=-1 ζ=0.6 |" in out and "with padding" not in out.replace(
        '"with padding"', "")
    # both protocols in one report: the cells without padding are the papers', the padded
    # ones are compared by no claim
    out, _ = _claims_of(padded, plain)
    assert "Protocol:" not in out
    assert "Cells no claim compares: mrpc: cosreg λ=1 with padding; mrpc: istar λ=-1 ζ=0.6 " \
        "with padding." in out


def test_p1_from_the_pre_trained_model_is_read_where_step_0_was_evaluated(tmp_path: Path
                                                                          ) -> None:
    # Three base runs on MRPC evaluated at steps 0, 80 and 100 of 100: the window (t >= 70)
    # holds 80 and 100. Raw top-1 share 0.5 at step 0, then 0.6 + s/100 and 0.8 + s/100:
    # growth 0.2 + s/100 = 0.20, 0.21, 0.22, mean 0.21, sample std 0.01, and the 95% interval
    # 0.21 ± t₀.₉₇₅(2) · 0.01 / √3 (t₀.₉₇₅(2) = 4.302653, tables). Centred: 0.1 at step 0,
    # 0.05 both later: -0.05 every seed, no spread.
    root = tmp_path / "entropy"
    for seed in range(3):
        s = seed / 100
        make_run(root, task="mrpc", seed=seed, global_step=100,
                 evals=[(0, 0.6), (80, 0.6), (100, 0.6)],
                 eval_spectra=[(0, 0.5, 0.1), (80, 0.6 + s, 0.05), (100, 0.8 + s, 0.05)])
        make_run(root, task="mrpc", reg="entropy", seed=seed, global_step=100)  # opens P1-P4
    out, _ = _claims_of(root)
    _tables_are_rectangular(out)
    half = 4.302653 * 0.01 / np.sqrt(3)
    assert (f"| mrpc | raw | 3 of 3 | +0.2100 ± 0.0100 | [{0.21 - half:+.4f}, {0.21 + half:+.4f}] "
            "| supported |") in out
    assert "| mrpc | centred | 3 of 3 | -0.0500 ± 0.0000 | no spread | inconclusive |" in out
    # a run not evaluated at step 0 writes no such table
    plain = tmp_path / "plain"
    for seed in range(3):
        make_run(plain, task="mrpc", seed=seed, global_step=100,
                 eval_spectra=[(80, 0.6, 0.05), (100, 0.8, 0.05)])
        make_run(plain, task="mrpc", reg="entropy", seed=seed, global_step=100)
    out = _claims_of(plain)[0]
    assert "### P1: growth" in out and "P1 from the pre-trained model" not in out
