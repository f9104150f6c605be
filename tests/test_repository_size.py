"""The tracked tree stays small enough to travel to a GPU machine with the model bundle.

A GPU machine receives the working tree (tracked and untracked files) plus carried paths, 64
MiB in all per command. The carried bundle (``benchmarks/gpu/make_bundle.py``: MiniLM in fp16
and the small GLUE tasks, xz-compressed) measures 34.6 MiB (``docs/gpu.md``), so the tree that
travels is held to :data:`TRACKED_BUDGET_MIB`: 34.6 + 28 = 62.6 MiB, 1.4 MiB to spare for
untracked files. The CPU runs (``docs/results/runs/``, one ``.tar.xz`` per sweep,
``docs/results/README.md``) do not travel: no GPU command reads them, and
``benchmarks/gpu/set_aside.sh out`` takes them out of the working tree for a GPU window. They
are held to :data:`CPU_RUNS_BUDGET_MIB` of their own (16.5 MiB on 2026-11-30, with the
confirmatory sweeps' first runs; a 10-epoch CoLA run of the entropy sweep packs to about 0.57
MiB, so its 30 runs take about 17). The GPU runs travel (``run.sh --archived docs/gpu-runs``
reads them), one archive per task (``docs/gpu-runs/``). No tracked file may pass
:data:`LARGEST_FILE_MIB` (a checkpoint or weights committed by mistake), except a packed sweep
of ``docs/results/runs/`` (or a packed run of ``.pending/<sweep>/``, a sweep still running)
that holds only the small files of its runs (:data:`RUN_FILES`), none of them over
:data:`RUN_FILE_MIB` (a 10-epoch CoLA run, evaluated every 20 steps, writes 1.9 MiB of
measurements).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from isotropy.reporting.packed import PACKED_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
TRACKED_BUDGET_MIB = 28.0  # the tree that travels: tracked files outside PACKED_RUNS
CPU_RUNS_BUDGET_MIB = 40.0  # PACKED_RUNS, which benchmarks/gpu/set_aside.sh keeps home
LARGEST_FILE_MIB = 1.0
RUN_FILE_MIB = 4.0  # the largest small file of a run inside a packed sweep
PACKED_RUNS = "docs/results/runs/"
RUN_FILES = {"config.json", "results.json", "metrics.jsonl", "measurements.jsonl",
             "eval_predictions.csv"}  # a run's files in a packed sweep (docs/results/sync.sh)


def _tracked_sizes() -> dict[str, int]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked tree cannot be listed")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    sizes = {}
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        if path.is_file():  # a tracked file deleted in the work tree does not travel
            sizes[name] = os.path.getsize(path)
    return sizes


def test_tracked_tree_within_budget() -> None:
    everything = _tracked_sizes()
    sizes = {n: s for n, s in everything.items() if not n.startswith(PACKED_RUNS)}
    total = sum(sizes.values()) / 2**20
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= TRACKED_BUDGET_MIB, (
        f"the tree a GPU command carries is {total:.1f} MiB, over its {TRACKED_BUDGET_MIB} "
        f"MiB budget (largest: {largest}); compress archived runs or move data out")
    runs = (sum(everything.values()) - sum(sizes.values())) / 2**20
    assert runs <= CPU_RUNS_BUDGET_MIB, (
        f"the CPU runs ({PACKED_RUNS}) are {runs:.1f} MiB, over their {CPU_RUNS_BUDGET_MIB} "
        "MiB budget")


def test_the_cpu_runs_are_set_aside_for_a_gpu_window_and_back(tmp_path) -> None:
    """``set_aside.sh out`` removes exactly the committed files of ``docs/results/runs/``
    (git keeps them as unchanged: ``git add -A`` records no deletion), refuses while anything
    there is not committed, and ``back`` restores every byte, refusing while a set-aside file
    has been written again (it would overwrite it)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    script = repo / "benchmarks" / "gpu" / "set_aside.sh"
    script.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "benchmarks" / "gpu" / "set_aside.sh", script)
    runs = repo / PACKED_RUNS
    (runs / ".pending").mkdir(parents=True)
    files = {runs / "a.tar.xz": b"a" * 100, runs / ".pending" / "b.tar.xz": b"b" * 50,
             repo / "kept.txt": b"code"}
    for path, data in files.items():
        path.write_bytes(data)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                              text=True).stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "runs")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), *args], cwd=repo, capture_output=True,
                              text=True)

    (runs / "notes.txt").write_text("not ours to delete")
    refused = run("out")
    assert refused.returncode == 1 and "notes.txt" in refused.stderr
    assert all(p.read_bytes() == d for p, d in files.items())
    (runs / "notes.txt").unlink()
    done = run("out")
    assert done.returncode == 0, done.stderr
    assert "set aside 2 committed files" in done.stdout
    assert not runs.exists() and (repo / "kept.txt").read_bytes() == b"code"
    git("add", "-A")
    assert git("status", "--porcelain") == ""  # no deletion recorded
    (runs / ".pending").mkdir(parents=True)
    (runs / ".pending" / "b.tar.xz").write_bytes(b"written in the window")  # sync.sh, say
    (runs / "new.tar.xz").write_bytes(b"new")  # untracked: never touched
    refused = run("back")
    assert refused.returncode == 1 and ".pending/b.tar.xz" in refused.stderr, refused.stderr
    assert (runs / ".pending" / "b.tar.xz").read_bytes() == b"written in the window"
    assert not (runs / "a.tar.xz").exists() and "S " in git("ls-files", "-v")  # nothing done
    (runs / ".pending" / "b.tar.xz").unlink()
    (runs / ".pending").rmdir()
    (runs / ".pending").write_text("a file where a set-aside folder was")
    refused = run("back")
    assert refused.returncode == 1 and ".pending" in refused.stderr, refused.stderr
    assert (runs / ".pending").read_text() == "a file where a set-aside folder was"
    (runs / ".pending").unlink()
    assert run("back").returncode == 0
    assert (runs / "new.tar.xz").read_bytes() == b"new"
    (runs / "new.tar.xz").unlink()
    assert all(p.read_bytes() == d for p, d in files.items())
    assert git("status", "--porcelain") == "" and "S " not in git("ls-files", "-v")
    assert run("sideways").returncode == 2


