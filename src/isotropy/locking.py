"""One writer per folder: an exclusive lock file that names its holder.

:func:`exclusive_lock` holds ``folder/<name>`` for the life of a ``with`` block. The lock is a
``flock`` on the open file, so the kernel releases it when the holder dies however it dies
(``SIGKILL`` included): a lock left by a killed process is simply taken over by the next one.
Processes the holder forked (data loader workers) share the lock until they exit too, seconds
later; meanwhile the next process is told to try again in a few seconds. On Linux, NFS
emulates ``flock`` with POSIX record locks, so this holds across NFS clients too.

A file system that has no ``flock`` at all (some FUSE and SMB mounts answer ``ENOLCK``,
``ENOTSUP`` or ``ENOSYS``) falls back to a second file, ``name + ".excl"``, created with
``O_EXCL`` and removed on exit: it names
its holder (host, pid, start time), and a lock whose holder is on this host and no longer
running is taken over; one held from another host is refused with the path to delete if that
holder is gone.

The file holds one JSON object, ``{"host", "pid", "started", "command"}``, written after the
lock is taken, so that a refused process can say who holds it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "EXCLUSIVE_SUFFIX",
    "FolderInUse",
    "exclusive_lock",
    "lock_holder",
]

EXCLUSIVE_SUFFIX = ".excl"

_NO_FLOCK = {errno.ENOLCK, errno.ENOSYS, errno.EINVAL,
             getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EOPNOTSUPP}


class FolderInUse(ValueError):
    """Another process holds the folder's lock."""


def _me() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            # time.time(), not gmtime()'s own clock (C time(), which may lag it by a tick)
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time())),
            "command": " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:300]}


def lock_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file at ``path`` says of its holder (``None`` if absent or unreadable)."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process"
    where = f" on {holder.get('host')}" if holder.get("host") != socket.gethostname() else ""
    what = f" ({holder['command']})" if holder.get("command") else ""
    return f"process {holder.get('pid')}{where}{what}, started {holder.get('started')},"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _write_holder(fd: int) -> None:
    data = (json.dumps(_me()) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


def _flock(fd: int) -> bool | None:
    """Take ``flock`` without waiting: ``True`` taken, ``False`` held by another process,
    ``None`` when the file system has no ``flock``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in _NO_FLOCK:
            return None
        raise
    return True


@contextlib.contextmanager
def _exclusive_file(path: Path, what: str) -> Iterator[None]:
    """The ``O_EXCL`` fallback: create the file, or take over one whose holder on this host is
    gone; removed on exit if it is still ours."""
    took_over = False
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            holder = lock_holder(path)
            if holder is None:
                # being written this instant, or damaged: wait a moment and look again
                time.sleep(0.2)
                holder = lock_holder(path)
            same_host = holder is not None and holder.get("host") == socket.gethostname()
            if same_host and isinstance(holder.get("pid"), int) and not _alive(holder["pid"]):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # its holder is gone: take it over
                took_over = True
                continue
            tail = ("" if same_host else
                    f" (if that process is gone, delete {path})")
            raise FolderInUse(f"{_describe(holder)} is writing {what}: wait for it to end or "
                              f"choose another folder{tail}") from None
    else:  # pragma: no cover - three takeovers lost to other processes in a row
        raise FolderInUse(f"{what} is being taken by other processes: try again")
    mine = os.fstat(fd).st_ino
    if took_over:
        # two processes taking over the same stale file: the later one's unlink may have
        # removed the earlier one's new file; whoever no longer finds its own file backs off
        time.sleep(0.2)
        try:
            still_mine = path.stat().st_ino == mine
        except FileNotFoundError:
            still_mine = False
        if not still_mine:
            os.close(fd)
            raise FolderInUse(f"another process took over the stale lock of {what} at the "
                              "same moment: try again")
    try:
        _write_holder(fd)
        yield
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            if path.stat().st_ino == mine:
                path.unlink()


@contextlib.contextmanager
def exclusive_lock(folder: str | os.PathLike[str], name: str, *,
                   what: str | None = None) -> Iterator[None]:
    """Hold the lock file ``folder/name`` for the ``with`` block, or raise :class:`FolderInUse`
    (a ``ValueError``) with one line naming the holder; ``what`` names the folder in it.

    The file stays after a ``flock`` is released (removing it could let two processes hold
    two files): folders that list their contents must skip ``name`` (and, on a file system
    without ``flock``, ``name + EXCLUSIVE_SUFFIX`` while it is held).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with exclusive_lock(d, ".lock"):
    ...     lock_holder(Path(d) / ".lock")["pid"] == os.getpid()
    True
    """
    folder = Path(folder)
    what = what or str(folder)
    path = folder / name
    if path.is_symlink():  # its target would be overwritten with the holder's record
        raise ValueError(f"{path} is a link to {os.readlink(path)}, not a lock file of "
                         f"isotropy's: remove the link to use {what}")
    # O_NOFOLLOW: a link made since the check above fails here rather than being written to
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        taken = _flock(fd)
        if taken is False:
            holder = lock_holder(path)
            pid = (holder or {}).get("pid")
            if (holder and holder.get("host") == socket.gethostname() and isinstance(pid, int)
                    and not _alive(pid)):
                # a flock is shared with forked children (data loader workers): they hold it
                # for the seconds they take to notice that their parent is gone
                raise FolderInUse(f"{_describe(holder)} has ended, but processes it started "
                                  f"still hold {what}: try again in a few seconds")
            raise FolderInUse(f"{_describe(holder)} is writing {what}: wait for it "
                              "to end or choose another folder")
        if taken is True:
            _write_holder(fd)
            yield
            return
    finally:
        os.close(fd)  # closing releases the flock
    # no flock on this file system: a second file, created exclusively
    with _exclusive_file(folder / (name + EXCLUSIVE_SUFFIX), what):
        yield
