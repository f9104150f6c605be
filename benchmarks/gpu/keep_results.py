"""Keep what one GPU call of ``benchmarks/gpu/run.sh`` brought back as ``DEST/<n>/``, the form
that ``run.sh --archived``, ``docs/results/gpu_phase.py``, ``docs/results/confirm_phase.py``
and ``make_rte_confirm_spec.py`` read (``docs/gpu-runs/<n>/`` is one).

    python benchmarks/gpu/keep_results.py FROM DEST [--number N] [--skip-incomplete]

FROM is the folder the call's files came back to: ``summary.txt`` beside ``gpu-results.tar.gz``
(``run.sh --pack``) or beside the unpacked output. ``DEST/<n>`` (``n`` one more than the
highest number in DEST, or ``--number``) gets:

- each finished run's ``config.json``, ``results.json``, ``metrics.jsonl``,
  ``measurements.jsonl`` and ``eval_predictions.csv``, uncompressed, one archive per task:
  ``runs-<task>.tar.xz`` holding ``runs/<run>/<file>`` (the task as the run's
  ``config.json`` names it; the same bytes for the same runs);
- ``sweep.json`` and the report's ``report.md``;
- ``summary.txt``, ``env.txt``, ``pytest.txt``, ``runs.txt``, ``report.txt``,
  ``gpu-utilization.csv``, ``bench.txt``, ``bench.json`` and ``bench.md``, where they came back.

The logs, ``pytest.xml`` and the report's tables are left behind. Refused (one line, exit 1,
nothing written): a FROM that is not ``run.sh``'s output (no ``summary.txt``, or neither
``gpu-results.tar.gz`` nor ``env.txt``), an archive member that is not a plain file or folder
under FROM, a damaged compressed file, a run folder without its ``config.json`` or
``results.json`` (``--skip-incomplete`` keeps the others, naming it), fewer runs than
``summary.txt`` says were copied (``runs: N finished runs copied``; where files did not come
back), a task or run name that is not a plain name, a ``DEST/<n>`` that exists. The folder is
written under a temporary name beside it (``.keep-<n>.*``), then renamed, so ``DEST/<n>`` is
whole or absent. Such a folder that a killed call left behind is deleted by the next call where
it holds only files of the names written here; any other is left as it is, and named.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

RUN_FILES = ("config.json", "eval_predictions.csv", "measurements.jsonl", "metrics.jsonl",
             "results.json")
KEPT = {"summary.txt": "summary.txt", "env.txt": "env.txt", "pytest.txt": "pytest.txt",
        "runs.txt": "runs.txt", "report.txt": "report.txt",
        "gpu-utilization.csv": "gpu-utilization.csv", "bench.txt": "bench.txt",
        "bench/bench.json": "bench.json", "bench/bench.md": "bench.md",
        "runs/sweep.json": "sweep.json", "runs-report/report.md": "report.md"}
MAX_BYTES = 1 << 30  # all that is read, uncompressed
_TASK = re.compile(r"[a-z0-9][a-z0-9_]*")
_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_NUMBER = re.compile(r"[0-9]+")
_COPIED = re.compile(r"runs: ([0-9]+) finished runs copied$", re.MULTILINE)
_LEFTOVER = re.compile(r"\.keep-[0-9]+\.[A-Za-z0-9_]+")  # tempfile.mkdtemp's names


class Refused(Exception):
    """What came back cannot be kept as it is."""


def _wanted(name: str) -> bool:
    parts = name.split("/")
    return name in KEPT or (len(parts) == 3 and parts[0] == "runs"
                            and parts[2].removesuffix(".gz") in RUN_FILES)


def _read_packed(archive: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            name = member.name.removeprefix("./").rstrip("/")
            if name.startswith("/") or ".." in name.split("/") \
                    or not (member.isfile() or member.isdir()):
                raise Refused(f"{archive.name}: refused member {member.name!r}")
            if member.isfile() and _wanted(name):
                data = tar.extractfile(member)
                files[name] = data.read() if data is not None else b""
    return files


def _read_folder(folder: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if _wanted(name):
            if path.is_symlink() or not path.is_file():
                raise Refused(f"{name}: not a plain file")
            files[name] = path.read_bytes()
    return files


def read_call(source: Path) -> dict[str, bytes]:
    """The files of one call that are kept, by their name in ``run.sh``'s output folder;
    run files gunzipped (``runs/<run>/results.json``)."""
    if not (source / "summary.txt").is_file():
        raise Refused(f"{source}: no summary.txt (not what run.sh writes)")
    packed = source / "gpu-results.tar.gz"
    files = _read_packed(packed) if packed.is_file() else {}
    for name, data in _read_folder(source).items():
        files.setdefault(name, data)  # summary.txt and bench.md stay beside the archive
    if "env.txt" not in files:
        raise Refused(f"{source}: neither gpu-results.tar.gz nor env.txt (not what run.sh writes)")
    out, total = {}, 0
    for name, data in files.items():
        if name.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as err:
                raise Refused(f"{name}: damaged ({err})") from None
            name = name.removesuffix(".gz")
        total += len(data)
        if total > MAX_BYTES:
            raise Refused(f"{source}: more than {MAX_BYTES} bytes to keep")
        out[name] = data
    return out


def runs_by_task(files: dict[str, bytes], skip_incomplete: bool = False
                 ) -> dict[str, dict[str, dict[str, bytes]]]:
    """``{task: {run: {file: bytes}}}`` of the runs; a run without its ``config.json`` or
    ``results.json`` is refused, or with ``skip_incomplete`` left out (named on stderr)."""
    runs: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "runs":
            runs.setdefault(parts[1], {})[parts[2]] = data
    tasks: dict[str, dict[str, dict[str, bytes]]] = {}
    for run, run_files in sorted(runs.items()):
        missing = [need for need in ("config.json", "results.json") if need not in run_files]
        if missing and skip_incomplete:
            print(f"keep_results: runs/{run} left out: no {' and no '.join(missing)}",
                  file=sys.stderr)
            continue
        if missing:
            raise Refused(f"runs/{run}: no {missing[0]} (--skip-incomplete keeps the others)")
        try:
            task = json.loads(run_files["config.json"])["task"]["name"]
        except (ValueError, KeyError, TypeError) as err:
            raise Refused(f"runs/{run}/config.json names no task ({err!r})") from None
        if not isinstance(task, str) or not _TASK.fullmatch(task) or not _RUN.fullmatch(run):
            raise Refused(f"runs/{run}: the task ({task!r}) or the run's name is not a plain "
                          "name")
        tasks.setdefault(task, {})[run] = run_files
    return tasks


def task_archive(runs: dict[str, dict[str, bytes]]) -> bytes:
    """``runs/<run>/<file>`` of every run, sorted, owner root, time 0: the same runs give the
    same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", format=tarfile.GNU_FORMAT) as tar:
        def add(name: str, data: bytes | None) -> None:
            info = tarfile.TarInfo(name)
            info.uname = info.gname = "root"
            info.mtime = 0
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        add("runs", None)
        for run in sorted(runs):
            add(f"runs/{run}", None)
            for name in sorted(runs[run]):
                add(f"runs/{run}/{name}", runs[run][name])
    return buffer.getvalue()


