"""One writer per folder (:mod:`isotropy.locking`, :meth:`RunDirectory.writer`): a second
process is refused with one line naming the holder; a killed holder's lock is taken over;
file systems without ``flock`` use the ``O_EXCL`` fallback with the same guarantees."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from isotropy import locking
from isotropy.locking import EXCLUSIVE_SUFFIX, FolderInUse, exclusive_lock, lock_holder
from isotropy.rundir import LOCK, RunDirectory

pytestmark = pytest.mark.timeout(120)

# the holder loads locking.py alone (stdlib only): importing the package would take seconds
HOLD = textwrap.dedent("""
    import importlib.util, os, sys, time
    {patch}
    spec = importlib.util.spec_from_file_location("locking", sys.argv[2])
    locking = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(locking)
    os.makedirs(sys.argv[1], exist_ok=True)
    with locking.exclusive_lock(sys.argv[1], sys.argv[3], what="run directory " + sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
""")

NO_FLOCK = textwrap.dedent("""
    import errno, fcntl
    def _no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    fcntl.flock = _no_flock
""")


def _holder(path, *, flock=True):
    """A process holding ``RunDirectory(path).writer()`` until killed."""
    code = HOLD.format(patch="" if flock else NO_FLOCK)
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), locking.__file__, LOCK],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def no_flock(monkeypatch):
    import fcntl

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "no-flock"])
def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, flock, request):
    if not flock:
        request.getfixturevalue("no_flock")
    run = tmp_path / "run"
    proc = _holder(run, flock=flock)
    try:
        with pytest.raises(FolderInUse) as err, RunDirectory(run).writer():
            pytest.fail("entered a folder held by another process")
        msg = str(err.value)
        assert "\n" not in msg
        assert f"process {proc.pid} " in msg and f"is writing run directory {run}" in msg
        assert isinstance(err.value, ValueError)  # the CLI's one-line errors
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("flock", [True, False], ids=["flock", "no-flock"])
def test_a_killed_holders_lock_is_taken_over(tmp_path, flock, request):
    if not flock:
        request.getfixturevalue("no_flock")
    run = tmp_path / "run"
    proc = _holder(run, flock=flock)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    name = LOCK if flock else LOCK + EXCLUSIVE_SUFFIX
    assert lock_holder(run / name)["pid"] == proc.pid  # left behind by the killed process
    with RunDirectory(run).writer():
        assert lock_holder(run / name)["pid"] == os.getpid()
    # the fallback's file goes with its holder; the flock file stays (never two files)
    assert (run / (LOCK + EXCLUSIVE_SUFFIX)).exists() is False
    assert (run / LOCK).exists()


def test_a_lock_held_from_another_host_is_refused_with_the_file_to_delete(tmp_path, no_flock):
    path = tmp_path / (LOCK + EXCLUSIVE_SUFFIX)
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": "then",
                                "command": "isotropy train"}))
    match = r"process 1 on elsewhere \(isotropy train\), started then, is writing"
    with pytest.raises(FolderInUse, match=match), exclusive_lock(tmp_path, LOCK):
        pass
    with pytest.raises(FolderInUse, match=f"delete {path}"), exclusive_lock(tmp_path, LOCK):
        pass


def test_a_live_holder_on_this_host_is_never_taken_over(tmp_path, no_flock):
    path = tmp_path / (LOCK + EXCLUSIVE_SUFFIX)
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getppid(),
                                "started": "now"}))
    match = f"process {os.getppid()}, started now, is writing"
    with pytest.raises(FolderInUse, match=match), exclusive_lock(tmp_path, LOCK):
        pass
    assert json.loads(path.read_text())["pid"] == os.getppid()


def test_one_process_may_not_take_its_own_lock_twice(tmp_path):
    """flock locks belong to the open file: a second open in the same process is refused
    too, so a library user cannot run two trainings into one folder from one script."""
    with exclusive_lock(tmp_path, LOCK), pytest.raises(FolderInUse), exclusive_lock(tmp_path, LOCK):
        pass


def test_other_errors_of_flock_are_not_taken_for_a_missing_flock(tmp_path, monkeypatch):
    import fcntl

    def broken(fd, op):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="Bad file descriptor"), exclusive_lock(tmp_path, LOCK):
        pass


def test_the_lock_is_no_part_of_the_run(tmp_path):
    """An empty folder holding only the lock is a new run; clearing a run keeps the lock."""
    rd = RunDirectory(tmp_path / "run")
    with rd.writer():
        assert rd.prepare(resume=False, overwrite=False, same_settings=lambda old: None) == "new"
        rd.write_config({"settings": {}})
        rd.append_metrics({"step": 1, "loss": 0.5})
        rd.clear()
        assert [p.name for p in rd.path.iterdir()] == [LOCK]


def test_the_holder_record_names_this_process(tmp_path):
    before = time.time()
    with exclusive_lock(tmp_path, LOCK):
        rec = lock_holder(tmp_path / LOCK)
    assert rec["pid"] == os.getpid() and rec["host"] == socket.gethostname()
    import calendar

    started = calendar.timegm(time.strptime(rec["started"], "%Y-%m-%dT%H:%M:%SZ"))
    assert before - 1 <= started <= time.time() + 1
    assert locking._alive(os.getpid()) and not locking._alive(2**22 + 12345)


def test_a_lock_kept_by_the_children_of_a_dead_holder_says_to_try_again(tmp_path):
    """flock is shared with forked children (data loader workers): while they outlive a
    killed holder, the next process is told the holder ended and to try again."""
    code = textwrap.dedent("""
        import importlib.util, os, sys, time
        spec = importlib.util.spec_from_file_location("locking", sys.argv[2])
        locking = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(locking)
        with locking.exclusive_lock(sys.argv[1], sys.argv[3], what="run directory x"):
            if os.fork() == 0:  # the child keeps the lock's open file
                time.sleep(600)
                os._exit(0)
            print("held", flush=True)
            time.sleep(600)
    """)
    tmp_path.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), locking.__file__, LOCK],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pytest.raises(FolderInUse, match=f"process {proc.pid} .* has ended, but "
                                              "processes it started still hold run "
                                              "directory x: try again in a few seconds"), \
                exclusive_lock(tmp_path, LOCK, what="run directory x"):
            pass
    finally:
        os.killpg(proc.pid, signal.SIGKILL)


def test_a_takeover_that_lost_a_race_backs_off(tmp_path, no_flock, monkeypatch):
    """Two processes taking over one stale fallback lock: the one whose new file was removed
    by the other's takeover backs off instead of holding a lock it no longer has."""
    path = tmp_path / (LOCK + EXCLUSIVE_SUFFIX)
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": 2**22 + 12345,
                                "started": "then"}))
    real_sleep = time.sleep

    def rival_takes_over(seconds):  # during the check, another process replaces the file
        path.unlink()
        path.write_text("{}")
        real_sleep(0)

    monkeypatch.setattr(locking.time, "sleep", rival_takes_over)
    with pytest.raises(FolderInUse, match="took over the stale lock .* at the same moment"), \
            exclusive_lock(tmp_path, LOCK):
        pass


def test_the_lock_file_never_lands_in_a_folder_that_holds_no_run(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no run"), \
            RunDirectory(folder).writer():
        pass
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_left_whole(tmp_path):
    """``.isotropy-run.lock`` linking to a user's file (a folder that otherwise looks empty):
    before, the lock's holder record replaced the file's contents."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).symlink_to(notes)
    with pytest.raises(ValueError, match=r"\.isotropy-run\.lock is a link to .*notes\.txt, not "
                                         "a lock file of isotropy's"), \
            RunDirectory(out).writer():
        pass
    assert notes.read_text() == "mine" and (out / LOCK).is_symlink()
