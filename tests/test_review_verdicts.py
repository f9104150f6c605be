"""``docs/results/review_verdicts.py``: the review phase's verdicts from the committed runs, by
the rules of ``docs/results.md``. The sign-test p against scipy, the rules on hand-made
differences, and the committed runs' B1 and B2 against the counts in ``docs/results.md``
(computed there by a separate script when those runs finished)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, sem
from scipy.stats import t as t_dist

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
    lines, p = rv.six_of_six(up, "t", constant_rule=True)
    assert "6 of 6 above 0" in lines[-1] and "**supported**" in lines[-1]
    assert p == 1 / 64
    # the same values, with CoLA's cell predicting one class on every seed: not above
    const = rv.Comparison(up.d, {"mrpc": False, "cola": True})
    lines, p = rv.six_of_six(const, "t", constant_rule=True)
    assert "3 of 6 above 0" in lines[-1] and "**inconclusive**" in lines[-1]
    assert p == pytest.approx(42 / 64)
    # B2's rule has no constant-predictor clause
    lines, p = rv.six_of_six(const, "t", constant_rule=False)
    assert "6 of 6 above 0" in lines[-1] and p == 1 / 64
    # a tie counts against the claimed side, and against neither in "below"
    tie = rv.Comparison({"mrpc": [-1.0, -1.0, 0.0], "cola": [-1.0, -1.0, -1.0]},
                        {"mrpc": False, "cola": False})
    lines, _ = rv.six_of_six(tie, "t", constant_rule=True)
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
    verdicts = [line.rsplit("**", 2)[1] for line in lines if line.endswith("**")]
    assert verdicts == ["inconclusive", "inconclusive", "supported"]
    assert p == pytest.approx(0.806, abs=5e-4)
    lines, p = rv.b2(RUNS)
    assert "2 of 6 above 0, 4 below" in lines[-1] and "**inconclusive**" in lines[-1]
    assert any(line.startswith("| MRPC | -7.35 | -5.64 | -6.37 | -6.45 [") for line in lines)
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
    # with no runs, every run the step needs is listed, the references too
    with pytest.raises(rv.Missing) as gone:
        rv.b2(tmp_path / "empty")
    assert str(gone.value).count("review/") == 12
    assert "review/stsb-minilm-none-seed2" in str(gone.value)


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
    for cell in (*sst2[3:-1], sst2[-1].removesuffix(" |")):  # B3's doses: a mean or pending
        assert cell == "pending" or re.fullmatch(r"[+-]\d+\.\d\d( \(one class\))?", cell), cell


def test_the_tables_interval_is_scipys_student_t_interval() -> None:
    values = [-8.33, 0.0, 0.0]
    expected = t_dist.interval(0.95, 2, loc=np.mean(values), scale=sem(values))
    row = rv._table(rv.Comparison({"mrpc": values}, {"mrpc": False}))[-1]
    low, high = (float(x) for x in row.rsplit("[", 1)[1].split("]")[0].split(", "))
    assert (low, high) == pytest.approx(expected, abs=0.005)  # printed to 2 decimals


def test_screen_counts_task_means_above_zero_but_not_a_one_class_cell() -> None:
    d = {"sst2": [0.1, 0.1, 0.1], "mrpc": [0.3, -0.1, -0.1], "cola": [1.0, 1.0, 1.0],
         "stsb": [0.0, 0.0, 0.0]}
    up, word = rv.screen(rv.Comparison(d, dict.fromkeys(d, False)))
    assert up == ["sst2", "mrpc", "cola"] and "candidate" in word and "CoLA" in word
    up, word = rv.screen(rv.Comparison(d, {**dict.fromkeys(d, False), "cola": True}))
    assert up == ["sst2", "mrpc"] and "does not beat" in word  # a mean of 0 is not above


@pytest.mark.parametrize("spec, cells", [
    ("review", lambda t, s: [rv.istar(t, "review", pad=True)]
     + ([rv.istar(t, "review", lr=3e-5), rv.base(t, "review", lr=3e-5)]
        if t in ("mrpc", "stsb") else [])),
    ("dose", lambda t, s: [rv.istar(t, "dose", -0.1), rv.istar(t, "dose", -0.03)]),
    ("readout", lambda t, s: [rv.istar(t, "readout", head="mean"),
                              rv.base(t, "readout", head="mean")] if t in ("mrpc", "cola")
     else []),
    ("istar", lambda t, s: [rv.istar(t, "istar"), rv.istar(t, "istar", -0.3),
                            rv.base(t, "istar"), rv.cosreg(t)]),
])
def test_every_run_looked_up_is_a_run_its_spec_names(spec, cells) -> None:
    # the names isotropy sweep gives the spec's points, against the names the script reads
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.config import args_from_dict

    points = expand(load_spec(ROOT / "docs" / "results" / "specs" / f"{spec}.yaml"))
    named = {p.name: args_from_dict(p.settings) for p in points}  # as isotropy train reads it
    wanted = [(t, c, s) for t in rv.PAPER for s in rv.SEEDS for c in cells(t, s)]
    assert wanted
    for task, cell, seed in wanted:
        name = rv.run_name(task, cell, seed)
        assert name in named, name
        iso, train = named[name]
        for key, value in cell.settings:
            got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
            assert got == value, (name, key, got, value)


def test_an_unfinished_run_is_pending_and_other_settings_are_refused(tmp_path) -> None:
    if not (RUNS / "review").is_dir():
        pytest.skip("no committed review runs")
    for name in ("mrpc-minilm-none-seed0", "mrpc-minilm-istar_l-1_z0.6-seed0"):
        shutil.copytree(RUNS / "review" / name, tmp_path / "review" / name)
    (tmp_path / "review" / "mrpc-minilm-none-seed0" / "results.json.gz").unlink()
    with pytest.raises(rv.Missing, match="review/mrpc-minilm-none-seed0"):
        rv.metric(tmp_path, "mrpc", rv.base("mrpc", "review", lr=3e-5), 0)
    # a reference that differs in a setting the rule does not name (here the epochs)
    shutil.rmtree(tmp_path / "review" / "mrpc-minilm-none-seed0")
    shutil.copytree(RUNS / "review" / "mrpc-minilm-none-seed0",
                    tmp_path / "review" / "mrpc-minilm-none-seed0")
    config = tmp_path / "review" / "mrpc-minilm-none-seed0" / "config.json"
    data = json.loads(config.read_text())
    data["settings"]["training"]["num_train_epochs"] = 2.0
    config.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="num_train_epochs"):
        rv.compare(tmp_path, [("mrpc", rv.istar("mrpc", "review", lr=3e-5),
                                rv.base("mrpc", "review", lr=3e-5))])


FOUND = {-0.1: ["sst2", "cola", "stsb"], -0.03: ["sst2", "mrpc", "cola"]}


def test_confirmation_spec_runs_exactly_the_runs_the_confirmation_reads(tmp_path) -> None:
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.config import args_from_dict

    path = tmp_path / "dose-confirm.yaml"
    path.write_text(rv.confirmation_spec(FOUND))
    spec = load_spec(path)
    points = expand(spec)
    named = {p.name: args_from_dict(p.settings) for p in points}
    wanted = [(t, c, s) for lam, tasks in FOUND.items() for t in tasks
              for c in rv.confirm_cells(t, lam) for s in (3, 4, 5)]
    # the base run once per task of any candidate: 4 tasks, plus 3 + 3 lambda cells, 3 seeds
    assert len({rv.run_name(t, c, s) for t, c, s in wanted}) == len(named) == (4 + 6) * 3
    for task, cell, seed in wanted:
        iso, train = named[rv.run_name(task, cell, seed)]
        assert train.seed == seed
        for key, value in cell.settings:
            got = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
            assert got == value, (task, key, got, value)
    # phase A's fixed settings, as the screen's runs had them, in a root of its own
    dose = load_spec(ROOT / "docs" / "results" / "specs" / "dose.yaml")
    assert spec.base == dose.base
    assert str(spec.output_root).endswith("/dose-confirm")
    assert [p.name for p in points][:4] == [rv.run_name(t, rv.base(t, "dose-confirm"), 3)
                                            for t in rv.PAPER]  # seed-major, seed 3 first
    with pytest.raises(ValueError, match="no candidate"):
        rv.confirmation_spec({})


def test_confirmation_verdicts_are_scipys_sign_test_under_statsmodels_holm() -> None:
    from statsmodels.stats.multitest import multipletests

    seeds = (3, 4, 5)
    strong = rv.Comparison({"sst2": [0.2, 0.1, 0.3], "cola": [1.0, 2.0, -1.0],
                            "stsb": [0.1, 0.2, 0.3]}, dict.fromkeys(("sst2", "cola", "stsb"),
                                                                   False), seeds)
    # a tie counts against the claimed side; a one-class cell's values are never above
    weak = rv.Comparison({"sst2": [0.2, 0.0, 0.3], "mrpc": [1.0, 2.0, 3.0],
                          "cola": [1.0, 1.0, 1.0]},
                         {"sst2": False, "mrpc": False, "cola": True}, seeds)
    lines = rv.confirm_verdicts({-0.1: strong, -0.03: weak})
    verdicts = [line for line in lines if line.endswith("**")]
    raw = [binomtest(k, 9, 0.5, alternative="greater").pvalue for k in (8, 5)]
    adjusted = multipletests(raw, method="holm")[1]
    assert verdicts[0].startswith("8 of 9 above 0") and verdicts[1].startswith("5 of 9 above 0")
    for line, p, a in zip(verdicts, raw, adjusted, strict=True):
        assert f"p = {p:.3f}, Holm-adjusted over 2 candidate(s) {a:.3f}" in line
    assert verdicts[0].endswith("**supported**") and adjusted[0] < 0.05
    assert verdicts[1].endswith("**not confirmed**")
    assert "| task | seed 3 | seed 4 | seed 5 |" in lines[2]
    # alone, 7 of 9 (p = 0.090) is not confirmed
    seven = rv.Comparison({**strong.d, "sst2": [0.2, -0.1, 0.3]}, strong.constant, seeds)
    assert rv.confirm_verdicts({-0.1: seven})[-2].endswith("**not confirmed**")


def test_confirmation_is_pending_with_every_missing_run_named(tmp_path) -> None:
    lines = rv.confirmation(tmp_path, {-0.1: ["sst2", "cola", "stsb"]})
    assert lines[-2].startswith("pending (missing: ")
    assert lines[-2].count("dose-confirm/") == 18  # 3 tasks x 2 cells x 3 seeds
    assert "dose-confirm/cola-minilm-istar_l-0.1_z0.8-seed5" in lines[-2]


def test_make_confirm_spec_refuses_an_incomplete_screen_and_writes_a_named_one(
        tmp_path, monkeypatch, capsys) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_confirm_spec", ROOT / "docs" / "results" / "make_confirm_spec.py")
    mcs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mcs)
    out = tmp_path / "out.yaml"
    assert mcs.main(["x", str(tmp_path / "empty"), str(out)]) == 1
    assert "not complete" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(mcs.rv, "candidates", lambda runs: {})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 1
    assert "nothing to confirm" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(mcs.rv, "candidates", lambda runs: {-0.1: ["sst2", "cola", "stsb"]})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 0
    assert "lambda = -0.1: SST-2, CoLA, STS-B" in capsys.readouterr().out
    assert out.read_text() == rv.confirmation_spec({-0.1: ["sst2", "cola", "stsb"]})
