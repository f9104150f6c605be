r"""The run directory of ``isotropy train``.

::

    config.json         every setting, the resolved data source and sizes, versions, git commit
    metrics.jsonl       one JSON object per Trainer log (training and evaluation)
    measurements.jsonl  one JSON object per evaluation: the representation measurements
                        (per layer, spectra, per-dimension mean/std, undefined-value reasons)
    checkpoint-N/       the Trainer's checkpoints, plus isotropy_state.pt (Sigma_S, the entropy
                        window, the measurements' Sigma_S), written last: a checkpoint without
                        it is incomplete (the run stopped while writing it) and never resumed
    eval_predictions.csv  one row per evaluation example (guid, label, prediction, outputs)
    model/              the fine-tuned model and tokenizer (``AutoModel...from_pretrained``)
    results.json        final and best metrics; written last: its presence marks a finished run
    .isotropy-run.lock  held by the one process writing the run (:meth:`RunDirectory.writer`)

A run directory has one writer: a second ``isotropy train`` (or sweep worker) on a folder in
use is refused with one line naming the process that holds it. The lock is released when its
holder ends, however it ends, so a killed run's folder is taken over by the next command.

A folder is taken for a run only by its own record: a ``config.json`` that is a JSON object
with the ``settings`` sections ``isotropy`` and ``training`` (and, where present, an integer
``measurement_format``), as :meth:`RunDirectory.write_config` writes it. Any other folder that
is not empty (a model folder, a finished run's ``model/``, someone's files) is refused with one
line and never changed; and in a run's folder, clearing it deletes only the entries a run
writes (:func:`written_by_a_run`), leaving any other file where it is.

A finished run is not re-run unless ``overwrite``; an unfinished one is continued with
``resume`` (from its last complete checkpoint) or started again with ``overwrite``; an
unfinished one without any complete checkpoint has nothing to continue and is started again.

``config.json`` holds ``measurement_format`` (absent in runs written before it existed: 1).
Format 2: per-layer IsoScore* shrinks each layer's cloud toward that layer's own
:math:`\Sigma_S` (format 1: toward the union's), and the training-time [CLS] anisotropy
spectrum is taken over the whole gradient-accumulation cycle, with its number of points
(format 1: per micro-batch). Task metrics and the union's IsoScore* mean the same in both.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from isotropy.io import (
    output_dir_problem,
    read_json,
    read_text_utf8,
    to_jsonable,
    write_json_atomic,
    write_text_atomic,
)
from isotropy.locking import exclusive_lock

__all__ = [
    "MEASUREMENT_FORMAT",
    "RunDirectory",
    "checkpoint_files",
    "checkpoint_problem",
    "git_commit",
    "library_versions",
    "read_jsonl_whole",
    "written_by_a_run",
]

MEASUREMENT_FORMAT = 2

CONFIG = "config.json"
RESULTS = "results.json"
METRICS = "metrics.jsonl"
MEASUREMENTS = "measurements.jsonl"
PREDICTIONS = "eval_predictions.csv"
MODEL = "model"
CHECKPOINT_STATE = "isotropy_state.pt"
TRAINER_STATE = "trainer_state.json"
LOCK = ".isotropy-run.lock"


def _is_bookkeeping(name: str) -> bool:
    """The lock file and the writability probe: never part of a run."""
    return name.startswith(LOCK) or name.startswith(".isotropy-write-test-")


# what a stop (SIGKILL) can leave behind of a write in progress: save_model's temporary
# folder (tempfile.mkdtemp(prefix=".model-")) and the atomic writers' temporary files of the
# run's own files (``.<name>.<random>.tmp<suffix>``, :func:`isotropy.io.atomic_path`)
_LEFTOVER = re.compile(
    r"\.model-[a-z0-9_]{8}"
    r"|\.(config\.json|results\.json|metrics\.jsonl|measurements\.jsonl"
    r"|eval_predictions\.csv)\.[a-z0-9_]{8}\.tmp\.(json|jsonl|csv)")
_CHECKPOINT = re.compile(r"checkpoint-[0-9]+")
_RUN_FILES = frozenset({CONFIG, RESULTS, METRICS, MEASUREMENTS, PREDICTIONS, MODEL,
                        "tensorboard"})


def _is_leftover(name: str) -> bool:
    """A temporary file or folder of a write that a stop cut short (ours by its name)."""
    return _LEFTOVER.fullmatch(name) is not None


def written_by_a_run(name: str) -> bool:
    """Whether an entry of a run directory named ``name`` is one a run writes: its files,
    ``model/``, ``checkpoint-N/``, the TensorBoard folder, and the temporary files of its
    writes.

    >>> [written_by_a_run(n) for n in ("metrics.jsonl", "checkpoint-12", "thesis.txt")]
    [True, True, False]
    """
    return name in _RUN_FILES or _CHECKPOINT.fullmatch(name) is not None or _is_leftover(name)


def run_record_problem(config: Any) -> str | None:
    """Why ``config`` (the parsed ``config.json`` of a folder) is not the record of a run of
    ours, or ``None`` when it is: a JSON object whose ``settings`` holds the ``isotropy`` and
    ``training`` sections, and whose ``measurement_format``, when present, is an integer.

    >>> run_record_problem({"settings": {"isotropy": {}, "training": {}},
    ...                     "measurement_format": 2}) is None
    True
    >>> run_record_problem({"model_type": "bert", "architectures": ["BertModel"]})
    'it has no settings of an isotropy run (keys: architectures, model_type)'
    """
    if not isinstance(config, dict):
        return f"it holds a JSON {type(config).__name__}, not the object a run writes"
    settings = config.get("settings")
    if not isinstance(settings, dict) or not all(
            isinstance(settings.get(k), dict) for k in ("isotropy", "training")):
        keys = ", ".join(sorted(map(str, config))[:6]) or "none"
        return f"it has no settings of an isotropy run (keys: {keys})"
    fmt = config.get("measurement_format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int):
        return f"its measurement_format is {fmt!r}, not a format number"
    return None


def library_versions() -> dict[str, str]:
    """Versions of the libraries a run depends on."""
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for name in ("isotropy", "torch", "transformers", "accelerate", "numpy", "scikit-learn",
                 "scipy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str | None:
    """The commit of the source tree of this package, if it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None



