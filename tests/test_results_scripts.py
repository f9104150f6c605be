"""``docs/results/restore.sh`` and ``sync.sh``: the committed runs (one ``<sweep>.tar.xz`` per
sweep) go back under ``$RUNS`` on a new machine and come back out with the same contents, an
unchanged sweep's archive is left byte for byte, what ``$RUNS`` already holds is kept, and a
sweep committed in the earlier layout (a folder of ``name.gz`` files) is packed in its place."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from isotropy.reporting.discovery import expand_inputs
from isotropy.reporting.packed import real_path
from isotropy.reporting.runs import load_run

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "docs" / "results"
ENV_PATH = "/usr/bin:/bin"


def _gnu_tar() -> bool:
    tar = shutil.which("tar", path=ENV_PATH)
    return tar is not None and "GNU tar" in subprocess.run(
        [tar, "--version"], capture_output=True, text=True).stdout


pytestmark = pytest.mark.skipif(
    any(shutil.which(t, path=ENV_PATH) is None for t in ("bash", "gzip", "xz", "cmp"))
    or not _gnu_tar(), reason="needs bash, gzip, GNU tar, xz and cmp")

def _config(run: str) -> bytes:
    """A run's ``config.json`` as isotropy writes it, cut to what the scripts read."""
    return json.dumps({"settings": {"isotropy": {"task": "sst2"}, "training": {
        "output_dir": f"/work/verdict-runs/dose/{run}"}},
        "git_commit": "1a94adc3" + "0" * 32}).encode()


FILES = {  # the committed sweep, as name -> bytes
    "dose/sweep.json": b'{"points": []}',  # an invocation with every point done
    **{f"dose/sst2-seed{i}/{name}": text for i, value in enumerate((0.5, 0.75))
       for name, text in (
           ("config.json", _config(f"sst2-seed{i}")),
           ("results.json", json.dumps({"final": {"eval_accuracy": value}}).encode()),
           ("metrics.jsonl", b'{"step": 1}\n'))},
}


