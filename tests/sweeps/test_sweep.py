"""``isotropy sweep``: spec expansion, naming, bad input, dry runs, resume and failures.

The runs are real ``isotropy train`` runs of a tiny random BERT on 16 SST-2-style rows, each in
its own worker process (2 workers).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from _sweep_fixtures import make_tiny_model, tiny_base, write_sst2
from _training import Crash as _Crash

from isotropy.cli.sweep import main as sweep_main
from isotropy.sweeps.driver import cell_summary, make_engine, run_sweep
from isotropy.sweeps.local_engine import LocalEngine
from isotropy.sweeps.points import check_inputs, expand
from isotropy.sweeps.presets import override, preset_spec
from isotropy.sweeps.spec import load_spec, spec_from_dict
from isotropy.sweeps.state import SweepStatus
from isotropy.sweeps.worker import Outcome, exit_reason


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("sweep_model"))


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    return write_sst2(tmp_path_factory.mktemp("sweep_glue"))


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _spec(tiny_model: Path, glue: Path, root: Path, **keys):
    return spec_from_dict({"output_root": str(root), "base": tiny_base(tiny_model, glue),
                           **keys}, source="test spec")


def _run_cli(argv, capsys) -> tuple[int, str, str]:
    code = sweep_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _usage_error(argv, capsys) -> str:
    """stderr of a command that must fail its checks: exit status 2, one line."""
    with pytest.raises(SystemExit) as info:
        sweep_main([str(a) for a in argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("isotropy sweep: error: "), err
    return err


# --------------------------------------------------------------------------- expansion


def test_grid_times_methods_times_seeds_in_seed_major_order(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path / "out",
                 grid={"max_seq_length": [12, 16]},
                 methods=[{"name": "base", "regularizer": "none"},
                          {"name": "cosreg", "regularizer": "cosreg", "cosreg_tuning": 1},
                          {"name": "istar", "regularizer": "istar", "tuning": [-1, 1],
                           "zeta": [0.2, 0.8]}],
                 seeds=[1, 2])
    points = expand(spec)
    # Expected by hand: per grid value, base, cosreg and the 2 x 2 I-STAR cells (CosReg's
    # lambda is not crossed with I-STAR's); seed-major: every seed-1 point first.
    cells = []
    for length in (12, 16):
        cells += [(length, "base", None, None), (length, "cosreg", None, None)]
        cells += [(length, "istar", t, z) for t in (-1, 1) for z in (0.2, 0.8)]
    expected = [(s, *c) for s in (1, 2) for c in cells]
    got = [(p.seed, p.settings["max_seq_length"], p.method, p.settings.get("tuning"),
            p.settings.get("zeta")) for p in points]
    assert got == expected
    assert [p.index for p in points] == list(range(24))
    assert points[2].name == "sst2-tiny-istar_l-1_z0.2-len12-seed1"
    assert points[1].name == "sst2-tiny-cosreg_l1-len12-seed1"
    assert points[6].name == "sst2-tiny-none-len16-seed1"
    assert all(p.run_dir == tmp_path / "out" / p.name for p in points)
    assert len({p.name for p in points}) == len(points)
    cell_major = expand(spec_from_dict({**spec.to_dict(), "order": "cell-major"}))
    assert [(p.cell, p.seed) for p in cell_major] == [
        (c, s) for c in dict.fromkeys(p.cell for p in points) for s in (1, 2)]


def test_names_are_the_default_run_names_when_nothing_else_varies(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path, grid={"regularizer": ["none", "entropy"]},
                 points=[{"regularizer": ["istar", "entropy"], "tuning": -3, "zeta": 0.4,
                          "select_features": False}],
                 seeds=[7])
    assert [p.name for p in expand(spec)] == [
        "sst2-tiny-none-seed7", "sst2-tiny-entropy_b1-seed7",
        "sst2-tiny-istar_l-3_z0.4+entropy_b1_allbars-seed7"]


def test_the_papers_weight_names_are_accepted_in_a_spec(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path,
                 methods=[{"name": "istar", "regularizer": "istar", "istar_lambda": [-1, 1]}],
                 grid={"entropy_beta": [0.5]}, seeds=[7])
    assert [p.settings["tuning"] for p in expand(spec)] == [-1, 1]
    assert [p.settings["entropy_weight"] for p in expand(spec)] == [0.5, 0.5]
    # --set / --grid take the papers' names too, replacing the setting they name
    spec = _spec(tiny_model, glue, tmp_path, base={**tiny_base(tiny_model, glue),
                                                   "regularizer": "istar", "istar_lambda": -1})
    assert [p.settings["tuning"] for p in expand(override(spec, base={"istar_lambda": -2}))] \
        == [-2]
    over = override(spec, grid={"istar_lambda": [3, 4]})
    assert sorted(p.settings["tuning"] for p in expand(over)) == [3, 4]
    with pytest.raises(ValueError, match="cosreg_lambda and cosreg_tuning are the same"):
        _spec(tiny_model, glue, tmp_path, base={**tiny_base(tiny_model, glue),
                                                "cosreg_lambda": 1, "cosreg_tuning": 1})


def test_names_carry_lr_batch_and_epochs_when_they_vary(tiny_model, glue, tmp_path):
    # YAML reads 1e-5 as a string: it is taken as the number it spells.
    spec = _spec(tiny_model, glue, tmp_path,
                 grid={"learning_rate": ["1e-5", 3e-5], "per_device_train_batch_size": [8, 16],
                       "num_train_epochs": [1]})
    names = [p.name for p in expand(spec)]
    assert names == ["sst2-tiny-none-lr1e-05_bs8-seed42", "sst2-tiny-none-lr1e-05_bs16-seed42",
                     "sst2-tiny-none-lr3e-05_bs8-seed42", "sst2-tiny-none-lr3e-05_bs16-seed42"]
    assert expand(spec)[0].settings["learning_rate"] == 1e-5


def test_duplicate_points_are_refused(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path, points=[{"zeta": 0.2}, {"zeta": 0.2}])
    with pytest.raises(ValueError, match="points 1 and 2 have the same settings"):
        expand(spec)


def test_exclude_leaves_out_named_runs_and_keeps_the_other_names(tiny_model, glue, tmp_path):
    # the lr suffix comes from the whole spec: it stays when the only 1e-5 run is left out
    grid = {"learning_rate": [1e-5, 3e-5]}
    whole = [p.name for p in expand(_spec(tiny_model, glue, tmp_path, grid=grid,
                                          seeds=[0, 1]))]
    assert whole == ["sst2-tiny-none-lr1e-05-seed0", "sst2-tiny-none-lr3e-05-seed0",
                     "sst2-tiny-none-lr1e-05-seed1", "sst2-tiny-none-lr3e-05-seed1"]
    spec = _spec(tiny_model, glue, tmp_path, grid=grid, seeds=[0, 1],
                 exclude=["sst2-tiny-none-lr1e-05-seed0", "sst2-tiny-none-lr1e-05-seed1"])
    points = expand(spec)
    assert [(p.index, p.name) for p in points] == [(0, "sst2-tiny-none-lr3e-05-seed0"),
                                                   (1, "sst2-tiny-none-lr3e-05-seed1")]
    assert spec.to_dict()["exclude"] == ["sst2-tiny-none-lr1e-05-seed0",
                                         "sst2-tiny-none-lr1e-05-seed1"]
    # --exclude adds to the spec's list (a repeated name once)
    more = override(spec, exclude=["sst2-tiny-none-lr3e-05-seed0",
                                   "sst2-tiny-none-lr1e-05-seed0"])
    assert [p.name for p in expand(more)] == ["sst2-tiny-none-lr3e-05-seed1"]
    assert len(more.exclude) == 3


def test_exclude_refuses_unknown_names_and_an_empty_sweep(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path, seeds=[0], exclude=["sst2-tiny-nonne-seed0"])
    with pytest.raises(ValueError, match=r"exclude names 1 run\(s\) the sweep does not have: "
                       r"sst2-tiny-nonne-seed0 \(did you mean 'sst2-tiny-none-seed0'\?\)"):
        expand(spec)
    # a cell's run at a seed the sweep does not run (--seeds narrowed it) is passed over
    spec = _spec(tiny_model, glue, tmp_path, seeds=[0, 1], exclude=["sst2-tiny-none-seed0"])
    assert [p.name for p in expand(override(spec, seeds=[1]))] == ["sst2-tiny-none-seed1"]
    assert [p.name for p in expand(override(spec, seeds=[0, 1]))] == ["sst2-tiny-none-seed1"]
    spec = _spec(tiny_model, glue, tmp_path, seeds=[0], exclude=["sst2-tiny-none-seed0"])
    with pytest.raises(ValueError, match="leaves out every point"):
        expand(spec)
    with pytest.raises(ValueError, match="exclude must be a list of run directory names"):
        _spec(tiny_model, glue, tmp_path, exclude="sst2-tiny-none-seed0")


@pytest.mark.slow
def test_presets_are_the_papers_grids(tmp_path):
    # expected values typed from the I-STAR paper: Section 4.1 and Table 2 (lambda x zeta
    # grid, CosReg lambda 1, five seeds), Fig. 3 (lambda 0.5), Fig. 4 (CosReg lambda -1),
    # Fig. 7 (zeta 0 and 1 with Table 2's RTE lambda -1)
    istar = expand(preset_spec("istar-grid"), output_root=tmp_path)
    assert len(istar) == (1 + 2 + 7 * 4 + 2) * 5
    grid = {(p.settings["tuning"], p.settings["zeta"]) for p in istar if p.method == "istar"}
    assert grid == set(itertools.product([-5, -3, -1, 0.5, 1, 3, 5], [0.2, 0.4, 0.6, 0.8]))
    ends = {(p.settings["tuning"], p.settings["zeta"]) for p in istar
            if p.method == "istar-zeta-ends"}
    assert ends == {(-1, 0), (-1, 1)}
    assert {p.settings["cosreg_tuning"] for p in istar if p.method == "cosreg"} == {1.0, -1.0}
    assert sorted({p.seed for p in istar}) == [1, 2, 3, 4, 5]
    assert [p.seed for p in istar[:33]] == [1] * 33  # one seed of every cell first
    assert len({p.name for p in istar}) == len(istar)
    tuning = expand(preset_spec("istar-tuning"), output_root=tmp_path)
    assert len(tuning) == 3 * 3 * 3 * 5
    assert {p.settings["regularizer"] for p in tuning} == {"none"}
    assert {(p.settings["per_device_train_batch_size"], p.settings["num_train_epochs"],
             p.settings["learning_rate"]) for p in tuning} == set(
        itertools.product([8, 16, 32], [3, 4, 5], [1e-5, 3e-5, 5e-5]))
    assert sorted({p.seed for p in tuning}) == [1, 2, 3, 4, 5]
    assert len({p.name for p in tuning}) == len(tuning)
    entropy = expand(preset_spec("entropy-grid"), output_root=tmp_path)
    assert len(entropy) == 3 * 5
    assert {(p.method, p.settings.get("select_features")) for p in entropy} == {
        ("base", None), ("entropy", True), ("entropy-allbars", False)}
    assert entropy[0].name == "mrpc-minilm-none-seed1"
    assert entropy[2].name == "mrpc-minilm-entropy_b1_allbars-seed1"


def test_yaml_and_toml_spec_files_give_the_same_points(tiny_model, glue, tmp_path):
    base = tiny_base(tiny_model, glue)
    (tmp_path / "s.yaml").write_text(
        f"output_root: {tmp_path / 'out'}\nbase:\n"
        + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in base.items())
        + "grid:\n  learning_rate: [1e-5, 2e-5]\nseeds: [1, 2]\n", encoding="utf-8")
    (tmp_path / "s.toml").write_text(
        f"output_root = {json.dumps(str(tmp_path / 'out'))}\nseeds = [1, 2]\n[base]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items())
        + "[grid]\nlearning_rate = [1e-5, 2e-5]\n", encoding="utf-8")
    a, b = (expand(load_spec(tmp_path / f)) for f in ("s.yaml", "s.toml"))
    assert [p.settings for p in a] == [p.settings for p in b]
    assert [p.settings["learning_rate"] for p in a] == [1e-5, 2e-5, 1e-5, 2e-5]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("data", "message"), [
    ({"base": {"learning_rat": 1e-5}},
     r"unknown setting 'learning_rat' in base \(did you mean 'learning_rate'\?\)"),
    ({"grid": {"zetta": [0.2]}}, r"unknown setting 'zetta' in grid \(did you mean 'zeta'\?\)"),
    ({"methods": [{"name": "i", "tunning": [1]}]},
     r"unknown setting 'tunning' in methods.i \(did you mean 'tuning'\?\)"),
    ({"gird": {"zeta": [0.2]}}, r"unknown key 'gird' \(did you mean 'grid'\?\)"),
    ({"grid": {}}, "the grid is empty"),
    ({"grid": {"zeta": []}}, "grid.zeta is an empty list"),
    ({"grid": {"zeta": 0.2}}, "grid.zeta must be a list of values"),
    ({"methods": []}, "methods is empty"),
    ({"methods": [{"regularizer": "istar"}]}, r"methods\[0\] needs a name"),
    ({"methods": [{"name": "a"}, {"name": "a"}]}, "two methods are named 'a'"),
    ({"grid": {"zeta": [0.2]}, "methods": [{"name": "i", "zeta": 0.4}]},
     "zeta is set both in grid and in methods.i"),
    ({"base": {"output_dir": "x"}}, "output_dir cannot be set in base"),
    ({"base": {"overwrite": True}}, "overwrite cannot be set in base"),
    ({"base": {"seed": 3}, "seeds": [1]}, "seed is set in base and seeds: is given"),
    ({"seeds": []}, "seeds must be a non-empty list"),
    ({"seeds": [1, 1]}, "seeds has duplicates"),
    ({"seeds": [-1]}, r"seeds must be in 0..4294967295 \(NumPy's seeds\), got -1"),
    ({"order": "random"}, "order must be seed-major or cell-major"),
    ({"points": []}, "points must be a non-empty list"),
])
def test_bad_specs_are_refused_with_one_line(data, message):
    with pytest.raises(ValueError, match=message) as info:
        spec_from_dict({"output_root": "x", **data}, source="sweep file s.yaml")
    assert str(info.value).startswith("sweep file s.yaml: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("name", "data", "message"), [
    ("s.yaml", b"output_root: x\ngrid:\n  zeta: [0.2]\n  zeta: [0.4]\n",
     r"is not valid YAML: .*the key 'zeta' is given twice .*line 4, column 3"),
    ("s.json", b'{"output_root": "x", "output_root": "y"}',
     "could not be parsed: the key 'output_root' is given twice"),
    ("s.yaml", "output_root: x\n".encode("utf-16"),
     r"the file is UTF-16 \(its byte-order mark\), not UTF-8"),
])
def test_spec_files_that_cannot_mean_one_spec_are_refused(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_spec_directory_is_not_said_to_be_missing(tmp_path):
    with pytest.raises(ValueError, match=f"sweep file {tmp_path} is a directory"):
        load_spec(tmp_path)


@pytest.mark.parametrize(("keys", "message"), [
    ({"grid": {"zeta": [0.2, 1.5]}},
     r"grid \(point 2: zeta=1.5, seed default\): --zeta must be in"),
    # values TrainingArguments itself accepts but training would reject or misuse
    ({"grid": {"learning_rate": [-1, 1e-5]}},
     r"grid \(point 1: learning_rate=-1, seed default\): --learning_rate must be >= 0"),
    ({"grid": {"per_device_train_batch_size": [8, 0]}},
     r"point 2: per_device_train_batch_size=0.*--per_device_train_batch_size must be >= 1"),
    ({"points": [{"num_train_epochs": -1}]},
     r"points\[0\] \(point 1: num_train_epochs=-1.*--num_train_epochs must be >= 0"),
    ({"grid": {"tuning": [-1, float("nan")]}}, "tuning must be finite, got nan"),
    ({"base": {"learning_rate": "fast"}}, "base: learning_rate must be a number, got 'fast'"),
    ({"grid": {"regularizer": ["istra"]}}, "unknown regularizer 'istra'"),
    ({"points": [{"num_train_epochs": "two"}]}, "num_train_epochs must be a number"),
    ({"base": {"use_cpu": "maybe"}}, "use_cpu must be true or false"),
    ({"grid": {"per_device_train_batch_size": [8, 2.5]}},
     "per_device_train_batch_size must be an integer, got 2.5"),
])
def test_bad_values_are_refused_before_any_run(tiny_model, glue, tmp_path, keys, message):
    spec = _spec(tiny_model, glue, tmp_path / "out", **keys)
    with pytest.raises(ValueError, match=message):
        expand(spec)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_dry_run_into_a_closed_pipe_ends_quietly(tiny_model, glue, tmp_path):
    """``isotropy sweep --dry-run | head``: the reader is gone before the plan is written;
    the command stops without a traceback or an "Exception ignored" line."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "isotropy.cli.main", "sweep", "--preset", "istar-grid",
         "--set", f"model={tiny_model}", "--set", f"data_dir={glue}", "--set", "task=sst2",
         "--output-root", str(out), "--dry-run"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the interpreter has even started
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=240) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert not out.exists()


