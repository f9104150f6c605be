"""The study's verdict script (``docs/results/verdict.py``): seed pairing, the bootstrap
interval, the verdict rule, and reading phases A and B apart."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from _runs import make_run

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "results" / "verdict.py"


@pytest.fixture(scope="module")
def verdict() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_verdict", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


class _Run:
    def __init__(self, seed: int, value: float | None) -> None:
        self.seed, self.v = seed, value


def _value(r: _Run) -> float | None:
    return r.v


def test_paired_matches_seeds_and_skips_missing(verdict: ModuleType) -> None:
    a = [_Run(0, 0.50), _Run(1, 0.60), _Run(2, 0.70), _Run(3, None)]
    b = [_Run(2, 0.71), _Run(0, 0.55), _Run(3, 0.9), _Run(4, 0.1)]
    d = verdict.paired(a, b, _value)
    # seeds 0 and 2 pair; seed 1 has no b, seed 3 no value in a, seed 4 no a
    assert d.n == 2
    assert d.mean == pytest.approx(((0.55 - 0.50) + (0.71 - 0.70)) / 2)
    assert verdict.paired(a, [_Run(9, 1.0)], _value) is None


def test_percentile_interval_of_three_seeds_is_their_range(verdict: ModuleType) -> None:
    # The mean of 3 values resampled with replacement: 27 equally likely resamples; the
    # all-minimum and all-maximum ones each have probability 1/27 > 2.5%, so the exact 2.5% and
    # 97.5% quantiles of the bootstrap distribution are the smallest and largest difference.
    diffs = [0.01, 0.02, 0.06]
    means = sorted(np.mean(c) for c in itertools.product(diffs, repeat=3))
    assert means[0] == min(diffs) and means[-1] == max(diffs)
    a = [_Run(s, 0.0) for s in range(3)]
    b = [_Run(s, x) for s, x in enumerate(diffs)]
    d = verdict.paired(a, b, _value)
    assert (d.low, d.high, d.n) == (pytest.approx(0.01), pytest.approx(0.06), 3)
    assert d.mean == pytest.approx(0.03)
    assert d.verdict(+1) == "supported" and d.verdict(-1) == "contradicted"


def test_interval_of_many_seeds_narrows_to_the_normal_one(verdict: ModuleType) -> None:
    # With 40 seeds, the percentile interval of the mean is close to mean ± 1.96 s / sqrt(n).
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.02, 0.01, size=40)
    d = verdict.paired([_Run(s, 0.0) for s in range(40)],
                       [_Run(s, float(x)) for s, x in enumerate(diffs)], _value)
    half = 1.96 * diffs.std(ddof=1) / np.sqrt(40)
    assert d.low == pytest.approx(diffs.mean() - half, abs=0.3 * half)
    assert d.high == pytest.approx(diffs.mean() + half, abs=0.3 * half)


@pytest.mark.parametrize(("low", "high", "n", "sign", "expected"), [
    (0.01, 0.03, 3, +1, "supported"),
    (0.01, 0.03, 3, -1, "contradicted"),
    (-0.03, -0.01, 3, -1, "supported"),
    (-0.01, 0.03, 3, +1, "inconclusive"),
    (0.01, 0.03, 1, +1, "inconclusive"),  # one seed never decides
    (float("nan"), float("nan"), 3, +1, "inconclusive"),
])
def test_verdict_rule(verdict: ModuleType, low: float, high: float, n: int, sign: int,
                      expected: str) -> None:
    assert verdict.Diff(0.02, low, high, n).verdict(sign) == expected


def test_phases_are_read_apart(verdict: ModuleType, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    # Both phases have a run without a regularizer on MRPC, under different learning rates:
    # pooled, they would be refused (or worse, compared); read apart, each is its phase's base.
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
    for root in (a, b):
        (root / "sweep.json").write_text("{}")  # sweep output roots: runs/ reads as both
    verdict.main(str(a), str(b))
    out = capsys.readouterr().out
    assert "| mrpc | none | 0.8100 ± 0.0141 (n=2) |" in out  # phase A: final metric
    assert "| mrpc | none | 0.7100 ± 0.0141 (n=2) |" in out  # phase B: last-30% mean
    assert "| mrpc | entropy β=1 | 0.7300 ± 0.0141 (n=2) | +0.0200 [" in out
    with pytest.raises(SystemExit, match="pass the runs of one protocol"):
        verdict.main(str(tmp_path), None)  # both roots read as one phase


def test_claim_verdict_doctests(verdict: ModuleType) -> None:
    import doctest
    failures, tried = doctest.testmod(verdict, verbose=False)
    assert tried >= 4 and failures == 0


@pytest.mark.parametrize(("units", "expected"), [
    ([], "not run"),
    (["supported"] * 3 + ["inconclusive"] * 2, "supported"),  # 3 of 5: "most tasks"
    (["supported"] * 2 + ["inconclusive"] * 3, "inconclusive"),
    (["supported", "supported"], "supported"),  # a two-task claim needs both
    (["supported", "inconclusive"], "inconclusive"),
    (["contradicted"] * 3 + ["supported"] * 2, "not supported"),
    (["contradicted", "supported"], "inconclusive"),
    (["not contradicted"] * 4 + ["contradicted"], "not contradicted"),
    (["not contradicted"] * 2 + ["contradicted"] * 3, "not supported"),
])
def test_claim_verdict_is_a_majority_of_units(verdict: ModuleType, units: list[str],
                                              expected: str) -> None:
    assert verdict.claim_verdict(units) == expected


def test_summary_counts_each_claims_units(verdict: ModuleType, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Phase B, 3 seeds, two tasks. The entropy loss (selected bars) lowers the raw top-1 share
    # in every seed on both tasks (P1 held down: supported) and lowers the metric in every seed
    # on both (P2: not supported). Without a regularizer the raw share grows on MRPC in every
    # seed and falls on CoLA in every seed: one unit each way, so "inconclusive".
    root = tmp_path / "entropy"
    for task in ("mrpc", "cola"):
        grow = 0.2 if task == "mrpc" else -0.2
        for seed in range(3):
            m = 0.6 + 0.01 * seed
            for reg, metric, top1 in (("none", m, 0.5 + grow), ("entropy", m - 0.02, 0.25)):
                spectrum = [(10, [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]),
                            (100, [top1 + 0.001 * seed, 0.1, 0.1, 0.2, 0.1, 0.1])]
                make_run(root, task=task, reg=reg, seed=seed, metric=metric,
                         spectrum=spectrum, evals=[(50, metric), (100, metric)],
                         global_step=100)
    (root / "sweep.json").write_text("{}")
    verdict.main(None, str(root))
    out = capsys.readouterr().out
    summary = out[out.index("## Summary"):]
    assert ("| P1 held down | the entropy loss (selected bars) lowers the raw top-1 share | "
            "2 (task) | 2 | 0 | 0 | supported |") in summary
    assert ("| P2 | the entropy loss (selected bars) raises the last-30% metric | 2 (task) | "
            "0 | 2 | 0 | not supported |") in summary
    assert ("| P1 grows, raw | without a regularizer the raw top-1 share grows | 2 (task) | "
            "1 | 1 | 0 | inconclusive |") in summary
    assert "| P1 grows, centred | without a regularizer the centred top-1 share grows | " \
           "2 (task) | 2 | 0 | 0 | supported |" in summary
    assert "| C1 vs none |" in summary and "| 0 (task) | 0 | 0 | 0 | not run |" in summary