# the files every resume reads, for a checkpoint written before its list of files was kept
_RESUME_READS = (TRAINER_STATE, "optimizer.pt", "scheduler.pt")


def checkpoint_files(folder: Path) -> dict[str, int]:
    """Every file of a checkpoint folder (path relative to it) with its size in bytes, but
    ``isotropy_state.pt`` itself: kept in ``isotropy_state.pt`` (``files``) when the checkpoint
    is written, so that a resume can tell a whole checkpoint from a damaged one."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith((CHECKPOINT_STATE, f".{CHECKPOINT_STATE}"))}


def checkpoint_problem(folder: Path, files: Mapping[str, int] | None) -> str | None:
    """What is missing or changed in a complete checkpoint folder, or ``None`` when it holds
    every file it was written with (``files``, :func:`checkpoint_files`); for a checkpoint
    written before that list was kept (``None``), the files every resume reads (the Trainer's
    state, optimizer, schedule and random state). A resume from a checkpoint missing one of
    them would silently restart the schedule or draw other random numbers.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "optimizer.pt").write_bytes(b"12345")
    >>> checkpoint_problem(d, {"optimizer.pt": 5, "scheduler.pt": 3})
    'scheduler.pt is missing'
    >>> checkpoint_problem(d, {"optimizer.pt": 9})
    'optimizer.pt holds 5 bytes, 9 when the checkpoint was written (cut short or changed)'
    >>> checkpoint_problem(d, None)  # an older checkpoint: no list, so every file it needs
    'trainer_state.json, scheduler.pt, rng_state.pth are missing'
    """
    if files is None:
        missing = [n for n in _RESUME_READS if not (folder / n).is_file()]
        rng = sorted(folder.glob("rng_state*.pth"))
        if not rng:
            missing.append("rng_state.pth")
        if missing:
            return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
        empty = [p.name for p in [*(folder / n for n in _RESUME_READS), *rng]
                 if p.stat().st_size == 0]  # no state file of torch's or the Trainer's is empty
        return f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty" if empty else None
    if not isinstance(files, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in files.items()):
        return "its list of files (isotropy_state.pt) is not a list of names and sizes"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        now = path.stat().st_size
        if now != size:
            return (f"{name} holds {now} bytes, {size} when the checkpoint was written (cut "
                    "short or changed)")
    return None


def _whole_records(text: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
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


def _is_whole_line(line: str) -> bool:
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
    for i, _, rec in _whole_records(text):
        out.append(rec)
        last = i
    bad = next((i for i in range(last + 1, len(lines)) if lines[i].strip()), None)
    if bad is None:
        return out, None
    return out, (f"{path.name}: line {bad + 1} of {len(lines)} is cut short or "
                 f"unreadable; the {len(out)} whole records before it are used")


class RunDirectory:
    """Paths and state of one run directory (see the module doc)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def finished(self) -> bool:
        return self.file(RESULTS).is_file()

    def checkpoints(self) -> list[Path]:
        """Checkpoint folders ordered by step."""
        found = []
        if self.path.is_dir():
            for p in self.path.glob("checkpoint-*"):
                tail = p.name.rsplit("-", 1)[-1]
                if p.is_dir() and tail.isdigit():
                    found.append((int(tail), p))
        return [p for _, p in sorted(found)]

    @staticmethod
    def is_complete(checkpoint: Path) -> bool:
        """Whether a checkpoint folder was written to the end (its last file is there); a
        complete one may since have been damaged (:func:`checkpoint_problem`)."""
        return (checkpoint / CHECKPOINT_STATE).is_file()

    def complete_checkpoints(self) -> list[Path]:
        """The complete checkpoint folders, ordered by step."""
        return [p for p in self.checkpoints() if self.is_complete(p)]

    def last_checkpoint(self) -> Path | None:
        """The last complete checkpoint (``None`` if there is none)."""
        cps = self.complete_checkpoints()
        return cps[-1] if cps else None

    def drop_checkpoints(self, *, incomplete: bool = True, after: int | None = None
                         ) -> list[Path]:
        """Delete the incomplete checkpoints, and with ``after`` those of later steps (the
        future a resumed run replaces); returns what was deleted."""
        doomed = [p for p in self.checkpoints()
                  if (incomplete and not self.is_complete(p))
                  or (after is not None and int(p.name.rsplit("-", 1)[-1]) > after)]
        linked = [p for p in doomed if p.is_symlink()]
        if linked:  # a link is not a checkpoint this run wrote: neither it nor its target goes
            raise ValueError(f"{linked[0]} is a link to {os.readlink(linked[0])}, not a "
                             "checkpoint this run wrote; nothing is removed: remove the link, "
                             "or choose another output directory")
        for p in doomed:
            shutil.rmtree(p)
        return doomed

    def check_writable(self) -> None:
        """Raise ``ValueError`` unless the folder can be created and written
        (:func:`isotropy.io.output_dir_problem`); then create it."""
        problem = output_dir_problem(self.path)
        if problem is not None:
            raise ValueError(f"output directory {self.path}: {problem}")
        self.path.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """Be the run's one writer for the ``with`` block: create the folder if needed and
        hold its lock (:func:`isotropy.locking.exclusive_lock`), or raise ``ValueError`` with
        one line naming the process that holds it. Taken before :meth:`prepare` reads the
        folder, kept until the last file is written."""
        self.check_writable()
        self._check_holds_a_run()  # before the lock file is put into a folder of other files
        with exclusive_lock(self.path, LOCK, what=f"run directory {self.path}"):
            yield

    def _check_holds_a_run(self) -> None:
        """``ValueError`` (one line) when the folder holds files but no run of ours: no
        ``config.json``, or one that is not a run's record (:func:`run_record_problem`)."""
        entries = [p for p in self.path.iterdir()
                   if not _is_bookkeeping(p.name) and not _is_leftover(p.name)]
        if not entries:
            return
        config = self.file(CONFIG)
        if not config.is_file():
            raise ValueError(
                f"output directory {self.path} is not empty and holds no run "
                f"({CONFIG} missing): choose another --output_dir"
            )
        try:
            problem = run_record_problem(json.loads(read_text_utf8(config)))
        except (OSError, ValueError) as err:
            problem = f"it is not readable JSON ({str(err).splitlines()[0]})"
        if problem is not None:
            raise ValueError(
                f"output directory {self.path} holds no run of isotropy: its {CONFIG} is not "
                f"a run's record ({problem}); nothing in it is changed: choose another "
                "--output_dir"
            )

    def check_not_foreign(self) -> None:
        """``ValueError`` (one line) when the folder exists, is not empty and holds no run of
        ours; changes nothing (checked before any work; a missing folder passes)."""
        if self.path.is_dir():
            self._check_holds_a_run()

    def _drop_leftovers(self) -> None:
        """Delete what a stop left of a write in progress (``.model-*`` folders, the atomic
        writers' temporary files of the run's files): only ever in a run's own folder."""
        for p in self.path.iterdir():
            if _is_leftover(p.name):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()

    def _logged_anything(self) -> bool:
        """Whether ``metrics.jsonl`` holds a whole line (newline-terminated, parseable or
        not): a run that logged something, unlike one cut while writing its first line."""
        path = self.file(METRICS)
        if not path.is_file():
            return False
        with path.open("rb") as f:
            return any(line.strip() and line.endswith(b"\n") for line in f)

    def prepare(self, *, resume: bool, overwrite: bool,
                same_settings: Callable[[Mapping[str, Any]], str | None]) -> str:
        """Decide what to do with the folder: ``'new'``, ``'resume'``, ``'finished'``, or
        ``'restart'``: an unfinished run without a complete checkpoint (nothing to continue)
        is cleared and started again when it has the same settings, or when it logged nothing
        (a run that did no work never blocks the next); with other settings after some work,
        it is refused like any other run.

        ``same_settings(old_config)`` returns a description of a difference (resume refuses
        to continue a run with other settings) or ``None``.
        """
        self.check_writable()
        self._check_holds_a_run()
        self._drop_leftovers()  # a run's own folder (or one holding nothing but those)
        entries = [p for p in self.path.iterdir() if not _is_bookkeeping(p.name)]
        if not entries:
            return "new"
        if overwrite:
            self.clear()
            return "new"
        diff = same_settings(self.read_config())
        if self.finished:
            if diff:
                raise ValueError(
                    f"{self.path} holds a finished run with other settings ({diff}): choose "
                    "another --output_dir (the finished run is kept)"
                )
            return "finished"
        if self.last_checkpoint() is None and (not diff or not self._logged_anything()):
            # nothing to continue, and either the same run or one that logged nothing
            self.clear()
            return "restart"
        if self.last_checkpoint() is None and not resume:
            raise ValueError(
                f"{self.path} holds an unfinished run with other settings ({diff}) and no "
                "checkpoint: pass --overwrite to replace it or choose another --output_dir"
            )
        if not resume:
            raise ValueError(
                f"{self.path} holds an unfinished run: pass --resume to continue it or "
                "--overwrite to start again"
            )
        if diff:
            raise ValueError(f"cannot resume {self.path}: {diff}")
        return "resume"

    def clear(self) -> None:
        """Delete the run's contents (only called on a folder holding a run): the entries a
        run writes (:func:`written_by_a_run`); not its lock, and never another file."""
        for p in self.path.iterdir():
            if _is_bookkeeping(p.name) or not written_by_a_run(p.name):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()

    def read_config(self) -> dict[str, Any]:
        return read_json(self.file(CONFIG), "run's record (a JSON object)")

    def write_config(self, config: Mapping[str, Any]) -> Path:
        return write_json_atomic(self.file(CONFIG), config)

    def write_results(self, results: Mapping[str, Any]) -> Path:
        return write_json_atomic(self.file(RESULTS), results)

    def read_results(self) -> dict[str, Any]:
        return read_json(self.file(RESULTS), "run's results (a JSON object)")

    def _append_jsonl(self, name: str, record: Mapping[str, Any]) -> None:
        """Append one JSON line to ``name`` (written whole, flushed and synced)."""
        line = json.dumps(to_jsonable(record), allow_nan=False) + "\n"
        try:
            with self.file(name).open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:  # a failed write() names no file: name it
            raise OSError(err.errno, err.strerror, str(self.file(name))) from err

    def _truncate_jsonl(self, name: str, max_step: int) -> None:
        """Keep only the records of ``name`` up to ``max_step`` (rewritten atomically), never
        past a line cut short by a crash or damaged (:func:`read_jsonl_whole`'s rule)."""
        path = self.file(name)
        if not path.is_file():
            return
        text = path.read_text(encoding="utf-8")
        whole = list(_whole_records(text))
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

    def _terminated_lines(self, name: str) -> list[str]:
        """The lines of the whole, newline-terminated records of ``name``, up to the first one
        that is not (appending after it would join two records)."""
        path = self.file(name)
        if not path.is_file():
            return []
        out = []
        for _, line, _ in _whole_records(path.read_text(encoding="utf-8")):
            if not line.endswith("\n"):
                break
            out.append(line)
        return out

    def _whole_lines(self, name: str) -> int:
        """The number of whole (newline-terminated, parseable) records of ``name``."""
        return len(self._terminated_lines(name))

    def check_records(self, counts: Mapping[str, int] | None, checkpoint: str) -> list[str]:
        """Check that ``metrics.jsonl`` and ``measurements.jsonl`` can be cut back to a
        checkpoint that counted ``counts`` records (``None``: a checkpoint written before
        they were counted); returns a line for each last line cut short by the stop (dropped
        on resume). ``ValueError`` (one line, naming the file and line) when a line that is
        not a whole record has whole records after it (damage, not a stop: resuming would
        drop them too), or when the file holds fewer whole records than the checkpoint
        counted (records before it are lost)."""
        notes = []
        for name in (METRICS, MEASUREMENTS):
            path = self.file(name)
            if not path.is_file():
                continue
            lines = read_text_utf8(path).splitlines(keepends=True)
            whole = len(self._terminated_lines(name))
            bad = next((i for i, line in enumerate(lines)
                        if line.strip() and not _is_whole_line(line)), None)
            if bad is not None:
                after = sum(1 for line in lines[bad + 1:] if line.strip())
                if after:
                    raise ValueError(
                        f"cannot resume {self.path}: {path} line {bad + 1} of {len(lines)} is "
                        f"not a whole JSON record and {after} line(s) follow it (damage, not a "
                        "stop: resuming would drop them): repair or remove that line, or pass "
                        "--overwrite to start again")
                notes.append(f"{name}: line {bad + 1} of {len(lines)} was cut short when the "
                             "run stopped: dropped")
            if counts is not None and counts.get(name, 0) > whole:
                raise ValueError(
                    f"cannot resume {self.path}: {path} holds {whole} whole records, but "
                    f"{checkpoint} was written after {counts[name]} (records before it are "
                    "lost): pass --overwrite to start again")
        return notes

    def record_counts(self) -> dict[str, int]:
        """How many records ``metrics.jsonl`` and ``measurements.jsonl`` hold (kept with a
        checkpoint, so that resuming it keeps exactly the records written before it)."""
        return {METRICS: self._whole_lines(METRICS), MEASUREMENTS: self._whole_lines(MEASUREMENTS)}

    def keep_records(self, counts: Mapping[str, int]) -> None:
        """Keep the first ``counts[name]`` records of each file (rewritten atomically); never
        a line cut short (a file that holds fewer whole records than counted keeps those)."""
        for name, n in counts.items():
            if self.file(name).is_file():
                lines = self._terminated_lines(name)[:n]
                write_text_atomic(self.file(name), "".join(lines))

    def _read_jsonl(self, name: str) -> list[dict[str, Any]]:
        """Every record of ``name`` (none when it is absent); ``ValueError`` naming the file
        and line when one is damaged or cut short, rather than fewer records without a word
        (:func:`read_jsonl_whole` gives the whole records before such a line, with a note)."""
        path = self.file(name)
        if not path.is_file():
            return []
        records, note = read_jsonl_whole(path)
        if note is not None:
            raise ValueError(f"{self.path}: {note}")
        return records

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (flushed and synced)."""
        self._append_jsonl(METRICS, record)

    def truncate_metrics(self, max_step: int) -> None:
        """Keep only the records up to ``max_step`` (a resumed run redoes the later ones)."""
        self._truncate_jsonl(METRICS, max_step)

    def read_metrics(self) -> list[dict[str, Any]]:
        return self._read_jsonl(METRICS)

    def append_measurements(self, record: Mapping[str, Any]) -> None:
        """Append one evaluation's measurements to ``measurements.jsonl`` (flushed and synced)."""
        self._append_jsonl(MEASUREMENTS, record)

    def truncate_measurements(self, max_step: int) -> None:
        """Keep only the measurements up to ``max_step`` (a resumed run redoes the later ones)."""
        self._truncate_jsonl(MEASUREMENTS, max_step)

    def read_measurements(self) -> list[dict[str, Any]]:
        return self._read_jsonl(MEASUREMENTS)

    def save_model(self, model: Any, tokenizer: Any) -> Path:
        """``save_pretrained`` of model and tokenizer into ``model/``, moved into place whole."""
        from transformers.utils import logging as hf_logging

        from isotropy.runtime import fault_point

        target = self.file(MODEL)
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise ValueError(f"{target} is {'a link' if target.is_symlink() else 'a file'}, "
                             "not the model folder this run writes; nothing is saved over it: "
                             "remove it, or choose another output directory")
        tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=self.path))
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # transformers 5's "Writing model shards" bar
        try:
            model.save_pretrained(tmp)
            fault_point("model_saving")  # a kill here leaves .model-XXXXXXXX (next run: deleted)
            tokenizer.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        return target
