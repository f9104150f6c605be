"""The tracked tree stays small enough to travel to a GPU machine with the model bundle.

A GPU machine receives the working tree (tracked and untracked files) plus carried paths, 64 MiB
in all per command. The carried bundle (``benchmarks/gpu/make_bundle.py``: MiniLM in fp16 and
the small GLUE tasks, xz-compressed) measures 34.6 MiB (``docs/gpu.md``), so the tracked
tree is held to :data:`TRACKED_BUDGET_MIB`: 34.6 + 28 = 62.6 MiB, 1.4 MiB to spare for
untracked files. (27.2 MiB with the review phase's B3 runs and GPU runs 7-8; the runs still
to come need room made first, ``docs/gpu.md``.) Archived runs keep their large files gzip-compressed
(``docs/results/README.md``); GPU runs are kept as one ``.tar.xz`` per task
(``docs/gpu-runs/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACKED_BUDGET_MIB = 28.0
LARGEST_FILE_MIB = 1.0


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


def test_no_large_tracked_file() -> None:
    big = {n: s for n, s in _tracked_sizes().items() if s > LARGEST_FILE_MIB * 2**20}
    assert not big, f"tracked files over {LARGEST_FILE_MIB} MiB: {big}"
