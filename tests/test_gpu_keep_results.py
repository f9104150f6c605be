"""``benchmarks/gpu/keep_results.py``: what a GPU call brought back, kept in the form its readers
take (``docs/gpu-runs/<n>/``)."""

from __future__ import annotations

import gzip
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.test_gpu_command import _checkout, _run

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "keep_results.py"
HELD = ROOT / "docs" / "gpu-runs" / "7"  # kept by hand from run 7's gpu-results.tar.gz

if "gpu_phase" not in sys.modules:  # tests/test_gpu_phase.py loads it the same way
    _spec = importlib.util.spec_from_file_location(
        "gpu_phase", ROOT / "docs" / "results" / "gpu_phase.py")
    sys.modules["gpu_phase"] = importlib.util.module_from_spec(_spec)  # for its dataclasses
    _spec.loader.exec_module(sys.modules["gpu_phase"])
gpu_phase = sys.modules["gpu_phase"]


def _keep(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def _members(archive: Path) -> dict[str, bytes | None]:
    """Each member's name and bytes (a folder: None)."""
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None)
                for m in tar.getmembers()}


def _files(archive: Path) -> dict[str, bytes]:
    """Each file member's name and bytes (the hand-kept archives list folders or not)."""
    return {name: data for name, data in _members(archive).items() if data is not None}


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _as_run_sh_packs(held: Path, source: Path) -> None:
    """``source`` as run.sh --pack leaves it for the runs of ``held``: summary.txt beside
    gpu-results.tar.gz, whose runs/<run>/ hold config.json and the other files gzipped, with
    the logs, the report's folder and pytest.xml beside them."""
    source.mkdir()
    (source / "summary.txt").write_bytes((held / "summary.txt").read_bytes())
    with tarfile.open(source / "gpu-results.tar.gz", "w:gz") as tar:
        for name in ("env.txt", "gpu-utilization.csv", "report.txt", "runs.txt"):
            _add(tar, name, (held / name).read_bytes())
        _add(tar, "runs/sweep.json", (held / "sweep.json").read_bytes())
        _add(tar, "runs-report/report.md", (held / "report.md").read_bytes())
        _add(tar, "runs-report/table1.csv", b"left behind\n")
        _add(tar, "runs-logs/x.log", b"left behind\n")
        _add(tar, "pytest.xml", b"<testsuites/>\n")
        for archive in sorted(held.glob("runs-*.tar.xz")):
            for name, data in _members(archive).items():
                if data is None:
                    continue
                if not name.endswith("/config.json"):
                    data, name = gzip.compress(data), name + ".gz"
                _add(tar, name, data)


def test_keep_results_gives_back_the_folder_kept_by_hand(tmp_path):
    """Run 7's pack, rebuilt from what was kept of it by hand, is kept as that folder: the same
    files, and in each task's archive the same runs' files, byte for byte."""
    source = tmp_path / "from"
    _as_run_sh_packs(HELD, source)
    proc = _keep(source, tmp_path / "dest")
    assert proc.returncode == 0, proc.stderr
    kept = tmp_path / "dest" / "1"
    assert proc.stdout.startswith(f"{kept}: 35 runs (cola 7, mrpc 10, sst2 7, stsb 11); ")
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in HELD.iterdir())
    for path in HELD.iterdir():
        if path.name.endswith(".tar.xz"):
            assert _files(kept / path.name) == _files(path), path.name
        else:
            assert (kept / path.name).read_bytes() == path.read_bytes(), path.name
    # gpu_phase reads the same runs from it
    ours = gpu_phase.unpack(tmp_path / "dest", tmp_path / "a")
    held = [(n, p) for n, p in gpu_phase.unpack(HELD.parent, tmp_path / "b") if n == 7]
    assert [p.name for _, p in ours] == [p.name for _, p in held] and len(ours) == 35
    # the same runs give the same bytes; the next call gets the next number
    assert _keep(source, tmp_path / "dest").returncode == 0
    for archive in kept.glob("runs-*.tar.xz"):
        assert archive.read_bytes() == (tmp_path / "dest" / "2" / archive.name).read_bytes()


