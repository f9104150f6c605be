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

from isotropy.reporting import packed

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


def _verdict(lines: list[str]) -> str:
    """The verdict line of a comparison (its bounds follow it)."""
    (line,) = [x for x in lines if x.endswith("**")]
    return line


def test_six_of_six_rule_and_the_constant_predictor() -> None:
    up = rv.Comparison({"mrpc": [0.5, 0.1, 0.2], "cola": [1.0, 2.0, 3.0]},
                       {"mrpc": False, "cola": False})
    lines, p = rv.six_of_six(up, "t", constant_rule=True)
    assert "6 of 6 above 0" in _verdict(lines) and "**supported**" in _verdict(lines)
    assert p == 1 / 64
    # the same values, with CoLA's cell predicting one class on every seed: not above
    const = rv.Comparison(up.d, {"mrpc": False, "cola": True})
    lines, p = rv.six_of_six(const, "t", constant_rule=True)
    assert "3 of 6 above 0" in _verdict(lines) and "**inconclusive**" in _verdict(lines)
    assert p == pytest.approx(42 / 64)
    # B2's rule has no constant-predictor clause
    lines, p = rv.six_of_six(const, "t", constant_rule=False)
    assert "6 of 6 above 0" in _verdict(lines) and p == 1 / 64
    # a tie counts against the claimed side, and against neither in "below"
    tie = rv.Comparison({"mrpc": [-1.0, -1.0, 0.0], "cola": [-1.0, -1.0, -1.0]},
                        {"mrpc": False, "cola": False})
    lines, _ = rv.six_of_six(tie, "t", constant_rule=True)
    assert "0 of 6 above 0, 5 below" in _verdict(lines) and "**inconclusive**" in _verdict(lines)


def test_committed_b1_and_b2_are_the_published_counts() -> None:
    if not packed.is_dir(RUNS / "review"):
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
    assert "2 of 6 above 0, 4 below" in _verdict(lines) and "**inconclusive**" in _verdict(lines)
    assert any(line.startswith("| MRPC | -7.35 | -5.64 | -6.37 | -6.45 [") for line in lines)
    assert p == pytest.approx(57 / 64)


def test_a_run_with_other_settings_is_refused_and_a_missing_one_is_pending(tmp_path) -> None:
    if not packed.is_dir(RUNS / "review"):
        pytest.skip("no committed review runs")
    name = "mrpc-minilm-none-seed0"
    shutil.copytree(packed.real_path(RUNS / "review") / name, tmp_path / "review" / name)
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
    if not packed.is_dir(RUNS / "istar"):
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
    ("mpnet", lambda t, s: [rv.istar(t, "mpnet", model="mpnet"),
                            rv.base(t, "mpnet", model="mpnet")]
     if t == "cola" and s in rv.MPNET_SEEDS else []),
])
def test_every_run_looked_up_is_a_run_its_spec_names(spec, cells) -> None:
    # the names isotropy sweep gives the spec's points, against the names the script reads
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.settings import args_from_dict

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
    if not packed.is_dir(RUNS / "review"):
        pytest.skip("no committed review runs")
    for name in ("mrpc-minilm-none-seed0", "mrpc-minilm-istar_l-1_z0.6-seed0"):
        shutil.copytree(packed.real_path(RUNS / "review") / name, tmp_path / "review" / name)
    (tmp_path / "review" / "mrpc-minilm-none-seed0" / "results.json").unlink()
    with pytest.raises(rv.Missing, match="review/mrpc-minilm-none-seed0"):
        rv.metric(tmp_path, "mrpc", rv.base("mrpc", "review", lr=3e-5), 0)
    # a reference that differs in a setting the rule does not name (here the epochs)
    shutil.rmtree(tmp_path / "review" / "mrpc-minilm-none-seed0")
    shutil.copytree(packed.real_path(RUNS / "review") / "mrpc-minilm-none-seed0",
                    tmp_path / "review" / "mrpc-minilm-none-seed0")
    config = tmp_path / "review" / "mrpc-minilm-none-seed0" / "config.json"
    data = json.loads(config.read_text())
    data["settings"]["training"]["num_train_epochs"] = 2.0
    config.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="num_train_epochs"):
        rv.compare(tmp_path, [("mrpc", rv.istar("mrpc", "review", lr=3e-5),
                                rv.base("mrpc", "review", lr=3e-5))])


