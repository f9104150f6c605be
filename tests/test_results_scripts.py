"""``docs/results/restore.sh`` and ``sync.sh``: the committed runs go back under ``$RUNS`` on a
new machine and come back out byte for byte, and what ``$RUNS`` already holds is kept."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "docs" / "results"


def _committed(here: Path) -> Path:
    """A copy of both scripts beside a committed-style sweep of two runs."""
    for name in ("restore.sh", "sync.sh"):
        shutil.copy(SCRIPTS / name, here / name)
    sweep = here / "runs" / "dose"
    for i, value in enumerate((0.5, 0.75)):
        run = sweep / f"sst2-seed{i}"
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"git_commit": "1a94adc3" + "0" * 32}))
        for name, text in (("results.json", json.dumps({"final": {"eval_accuracy": value}})),
                           ("metrics.jsonl", '{"step": 1}\n')):
            (run / f"{name}.gz").write_bytes(gzip.compress(text.encode(), 9, mtime=0))
    (sweep / "sweep.json").write_text('{"points": []}')
    return sweep


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("gzip") is None,
                    reason="needs bash and gzip")
def test_restore_then_sync_gives_the_committed_bytes_back(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    here.mkdir()
    sweep = _committed(here)
    before = {p.relative_to(sweep): p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    # a run already there (an interrupted one with its checkpoint) is left as it is
    kept = runs / "dose" / "sst2-seed1"
    (kept / "checkpoint-10").mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    out = subprocess.run(["bash", str(here / "restore.sh")], env={"RUNS": str(runs),
                         "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
    assert "dose: 1 run(s) restored" in out.stdout and "commit(s): 1a94adc" in out.stdout
    restored = runs / "dose" / "sst2-seed0"
    assert json.loads((restored / "results.json").read_text()) == {
        "final": {"eval_accuracy": 0.5}}
    assert not (kept / "results.json").exists() and (kept / "checkpoint-10").is_dir()
    assert not list(runs.rglob("*.restoring"))
    # back out: sync.sh writes what was committed, byte for byte
    shutil.rmtree(kept)
    subprocess.run(["bash", str(here / "restore.sh")], env={"RUNS": str(runs),
                   "PATH": "/usr/bin:/bin"}, capture_output=True, check=True)
    shutil.rmtree(here / "runs")
    subprocess.run(["bash", str(here / "sync.sh")], env={"RUNS": str(runs),
                   "PATH": "/usr/bin:/bin"}, capture_output=True, check=True)
    after = {p.relative_to(sweep): p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    assert after == before
