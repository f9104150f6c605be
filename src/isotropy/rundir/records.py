"""The JSONL record files of a run (``metrics.jsonl``, ``measurements.jsonl``): one JSON object
per line, appended whole and synced; read, counted and cut back only up to the first line that
is not a whole record (a line cut short by a stop, or damage), never past it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from isotropy.io import read_text_utf8, to_jsonable, write_text_atomic


def whole_records(text: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line index, line, record)`` of a JSONL text's lines up to the first that is not a whole
    JSON object (blank lines skipped): the one rule by which run files are read."""
    for i, line in enumerate(text.splitlines(keepends=True)):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(rec, dict):
            return
        yield i, line, rec


def is_whole_line(line: str) -> bool:
    """A newline-terminated line holding one JSON object (a record written to the end)."""
    if not line.endswith("\n"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def read_jsonl_whole(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    r"""The records of a JSONL file up to its first line that is not a whole JSON object (a
    line cut short by a crash, or damage), and a note saying what was left out (``None`` when
    the file is whole or absent): records after a cut are never used.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.jsonl"
    >>> _ = p.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    >>> records, note = read_jsonl_whole(p)
    >>> records
    [{'step': 1}, {'step': 2}]
    >>> note.split("; ")
    ['m.jsonl: line 3 of 3 is cut short or unreadable', 'the 2 whole records before it are used']
    """
    try:
        text = read_text_utf8(path)
    except (OSError, ValueError) as err:
        if not path.exists():
            return [], None
        return [], f"{path.name}: unreadable ({err}); none of it is used"
    lines = text.splitlines(keepends=True)
    out: list[dict[str, Any]] = []
    last = -1
    for i, _, rec in whole_records(text):
        out.append(rec)
        last = i
    bad = next((i for i in range(last + 1, len(lines)) if lines[i].strip()), None)
    if bad is None:
        return out, None
    return out, (f"{path.name}: line {bad + 1} of {len(lines)} is cut short or "
                 f"unreadable; the {len(out)} whole records before it are used")


class RecordFile:
    """One JSONL record file of a run directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line (written whole, flushed and synced)."""
        line = json.dumps(to_jsonable(record), allow_nan=False) + "\n"
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:  # a failed write() names no file: name it
            raise OSError(err.errno, err.strerror, str(self.path)) from err

    def truncate(self, max_step: int) -> None:
        """Keep only the records up to ``max_step`` (rewritten atomically), never past a line
        cut short by a crash or damaged (:func:`read_jsonl_whole`'s rule)."""
        path = self.path
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8")
        whole = list(whole_records(text))
        lines = text.splitlines()
        after = (whole[-1][0] + 1) if whole else 0
        later = [i for i in range(after, len(lines)) if lines[i].strip()]
        # a damaged line with lines after it (not a crash's cut last line) while records are
        # to be kept: they would go without a word (a restart, max_step 0, keeps none)
        if len(later) > 1 and max_step > 0:
            raise ValueError(f"{path}: line {later[0] + 1} of {len(lines)} is damaged and "
                             f"{len(later) - 1} line(s) follow it; nothing is changed")
        kept = [line.rstrip("\n") for _, line, rec in whole if rec.get("step", 0) <= max_step]
        write_text_atomic(path, "".join(line + "\n" for line in kept))

    def terminated_lines(self) -> list[str]:
        """The lines of the whole, newline-terminated records, up to the first one that is
        not (appending after it would join two records)."""
        if not self.path.is_file():
            return []
        out = []
        for _, line, _ in whole_records(self.path.read_text(encoding="utf-8")):
            if not line.endswith("\n"):
                break
            out.append(line)
        return out

    def count(self) -> int:
        """The number of whole (newline-terminated, parseable) records."""
        return len(self.terminated_lines())

    def check(self, counted: int | None, run: Path, checkpoint: str) -> str | None:
        """Check that the file can be cut back to a checkpoint of ``run`` that counted
        ``counted`` of its records (``None``: a checkpoint written before they were
        counted); returns a line for a last line cut short by the stop (dropped on resume),
        else ``None``. ``ValueError`` (one line, naming the file and line) when a line that
        is not a whole record has whole records after it (damage, not a stop: resuming
        would drop them too), or when the file holds fewer whole records than counted
        (records before the checkpoint are lost)."""
        path = self.path
        if not path.is_file():
            return None
        lines = read_text_utf8(path).splitlines(keepends=True)
        whole = self.count()
        note = None
        bad = next((i for i, line in enumerate(lines)
                    if line.strip() and not is_whole_line(line)), None)
        if bad is not None:
            after = sum(1 for line in lines[bad + 1:] if line.strip())
            if after:
                raise ValueError(
                    f"cannot resume {run}: {path} line {bad + 1} of {len(lines)} is "
                    f"not a whole JSON record and {after} line(s) follow it (damage, not a "
                    "stop: resuming would drop them): repair or remove that line, or pass "
                    "--overwrite to start again")
            note = (f"{path.name}: line {bad + 1} of {len(lines)} was cut short when the "
                    "run stopped: dropped")
        if counted is not None and counted > whole:
            raise ValueError(
                f"cannot resume {run}: {path} holds {whole} whole records, but "
                f"{checkpoint} was written after {counted} (records before it are "
                "lost): pass --overwrite to start again")
        return note

    def keep(self, n: int) -> None:
        """Keep the first ``n`` records (rewritten atomically); never a line cut short (a
        file that holds fewer whole records keeps those)."""
        if self.path.is_file():
            write_text_atomic(self.path, "".join(self.terminated_lines()[:n]))

    def read(self) -> list[dict[str, Any]]:
        """Every record (none when the file is absent); ``ValueError`` naming the file and
        line when one is damaged or cut short, rather than fewer records without a word
        (:func:`read_jsonl_whole` gives the whole records before such a line, with a note)."""
        if not self.path.is_file():
            return []
        records, note = read_jsonl_whole(self.path)
        if note is not None:
            raise ValueError(f"{self.path.parent}: {note}")
        return records