FOUND = {-0.1: ["sst2", "cola", "stsb"], -0.03: ["sst2", "mrpc", "cola"]}
# phase A's learning rates and the I-STAR paper's best BERT zeta (its Table 2), per task
LR = {"sst2": 3e-5, "mrpc": 1e-4, "cola": 3e-5, "stsb": 1e-4}
ZETA = {"sst2": 0.2, "mrpc": 0.6, "cola": 0.8, "stsb": 0.2}


def _comparison(d: dict[str, list[float]], one_class: tuple[str, ...] = (),
                seeds: tuple[int, ...] = (0, 1, 2)) -> rv.Comparison:
    return rv.Comparison(d, {t: t in one_class for t in d}, seeds)


def test_confirmation_spec_runs_exactly_the_runs_the_confirmation_reads(tmp_path) -> None:
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.settings import args_from_dict

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
    # every point, against values written here: the task's rate and zeta, SST-2's 8k subset
    for p in spec.points:
        t = p["task"]
        assert p["learning_rate"] == LR[t]
        assert p.get("max_train_samples") == (8000 if t == "sst2" else None)
        if p["regularizer"] == "istar":
            assert p["zeta"] == ZETA[t] and t in FOUND[p["tuning"]]
        else:
            assert p == {k: v for k, v in p.items() if k in (
                "task", "learning_rate", "max_train_samples", "regularizer")}
            assert p["regularizer"] == "none"
    # phase A's fixed settings, as the screen's runs had them, in a root of its own
    dose = load_spec(ROOT / "docs" / "results" / "specs" / "dose.yaml")
    assert spec.base == dose.base and "classifier_pooling" not in spec.base
    assert str(spec.output_root).endswith("/dose-confirm")
    assert spec.seeds == [3, 4, 5] and spec.order == "seed-major"
    assert [p.name for p in points][:4] == [rv.run_name(t, rv.base(t, "dose-confirm"), 3)
                                            for t in rv.PAPER]  # seed 3 first
    with pytest.raises(ValueError, match="no candidate"):
        rv.confirmation_spec({})


def test_confirmation_verdicts_are_scipys_sign_test_under_statsmodels_holm() -> None:
    from statsmodels.stats.multitest import multipletests

    seeds = (3, 4, 5)
    strong = _comparison({"sst2": [0.2, 0.1, 0.3], "cola": [1.0, 2.0, -1.0],
                          "stsb": [0.1, 0.2, 0.3]}, seeds=seeds)
    # a tie counts against the claimed side; a one-class cell's values are never above
    weak = _comparison({"sst2": [0.2, 0.0, 0.3], "mrpc": [1.0, 2.0, 3.0],
                        "cola": [1.0, 1.0, 1.0]}, one_class=("cola",), seeds=seeds)
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
    seven = _comparison({**strong.d, "sst2": [0.2, -0.1, 0.3]}, seeds=seeds)
    assert rv.confirm_verdicts({-0.1: seven})[-2].endswith("**not confirmed**")


