"""A report folder holds one report. ``isotropy report`` records the files it writes in the
folder's manifest, ``.isotropy-report.json``; the next report into the folder removes the files
of the earlier one that it does not write again (a ``picks.csv``, a figure of another task),
and only those. A folder holding visible files that no report wrote is refused before
anything is written, so that no report is mixed with other files and no such file is
overwritten or removed.

A report's files are those its manifest lists; while a report is being written its manifest
says so and lists each group of files as soon as they are written (:func:`record`), so that a
report cut short leaves exactly its files recognisable, and a file that a user adds to such a
folder, even one named like a report output, is refused, never removed or overwritten. In a
folder holding a ``report.md`` of ours written before manifests were kept, the files with the
name of a report output (:data:`OUTPUT_NAME`) count as that report's. Hidden files (a
``.gitignore``, a temporary file of an interrupted write) are neither refused nor removed.
Each sub-report (``sweeps/NAME/``) is a report folder of its own, checked when it is written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from isotropy.io import write_json_atomic

__all__ = ["MANIFEST", "OUTPUT_NAME", "earlier_outputs", "finish", "folder_problem", "record",
           "start"]

MANIFEST = ".isotropy-report.json"
GENERATED_BY = "isotropy report"
# the relative paths a report writes (figures/NAME_TASK_MODEL[_sN].png and .svg)
OUTPUT_NAME = re.compile(r"(report\.md|table[123]\.csv|pe_table2\.csv|runs\.csv|picks\.csv|"
                         r"claims\.md|claims\.json|figures/[^/]+\.(png|svg))")
_REPORT_HEAD = "# Report of "


def _manifest(folder: Path) -> tuple[list[str], bool] | None:
    """The files the manifest of ``folder`` lists (only paths a report writes) and whether
    that report was complete; ``None`` when there is no readable manifest of ours."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("generated_by") != GENERATED_BY \
            or not isinstance(data.get("files"), list):
        return None
    files = [f for f in data["files"] if isinstance(f, str) and OUTPUT_NAME.fullmatch(f)]
    return files, data.get("complete") is True


def _old_report_md(folder: Path) -> bool:
    """Whether ``folder/report.md`` is one that ``isotropy report`` wrote (its title)."""
    try:
        with (folder / "report.md").open(encoding="utf-8") as f:
            return f.read(len(_REPORT_HEAD)) == _REPORT_HEAD
    except (OSError, UnicodeDecodeError):
        return False


def _holds_report(folder: Path) -> bool:
    return _manifest(folder) is not None or _old_report_md(folder)


def _visible_files(folder: Path, rel: str = "") -> list[str]:
    """The relative paths of the files under ``folder`` whose names do not start with a dot,
    sub-reports (report folders under ``sweeps/``) left out; a folder or link that cannot be
    walked counts as a file."""
    out: list[str] = []
    for entry in sorted(os.scandir(folder / rel) if rel else os.scandir(folder),
                        key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        path = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            if path.startswith("sweeps/") and _holds_report(folder / path):
                continue
            out.extend(_visible_files(folder, path))
        else:
            out.append(path)
    return out


def earlier_outputs(folder: str | os.PathLike[str]) -> list[str]:
    """The files (relative paths) of the report already in ``folder``: those its manifest
    lists (complete, or as far as a report cut short had recorded them), or for a report
    written before manifests were kept (no manifest, a ``report.md`` of ours) the files with
    output names; none when ``folder`` holds no report."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    manifest = _manifest(folder)
    if manifest is not None:
        return manifest[0]
    if not _old_report_md(folder):
        return []
    return sorted(f for f in _visible_files(folder) if OUTPUT_NAME.fullmatch(f))


def folder_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why a report cannot be written into ``folder``: it holds visible files that no report
    wrote (named, at most three); ``None`` for a new or empty folder, or one holding a report
    (and hidden files) only."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder: a report goes into a new or empty folder"
    if not folder.is_dir():
        return None
    try:
        files = _visible_files(folder)
    except OSError as err:
        return f"{folder} cannot be read ({err.strerror or err})"
    ours = set(earlier_outputs(folder))
    foreign = [f for f in files if f not in ours]
    if not foreign:
        return None
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    manifest = _manifest(folder)
    cut = ("; a report into it was cut short, and these are not among the files it recorded "
           "(remove them if they are its own)" if manifest is not None and not manifest[1]
           else "")
    return (f"{folder} holds {len(foreign)} file(s) that isotropy report did not write "
            f"({shown}): a report goes into a new or empty folder, or one holding a report"
            f"{cut}")


def start(folder: str | os.PathLike[str], earlier: Iterable[str]) -> None:
    """Mark ``folder`` as being written (its manifest lists the ``earlier`` outputs, not yet
    complete): a report cut short leaves its new files recognisable as a report's."""
    write_json_atomic(Path(folder) / MANIFEST, {"generated_by": GENERATED_BY,
                                               "complete": False, "files": sorted(earlier)})


def record(folder: str | os.PathLike[str], earlier: Iterable[str],
           written: Iterable[str | os.PathLike[str]]) -> None:
    """List the files ``written`` so far (with the ``earlier`` outputs) in the manifest of a
    report being written: a report cut short after this call leaves them recognisable."""
    folder = Path(folder)
    now = {Path(p).relative_to(folder).as_posix() for p in written}
    write_json_atomic(folder / MANIFEST, {"generated_by": GENERATED_BY, "complete": False,
                                          "files": sorted({*earlier, *now})})


def finish(folder: str | os.PathLike[str], earlier: Iterable[str],
           written: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Remove the ``earlier`` outputs of ``folder`` (:func:`earlier_outputs`, read before the
    new report was written) that the new report did not write again, then record the
    ``written`` files in the manifest; returns the removed files. An emptied ``figures/`` is
    removed too."""
    folder = Path(folder)
    now = {Path(p).relative_to(folder).as_posix() for p in written}
    removed: list[str] = []
    for rel in sorted(set(earlier) - now):
        path = folder / rel
        if OUTPUT_NAME.fullmatch(rel) and path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(rel)
    figures = folder / "figures"
    if figures.is_dir() and not figures.is_symlink() and not any(figures.iterdir()):
        figures.rmdir()
    write_json_atomic(folder / MANIFEST, {"generated_by": GENERATED_BY, "complete": True,
                                          "files": sorted(now)})
    return removed