def next_number(dest: Path) -> int:
    numbers = [int(p.name) for p in dest.iterdir() if p.is_dir() and _NUMBER.fullmatch(p.name)] \
        if dest.is_dir() else []
    return max(numbers, default=0) + 1


def remove_leftovers(dest: Path) -> list[Path]:
    """Delete each ``dest/.keep-<n>.*`` folder a killed call left behind, where it holds only
    plain files of the names :func:`keep` writes; returns those left as they are."""
    ours = set(KEPT.values())
    left = []
    for tmp in sorted(dest.iterdir()) if dest.is_dir() else []:
        if not (_LEFTOVER.fullmatch(tmp.name) and tmp.is_dir() and not tmp.is_symlink()):
            continue
        files = list(tmp.iterdir())
        if all(f.is_file() and not f.is_symlink()
               and (f.name in ours or re.fullmatch(r"runs-[a-z0-9_]+\.tar\.xz", f.name))
               for f in files):
            for f in files:
                f.unlink()
            tmp.rmdir()
        else:
            left.append(tmp)
    return left


def keep(source: Path, dest: Path, number: int | None = None, skip_incomplete: bool = False
         ) -> tuple[Path, dict[str, int]]:
    """Write ``dest/<number>``; returns it and the number of runs per task."""
    files = read_call(source)
    tasks = runs_by_task(files, skip_incomplete)
    copied = _COPIED.findall(files["summary.txt"].decode("utf-8", "replace"))
    kept = sum(len(runs) for runs in tasks.values())
    if kept < sum(map(int, copied)) and not skip_incomplete:
        raise Refused(f"{source}: {kept} runs came back, summary.txt says {sum(map(int, copied))} "
                      "were copied")
    number = next_number(dest) if number is None else number
    if number < 1:
        raise Refused(f"--number must be at least 1, not {number}")
    target = dest / str(number)
    if target.exists():
        raise Refused(f"{target} exists: nothing was written")
    dest.mkdir(parents=True, exist_ok=True)
    for other in remove_leftovers(dest):
        print(f"keep_results: {other} is not a folder this script left: left as it is",
              file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix=f".keep-{number}.", dir=dest))
    try:
        for name, kept in KEPT.items():
            if name in files:
                (tmp / kept).write_bytes(files[name])
        for task, runs in tasks.items():
            (tmp / f"runs-{task}.tar.xz").write_bytes(task_archive(runs))
        os.chmod(tmp, 0o755)
        if target.exists() or target.is_symlink():  # appeared meanwhile
            raise Refused(f"{target} exists: nothing was written")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target, {task: len(runs) for task, runs in sorted(tasks.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, metavar="FROM")
    ap.add_argument("dest", type=Path, metavar="DEST")
    ap.add_argument("--number", type=int, default=None)
    ap.add_argument("--skip-incomplete", action="store_true",
                    help="keep the other runs where one lacks config.json or results.json")
    args = ap.parse_args(argv)
    try:
        target, counts = keep(args.source, args.dest, args.number, args.skip_incomplete)
    except (Refused, OSError, tarfile.TarError, EOFError) as err:
        print(f"keep_results: {err}", file=sys.stderr)
        return 1
    runs = ", ".join(f"{task} {n}" for task, n in counts.items()) or "none"
    print(f"{target}: {sum(counts.values())} runs ({runs}); "
          f"{' '.join(sorted(p.name for p in target.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