def test_the_screen_names_candidates_and_b3_hands_them_to_the_confirmation(
        tmp_path, monkeypatch) -> None:
    hand = {  # -0.1: 3 of 4 task means above 0 (STS-B's mean is exactly 0: not above)
        -0.1: _comparison({"sst2": [0.1, 0.2, -0.1], "mrpc": [0.5, 0.5, -0.9],
                           "cola": [1.0, 0.0, 0.0], "stsb": [0.1, -0.1, 0.0]}),
        # -0.03: 3 means above 0, but CoLA's cell predicts one class on every seed
        -0.03: _comparison({"sst2": [0.1, 0.1, 0.1], "mrpc": [0.2, 0.2, 0.2],
                            "cola": [5.0, 5.0, 5.0], "stsb": [-1.0, -1.0, -1.0]},
                           one_class=("cola",))}
    monkeypatch.setattr(rv, "screening", lambda runs, lam: hand[lam])
    monkeypatch.setattr(rv, "CONFIRM_SPEC", tmp_path / "no-spec-yet.yaml")
    assert rv.candidates(tmp_path) == {-0.1: ["sst2", "mrpc", "cola"]}
    text = "\n".join(rv.b3(tmp_path))
    assert "task means above 0 on 3 of 4: a **candidate**" in text
    assert "task means above 0 on 2 of 4: **does not beat**" in text
    confirm = text.split("#### B3's confirmation", 1)[1]
    assert "dose-confirm/mrpc-minilm-istar_l-0.1_z0.6-seed3" in confirm
    assert "stsb" not in confirm.split("Dose-response")[0] and "l-0.03" not in confirm
    # a spec on disk that the screen does not name is refused
    (tmp_path / "no-spec-yet.yaml").write_text(rv.confirmation_spec({-0.1: ["sst2"]}))
    with pytest.raises(ValueError, match="not the spec B3's screen names"):
        rv.b3(tmp_path)


def test_a_complete_lambda_gets_its_word_while_another_is_pending(tmp_path, monkeypatch
                                                                   ) -> None:
    done = _comparison({"sst2": [0.1, 0.2, 0.3], "mrpc": [-1.0, 0.0, 0.5],
                        "cola": [-2.0, 0.1, 0.8], "stsb": [0.1, -0.1, 0.2]})

    def screening(runs, lam):
        if lam == -0.1:
            return done
        raise rv.Missing("dose/stsb-minilm-istar_l-0.03_z0.2-seed2")

    monkeypatch.setattr(rv, "screening", screening)
    text = "\n".join(rv.b3(tmp_path))
    assert "task means above 0 on 2 of 4: **does not beat**" in text
    assert "lambda = -0.03: pending (missing: dose/stsb-minilm-istar_l-0.03_z0.2-seed2)" in text
    assert "The confirmation waits" in text and "#### B3's confirmation" not in text


def test_missing_runs_are_named_for_every_lambda(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(rv, "CONFIRM_SPEC", tmp_path / "none.yaml")
    lines = rv.confirmation(tmp_path, FOUND)
    assert lines[-2].startswith("pending (missing: ")
    assert lines[-2].count("dose-confirm/") == 2 * 18  # 3 tasks x 2 cells x 3 seeds, per lambda
    assert "dose-confirm/cola-minilm-istar_l-0.1_z0.8-seed5" in lines[-2]
    assert "dose-confirm/mrpc-minilm-istar_l-0.03_z0.6-seed3" in lines[-2]
    with pytest.raises(rv.Missing) as gone:  # the screen of both lambdas at once
        rv.candidates(tmp_path)
    assert "l-0.1_z0.2-seed0" in str(gone.value) and "l-0.03_z0.2-seed2" in str(gone.value)


def _make_confirm_spec():
    spec = importlib.util.spec_from_file_location(
        "make_confirm_spec", ROOT / "docs" / "results" / "make_confirm_spec.py")
    mcs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mcs)
    return mcs