def test_dry_run_refuses_a_bad_grid_value_naming_point_and_setting(tiny_model, glue, tmp_path,
                                                                    capsys):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({
        "output_root": str(tmp_path / "out"), "base": tiny_base(tiny_model, glue),
        "grid": {"learning_rate": [1e-5, -1]}}), encoding="utf-8")
    err = _usage_error([spec_file, "--dry-run"], capsys)
    assert "point 2: learning_rate=-1" in err and "--learning_rate must be >= 0, got -1" in err
    assert not (tmp_path / "out").exists()


def test_entropy_on_a_local_decoder_with_first_token_pooling_is_refused(glue, tmp_path):
    from transformers import GPT2Config

    gpt2 = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50).save_pretrained(gpt2)
    spec = spec_from_dict({"output_root": str(tmp_path / "out"),
                           "base": {"task": "sst2", "model": str(gpt2), "data_dir": str(glue),
                                    "regularizer": "entropy"},
                           "grid": {"pooling": ["mean", "cls"]}}, source="test spec")
    points = expand(spec)
    with pytest.raises(ValueError, match=r"point 2 .*decoder-only model.*--pooling mean"):
        check_inputs(points)
    check_inputs(points[:1])


def test_missing_model_and_data_are_found_before_any_run(tiny_model, glue, tmp_path):
    spec = _spec(tiny_model, glue, tmp_path, grid={"task": ["sst2", "rte"]})
    with pytest.raises(FileNotFoundError, match=r"point 2 \(rte-tiny-none-seed42\).*RTE"):
        check_inputs(expand(spec))
    spec = _spec(tiny_model, glue, tmp_path, grid={"model": [str(tmp_path / "nope")]})
    with pytest.raises(FileNotFoundError, match="model directory .*nope does not exist"):
        check_inputs(expand(spec))


