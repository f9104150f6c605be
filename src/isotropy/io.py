"""Atomic writers for results (JSON, CSV, any file produced by a callback) and a strict
UTF-8 reader for inputs (a ``.gz`` file is read decompressed: archived run files are stored
gzip-compressed, and :func:`archived` finds ``name.gz`` where ``name`` is absent).

Each writer writes to a temporary file in the destination directory and moves it into place
with :func:`os.replace`, so a reader never sees a half-written file (even after a crash).
"""

from __future__ import annotations

import csv
import dataclasses
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
    "not_found",
    "parse_json_unique",
    "parse_yaml_unique",
    "read_json",
    "read_text_utf8",
    "to_jsonable",
    "write_csv_atomic",
    "write_json_atomic",
    "write_text_atomic",
    "write_with_atomic",
]


_BOM = b"\xef\xbb\xbf"
# byte-order marks of the encodings a text file saved as "Unicode" by an editor may be in
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
               (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


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
    not valid UTF-8 (instead of a bare ``UnicodeDecodeError``), or saying that the file is
    UTF-16 or UTF-32 (its byte-order mark), or that a ``.gz`` file is not gzip data.
    """
    data = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        data = _gunzip(data, path)
    for bom, encoding in _OTHER_BOMS:
        if data.startswith(bom):
            raise ValueError(f"{path}: the file is {encoding} (its byte-order mark), not UTF-8; "
                             "save it as UTF-8")
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


def read_json(path: str | os.PathLike[str], what: str = "JSON object") -> Any:
    """The JSON object in the UTF-8 file ``path`` (:func:`read_text_utf8`); ``ValueError``
    naming the file when it is not valid JSON (with the line and column) or holds no JSON
    object (``what`` says what it should hold).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "c.json"
    >>> _ = p.write_text('[1,\\n')
    >>> try:
    ...     read_json(p)
    ... except ValueError as err:
    ...     print(str(err).replace(str(p.parent), "D"))
    D/c.json is not valid JSON: Expecting value: line 2 column 1 (char 4)
    """
    text = read_text_utf8(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a {what}, not {type(data).__name__}")
    return data


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; ``ValueError`` for a key given twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice (which one was meant?)")
        out[key] = value
    return out


def parse_json_unique(text: str) -> Any:
    """:func:`json.loads`, except that an object giving a key twice (JSON keeps the last one,
    silently) is a ``ValueError``.

    >>> parse_json_unique('{"a": 1, "b": 2}')
    {'a': 1, 'b': 2}
    >>> parse_json_unique('{"a": 1, "a": 2}')
    Traceback (most recent call last):
    ...
    ValueError: the key 'a' is given twice (which one was meant?)
    """
    return json.loads(text, object_pairs_hook=_unique_pairs)


def parse_yaml_unique(text: str) -> Any:
    """``yaml.safe_load``, except that a mapping giving a key twice (PyYAML keeps the last
    one, silently) is a ``yaml.YAMLError`` with its line (``problem_mark``)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """A safe loader refusing a key given twice in one mapping."""

    def mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                twice = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor refuses it itself
                continue
            if twice:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (which one was meant?)",
                    key_node.start_mark)
        return loader.construct_mapping(node, deep=deep)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


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
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # its fields, by name
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
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


def not_found(path: str | os.PathLike[str], kind: str = "file") -> str | None:
    """Why ``path`` is not an existing ``kind`` (``file`` or ``directory``), as the end of a
    sentence naming it, or ``None`` when it is one.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> not_found(d, "directory") is None, not_found(d, "file")
    (True, 'is a directory, not a file')
    >>> not_found(os.path.join(d, "x"), "directory")
    'does not exist'
    """
    p = Path(path)
    if kind == "directory" and p.is_dir() or kind == "file" and p.is_file():
        return None
    if not p.exists():
        return "does not exist"
    if p.is_dir():
        return f"is a directory, not a {kind}"
    return f"is a file, not a {kind}" if p.is_file() else f"is not a regular {kind}"


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