def test_make_confirm_spec_refuses_an_incomplete_screen_and_writes_a_named_one(
        tmp_path, monkeypatch, capsys) -> None:
    mcs = _make_confirm_spec()
    out = tmp_path / "out.yaml"
    assert mcs.main(["x", str(tmp_path / "empty"), str(out)]) == 1
    assert "not complete" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(mcs.rv, "candidates", lambda runs: {})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 1
    assert "nothing to confirm" in capsys.readouterr().err and not out.exists()
    monkeypatch.setattr(mcs.rv, "candidates", lambda runs: {-0.1: ["sst2", "cola", "stsb"]})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 0
    assert "lambda = -0.1: SST-2, CoLA, STS-B" in capsys.readouterr().out
    written = out.read_text()
    assert written == rv.confirmation_spec({-0.1: ["sst2", "cola", "stsb"]})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 0  # the same again: fine
    # a screen that now names other runs never replaces the spec written before
    monkeypatch.setattr(mcs.rv, "candidates", lambda runs: {-0.1: ["sst2", "mrpc", "stsb"]})
    assert mcs.main(["x", str(tmp_path), str(out)]) == 1
    assert "Not replaced" in capsys.readouterr().err and out.read_text() == written


def test_run_confirm_runs_only_a_committed_spec_that_results_md_names(tmp_path) -> None:
    import subprocess

    here = tmp_path / "docs" / "results"
    (here / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "results" / "run_confirm.sh", here)
    fake = here / "run_review.sh"  # stands in for the sweep: says what it was given
    fake.write_text('#!/usr/bin/env bash\necho "ran $1 seeds=${SEEDS:-spec}"\n')
    fake.chmod(0o755)
    results = tmp_path / "docs" / "results.md"
    results.write_text("rules\n")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(here / "run_confirm.sh")], capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "SEEDS": "0 1 2"},
                              timeout=60)

    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    got = run()
    assert got.returncode == 2 and "make_confirm_spec.py writes it" in got.stderr
    spec = here / "specs" / "dose-confirm.yaml"
    spec.write_text(rv.confirmation_spec(FOUND))
    got = run()
    assert got.returncode == 2 and "commit" in got.stderr  # not committed
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "spec"], check=True)
    got = run()
    assert got.returncode == 2
    assert "does not name 'lambda = -0.1 on SST-2, CoLA, STS-B'" in got.stderr
    results.write_text("lambda = -0.1 on SST-2, CoLA, STS-B\n")
    assert "does not name 'lambda = -0.03 on SST-2, MRPC, CoLA'" in run().stderr
    results.write_text("lambda = -0.1 on SST-2, CoLA, STS-B; lambda = -0.03 on SST-2, MRPC, "
                       "CoLA\n")
    got = run()
    assert got.returncode == 0 and got.stdout == "ran dose-confirm seeds=spec\n"
    spec.write_text(spec.read_text() + "# edited\n")  # changed after the commit
    got = run()
    assert got.returncode == 2 and "unchanged" in got.stderr


def test_b6_reports_each_runs_metric_and_majority_share_and_no_verdict(tmp_path) -> None:
    # phase A's CoLA runs of seeds 0-1 stand in for MPNet's, their model renamed
    if not packed.is_dir(RUNS / "istar"):
        pytest.skip("no committed phase A runs")
    values = {}
    for cell, seed in [(c, s) for c in ("none", "istar_l-1_z0.8") for s in rv.MPNET_SEEDS]:
        src = packed.real_path(RUNS / "istar") / f"cola-minilm-{cell}-seed{seed}"
        dest = tmp_path / "mpnet" / f"cola-mpnet-{cell}-seed{seed}"
        shutil.copytree(src, dest)
        config = json.loads((dest / "config.json").read_text())
        config["settings"]["isotropy"]["model"] = "mpnet"
        (dest / "config.json").write_text(json.dumps(config))
        final = json.loads((dest / "results.json").read_text())["final"]
        values[cell, seed] = (final["eval_matthews_correlation"], final["eval_majority_fraction"])
    lines = "\n".join(rv.b6(tmp_path))
    for mcc, share in values.values():
        assert f"{mcc:.4f} (majority class {100 * share:.1f}%)" in lines
    ds = [100 * (values["istar_l-1_z0.8", s][0] - values["none", s][0]) for s in rv.MPNET_SEEDS]
    assert "| CoLA" in lines and all(f"{d:+.2f}" in lines or d == 0 for d in ds)
    assert "without a verdict" in lines and "supported" not in lines
    with pytest.raises(rv.Missing, match="mpnet/cola-mpnet-none-seed1"):
        rv.b6(tmp_path / "empty")