def test_cli_bad_input_is_one_line_and_creates_nothing(tiny_model, glue, tmp_path, capsys,
                                                       monkeypatch):
    out = tmp_path / "out"
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"output_root": str(out), "base": {
        **tiny_base(tiny_model, glue), "learning_rat": 0.1}}), encoding="utf-8")
    assert "did you mean 'learning_rate'" in _usage_error([spec], capsys)
    assert "invalid choice: 'spark'" in _usage_error([spec, "--engine", "spark"], capsys)
    assert "does not exist" in _usage_error([tmp_path / "none.yaml"], capsys)
    assert "sweep file" in _usage_error([], capsys)
    assert "not both" in _usage_error([spec, "--preset", "istar-grid"], capsys)
    (tmp_path / "bad.yaml").write_text("base: [unclosed\n", encoding="utf-8")
    assert "is not valid YAML" in _usage_error([tmp_path / "bad.yaml"], capsys)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"output_root": str(out), "base": tiny_base(tiny_model,
                                                                                glue)}))
    assert "applies to --engine ray only" in _usage_error(
        [good, "--cpus-per-trial", "2"], capsys)
    assert "seeds must be in 0..4294967295" in _usage_error([good, "--seeds", "-1"], capsys)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert "the ray engine needs Ray" in _usage_error([good, "--engine", "ray"], capsys)
    assert not out.exists()


