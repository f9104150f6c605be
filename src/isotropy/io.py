"""Atomic writers for results (JSON, CSV, any file produced by a callback) and a strict
UTF-8 reader for inputs (a ``.gz`` file is read decompressed: archived run files are stored
gzip-compressed, and :func:`archived` finds ``name.gz`` where ``name`` is absent).

Each writer writes to a temporary file in the destination directory and moves it into place
with :func:`os.replace`, so a reader never sees a half-written file (even after a crash).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "archived",
    "atomic_path",
    "earlier_outputs_problem",
    "read_text_utf8",
    "to_jsonable",
    "write_csv_atomic",
    "write_json_atomic",
    "write_text_atomic",
    "write_with_atomic",
]


_BOM = b"\xef\xbb\xbf"


def archived(path: str | os.PathLike[str]) -> Path:
    """``path``, or its gzip-compressed twin ``path.gz`` when only that exists.

    >>> import gzip, tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "m.jsonl.gz").write_bytes(gzip.compress(b"{}"))
    >>> archived(d / "m.jsonl").name, archived(d / "other.json").name
    ('m.jsonl.gz', 'other.json')
    """
    p = Path(path)
    if p.exists():
        return p
    gz = p.with_name(p.name + ".gz")
    return gz if gz.is_file() else p


def _gunzip(data: bytes, path: str | os.PathLike[str]) -> bytes:
    """The decompressed bytes of gzip ``data``; of a file cut short, what precedes the cut
    (a JSONL reader then keeps the whole records before it, as for a plain file)."""
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data)
        while d.eof and d.unused_data:  # further gzip members
            rest = d.unused_data
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out += d.decompress(rest)
    except zlib.error as err:
        raise ValueError(f"{path}: not readable gzip data ({err})") from None
    return out


def read_text_utf8(path: str | os.PathLike[str]) -> str:
    """The text of a UTF-8 file, a leading byte-order mark dropped, line endings untouched; a
    file whose name ends in ``.gz`` is decompressed first.

    Raises ``ValueError`` naming the file, the line and the column of the first byte that is
    not valid UTF-8 (instead of a bare ``UnicodeDecodeError``), or saying that a ``.gz`` file
    is not gzip data.
    """
    data = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        data = _gunzip(data, path)
    start = len(_BOM) if data.startswith(_BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        pos = start + err.start
        line = data.count(b"\n", 0, pos) + 1
        column = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 (byte 0x{data[pos]:02x}, byte {column} of the line); "
            "save the file as UTF-8"
        ) from None


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike[str]):
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    The temporary file keeps ``path``'s suffix, so writers that infer a format from it
    (e.g. ``matplotlib.savefig``) work. On an exception the temporary file is removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=target.parent
    )
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp creates 0600; use the usual mode
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_with_atomic(path: str | os.PathLike[str], write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def to_jsonable(obj: Any) -> Any:
    """Convert tensors, numpy values, paths, dataclass-like mappings and tuples to plain JSON.

    Non-finite floats become ``None`` (JSON has no NaN or infinity).

    >>> to_jsonable({"a": (1, float("nan")), "b": Path("x")})
    {'a': [1, None], 'b': 'x'}
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "tolist"):  # torch tensors and numpy arrays / scalars
        return to_jsonable(obj.tolist())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 2) -> Path:
    """Write ``obj`` as JSON (via :func:`to_jsonable`) to ``path`` atomically."""
    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False) + "\n"
    return write_text_atomic(path, text)


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        return _csv_cell(v.item())
    return v


def write_csv_atomic(
    path: str | os.PathLike[str],
    rows: Iterable[Mapping[str, Any]],
    fieldnames: Sequence[str] | None = None,
) -> Path:
    """Write dict rows as CSV (header first) to ``path`` atomically.

    ``fieldnames`` defaults to the keys in order of first appearance; missing values,
    ``None`` and non-finite floats are written as empty cells.
    """
    rows = list(rows)
    if fieldnames is None:
        names: dict[str, None] = {}
        for r in rows:
            for k in r:
                names.setdefault(str(k), None)
        fieldnames = list(names)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fieldnames), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        unknown = set(r) - set(fieldnames)
        if unknown:
            raise ValueError(f"row has columns not in fieldnames: {sorted(unknown)}")
        writer.writerow({k: _csv_cell(r.get(k)) for k in fieldnames})
    return write_text_atomic(path, buf.getvalue())


def output_dir_problem(path: Path, names: Sequence[str] = ()) -> str | None:
    """Why the files ``names`` cannot be written into the directory ``path`` (created with its
    parents if needed), or ``None``. Writing is probed with a temporary file in the deepest
    existing directory, which is then removed; nothing else is created."""
    existing = path
    try:
        while not existing.exists():
            if existing.is_symlink():
                return f"{existing} is a broken symbolic link"
            existing = existing.parent
        if not existing.is_dir():
            if existing == path:
                return f"{path} exists and is not a directory"
            return f"{existing} is a file, so {path} cannot be created under it"
        if existing == path:
            for name in names:
                if (path / name).is_dir():
                    return f"{path / name} is a directory, so it cannot be written"
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".isotropy-write-test-"):
            pass
    except OSError as err:
        return f"{existing} is not writable ({err.strerror or err})"
    return None


# the record (JSON) each command's output folder holds, and keys it always has
_RECORD_KEYS = {"measure.json": ("config", "rows"), "analyze.json": ("config", "rows"),
                "stability.json": ("experiment", "config"),
                "comparison.json": ("rows", "settings")}


def earlier_outputs_problem(path: Path, names: Sequence[str]) -> str | None:
    """Why the files ``names`` (a command's outputs, one of them its JSON record) must not be
    replaced in the folder ``path``, or ``None``: when one of them exists but the record there
    is not one such a command writes (a JSON object with its keys), someone else's file would
    be replaced. An earlier output of the same command is replaced as before.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "measure.csv").write_text("my,data")
    >>> earlier_outputs_problem(d, ["measure.json", "measure.csv"]).split(": ")[0]
    'it holds measure.csv but no measure.json of an earlier run of the command'
    """
    record = next((n for n in names if n in _RECORD_KEYS), None)
    present = [n for n in names if (Path(path) / n).exists()]
    if record is None or not present:
        return None
    try:
        data = json.loads(read_text_utf8(Path(path) / record))
        ours = isinstance(data, dict) and all(k in data for k in _RECORD_KEYS[record])
    except (OSError, ValueError):
        ours = False
    if ours:
        return None
    return (f"it holds {present[0]} but no {record} of an earlier run of the command: choose "
            "another folder (nothing in it is replaced)")
