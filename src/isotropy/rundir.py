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
    "git_commit",
    "library_versions",
    "read_jsonl_whole",
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
        """Whether a checkpoint folder was written to the end (its last file is there)."""
        return (checkpoint / TRAINER_STATE).is_file() and (checkpoint / CHECKPOINT_STATE).is_file()

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
        gone = []
        for p in self.checkpoints():
            step = int(p.name.rsplit("-", 1)[-1])
            if (incomplete and not self.is_complete(p)) or (after is not None and step > after):
                shutil.rmtree(p)
                gone.append(p)
        return gone

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
        """``ValueError`` when the folder holds files but no run (``config.json`` missing)."""
        entries = [p for p in self.path.iterdir() if not _is_bookkeeping(p.name)]
        if entries and not self.file(CONFIG).is_file():
            raise ValueError(
                f"output directory {self.path} is not empty and holds no run "
                f"({CONFIG} missing): choose another --output_dir"
            )

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
        entries = [p for p in self.path.iterdir() if not _is_bookkeeping(p.name)]
        if not entries:
            return "new"
        self._check_holds_a_run()
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
        if self.last_checkpoint() is None and (not diff or not self._whole_lines(METRICS)):
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
        """Delete the run's contents (only called on a folder holding a run), not its lock."""
        for p in self.path.iterdir():
            if _is_bookkeeping(p.name):
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
        kept = [line.rstrip("\n") for _, line, rec in _whole_records(text)
                if rec.get("step", 0) <= max_step]
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
        path = self.file(name)
        if not path.is_file():
            return []
        return read_jsonl_whole(path)[0]

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

        target = self.file(MODEL)
        tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=self.path))
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # transformers 5's "Writing model shards" bar
        try:
            model.save_pretrained(tmp)
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