def test_exit_reason_names_the_signal():
    assert exit_reason(-9, "step 3\n\n") == (
        "the worker process was killed by SIGKILL (out of memory?); last output: step 3")
    assert exit_reason(1, "") == "the worker process exited with status 1 without a result"


def test_one_gpu_per_local_worker():
    with pytest.raises(ValueError, match="--workers 3 exceeds the 2 visible GPU"):
        LocalEngine(3, gpus=["0", "1"])
    engine = LocalEngine(2, gpus=["4", "6"])
    assert [engine._env(i)["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["4", "6"]
    assert LocalEngine(None, gpus=["0", "1"]).workers == 2
    cpu = LocalEngine(3, gpus=[], cpus=16)
    assert cpu.threads == 5 and cpu._env(0)["OMP_NUM_THREADS"] == "5"
    assert cpu._env(0).get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_workers_may_share_a_gpu_when_asked():
    shared = LocalEngine(5, gpus=["0", "1"], cpus=16, workers_per_gpu=3)
    assert [shared._env(i)["CUDA_VISIBLE_DEVICES"] for i in range(5)] == ["0", "1", "0", "1",
                                                                          "0"]
    assert shared.threads == 3 and "up to 3 per GPU (0, 1)" in shared.describe()
    with pytest.raises(ValueError, match="--workers 7 exceeds the 2 visible GPU.* 3"):
        LocalEngine(7, gpus=["0", "1"], workers_per_gpu=3)
    with pytest.raises(ValueError, match="workers-per-gpu must be an integer >= 1"):
        LocalEngine(1, gpus=["0"], workers_per_gpu=0)
    from isotropy.sweeps.driver import make_engine
    with pytest.raises(ValueError, match="applies to --engine local only"):
        make_engine("ray", workers_per_gpu=2)


def test_cell_summary_is_mean_and_sample_std_over_seeds(tiny_model, glue, tmp_path):
    points = expand(_spec(tiny_model, glue, tmp_path, grid={"regularizer": ["none", "cosreg"]},
                          seeds=[1, 2, 3]))
    values = {"none": [0.5, 0.75, 0.625], "cosreg": [0.25, 0.5]}  # cosreg seed 3 unfinished
    for p in points:
        reg = "none" if p.settings["regularizer"] == "none" else "cosreg"
        if p.seed <= len(values[reg]):
            p.run_dir.mkdir()
            (p.run_dir / "results.json").write_text(json.dumps({
                "main_metric": "accuracy", "final": {"eval_accuracy": values[reg][p.seed - 1]}}))
    rows = {r["cell"]: r for r in cell_summary(points)}
    none, cos = rows["sst2-tiny-none"], rows["sst2-tiny-cosreg_l1"]
    assert none["mean"] == pytest.approx(np.mean(values["none"]))
    assert none["std"] == pytest.approx(np.std(values["none"], ddof=1))
    assert (none["n"], none["seeds"], cos["n"], cos["seeds"]) == (3, 3, 2, 3)
    assert cos["std"] == pytest.approx(np.std(values["cosreg"], ddof=1))


@pytest.mark.slow
def test_dry_run_lists_the_points_and_creates_nothing(tiny_model, glue, tmp_path, capsys):
    out = tmp_path / "out"
    code, text, _ = _run_cli(["--preset", "istar-grid", "--set", f"model={tiny_model}",
                              "--set", f"data_dir={glue}", "--set", "task=sst2",
                              "--output-root", out, "--dry-run"], capsys)
    lines = text.splitlines()
    assert code == 0
    assert lines[0].startswith(f"165 point(s) (33 cell(s), 5 seed(s)) in {out}: 0 done")
    assert lines[1].split() == ["1", "pending", "sst2-tiny-none-seed1"]
    assert lines[3].split() == ["3", "pending", "sst2-tiny-cosreg_l-1-seed1"]
    assert lines[4].split() == ["4", "pending", "sst2-tiny-istar_l-5_z0.2-seed1"]
    assert len(lines) == 1 + 165
    assert not out.exists()
    code, text, _ = _run_cli(["--preset", "entropy-grid", "--show-spec"], capsys)
    assert code == 0 and yaml.safe_load(text)["seeds"] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_dry_run_with_exclude_lists_only_the_points_left(tiny_model, glue, tmp_path, capsys):
    out = tmp_path / "out"
    code, text, _ = _run_cli(["--preset", "istar-grid", "--set", f"model={tiny_model}",
                              "--set", f"data_dir={glue}", "--set", "task=sst2",
                              "--output-root", out, "--exclude", "sst2-tiny-none-seed1",
                              "sst2-tiny-cosreg_l-1-seed1", "--dry-run"], capsys)
    lines = text.splitlines()
    assert code == 0 and lines[0].startswith("163 point(s) (33 cell(s), 5 seed(s))")
    assert "sst2-tiny-none-seed1" not in text and "sst2-tiny-none-seed2" in text
    err = _usage_error(["--preset", "istar-grid", "--set", f"model={tiny_model}",
                        "--set", f"data_dir={glue}", "--set", "task=sst2",
                        "--output-root", out, "--exclude", "nope-seed1", "--dry-run"], capsys)
    assert "exclude names 1 run(s) the sweep does not have: nope-seed1" in err
    assert not out.exists()


# --------------------------------------------------------------------------- real runs


def _attempts(log: Path) -> int:
    return log.read_text(encoding="utf-8").count("\n=== ") if log.is_file() else 0


@pytest.mark.slow
def test_finished_points_are_skipped_and_interrupted_ones_resumed(tiny_model, glue, tmp_path,
                                                                   capsys):
    from isotropy.training.run import run_training
    from isotropy.training.settings import args_from_dict

    root = tmp_path / "out"
    spec = _spec(tiny_model, glue, root, seeds=[1, 2],
                 base={**tiny_base(tiny_model, glue), "save_strategy": "steps",
                       "save_steps": 1})
    first, second = expand(spec)
    # Point 1 was interrupted at step 2 of 2, after checkpoint-1 was saved.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="simulated crash"):
            run_training(*args_from_dict(first.settings), callbacks=[_Crash(2)],
                         echo=lambda s: None)
    assert [p.name for p in first.run_dir.glob("checkpoint-*")] == ["checkpoint-1"]
    status = SweepStatus(root)
    assert status.state(first) == ("interrupted", "resumes from checkpoint-1")
    assert status.state(second) == ("pending", "")

    outcome = run_sweep(spec, [first, second], make_engine("local", workers=2),
                        echo=lambda s: None)
    assert outcome.states == {first.name: "done", second.name: "done"}
    results = [json.loads((p.run_dir / "results.json").read_text()) for p in (first, second)]
    assert results[0]["train"]["resumed_from"].endswith("checkpoint-1")
    assert results[1]["train"]["resumed_from"] is None
    status = json.loads((root / "sweep.json").read_text())
    assert [(p["name"], p["state"], p["attempts"]) for p in status["points"]] == [
        (first.name, "done", 1), (second.name, "done", 1)]
    with (root / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    for row, res in zip(rows, results, strict=True):
        assert row["state"] == "done"
        assert math.isclose(float(row["value"]), res["final"]["eval_accuracy"])

    # Run again: nothing is re-run, nothing rewritten.
    stamps = [(p.run_dir / "results.json").stat().st_mtime_ns for p in (first, second)]
    logs = [root / "logs" / f"{p.name}.log" for p in (first, second)]
    assert [_attempts(x) for x in logs] == [1, 1]
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec.to_dict()), encoding="utf-8")
    code, text, _ = _run_cli([spec_file, "--workers", "2"], capsys)
    assert code == 0
    assert "2 done, 0 failed, 0 interrupted, 0 pending" in text and "start" not in text
    assert [(p.run_dir / "results.json").stat().st_mtime_ns for p in (first, second)] == stamps
    assert [_attempts(x) for x in logs] == [1, 1]
    code, text, _ = _run_cli([spec_file, "--dry-run"], capsys)
    assert [line.split()[1] for line in text.splitlines()[1:]] == ["done", "done"]


@pytest.mark.slow
def test_dry_run_during_a_sweep_shows_its_running_point(tiny_model, glue, tmp_path, capsys):
    from isotropy.sweeps.lock import _sweep_lock, sweep_in_progress

    root = tmp_path / "out"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({
        "output_root": str(root), "base": tiny_base(tiny_model, glue), "seeds": [1, 2]}),
        encoding="utf-8")
    first, _ = expand(load_spec(spec_file))
    status = SweepStatus(root)
    status.set_points(load_spec(spec_file), expand(load_spec(spec_file)))
    status.update(first.name, state="running")
    assert not sweep_in_progress(root)  # no lock file yet
    with _sweep_lock(root):  # what a running driver holds
        assert sweep_in_progress(root)
        code, text, _ = _run_cli([spec_file, "--dry-run"], capsys)
        assert code == 0
        lines = text.splitlines()
        assert lines[0] == f"a sweep is running in {root} now (this dry run changes nothing)"
        assert lines[1].endswith("0 done, 0 failed, 0 interrupted, 1 pending, 1 running")
        assert lines[2].split()[:3] == ["1", "running", first.name]
    assert not sweep_in_progress(root)  # released, and the dry run did not keep it
    code, text, _ = _run_cli([spec_file, "--dry-run"], capsys)  # the driver died
    assert text.splitlines()[1].split()[:3] == ["1", "interrupted", first.name]


