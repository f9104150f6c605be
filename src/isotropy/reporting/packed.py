"""Packed sweeps: a sweep folder stored as one ``<sweep>.tar.xz`` beside where the folder would
be, read as if it were that folder (``runs/dose.tar.xz`` reads as ``runs/dose/``).

An archive packs a sweep's small files together (``<sweep>/sweep.json``, ``<sweep>/<run>/
config.json``, ``results.json``, ...), which compresses the many similar JSON files of a
sweep far better than one file at a time. Reading one unpacks it once per process into a
private temporary folder, removed at exit; a path inside it keeps the name it would have if
the folder were there, so reports list the same paths either way. The folder wins where both
exist (``tar -xJf`` an archive elsewhere, ``-C DIR``, not beside it). A ``.tar.xz`` whose
first member is not under ``<sweep>/`` is another kind of archive and is not listed as a
folder. Only plain files and folders under ``<sweep>/``, at most :data:`MAX_UNPACKED_BYTES` in
all, may be in a packed sweep (``ValueError`` otherwise, before anything is unpacked).

>>> import io, tarfile, tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with tarfile.open(root / "dose.tar.xz", "w:xz") as tar:
...     info = tarfile.TarInfo("dose/run-seed0/config.json"); info.size = 2
...     tar.addfile(info, io.BytesIO(b"{}"))
>>> list_dir(root), list_dir(root / "dose"), is_file(root / "dose" / "run-seed0" / "config.json")
(['dose', 'dose.tar.xz'], ['run-seed0'], True)
>>> glob_packed(str(root / "*" / "*-seed0")) == [str(root / "dose" / "run-seed0")]
True
>>> import shutil; shutil.rmtree(root)
"""

from __future__ import annotations

import atexit
import fnmatch
import glob
import lzma
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

__all__ = ["MAX_UNPACKED_BYTES", "PACKED_SUFFIX", "as_folder", "exists", "glob_packed", "is_dir",
           "is_file", "list_dir", "real_path"]

PACKED_SUFFIX = ".tar.xz"
MAX_UNPACKED_BYTES = 2 * 2**30  # a sweep's small files are tens of MB
_Key = tuple[str, int, int, int, int]  # archive's real path, inode, size, mtime, ctime
_unpacked: dict[_Key, Path] = {}  # -> the unpacked folder
_unreadable: dict[_Key, str] = {}  # -> why it cannot be unpacked (not tried again)
_is_sweep: dict[_Key, bool] = {}  # -> whether its first member is under <sweep>/
_scratch: list[str] = []
_READ_ERRORS = (tarfile.TarError, EOFError, OSError, lzma.LZMAError)


def _key(archive: Path) -> _Key:
    st = archive.stat()  # ctime too: a copy that keeps the mtime (cp -p) still changes it
    return (os.path.realpath(archive), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _top(archive: Path) -> str:
    return archive.name[: -len(PACKED_SUFFIX)]


def _scratch_dir() -> Path:
    if not _scratch:
        _scratch.append(tempfile.mkdtemp(prefix="isotropy-packed-"))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return Path(_scratch[0])


def _check_members(tar: tarfile.TarFile, archive: Path, top: str) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if not (m.isfile() or m.isdir()) or m.issparse() or os.path.isabs(m.name) \
                or ".." in parts or not parts or parts[0] != top:
            raise ValueError(f"{archive} is not a packed sweep: it holds {m.name!r} (only plain "
                             f"files and folders under {top}/ may be there)")
    total = sum(m.size for m in members)
    if total > MAX_UNPACKED_BYTES:
        raise ValueError(f"{archive} would unpack to {total / 2**30:.1f} GiB, more than a "
                         f"packed sweep's {MAX_UNPACKED_BYTES / 2**30:.0f} GiB")
    return members


def _looks_packed(archive: Path) -> bool:
    """Whether ``archive``'s first member is under ``<sweep>/`` (read from its start only); an
    archive that cannot be read counts as one, so that its error is seen where it is read."""
    key = _key(archive)
    if key not in _is_sweep:
        try:
            with tarfile.open(archive, "r|xz") as tar:
                first = tar.next()
            _is_sweep[key] = first is None or Path(first.name).parts[:1] == (_top(archive),)
        except _READ_ERRORS:
            _is_sweep[key] = True
    return _is_sweep[key]


def _unpack(archive: Path) -> Path:
    """The unpacked sweep folder of ``archive`` (unpacked on first use)."""
    key = _key(archive)
    if key in _unreadable:
        raise ValueError(_unreadable[key])
    if key not in _unpacked:
        top = _top(archive)
        dest = Path(tempfile.mkdtemp(dir=_scratch_dir()))
        try:
            with tarfile.open(archive, "r:xz") as tar:
                members = _check_members(tar, archive, top)
                for m in members:  # plain files and folders only, checked above
                    target = dest.joinpath(*Path(m.name).parts)
                    if m.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(m)
                    assert src is not None  # a regular file
                    with src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out)
        except (*_READ_ERRORS, ValueError) as err:  # ValueError: _check_members' refusal
            shutil.rmtree(dest, ignore_errors=True)
            why = (f"unreadable packed sweep {archive}: {err}" if isinstance(err, _READ_ERRORS)
                   else str(err))
            _unreadable[key] = why
            raise ValueError(why) from None
        _unpacked[key] = dest / top
    return _unpacked[key]


