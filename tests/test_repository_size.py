"""The tracked tree stays small enough to travel to a GPU machine with the model bundle.

A GPU machine receives the working tree (tracked and untracked files) plus carried paths, 64 MiB
in all per command. The carried bundle (``benchmarks/gpu/make_bundle.py``: MiniLM in fp16 and
the small GLUE tasks, xz-compressed) measures 34.6 MiB (``docs/gpu.md``), so the tracked
tree is held to :data:`TRACKED_BUDGET_MIB`: 34.6 + 28 = 62.6 MiB, 1.4 MiB to spare for
untracked files. (22.9 MiB once the CPU runs were packed; ``docs/gpu.md``.) The CPU runs are
kept as one ``.tar.xz`` per sweep (``docs/results/README.md``), the GPU runs as one per task
(``docs/gpu-runs/``). No tracked file may pass :data:`LARGEST_FILE_MIB` (a checkpoint or
weights committed by mistake), except a packed sweep of ``docs/results/runs/`` (or of its
``.pending/``, a sweep still running) that holds
only the small files of its runs (:data:`RUN_FILES`), none of them over that size.
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
TRACKED_BUDGET_MIB = 28.0
LARGEST_FILE_MIB = 1.0
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
    sizes = _tracked_sizes()
    total = sum(sizes.values()) / 2**20
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= TRACKED_BUDGET_MIB, (
        f"the tracked tree is {total:.1f} MiB, over its {TRACKED_BUDGET_MIB} MiB budget "
        f"(largest: {largest}); compress archived runs (docs/results/sync.sh) or move data out")


def _packed_sweep_problem(name: str) -> str | None:
    """Why tracked archive ``name`` is not a packed sweep of small run files (None if it is)."""
    sweep = name.rsplit("/", 1)[1][:-len(PACKED_SUFFIX)]
    with tarfile.open(ROOT / name, "r:xz") as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if m.isdir() and parts[0] == sweep and len(parts) <= 2:
                continue
            allowed = (parts[0] == sweep and m.isfile()
                       and (parts[1:] in (["sweep.json"], ["results.csv"])
                            or (len(parts) == 3 and parts[2] in RUN_FILES)))
            if not allowed:
                return f"holds {m.name}"
            if m.size > LARGEST_FILE_MIB * 2**20:
                return f"holds {m.name} of {m.size / 2**20:.1f} MiB"
    return None


def test_no_large_tracked_file() -> None:
    big = {n: s for n, s in _tracked_sizes().items() if s > LARGEST_FILE_MIB * 2**20}
    packed = {n for n in big if n.endswith(PACKED_SUFFIX) and n.rsplit("/", 1)[0] + "/" in
              (PACKED_RUNS, PACKED_RUNS + ".pending/")}
    problems = {n: _packed_sweep_problem(n) for n in sorted(packed)}
    assert not {n: p for n, p in problems.items() if p}, problems
    others = {n: s for n, s in big.items() if n not in packed}
    assert not others, f"tracked files over {LARGEST_FILE_MIB} MiB: {others}"