@pytest.mark.slow
def test_a_driver_starting_during_a_dry_run_probe_waits_for_it(tmp_path, monkeypatch):
    import fcntl

    from isotropy.sweeps import lock

    root = tmp_path / "out"
    root.mkdir()
    fds_before = len(os.listdir("/proc/self/fd"))
    assert not lock.sweep_in_progress(root) and not (root / ".sweep.lock").exists()
    (root / ".sweep.lock").touch()
    probe = os.open(root / ".sweep.lock", os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a probe caught mid-way
    waits = []

    def probe_ends(seconds):
        waits.append(seconds)
        os.close(probe)

    monkeypatch.setattr(lock.time, "sleep", probe_ends)
    with lock._sweep_lock(root):
        assert waits == [0.1]
        assert lock.sweep_in_progress(root)
    assert not lock.sweep_in_progress(root)
    assert len(os.listdir("/proc/self/fd")) == fds_before

    holder = os.open(root / ".sweep.lock", os.O_RDONLY)  # a probe that does not end
    fcntl.flock(holder, fcntl.LOCK_SH | fcntl.LOCK_NB)
    monkeypatch.setattr(lock.time, "sleep", lambda seconds: waits.append(seconds))
    try:
        with pytest.raises(ValueError, match="another sweep is running"), \
                lock._sweep_lock(root):
            pass
    finally:
        os.close(holder)
    assert waits == [0.1] * 5


@pytest.mark.slow
def test_failed_point_is_reported_and_retried_on_request(tiny_model, glue, tmp_path, capsys):
    broken = write_sst2(tmp_path / "broken_glue", bad_label_in_train=True)
    root = tmp_path / "out"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({
        "output_root": str(root), "base": tiny_base(tiny_model, glue),
        "grid": {"data_dir": [str(glue), str(broken)]}}), encoding="utf-8")
    good, bad = expand(load_spec(spec_file))
    assert (good.name, bad.name) == ("sst2-tiny-none-data_dir=sweep_glue0-seed42",
                                     "sst2-tiny-none-data_dir=broken_glue-seed42")
    code, text, _ = _run_cli([spec_file, "--workers", "2"], capsys)
    assert code == 1
    assert f"done {good.name}" in text
    error_line = next(x for x in text.splitlines() if x.startswith(f"  FAILED {bad.name}"))
    assert "label 'x' is not one of ['0', '1']" in error_line
    assert (good.run_dir / "results.json").is_file()
    assert not (bad.run_dir / "results.json").exists()
    record = {p["name"]: p for p in json.loads((root / "sweep.json").read_text())["points"]}
    assert record[bad.name]["state"] == "failed"
    assert "label 'x'" in record[bad.name]["error"] and "\n" not in record[bad.name]["error"]
    bad_log = root / "logs" / f"{bad.name}.log"
    assert _attempts(bad_log) == 1

    # Without --retry-failed the failure is reported again, not retried.
    code, text, _ = _run_cli([spec_file, "--workers", "2"], capsys)
    assert code == 1 and "1 done, 1 failed" in text and "start" not in text
    assert "label 'x'" in next(x for x in text.splitlines() if "FAILED" in x)
    assert _attempts(bad_log) == 1
    code, text, _ = _run_cli([spec_file, "--dry-run"], capsys)
    assert "not retried without --retry-failed" in text

    write_sst2(broken)  # fixed
    code, text, _ = _run_cli([spec_file, "--workers", "2", "--retry-failed"], capsys)
    assert code == 0 and f"done {bad.name}" in text and f"start {good.name}" not in text
    assert _attempts(bad_log) == 2
    assert json.loads((root / "sweep.json").read_text())["points"][1]["state"] == "done"