def test_a_run_of_a_sweep_still_running_is_read_from_pending(tmp_path) -> None:
    if not packed.is_dir(RUNS / "review"):
        pytest.skip("no committed review runs")
    name = "mrpc-minilm-none-seed0"
    shutil.copytree(packed.real_path(RUNS / "review") / name,
                    tmp_path / rv.PENDING / "review" / name)
    value, run = rv.metric(tmp_path, "mrpc", rv.base("mrpc", "review", lr=3e-5), 0)
    assert run.path == tmp_path / rv.PENDING / "review" / name and 0 < value < 1


def test_finished_pairs_lists_the_pairs_whose_two_runs_are_there(tmp_path) -> None:
    if not packed.is_dir(RUNS / "review"):
        pytest.skip("no committed review runs")
    cell, ref = rv.istar("mrpc", "review", lr=3e-5), rv.base("mrpc", "review", lr=3e-5)
    got = []
    for c in (cell, ref):
        name = rv.run_name("mrpc", c, 0)
        shutil.copytree(packed.real_path(RUNS / "review") / name, tmp_path / "review" / name)
        got.append(json.loads((tmp_path / "review" / name / "results.json").read_text())[
            "final"]["eval_accuracy"])
    lines = rv.finished_pairs(tmp_path, [("mrpc", cell, ref)])
    assert lines == [f"- MRPC, seed 0: {got[0]:.4f} - {got[1]:.4f} = "
                     f"{100 * (got[0] - got[1]):+.2f} points"]  # seeds 1-2 are absent
    assert rv.finished_pairs(tmp_path / "empty", [("mrpc", cell, ref)]) == []


def test_b4_reports_its_secondaries_beside_the_primary_test(tmp_path) -> None:
    # phase A's MRPC and CoLA runs stand in for B4's, moved under the mean readout, with the
    # base run's metric raised by 0.01 there: the readout secondary is +1.00 point per seed
    if not packed.is_dir(RUNS / "istar"):
        pytest.skip("no committed phase A runs")
    key = {"mrpc": "eval_accuracy", "cola": "eval_matthews_correlation"}
    phase_a: dict[tuple[str, str, int], float] = {}
    for task in rv.B4_TASKS:
        for which in ("paper", "base"):
            cls = rv.istar(task, "istar") if which == "paper" else rv.base(task, "istar")
            mean = (rv.istar(task, "readout", head="mean") if which == "paper"
                    else rv.base(task, "readout", head="mean"))
            for seed in rv.SEEDS:
                src = packed.real_path(RUNS / "istar") / rv.run_name(task, cls, seed)
                shutil.copytree(src, tmp_path / "istar" / src.name)
                dest = tmp_path / "readout" / rv.run_name(task, mean, seed)
                shutil.copytree(src, dest)
                config = json.loads((dest / "config.json").read_text())
                config["settings"]["isotropy"]["classifier_pooling"] = "mean"
                (dest / "config.json").write_text(json.dumps(config))
                results = json.loads((dest / "results.json").read_text())
                phase_a[task, which, seed] = results["final"][key[task]]
                if which == "base":
                    results["final"][key[task]] += 0.01
                    (dest / "results.json").write_text(json.dumps(results))
    lines, p = rv.b4(tmp_path)
    text = "\n".join(lines)
    # primary: phase A's d minus 1 point, every value below 0 (CoLA's paper cell predicts one
    # class on every seed under [CLS], so it counts as not above anyway)
    ds = {(t, s): 100 * (phase_a[t, "paper", s] - phase_a[t, "base", s]) - 1
          for t in rv.B4_TASKS for s in rv.SEEDS}
    assert all(d < 0 for d in ds.values())
    assert "0 of 6 above 0, 6 below" in text and "**contradicted**" in text and p == 1.0
    readout, cls = text.split("Secondary")[1:]
    assert "| MRPC | +1.00 | +1.00 | +1.00 | +1.00" in readout
    assert "| CoLA | +1.00 | +1.00 | +1.00 | +1.00" in readout
    for task, label in (("mrpc", "| MRPC | "), ("cola", "| CoLA (the cell predicts")):
        cells = " | ".join(f"{ds[task, s] + 1:+.2f}" for s in rv.SEEDS)
        assert label in cls and cells in cls
    # a pair that differs in more than the method and the readout is still refused
    config = tmp_path / "readout" / rv.run_name("mrpc", rv.base("mrpc", "readout", head="mean"),
                                                0) / "config.json"
    data = json.loads(config.read_text())
    data["settings"]["training"]["num_train_epochs"] = 4
    config.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="differ in more than the method"):
        rv.b4(tmp_path)