def _packed_sweep_problem(name: str) -> str | None:
    """Why tracked archive ``name`` is not a packed sweep of small run files, or one packed
    run of a sweep still running (``.pending/<sweep>/<run>.tar.xz``) (None if it is)."""
    top = name.rsplit("/", 1)[1][:-len(PACKED_SUFFIX)]
    one_run = name.count("/") == PACKED_RUNS.count("/") + 2  # under .pending/<sweep>/
    with tarfile.open(ROOT / name, "r:xz") as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if m.isdir() and parts[0] == top and len(parts) <= (1 if one_run else 2):
                continue
            if one_run:
                allowed = m.isfile() and len(parts) == 2 and parts[0] == top \
                    and parts[1] in RUN_FILES
            else:
                allowed = (parts[0] == top and m.isfile()
                           and (parts[1:] in (["sweep.json"], ["results.csv"])
                                or (len(parts) == 3 and parts[2] in RUN_FILES)))
            if not allowed:
                return f"holds {m.name}"
            if m.size > RUN_FILE_MIB * 2**20:
                return f"holds {m.name} of {m.size / 2**20:.1f} MiB"
    return None


def test_no_large_tracked_file() -> None:
    big = {n: s for n, s in _tracked_sizes().items() if s > LARGEST_FILE_MIB * 2**20}
    pending = PACKED_RUNS + ".pending/"
    packed = {n for n in big if n.endswith(PACKED_SUFFIX) and (
        n.rsplit("/", 1)[0] + "/" in (PACKED_RUNS, pending)
        or (n.startswith(pending) and n.count("/") == PACKED_RUNS.count("/") + 2))}
    problems = {n: _packed_sweep_problem(n) for n in sorted(packed)}
    assert not {n: p for n, p in problems.items() if p}, problems
    others = {n: s for n, s in big.items() if n not in packed}
    assert not others, f"tracked files over {LARGEST_FILE_MIB} MiB: {others}"