def _scripted_runs(monkeypatch, failing: set[int]) -> list[int]:
    """The local engine's runs replaced by outcomes given by the point's seed: failed for
    the seeds in ``failing``, done otherwise; returns the seeds in the order they started."""
    order: list[int] = []

    def run_one(self, slot, point, root):
        order.append(point.seed)
        if point.seed in failing:
            return Outcome(ok=False, error=f"boom {point.seed}")
        return Outcome(ok=True, status="trained", main_metric="accuracy", value=0.5)

    monkeypatch.setattr(LocalEngine, "_run_one", run_one)
    return order


@pytest.mark.parametrize(("max_failures", "started"), [(None, [1, 2, 3, 4, 5]),
                                                       (3, [1, 2, 3, 4, 5]),
                                                       (2, [1, 2, 3]), (1, [1])])
def test_max_failures_stops_starting_points_and_leaves_the_rest_pending(
        tiny_model, glue, tmp_path, monkeypatch, max_failures, started):
    """Seeds 1 and 3 fail, one worker: the count of failures, not of points, decides; the
    points never started stay pending in sweep.json, and a second call runs them."""
    root = tmp_path / "out"
    spec = _spec(tiny_model, glue, root, seeds=[1, 2, 3, 4, 5])
    points = expand(spec)
    order = _scripted_runs(monkeypatch, failing={1, 3})
    lines: list[str] = []
    outcome = run_sweep(spec, points, LocalEngine(1, gpus=[]), max_failures=max_failures,
                        echo=lines.append)
    assert order == started
    expected = {1: "failed", 2: "done", 3: "failed", 4: "done", 5: "done"}
    assert outcome.states == {p.name: (expected[p.seed] if p.seed in started else "pending")
                              for p in points}
    assert outcome.not_started == [p.name for p in points if p.seed not in started]
    recorded = {q["name"]: q["state"] for q in json.loads((root / "sweep.json").read_text())
                ["points"]}
    assert recorded == outcome.states
    held = [x for x in lines if "--max-failures" in x]
    if len(started) == 5:
        assert not held
    else:
        assert held[0] == (f"{max_failures} point(s) failed (--max-failures {max_failures}): "
                           "no further point starts; the running ones finish")
        assert held[1] == (f"  {5 - len(started)} point(s) not started after --max-failures "
                           "was reached; the same command runs them")
        # The same call without the limit: the failed points are not retried, every other
        # one runs (the scripted runs write no results.json, so the done ones run again).
        order.clear()
        again = run_sweep(spec, points, LocalEngine(1, gpus=[]), echo=lines.append)
        assert order == [s for s in range(1, 6) if s not in {1, 3} & set(started)]
        assert again.not_started == [] and again.count("pending") == 0


