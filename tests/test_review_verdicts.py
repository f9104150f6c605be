"""``docs/results/review_verdicts.py``: the review phase's verdicts from the committed runs, by
the rules of ``docs/results.md``. The sign-test p against scipy, the rules on hand-made
differences, and the committed runs' B1 and B2 against the counts in ``docs/results.md``
(computed there by a separate script when those runs finished)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "results" / "runs"
_spec = importlib.util.spec_from_file_location(
    "review_verdicts", ROOT / "docs" / "results" / "review_verdicts.py")
rv = importlib.util.module_from_spec(_spec)
sys.modules["review_verdicts"] = rv  # its dataclasses look their module up there
_spec.loader.exec_module(rv)


def test_doctests() -> None:
    assert doctest.testmod(rv).failed == 0


def test_sign_p_is_scipys_exact_binomial_test() -> None:
    for n in range(1, 13):
        for k in range(n + 1):
            expected = binomtest(k, n, 0.5, alternative="greater").pvalue
            assert rv.sign_p(k, n) == pytest.approx(expected, rel=1e-12, abs=0), (k, n)


def test_six_of_six_rule_and_the_constant_predictor() -> None:
    up = rv.Comparison({"mrpc": [0.5, 0.1, 0.2], "cola": [1.0, 2.0, 3.0]},
                       {"mrpc": False, "cola": False})
    lines, p = rv.six_of_six(up, "t")
    assert "6 of 6 above 0" in lines[-1] and "**supported**" in lines[-1]
    assert p == 1 / 64
    # the same values, with CoLA's cell predicting one class on every seed: not above
    const = rv.Comparison(up.d, {"mrpc": False, "cola": True})
    lines, p = rv.six_of_six(const, "t")
    assert "3 of 6 above 0" in lines[-1] and "**inconclusive**" in lines[-1]
    assert p == pytest.approx(42 / 64)
    # a tie counts against the claimed side, and against neither in "below"
    tie = rv.Comparison({"mrpc": [-1.0, -1.0, 0.0], "cola": [-1.0, -1.0, -1.0]},
                        {"mrpc": False, "cola": False})
    lines, _ = rv.six_of_six(tie, "t")
    assert "0 of 6 above 0, 5 below" in lines[-1] and "**inconclusive**" in lines[-1]


def test_committed_b1_and_b2_are_the_published_counts() -> None:
    if not (RUNS / "review").is_dir():
        pytest.skip("no committed review runs")
    lines, p = rv.b1(RUNS)
    text = "\n".join(lines)
    # docs/results.md, "B1 ... verdict": 5 above, 5 below, 2 ties; 3 of 12 against CosReg;
    # 10 of 12 against the setting without padding
    assert "5 of 12 above 0, 5 below, 2 exactly 0" in text
    assert "3 of 12 above 0, 9 below" in text
    assert "10 of 12 above 0, 2 below" in text
    assert p == pytest.approx(0.806, abs=5e-4)
    lines, p = rv.b2(RUNS)
    assert "2 of 6 above 0, 4 below" in lines[-1] and "**inconclusive**" in lines[-1]
    assert "| MRPC | -7.35 | -5.64 | -6.37 | -6.45 |" in lines
    assert p == pytest.approx(57 / 64)


def test_a_run_with_other_settings_is_refused_and_a_missing_one_is_pending(tmp_path) -> None:
    if not (RUNS / "review").is_dir():
        pytest.skip("no committed review runs")
    name = "mrpc-minilm-none-seed0"
    shutil.copytree(RUNS / "review" / name, tmp_path / "review" / name)
    config = tmp_path / "review" / name / "config.json"
    data = json.loads(config.read_text())
    data["settings"]["training"]["learning_rate"] = 1e-4
    config.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="learning_rate"):
        rv.metric(tmp_path, "mrpc", rv.base("mrpc", "review", lr=3e-5), 0)
    with pytest.raises(rv.Missing, match="review/mrpc-minilm-istar_l-1_z0.6-seed0"):
        rv.b2(tmp_path)


def test_dose_response_reads_phase_a_and_marks_the_missing_doses_pending() -> None:
    if not (RUNS / "istar").is_dir():
        pytest.skip("no committed phase A runs")
    rows = {line.split(" |")[0][2:]: line for line in rv.dose_response(RUNS) if "lambda = -" in line
            and line.startswith("| ")}
    # docs/results.md, C1: the paper's setting's three-seed means, SST-2 -2.6 and CoLA -28.9
    # points, CoLA's cell predicting one class on every seed
    sst2 = rows["SST-2 (paper's lambda = -5)"].split(" | ")
    cola = rows["CoLA (paper's lambda = -1)"].split(" | ")
    assert sst2[1] == "-2.56" and cola[1] == "-28.91 (one class)"
    if not (RUNS / "dose").is_dir():
        assert sst2[3:] == ["pending", "pending |"]