def _members(archive: Path) -> dict[str, bytes]:
    """The plain files of a ``.tar.xz`` as name -> bytes (read with Python, not the scripts)."""
    with tarfile.open(archive, "r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _scripts(here: Path) -> None:
    here.mkdir(parents=True, exist_ok=True)
    for name in ("restore.sh", "sync.sh"):
        shutil.copy(SCRIPTS / name, here / name)


def _committed(here: Path) -> Path:
    """Both scripts beside a packed sweep of two runs (written with Python's tarfile)."""
    _scripts(here)
    (here / "runs").mkdir()
    archive = here / "runs" / "dose.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        for name, data in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def _bash(script: Path, runs: Path) -> str:
    return subprocess.run(["bash", str(script)], env={"RUNS": str(runs), "PATH": ENV_PATH},
                          capture_output=True, text=True, check=True).stdout


def test_restore_then_sync_gives_the_committed_runs_back(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    # a run already there (an interrupted one with its checkpoint) is left as it is
    kept = runs / "dose" / "sst2-seed1"
    (kept / "checkpoint-10").mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    out = _bash(here / "restore.sh", runs)
    assert "dose: 1 run(s) restored" in out and "commit(s): 1a94adc" in out
    restored = runs / "dose" / "sst2-seed0"
    assert json.loads((restored / "results.json").read_text()) == {
        "final": {"eval_accuracy": 0.5}}
    assert not (kept / "results.json").exists() and (kept / "checkpoint-10").is_dir()
    assert not list(runs.rglob("*.restoring*"))
    # back out: sync.sh packs the same files again
    shutil.rmtree(kept)
    _bash(here / "restore.sh", runs)
    archive.unlink()
    assert "synced 2 finished runs" in _bash(here / "sync.sh", runs)
    assert _members(archive) == FILES
    # nothing new: the archive is not rewritten; rewritten, it has the same bytes
    packed, stamp = archive.read_bytes(), archive.stat().st_mtime_ns
    _bash(here / "sync.sh", runs)
    assert archive.stat().st_mtime_ns == stamp and archive.read_bytes() == packed
    archive.unlink()
    _bash(here / "sync.sh", runs)
    assert archive.read_bytes() == packed


def _sweep_json(states: dict[str, str]) -> bytes:
    return json.dumps({"points": [{"name": n, "state": st} for n, st in states.items()]}).encode()


def test_a_running_sweeps_runs_wait_in_pending_until_it_is_complete(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)  # seeds 0-1 back under RUNS, as on a machine that goes on
    running_json = _sweep_json({"sst2-seed2": "done", "sst2-seed3": "running"})
    (runs / "dose" / "sweep.json").write_bytes(running_json)
    done, running = runs / "dose" / "sst2-seed2", runs / "dose" / "sst2-seed3"
    for run in (done, running):
        (run / "checkpoint-5").mkdir(parents=True)
        (run / "config.json").write_bytes(_config(run.name))
    (done / "results.json").write_text('{"final": {}}')
    (done / "checkpoint-5.bak").mkdir()  # not the run's: a user's copy, and a link
    (done / "checkpoint-5.bak" / "notes.txt").write_text("mine")
    (done / "model").symlink_to(done / "checkpoint-5.bak")
    out = _bash(here / "sync.sh", runs)
    assert (done / "checkpoint-5.bak" / "notes.txt").read_text() == "mine"
    assert (done / "model").is_symlink()
    assert "synced 2 finished runs" in out and "1 more of sweeps still running" in out
    pending = here / "runs" / ".pending" / "dose"
    assert _members(archive) == FILES  # the report's runs do not change
    assert sorted(p.name for p in pending.iterdir()) == ["sst2-seed2.tar.xz", "sweep.json"]
    assert (pending / "sweep.json").read_bytes() == running_json
    one = pending / "sst2-seed2.tar.xz"
    assert _members(one) == {"sst2-seed2/config.json": _config("sst2-seed2"),
                             "sst2-seed2/results.json": b'{"final": {}}'}
    # the next run to finish leaves the earlier run's archive as it is (written once)
    stamp, packed = one.stat().st_mtime_ns, one.read_bytes()
    later = runs / "dose" / "sst2-seed4"
    later.mkdir()
    (later / "config.json").write_bytes(_config(later.name))
    (later / "results.json").write_text('{"final": {"y": 2}}')
    later_json = _sweep_json({"sst2-seed2": "done", "sst2-seed3": "running",
                              "sst2-seed4": "done"})
    (runs / "dose" / "sweep.json").write_bytes(later_json)
    assert "2 more of sweeps still running" in _bash(here / "sync.sh", runs)
    assert one.stat().st_mtime_ns == stamp and one.read_bytes() == packed
    assert (pending / "sweep.json").read_bytes() == later_json
    # read as the folder sst2-seed4/
    assert json.loads(real_path(pending / "sst2-seed4" / "results.json").read_text()) == {
        "final": {"y": 2}}
    assert not (done / "checkpoint-5").exists() and (running / "checkpoint-5").is_dir()
    assert [p.name for p in expand_inputs([str(here / "runs")])] == ["sst2-seed0",
                                                                     "sst2-seed1"]
    # a new machine gets all three finished runs back, and the running sweep's sweep.json
    fresh = tmp_path / "fresh-runs"
    out = _bash(here / "restore.sh", fresh)
    assert "dose (still running): 2 run(s) restored" in out and "dose: 2 run(s)" in out
    assert (fresh / "dose" / "sweep.json").read_bytes() == later_json
    assert sorted(p.name for p in (fresh / "dose").iterdir() if p.is_dir()) == [
        "sst2-seed0", "sst2-seed1", "sst2-seed2", "sst2-seed4"]
    # once every point is done, the pending runs join the others
    (running / "results.json").write_text('{"final": {"x": 1}}')
    done_json = _sweep_json({"sst2-seed2": "done", "sst2-seed3": "done", "sst2-seed4": "done"})
    (runs / "dose" / "sweep.json").write_bytes(done_json)
    _bash(here / "sync.sh", runs)
    assert not pending.exists() and not (here / "runs" / ".pending").exists()
    assert _members(archive) == {**FILES, "dose/sweep.json": done_json,
                                 "dose/sst2-seed2/config.json": _config("sst2-seed2"),
                                 "dose/sst2-seed2/results.json": b'{"final": {}}',
                                 "dose/sst2-seed3/config.json": _config("sst2-seed3"),
                                 "dose/sst2-seed3/results.json": b'{"final": {"x": 1}}',
                                 "dose/sst2-seed4/config.json": _config("sst2-seed4"),
                                 "dose/sst2-seed4/results.json": b'{"final": {"y": 2}}'}


def test_an_older_pending_archive_becomes_one_archive_per_run(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    older = here / "runs" / ".pending" / "wait.tar.xz"  # all of a running sweep in one
    older.parent.mkdir(parents=True)
    state = _sweep_json({"sst2-seed0": "done", "sst2-seed1": "running"})
    with tarfile.open(older, "w:xz") as tar:
        for name, data in {"wait/sweep.json": state,
                           "wait/sst2-seed0/config.json": _config("sst2-seed0"),
                           "wait/sst2-seed0/results.json": b"{}"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    _bash(here / "restore.sh", runs)
    assert (runs / "wait" / "sst2-seed0" / "results.json").read_bytes() == b"{}"
    _bash(here / "sync.sh", runs)
    assert not older.exists()
    assert _members(older.parent / "wait" / "sst2-seed0.tar.xz") == {
        "sst2-seed0/config.json": _config("sst2-seed0"), "sst2-seed0/results.json": b"{}"}
    assert (older.parent / "wait" / "sweep.json").read_bytes() == state


def test_sync_removes_a_folder_beside_its_archive(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    _bash(here / "sync.sh", runs)
    packed = archive.read_bytes()
    (here / "runs" / "dose" / "stale").mkdir(parents=True)  # unpacked in place
    _bash(here / "sync.sh", runs)
    assert not (here / "runs" / "dose").exists() and archive.read_bytes() == packed


def test_a_run_synced_again_replaces_its_copy_whole_with_fixed_modes(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    run = runs / "dose" / "sst2-seed0"
    (run / "metrics.jsonl").unlink()  # the run ran again and wrote no metrics this time
    (run / "results.json").write_text('{"again": 1}')
    (run / "config.json").chmod(0o755)
    _bash(here / "sync.sh", runs)
    with tarfile.open(archive, "r:xz") as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert "dose/sst2-seed0/metrics.jsonl" not in modes
    assert _members(archive)["dose/sst2-seed0/results.json"] == b'{"again": 1}'
    assert modes["dose/sst2-seed0/config.json"] == 0o644 and modes["dose/sst2-seed0"] == 0o755


def test_restore_goes_on_past_a_sweep_with_no_finished_run(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    with tarfile.open(here / "runs" / "a-started.tar.xz", "w:xz") as tar:
        info = tarfile.TarInfo("a-started/sweep.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    out = _bash(here / "restore.sh", runs)
    assert "a-started: 0 run(s) restored" in out and "commit(s): unknown" in out
    assert "dose: 2 run(s) restored" in out and (runs / "dose" / "sst2-seed1").is_dir()


def test_report_reads_a_packed_sweep_as_its_folder(tmp_path: Path) -> None:
    archive = _committed(tmp_path / "results")
    assert [p.name for p in expand_inputs([str(archive.parent)])] == ["sst2-seed0",
                                                                       "sst2-seed1"]
    assert [str(p) for p in expand_inputs([str(archive.parent / "dose" / "*-seed1")])] == [
        str(archive.parent / "dose" / "sst2-seed1")]
    with pytest.raises(ValueError, match="another format"):  # read, then judged on its content
        load_run(archive.parent / "dose" / "sst2-seed0")


def test_an_earlier_invocations_unfinished_points_keep_a_sweep_pending(tmp_path: Path) -> None:
    # a sweep run again without its new seeds: the latest points are done, others are not
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    state = {"points": [{"name": "sst2-seed0", "state": "done"}],
             "other_points": [{"name": "sst2-seed2", "state": "interrupted"}]}
    (runs / "dose" / "sweep.json").write_text(json.dumps(state))
    (runs / "dose" / "sst2-seed2").mkdir()
    (runs / "dose" / "sst2-seed2" / "config.json").write_bytes(_config("sst2-seed2"))
    (runs / "dose" / "sst2-seed2" / "results.json").write_text("{}")
    _bash(here / "sync.sh", runs)
    assert _members(archive) == FILES
    pending = here / "runs" / ".pending" / "dose"
    assert "sst2-seed2/results.json" in _members(pending / "sst2-seed2.tar.xz")
    # a run unpacked beside its pending archive is removed too
    (pending / "sst2-seed2").mkdir()
    (pending / "sst2-seed2" / "results.json").write_text("{}")
    _bash(here / "sync.sh", runs)
    assert not (pending / "sst2-seed2").exists() and (pending / "sst2-seed2.tar.xz").is_file()


def test_restore_takes_the_archives_sweep_state_only_where_it_is_newer(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    (runs / "dose").mkdir(parents=True)
    older = {"updated": "2026-11-25T00:00:00+0000", "points": []}
    newer = {"updated": "2026-11-27T00:00:00+0000", "points": [{"name": "x", "state": "done"}]}
    pending = here / "runs" / ".pending" / "dose"
    pending.mkdir(parents=True)
    (pending / "sweep.json").write_text(json.dumps(newer))
    (runs / "dose" / "sweep.json").write_text(json.dumps(older))
    _bash(here / "restore.sh", runs)  # the pending state is newer than the one left there
    assert json.loads((runs / "dose" / "sweep.json").read_text()) == newer
    (runs / "dose" / "sweep.json").write_text(json.dumps({**newer, "updated": "2027"}))
    _bash(here / "restore.sh", runs)  # ... and one updated since is kept
    assert json.loads((runs / "dose" / "sweep.json").read_text())["updated"] == "2027"


def test_a_sweep_that_ended_with_a_failed_point_is_named(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    _bash(here / "restore.sh", runs)
    (runs / "dose" / "sweep.json").write_text(json.dumps({"points": [
        {"name": "sst2-seed0", "state": "done"}, {"name": "sst2-seed2", "state": "failed"}]}))
    out = subprocess.run(["bash", str(here / "sync.sh")], env={"RUNS": str(runs),
                         "PATH": ENV_PATH}, capture_output=True, text=True, check=True)
    assert "dose has ended with failed points (sst2-seed2)" in out.stderr
    assert (here / "runs" / ".pending" / "dose" / "sweep.json").is_file()  # held back, not lost


# --- nothing that is not ours is touched


@pytest.mark.parametrize("config", [None, b"not json", b'{"architectures": ["Bert"]}',
                                    _config("another-run")])
def test_sync_leaves_a_folder_that_is_not_a_run_of_ours_whole(tmp_path: Path, config) -> None:
    """A folder with a results.json but no record of a run of ours (no config.json, another
    tool's, or another run's) is neither packed nor stripped of its model and checkpoints."""
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    foreign = runs / "dose" / "mine"
    for name in ("results.json", "model/weights.bin", "checkpoint-3/state.pt", "notes.txt"):
        (foreign / name).parent.mkdir(parents=True, exist_ok=True)
        (foreign / name).write_text(name)
    if config is not None:
        (foreign / "config.json").write_bytes(config)
    before = {p: p.read_bytes() for p in foreign.rglob("*") if p.is_file()}
    proc = subprocess.run(["bash", str(here / "sync.sh")], env={"RUNS": str(runs),
                          "PATH": ENV_PATH}, capture_output=True, text=True, check=True)
    assert {p: p.read_bytes() for p in foreign.rglob("*") if p.is_file()} == before
    assert f"{foreign}/ is not a run of ours" in proc.stderr
    assert _members(archive) == FILES


def test_sync_keeps_what_a_folder_beside_its_archive_holds_that_the_archive_does_not(
        tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    beside = here / "runs" / "dose"
    for name, data in FILES.items():  # unpacked in place ...
        (here / "runs" / name).parent.mkdir(parents=True, exist_ok=True)
        (here / "runs" / name).write_bytes(data)
    (beside / "notes.txt").write_text("mine")  # ... with a note and an edited file
    (beside / "sst2-seed1" / "results.json").write_text('{"edited": 1}')
    proc = subprocess.run(["bash", str(here / "sync.sh")], env={"RUNS": str(runs),
                          "PATH": ENV_PATH}, capture_output=True, text=True, check=True)
    assert f"{beside} holds files its archive does not: left as it is" in proc.stderr
    left = sorted(str(p.relative_to(beside)) for p in beside.rglob("*") if p.is_file())
    assert left == ["notes.txt", "sst2-seed1/results.json"]  # the copies removed, no more
    assert (beside / "sst2-seed1" / "results.json").read_text() == '{"edited": 1}'
    assert _members(archive) == FILES


def test_sync_leaves_a_file_named_like_its_temporary_archive(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    archive = _committed(here)
    _bash(here / "restore.sh", runs)
    archive.unlink()
    mine = here / "runs" / "dose.tar.xz.tmp"
    mine.write_text("mine")
    _bash(here / "sync.sh", runs)
    assert mine.read_text() == "mine" and _members(archive) == FILES
    assert sorted(p.name for p in (here / "runs").iterdir()) == ["dose.tar.xz", "dose.tar.xz.tmp"]


def test_restore_leaves_a_folder_named_like_its_staging(tmp_path: Path) -> None:
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    mine = runs / "dose" / "sst2-seed0.restoring"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    _bash(here / "restore.sh", runs)
    assert (mine / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (runs / "dose").iterdir()) == [
        "sst2-seed0", "sst2-seed0.restoring", "sst2-seed1", "sweep.json"]
    assert (runs / "dose" / "sst2-seed0" / "config.json").read_bytes() == _config("sst2-seed0")


STUB_ISOTROPY = """#!/usr/bin/env bash
echo "$PWD|$*" >> "$LOG"
if [ -n "${FAIL_ON:-}" ]; then case "$*" in *"$FAIL_ON"*) exit 1 ;; esac; fi
"""


def _study(tmp_path: Path) -> tuple[Path, Path, Path]:
    """run.sh and run_review.sh beside stand-in specs; a worktree whose isotropy logs each call
    (its folder, its arguments) to ``log``; an empty folder to call them from."""
    here = tmp_path / "results"
    (here / "specs").mkdir(parents=True)
    for name in ("run.sh", "run_review.sh"):
        shutil.copy(SCRIPTS / name, here / name)
    for name in ("istar-lr", "istar", "entropy", "review", "zeta"):
        (here / "specs" / f"{name}.yaml").write_text("points: []\n")
    (here / "pick_zeta_spec.py").write_text("import sys\nprint(sys.argv[2] + '/zeta.yaml')\n")
    iso = tmp_path / "wt" / ".venv" / "bin" / "isotropy"
    iso.parent.mkdir(parents=True)
    iso.write_text(STUB_ISOTROPY)
    iso.chmod(0o755)
    caller = tmp_path / "caller"
    caller.mkdir()
    return here, caller, tmp_path / "log"


def _calls(log: Path) -> list[tuple[str, list[str]]]:
    return [(cwd, args.split()) for cwd, args in
            (line.split("|", 1) for line in log.read_text().splitlines())]


@pytest.mark.parametrize("script", ["run.sh", "run_review.sh"])
def test_study_scripts_resolve_relative_paths_against_the_callers_folder(
        tmp_path: Path, script: str) -> None:
    """Before, RUNS=rel went into the worktree the sweeps run in (and WT=wt found no isotropy)."""
    here, caller, log = _study(tmp_path)
    proc = subprocess.run(["bash", str(here / script)], cwd=caller, capture_output=True,
                          text=True, env={"PATH": ENV_PATH, "WT": "../wt", "RUNS": "rel",
                                          "LOG": str(log), "GLUE_DIR": "glue"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _calls(log)
    assert calls and {cwd for cwd, _ in calls} == {str(tmp_path / "wt")}
    roots = [args[args.index("--output-root") + 1] for _, args in calls]
    assert roots[0] == str(caller / "rel" / ("istar-lr" if script == "run.sh" else "review"))
    assert all(root.startswith(str(caller / "rel") + "/") for root in roots), roots


def test_the_study_goes_on_past_a_failed_sweep_and_exits_1(tmp_path: Path) -> None:
    here, caller, log = _study(tmp_path)
    proc = subprocess.run(["bash", str(here / "run.sh")], cwd=caller, capture_output=True,
                          text=True, env={"PATH": ENV_PATH, "WT": str(tmp_path / "wt"),
                                          "RUNS": str(tmp_path / "runs"), "LOG": str(log),
                                          "FAIL_ON": "entropy.yaml"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    specs = [Path(args[1]).name for _, args in _calls(log)]
    assert specs == ["istar-lr.yaml"] + ["istar.yaml", "entropy.yaml"] * 3 + ["zeta.yaml"]
    assert "failed: entropy seed 0, entropy seed 1, entropy seed 2" in proc.stdout


PICKS = "task,picked,metric,mean\n" + "".join(
    f"{t},learning_rate=3e-05,accuracy,0.5\n" for t in ("sst2", "rte", "mrpc", "cola", "stsb"))


def test_make_istar_spec_never_replaces_a_spec_that_says_otherwise(tmp_path: Path) -> None:
    shutil.copy(SCRIPTS / "make_istar_spec.py", tmp_path / "make_istar_spec.py")
    (tmp_path / "specs").mkdir()
    shutil.copy(SCRIPTS / "specs" / "istar-lr.yaml", tmp_path / "specs" / "istar-lr.yaml")
    (tmp_path / "picks.csv").write_text(PICKS)
    out = tmp_path / "specs" / "istar.yaml"

    def make() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tmp_path / "make_istar_spec.py"),
                               str(tmp_path / "picks.csv"), str(out)],
                              capture_output=True, text=True)

    assert make().returncode == 0
    written = {p.name: p.read_text() for p in (tmp_path / "specs").iterdir()}
    assert sorted(written) == ["istar-lr.yaml", "istar.yaml", "zeta.yaml"]
    assert "3.0e-05, regularizer: istar, tuning: -1, zeta: 0.8" in written["zeta.yaml"]
    assert make().returncode == 0  # the same specs again: nothing changes
    assert {p.name: p.read_text() for p in (tmp_path / "specs").iterdir()} == written
    (tmp_path / "specs" / "zeta.yaml").write_text("# edited\n")
    out.unlink()
    proc = make()
    assert proc.returncode == 1 and "zeta.yaml exists and says otherwise" in proc.stderr
    assert (tmp_path / "specs" / "zeta.yaml").read_text() == "# edited\n"
    assert not out.exists()  # both, or neither


def _confirm_guard(spec: str | None, wt: Path) -> subprocess.CompletedProcess:
    """``run_confirm_cpu.sh`` from this checkout, with worktree ``wt`` (it refuses before any
    sweep starts in every case below)."""
    return subprocess.run(["bash", str(SCRIPTS / "run_confirm_cpu.sh"), *([spec] if spec else [])],
                          env={"WT": str(wt), "RUNS": str(wt / "runs"), "PATH": ENV_PATH},
                          capture_output=True, text=True, timeout=60)


def test_the_confirmatory_guard_takes_only_its_specs(tmp_path: Path) -> None:
    proc = _confirm_guard("review", tmp_path)
    assert proc.returncode == 2
    assert "SPEC is confirm-cpu or confirm-entropy-cpu, not 'review'" in proc.stderr


@pytest.mark.parametrize("spec", [None, "confirm-entropy-cpu"])
def test_the_confirmatory_guard_refuses_a_worktree_without_the_committed_spec(
        tmp_path: Path, spec: str | None) -> None:
    proc = _confirm_guard(spec, tmp_path)  # not a git checkout: the spec is not committed there
    name = spec or "confirm-cpu"
    assert proc.returncode == 2
    # this checkout is checked first (an edited spec there is refused the same way)
    assert f"commit docs/results/specs/{name}.yaml, unchanged, in " in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_git_keeps_the_pending_archives_and_ignores_unpacked_copies() -> None:
    """What sync.sh writes under runs/.pending/<sweep>/ is committed (a run's archive, the
    sweep's state); a run unpacked beside its archive, or a sweep beside its, is not."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    pending = "docs/results/runs/.pending/a-sweep"
    names = [f"{pending}/run-seed0.tar.xz", f"{pending}/sweep.json",
             f"{pending}/results.csv", "docs/results/runs/a-sweep.tar.xz",
             f"{pending}/run-seed0/results.json", "docs/results/runs/a-sweep/x/results.json"]
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT,
                         input="\n".join(names), capture_output=True, text=True).stdout
    assert out.split() == names[4:]


def test_a_file_in_pending_that_is_not_one_runs_archive_is_left_alone(tmp_path: Path) -> None:
    """An archive in .pending/<sweep>/ that does not hold exactly <run>/ (someone's backup) is
    neither unpacked into the sweep nor deleted; the pending results.csv is carried along."""
    here, runs = tmp_path / "results", tmp_path / "verdict-runs"
    _committed(here)
    _bash(here / "restore.sh", runs)
    (runs / "dose" / "sweep.json").write_bytes(_sweep_json({"sst2-seed2": "done",
                                                             "sst2-seed3": "running"}))
    run = runs / "dose" / "sst2-seed2"
    run.mkdir()
    (run / "config.json").write_bytes(_config(run.name))
    (run / "results.json").write_text("{}")
    (runs / "dose" / "results.csv").write_text("name\nsst2-seed2\n")
    _bash(here / "sync.sh", runs)
    pending = here / "runs" / ".pending" / "dose"
    (runs / "dose" / "results.csv").unlink()  # RUNS lost it: the committed one is kept
    backup = pending / "backup.tar.xz"
    with tarfile.open(backup, "w:xz") as tar:
        for name, data in {"top.txt": b"mine", "sub/y": b"also mine"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    packed = backup.read_bytes()
    result = subprocess.run(["bash", str(here / "sync.sh")], env={"RUNS": str(runs),
                            "PATH": ENV_PATH}, capture_output=True, text=True, check=True)
    assert "backup.tar.xz is not one run's archive" in result.stderr
    assert backup.read_bytes() == packed and not (pending / "sub.tar.xz").exists()
    assert (pending / "results.csv").read_text() == "name\nsst2-seed2\n"
    assert sorted(p.name for p in pending.iterdir()) == [
        "backup.tar.xz", "results.csv", "sst2-seed2.tar.xz", "sweep.json"]