def test_max_failures_keeps_an_unstarted_interrupted_point_resumable(tiny_model, glue,
                                                                   tmp_path, monkeypatch):
    """A point interrupted by an earlier call and never started by this one (the limit came
    first) stays interrupted, with its detail, for the next call to resume."""
    root = tmp_path / "out"
    spec = _spec(tiny_model, glue, root, seeds=[1, 2, 3])
    points = expand(spec)

    def interrupt_seed_3(self, slot, point, root):
        if point.seed == 3:
            return Outcome(ok=False, interrupted=True)
        return Outcome(ok=True, status="trained", main_metric="accuracy", value=0.5)

    monkeypatch.setattr(LocalEngine, "_run_one", interrupt_seed_3)
    run_sweep(spec, points, LocalEngine(1, gpus=[]), echo=lambda line: None)
    order = _scripted_runs(monkeypatch, failing={1})
    outcome = run_sweep(spec, points, LocalEngine(1, gpus=[]), max_failures=1,
                        echo=lambda line: None)
    assert order == [1]
    assert outcome.states[points[2].name] == "interrupted"
    assert outcome.not_started == [points[1].name, points[2].name]
    record = {q["name"]: q for q in json.loads((root / "sweep.json").read_text())["points"]}
    assert record[points[2].name]["state"] == "interrupted"
    assert record[points[2].name]["detail"] == "restarts (no checkpoint)"


def test_max_failures_lets_the_running_points_finish(tiny_model, glue, tmp_path, monkeypatch):
    """Two workers, both points running when the first fails: the other ends as it would
    have (done), and the third never starts."""
    import threading

    root = tmp_path / "out"
    spec = _spec(tiny_model, glue, root, seeds=[1, 2, 3])
    points = expand(spec)
    both_running = threading.Barrier(2, timeout=30)
    first_failed = threading.Event()

    def run_one(self, slot, point, root):
        if point.seed == 3:
            return Outcome(ok=True, status="trained", main_metric="accuracy", value=0.5)
        both_running.wait()
        if point.seed == 1:
            return Outcome(ok=False, error="boom")
        assert first_failed.wait(timeout=30)  # seed 2 ends after seed 1's failure counted
        return Outcome(ok=True, status="trained", main_metric="accuracy", value=0.5)

    monkeypatch.setattr(LocalEngine, "_run_one", run_one)

    def echo(line: str) -> None:
        if "--max-failures 1" in line:
            first_failed.set()

    outcome = run_sweep(spec, points, LocalEngine(2, gpus=[]), max_failures=1, echo=echo)
    assert [outcome.states[p.name] for p in points] == ["failed", "done", "pending"]
    assert outcome.not_started == [points[2].name]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_max_failures_must_be_a_positive_integer(tiny_model, glue, tmp_path, bad):
    spec = _spec(tiny_model, glue, tmp_path / "out")
    with pytest.raises(ValueError, match="--max-failures must be an integer >= 1"):
        run_sweep(spec, expand(spec), LocalEngine(1, gpus=[]), max_failures=bad)
    assert not (tmp_path / "out").exists()


def test_cli_max_failures_exits_1_and_names_what_did_not_start(tiny_model, glue, tmp_path,
                                                               capsys, monkeypatch):
    root = tmp_path / "out"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(tiny_model, glue, root, seeds=[1, 2, 3])
                                        .to_dict()))
    order = _scripted_runs(monkeypatch, failing={1})
    code, out, _ = _run_cli([spec_file, "--workers", "1", "--max-failures", "1"], capsys)
    assert code == 1 and order == [1]
    assert "1 point(s) failed (--max-failures 1): no further point starts" in out
    assert "  2 point(s) not started after --max-failures was reached" in out
    assert "0/3 point(s) done, 1 failed" in out


def test_cli_max_failures_is_refused_below_one(tiny_model, glue, tmp_path, capsys):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(tiny_model, glue, tmp_path / "out").to_dict()))
    err = _usage_error([spec_file, "--max-failures", "0"], capsys)
    assert "--max-failures" in err
    assert not (tmp_path / "out").exists()


def test_a_finished_run_with_other_settings_is_never_counted_or_overwritten(
        tiny_model, glue, tmp_path, capsys):
    root = tmp_path / "out"
    (point,) = expand(_spec(tiny_model, glue, root))
    point.run_dir.mkdir(parents=True)
    config = {"settings": {"isotropy": {"max_seq_length": 64}, "training": {}}}
    (point.run_dir / "config.json").write_text(json.dumps(config))
    (point.run_dir / "results.json").write_text("{}")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(tiny_model, glue, root).to_dict()))
    err = _usage_error([spec_file], capsys)
    assert "holds a finished run with other settings (setting max_seq_length was 64, now 12)" \
        in err
    assert (point.run_dir / "results.json").read_text() == "{}"