def test_keep_results_keeps_what_run_sh_packed(tmp_path):
    """run.sh's own pack (a stand-in interpreter's one run) is kept: the run uncompressed
    under runs/<run>/, in the archive of its task, named as --archived looks for it."""
    _checkout(tmp_path)
    (tmp_path / "model").mkdir()
    proc = _run(tmp_path, "--cpu", "--out", "out", "--steps", "runs", "--pack",
                FAKE_MODEL=str(tmp_path / "model"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    keep = _keep(tmp_path / "caller" / "out", tmp_path / "dest")
    assert keep.returncode == 0, keep.stderr
    kept = tmp_path / "dest" / "1"
    assert sorted(p.name for p in kept.iterdir()) == [
        "env.txt", "report.txt", "runs-mrpc.tar.xz", "runs.txt", "summary.txt", "sweep.json"]
    assert _members(kept / "runs-mrpc.tar.xz") == {
        "runs": None, "runs/r1": None, "runs/r1/config.json": b'{"task": {"name": "mrpc"}}\n',
        "runs/r1/results.json": b"{}\n"}


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("fault", "message"), [
    ("escape", "refused member '../escape.txt'"),
    ("link", "refused member 'runs/link'"),
    ("no results", "runs/r1: no results.json"),
    ("no task", "runs/r1/config.json names no task"),
    ("bad task", "the task ('../x') or the run's name is not a plain name"),
    ("no summary", "no summary.txt (not what run.sh writes)"),
    ("number taken", "dest/1 exists: nothing was written"),
    ("fewer runs", "1 runs came back, summary.txt says 2 were copied"),
    ("damaged", "runs/r1/results.json.gz: damaged"),
    ("a kept folder", "0 runs came back, summary.txt says 35 were copied"),
])
def test_keep_results_refuses_and_writes_nothing(tmp_path, fault, message):
    source = tmp_path / "from"
    if fault == "a kept folder":  # a folder kept already is not a call's return
        shutil.copytree(HELD, source)
    else:
        source.mkdir()
    if fault not in ("no summary", "a kept folder"):
        copied = "2" if fault == "fewer runs" else "1"
        (source / "summary.txt").write_text(f"x runs: {copied} finished runs copied\n")
    config = {"no task": b"{}", "bad task": b'{"task": {"name": "../x"}}'}.get(
        fault, b'{"task": {"name": "mrpc"}}')
    if fault != "a kept folder":
        with tarfile.open(source / "gpu-results.tar.gz", "w:gz") as tar:
            _add(tar, "env.txt", b"env\n")
            _add(tar, "runs/r1/config.json", config)
            if fault != "no results":
                _add(tar, "runs/r1/results.json.gz",
                     gzip.compress(b"{}")[:-6] if fault == "damaged" else gzip.compress(b"{}"))
            if fault == "escape":
                _add(tar, "../escape.txt", b"x")
            if fault == "link":
                info = tarfile.TarInfo("runs/link")
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
    dest = tmp_path / "dest"
    (dest / "1").mkdir(parents=True)
    (dest / "1" / "mine.txt").write_text("not ours\n")
    before = _tree(tmp_path)
    proc = _keep(source, dest, *(["--number", "1"] if fault == "number taken" else []))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("keep_results: ") and proc.stderr.count("\n") == 1
    assert message in proc.stderr, proc.stderr
    assert _tree(tmp_path) == before


def test_keep_results_can_leave_out_a_run_that_came_back_incomplete(tmp_path):
    """A run whose config.json could not be copied (run.sh counts it, says so) refuses the
    call; --skip-incomplete keeps the others and names it."""
    source = tmp_path / "from"
    source.mkdir()
    (source / "summary.txt").write_text("x runs: 2 finished runs copied\n")
    with tarfile.open(source / "gpu-results.tar.gz", "w:gz") as tar:
        _add(tar, "env.txt", b"env\n")
        for run in ("r1", "r2"):
            if run == "r1":
                _add(tar, f"runs/{run}/config.json", b'{"task": {"name": "rte"}}')
            _add(tar, f"runs/{run}/results.json.gz", gzip.compress(b"{}"))
    refused = _keep(source, tmp_path / "dest")
    assert refused.returncode == 1 and "runs/r2: no config.json" in refused.stderr
    assert not (tmp_path / "dest").exists()
    kept = _keep(source, tmp_path / "dest", "--skip-incomplete")
    assert kept.returncode == 0, kept.stderr
    assert "runs/r2 left out: no config.json" in kept.stderr
    assert _files(tmp_path / "dest" / "1" / "runs-rte.tar.xz") == {
        "runs/r1/config.json": b'{"task": {"name": "rte"}}', "runs/r1/results.json": b"{}"}


def test_keep_results_deletes_only_the_leftovers_it_could_have_written(tmp_path):
    """A ``.keep-<n>.*`` folder left by a killed call goes where it holds only the file names
    keep_results writes; one holding anything else stays, byte for byte, and is named."""
    source = tmp_path / "from"
    source.mkdir()
    (source / "summary.txt").write_text("x runs: 1 finished runs copied\n")
    with tarfile.open(source / "gpu-results.tar.gz", "w:gz") as tar:
        _add(tar, "env.txt", b"env\n")
        _add(tar, "runs/r1/config.json", b'{"task": {"name": "rte"}}')
        _add(tar, "runs/r1/results.json.gz", gzip.compress(b"{}"))
    dest = tmp_path / "dest"
    ours = dest / ".keep-1.ab_c9"
    ours.mkdir(parents=True)
    for name in ("summary.txt", "runs-mrpc.tar.xz", "sweep.json"):
        (ours / name).write_bytes(b"half written")
    foreign = {".keep-2.x1": {"mine.txt": b"not ours\n"},  # a name keep_results never writes
               ".keep-3.y2": {"summary.txt": b"s", "runs/x": b"a folder inside"},
               ".keep-x.z3": {"summary.txt": b"not mkdtemp's name"}}
    for folder, files in foreign.items():
        for name, data in files.items():
            (dest / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / folder / name).write_bytes(data)
    before = {name: _tree(dest / name) for name in foreign}
    proc = _keep(source, dest)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in dest.iterdir()) == [".keep-2.x1", ".keep-3.y2", ".keep-x.z3",
                                                       "1"]
    assert {name: _tree(dest / name) for name in foreign} == before
    assert proc.stderr.splitlines() == [
        f"keep_results: {dest / n} is not a folder this script left: left as it is"
        for n in (".keep-2.x1", ".keep-3.y2")]