def test_committed_b4_matches_the_run_files_read_directly() -> None:
    # the d of every pair from each run's results.json, read without the script's lookup
    if not packed.is_dir(RUNS / "readout"):
        pytest.skip("no committed readout runs")
    root = packed.real_path(RUNS / "readout")
    key = {"mrpc": ("0.6", "eval_accuracy"), "cola": ("0.8", "eval_matthews_correlation")}
    ds = []
    for task, (zeta, metric) in key.items():
        for seed in (0, 1, 2):
            got = [json.loads((root / f"{task}-minilm-{cell}+meanhead-seed{seed}" /
                               "results.json").read_text())["final"][metric]
                   for cell in (f"istar_l-1_z{zeta}", "none")]
            ds.append(100 * (got[0] - got[1]))
    lines, p = rv.b4(RUNS)
    text = "\n".join(lines)
    above, below = sum(d > 0 for d in ds), sum(d < 0 for d in ds)
    assert f"{above} of 6 above 0, {below} below" in text
    assert (above, below) == (1, 5) and "**inconclusive**" in text  # docs/results.md, B4
    assert p == pytest.approx(rv.sign_p(above, 6))
    for d in ds:
        assert f"{d:+.2f}" in text


def _scipy_sign_flip(groups: list[list[float]]) -> tuple[float, float]:
    """S and its exact two-sided p by scipy's sign flips of one sample, stratified."""
    from scipy.stats import permutation_test

    task = np.concatenate([[i] * len(g) for i, g in enumerate(groups)])

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([np.mean(x[..., task == i], axis=axis) for i in range(len(groups))],
                       axis=0)

    data = np.concatenate(groups)
    res = permutation_test((data,), statistic, permutation_type="samples", n_resamples=np.inf,
                           vectorized=True)
    return float(res.statistic), float(res.pvalue)


def test_committed_b1_carries_the_plans_primary_test_as_scipy_computes_it() -> None:
    if not packed.is_dir(RUNS / "review"):
        pytest.skip("no committed review runs")
    lines, _ = rv.b1(RUNS)
    said = [line for line in lines if line.startswith("The confirmatory plan's primary test")]
    assert len(said) == 3 and all("(exploratory" in line for line in said)
    # against the base run: the d of the table's rows, read back from the table itself
    first = lines.index("Against the base run (primary):")
    rows = [line for line in lines[first:] if line.startswith("| ") and "seed" not in line]
    groups = [[0.0 if c.strip() == "0 (tie)" else float(c) for c in row.split(" | ")[1:4]]
              for row in rows[:4]]
    s, p = _scipy_sign_flip(groups)
    assert f"S = {s:+.2f} points over 4 task(s), 12 values" in said[0]
    assert said[0].endswith(f"two-sided p = {p:.4g}.")
    assert rv.plan_p(lines) == pytest.approx(p, rel=1e-3)