@pytest.mark.parametrize("case", ["point folder", "sweep.json", "results.csv"])
def test_a_root_or_point_folder_a_sweep_did_not_write_is_refused_and_kept(
        tiny_model, glue, tmp_path, capsys, case):
    """A point's folder holding someone's files with a results.json (it was counted done), a
    sweep.json that is not a sweep's (a traceback, then replaced) or a results.csv without a
    sweep.json (replaced at the end): one line before any run, and every file is kept."""
    root = tmp_path / "out"
    (point,) = expand(_spec(tiny_model, glue, root))
    if case == "point folder":
        point.run_dir.mkdir(parents=True)
        (point.run_dir / "config.json").write_text('{"model_type": "bert"}')
        (point.run_dir / "results.json").write_text('{"mine": 1}')
        message = "holds no run of isotropy"
    elif case == "sweep.json":
        root.mkdir()
        (root / "sweep.json").write_text("[1, 2]")
        message = "is not a sweep's status file"
    else:
        root.mkdir()
        (root / "results.csv").write_text("a,b\n1,2\n")
        message = "holds results.csv but no sweep.json"
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(tiny_model, glue, root).to_dict()))
    assert message in _usage_error([spec_file], capsys)
    assert message in _usage_error([spec_file, "--dry-run"], capsys)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_an_interrupted_sweep_stops_its_workers_and_records_the_point(tiny_model, glue,
                                                                       tmp_path):
    import signal
    import threading

    from isotropy.sweeps.lock import _sweep_lock

    spec = _spec(tiny_model, glue, tmp_path / "out")
    (point,) = expand(spec)
    engine = make_engine("local", workers=1)

    def ctrl_c_once_the_worker_runs() -> None:
        deadline = time.monotonic() + 60
        while not engine._procs and time.monotonic() < deadline:
            time.sleep(0.01)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def interrupt_soon(line: str) -> None:
        if " start " in line:  # Ctrl-C while the point's worker process runs
            threading.Thread(target=ctrl_c_once_the_worker_runs, daemon=True).start()

    # Ctrl-C raises KeyboardInterrupt whatever handler an earlier test or library left.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(spec, [point], engine, echo=interrupt_soon)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert engine._procs == {}  # no worker process left running
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())["points"][0]
    assert record["state"] == "interrupted"
    assert SweepStatus(tmp_path / "out").state(point)[0] == "interrupted"
    assert not (point.run_dir / "results.json").exists()
    # The lock was released; while another driver holds it, a sweep is refused.
    with _sweep_lock(tmp_path / "out"), pytest.raises(ValueError, match="another sweep is"):
        run_sweep(spec, [point], engine, echo=lambda s: None)


def test_the_sweeps_signal_handlers_stop_once_and_are_restored():
    import signal

    from isotropy.cli.sweep import _interrupt_on_signals

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), _interrupt_on_signals():
        signal.raise_signal(signal.SIGTERM)
    # (inside, after the first signal, both were ignored while the stop ran)
    assert {sig: signal.getsignal(sig) for sig in before} == before
    with _interrupt_on_signals():
        assert signal.getsignal(signal.SIGTERM) not in (before[signal.SIGTERM], signal.SIG_IGN)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # a second one: ignored
        signal.raise_signal(signal.SIGTERM)
    assert {sig: signal.getsignal(sig) for sig in before} == before


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_stops_a_background_sweep_as_ctrl_c_does(tiny_model, glue, tmp_path):
    """``nohup isotropy sweep ... &`` starts with SIGINT ignored; SIGTERM (plain ``kill``) or
    SIGINT must still stop it: the point recorded as interrupted, its worker gone, exit 130."""
    import signal

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({
        "output_root": str(tmp_path / "out"),
        "base": tiny_base(tiny_model, glue, num_train_epochs=2000)}))  # minutes, if not stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "isotropy.cli.main", "sweep", str(spec_file), "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # its lines arrive as printed
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as a background job
    try:
        for line in proc.stdout:  # the driver prints " start " once the worker process runs
            if " start " in line:
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the sweep and its workers, if left
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted; run the same command to resume" in err
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())["points"][0]
    assert record["state"] == "interrupted"
    assert not list((tmp_path / "out").glob("*/results.json"))


def test_example_spec_expands_to_its_stated_grid(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "sweep_istar_rte.yaml"
    points = expand(load_spec(example), output_root=tmp_path)
    assert len(points) == (1 + 1 + 3 * 2) * 3  # as its header says: 24 runs
    assert {(p.settings["tuning"], p.settings["zeta"]) for p in points
            if p.method == "istar"} == set(itertools.product([-3, -1, 1], [0.2, 0.8]))
    assert points[0].name == "rte-minilm-none-seed1" and points[8].seed == 2
    assert all(p.settings["learning_rate"] == 3e-5 for p in points)


@pytest.mark.parametrize(("where", "text"), [("base", "base:\n  learning_rate: .nan\n"),
                                             ("grid", "grid:\n  learning_rate: [1.0e-4, .nan]\n")],
                         ids=["base", "grid"])
def test_a_nan_in_a_spec_file_is_named_as_nan_not_as_null(tiny_model, glue, tmp_path, capsys,
                                                         where, text):
    """YAML's ``.nan`` read from a file, through the command line's overrides: the message
    says the value is NaN (it was once said to be missing)."""
    base = {k: v for k, v in tiny_base(tiny_model, glue).items() if k != "learning_rate"}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({"output_root": str(tmp_path / "out"), "base": base})
                         .replace("base:\n", "base:\n  learning_rate: .nan\n")
                         if where == "base" else
                         yaml.safe_dump({"output_root": str(tmp_path / "out"), "base": base})
                         + text, encoding="utf-8")
    assert text in spec_file.read_text(encoding="utf-8")
    err = _usage_error([spec_file, "--dry-run", "--seeds", "1"], capsys)
    assert f"{where}: learning_rate must be finite, got nan" in err, err
    assert "null" not in err
    assert not (tmp_path / "out").exists()
