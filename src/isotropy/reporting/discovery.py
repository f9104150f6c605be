"""Which run directories the arguments of ``isotropy report`` name: run directories, sweep
output roots (their sub-directories), folders of sweep roots, globs of any of these, and
packed sweeps (``<sweep>.tar.xz``) read as their folders (:mod:`isotropy.reporting.packed`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from isotropy.io import archived
from isotropy.reporting.packed import (
    as_folder,
    exists,
    glob_packed,
    is_dir,
    is_file,
    list_dir,
    real_path,
)
from isotropy.rundir import CONFIG, RESULTS

__all__ = ["expand_inputs", "sweeps_inside"]

_GLOB_CHARS = set("*?[")


def _sweep_logs(path: Path) -> bool:
    """Whether ``path`` is the ``logs/`` folder of an ``isotropy sweep`` output root."""
    return path.name == "logs" and is_file(path.parent / "sweep.json")


def _is_run(p: Path) -> bool:
    real = real_path(p)
    return (real / CONFIG).exists() or archived(real / RESULTS).exists()


def _unreadable(p: Path) -> bool:
    """Whether ``p`` is (or lies in) a packed sweep that cannot be unpacked: taken as a run
    directory, which :func:`~isotropy.reporting.runs.load_run` then skips with the reason."""
    try:
        real_path(p)
    except ValueError:
        return True
    return False


def _is_sweep_root(p: Path) -> bool:
    """A sweep output root: a ``sweep.json`` and no run files."""
    return not _unreadable(p) and is_file(p / "sweep.json") and not _is_run(p)


def _is_dir(p: Path) -> bool:
    """A directory, or a packed sweep that cannot be unpacked (skipped with its reason)."""
    return _unreadable(p) or is_dir(p)


def _subdirs(p: Path) -> list[Path]:
    """The sub-directories of ``p`` in name order (packed sweeps among them, also those that
    cannot be unpacked), without hidden ones and a sweep's logs."""
    return [c for c in (p / name for name in list_dir(p))
            if _is_dir(c) and not c.name.startswith(".") and not _sweep_logs(c)]


def _runs_under(p: Path) -> list[Path]:
    """``p`` if it is a run (or not a directory, or a packed sweep that cannot be unpacked);
    else its sub-directories in name order, those that are sweep output roots themselves
    expanded in turn; ``[p]`` when it has none (it is then skipped with the reason)."""
    if _unreadable(p) or not is_dir(p) or _is_run(p):
        return [p]
    out: list[Path] = []
    for c in _subdirs(p):
        out.extend(_runs_under(c) if _is_sweep_root(c) else [c])
    return out or [p]


def sweeps_inside(patterns: Iterable[str]) -> list[tuple[str, Path]]:
    """The sweep output roots inside the arguments that are folders of sweeps (the nested roots
    :func:`expand_inputs` expands), as ``(name, root)`` with ``name`` the root's path relative
    to the folder given (``istar``, or ``phase-a/istar`` when nested twice). An argument that
    is a run or a sweep root itself contributes nothing (so a glob such as ``runs/*`` that
    matches the sweep roots themselves gives none); globs are expanded as there. A root reached
    twice (the same folder given twice, links) is listed once. ``ValueError`` when two
    different roots would get the same name (two folders that both hold an ``istar`` sweep)."""
    named: dict[str, Path] = {}  # name -> root, in the order found
    reached: set[str] = set()  # real paths of the roots found

    def walk(top: Path, p: Path) -> None:
        for c in filter(_is_sweep_root, _subdirs(p)):
            real, name = os.path.realpath(c), c.relative_to(top).as_posix()
            if real in reached:
                continue
            if name in named:
                raise ValueError(f"two sweeps would both be reported as sweeps/{name}: "
                                 f"{named[name]} and {c}; report them separately")
            reached.add(real)
            named[name] = c
            walk(top, c)

    for pattern in patterns:
        matches = glob_packed(pattern) if _GLOB_CHARS & set(pattern) else [pattern]
        for m in matches:
            p = Path(m)
            if not _unreadable(p) and is_dir(p) and not _is_run(p) \
                    and not is_file(p / "sweep.json"):
                walk(p, p)
    return list(named.items())


def expand_inputs(patterns: Iterable[str]) -> list[Path]:
    """Run directories of the arguments (directories or globs).

    A directory with ``config.json`` or ``results.json`` is a run; any other directory is a
    sweep root whose sub-directories are taken (in name order; a sub-directory that is a sweep
    output root with its ``sweep.json`` is expanded in turn, so that a folder of sweeps reads
    as all their runs); files a glob matches, hidden
    directories and the ``logs/`` folder of an ``isotropy sweep`` output root (beside its
    ``sweep.json``) are ignored. A packed sweep ``<sweep>.tar.xz`` reads as the folder
    ``<sweep>`` (:mod:`isotropy.reporting.packed`), in paths and globs alike, and named by
    its archive too.
    ``FileNotFoundError`` for a glob that matches no directory or a path that does not exist.
    """
    out: list[Path] = []
    for pattern in patterns:
        if _GLOB_CHARS & set(pattern):
            matches = [m for m in glob_packed(pattern) if _is_dir(Path(m))]
            if not matches:
                raise FileNotFoundError(f"{pattern} matches no directory")
        elif not exists(pattern):
            raise FileNotFoundError(f"{pattern} does not exist")
        else:
            matches = [str(as_folder(pattern))]  # a packed sweep named by its archive
        for m in matches:
            p = Path(m)
            if _sweep_logs(p):
                continue
            out.extend(_runs_under(p))
    seen: dict[str, Path] = {}
    for p in out:
        seen.setdefault(os.path.realpath(p), p)
    return list(seen.values())
