"""``output_root/.sweep.lock``: one driver per output root, held by its workers too."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

__all__ = [
    "sweep_in_progress",
]

_LOCK = ".sweep.lock"


@contextlib.contextmanager
def _sweep_lock(root: Path):
    """Hold ``root/.sweep.lock`` (``ValueError`` if another sweep holds it); yields its file
    descriptor, which local workers keep open so an orphaned worker still holds the lock."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            for attempt in range(5):  # a dry run's probe holds the lock for an instant
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.1)
        except ImportError:  # pragma: no cover - not POSIX
            pass
        except OSError:
            raise ValueError(f"another sweep is running in {root} (or one of its worker "
                             "processes still is)") from None
        yield fd
    finally:
        os.close(fd)


def sweep_in_progress(root: str | os.PathLike[str]) -> bool:
    """Whether a sweep (or one of its workers) holds ``root/.sweep.lock`` now; the lock is
    only tested, never kept."""
    path = Path(root) / _LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # conflicts with the driver's LOCK_EX
    except ImportError:  # pragma: no cover - not POSIX
        return False
    except BlockingIOError:
        return True
    except OSError:  # e.g. a file system without flock: cannot tell
        return False
    finally:
        os.close(fd)  # closing the descriptor releases a lock just taken
    return False