def _archive_of(p: Path) -> Path | None:
    """``p``'s ``<name>.tar.xz`` twin when ``p`` does not exist and the twin is a file."""
    if not p.name or p.exists():
        return None
    twin = p.with_name(p.name + PACKED_SUFFIX)
    return twin if twin.is_file() else None


def real_path(path: str | os.PathLike[str]) -> Path:
    """Where ``path`` is read from: itself, unless a folder on its way is missing and packed
    beside (then the same path inside the unpacked copy). ``..`` is resolved by name first,
    as :func:`os.path.normpath` does."""
    p = Path(os.path.normpath(path))
    if p.exists():
        return p
    parts = p.parts
    for i in range(1, len(parts) + 1):
        head = Path(*parts[:i])
        archive = _archive_of(head)
        if archive is not None:
            return _unpack(archive).joinpath(*parts[i:])
        if not head.exists():
            break
    return p


def as_folder(path: str | os.PathLike[str]) -> Path:
    """The folder a packed sweep named by its archive reads as (``runs/dose.tar.xz`` ->
    ``runs/dose``); any other path as it is."""
    p = Path(path)
    if p.name.endswith(PACKED_SUFFIX) and len(p.name) > len(PACKED_SUFFIX) and p.is_file() \
            and _looks_packed(p):
        return p.with_name(_top(p))
    return p


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists, packed sweeps read as folders."""
    return real_path(path).exists()


def is_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder, packed sweeps read as folders."""
    return real_path(path).is_dir()


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file, packed sweeps read as folders."""
    return real_path(path).is_file()


def list_dir(path: str | os.PathLike[str]) -> list[str]:
    """The names in folder ``path`` in sorted order, each packed sweep ``X.tar.xz`` also
    listed as ``X`` (unless a folder ``X`` is there; an archive of another layout is not)."""
    real = real_path(path)
    names = set(os.listdir(real))
    for n in list(names):
        if n.endswith(PACKED_SUFFIX) and len(n) > len(PACKED_SUFFIX) and (real / n).is_file() \
                and _looks_packed(real / n):
            names.add(n[: -len(PACKED_SUFFIX)])
    return sorted(names)


def glob_packed(pattern: str) -> list[str]:
    """:func:`glob.glob` (sorted) that sees packed sweeps as folders: ``runs/istar/*-seed0``
    matches inside ``runs/istar.tar.xz``. Names starting with a dot match only a pattern
    part that starts with one, as there. Unlike there, a trailing ``/`` still matches files,
    and the matches are spelled as :class:`~pathlib.Path` spells the pattern (``./`` and
    ``//`` dropped): filter with :func:`is_dir` where folders are wanted. A packed sweep
    that cannot be unpacked, where the pattern goes on inside it, is a match itself (reading
    it then says why it cannot be used)."""
    if not glob.has_magic(pattern):
        return [pattern] if exists(pattern) else []
    p = Path(pattern)
    anchor, parts = (p.anchor, p.parts[1:]) if p.anchor else ("", p.parts)
    found = [anchor]
    unreadable: set[str] = set()  # packed sweeps on the way that cannot be unpacked
    for part in parts:
        step: list[str] = []
        for base in found:
            here = base or "."
            try:
                if not glob.has_magic(part):
                    cand = os.path.join(base, part) if base else part
                    if exists(cand):
                        step.append(cand)
                    continue
                if not is_dir(here):
                    continue
            except ValueError:  # matched as the archive's folder, whose reading says why not
                unreadable.add(base)
                continue
            for name in list_dir(here):
                if fnmatch.fnmatchcase(name, part) and \
                        (not name.startswith(".") or part.startswith(".")):
                    step.append(os.path.join(base, name) if base else name)
        found = step
    return sorted(set(found) | unreadable)
