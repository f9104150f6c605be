"""A run directory of ``isotropy train`` (its files: :mod:`isotropy.rundir.layout`): its one
writer, what a new command does with what it holds, and its files read and written.

A run directory has one writer: a second ``isotropy train`` (or sweep worker) on a folder in
use is refused with one line naming the process that holds it. The lock is released when its
holder ends, however it ends, so a killed run's folder is taken over by the next command.

Any folder that is not empty and holds no run of ours (a model folder, a finished run's
``model/``, someone's files) is refused with one line and never changed; in a run's folder,
clearing it deletes only the entries a run writes, leaving any other file where it is.

A finished run is not re-run unless ``overwrite``; an unfinished one is continued with
``resume`` (from its last complete checkpoint) or started again with ``overwrite``; an
unfinished one without any complete checkpoint has nothing to continue and is started again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from isotropy.io import output_dir_problem, read_json, read_text_utf8, write_json_atomic
from isotropy.locking import exclusive_lock
from isotropy.rundir.checkpoints import (
    checkpoint_folders,
    drop_checkpoints,
    foreign_checkpoint,
    is_complete,
)
from isotropy.rundir.layout import (
    CONFIG,
    LOCK,
    MEASUREMENTS,
    METRICS,
    MODEL,
    RESULTS,
    is_bookkeeping,
    is_leftover,
    run_record_problem,
    written_by_a_run,
)
from isotropy.rundir.ownership import folder_files, unowned_file
from isotropy.rundir.records import RecordFile


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
        return checkpoint_folders(self.path)

    @staticmethod
    def is_complete(checkpoint: Path) -> bool:
        """Whether a checkpoint folder was written to the end (its last file is there); a
        complete one may since have been damaged (:func:`~isotropy.rundir.checkpoint_problem`)."""
        return is_complete(checkpoint)

    def complete_checkpoints(self) -> list[Path]:
        """The complete checkpoint folders, ordered by step."""
        return [p for p in self.checkpoints() if is_complete(p)]

    def last_checkpoint(self) -> Path | None:
        """The last complete checkpoint (``None`` if there is none)."""
        cps = self.complete_checkpoints()
        return cps[-1] if cps else None

    def drop_checkpoints(self, *, incomplete: bool = True, after: int | None = None
                         ) -> list[Path]:
        """Delete the incomplete checkpoints, and with ``after`` those of later steps (the
        future a resumed run replaces); returns what was deleted
        (:func:`~isotropy.rundir.checkpoints.drop_checkpoints`)."""
        return drop_checkpoints(self.path, incomplete=incomplete, after=after)

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
                   if not is_bookkeeping(p.name) and not is_leftover(p.name)]
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

    def check_not_foreign(self, *, overwrite: bool = False) -> None:
        """``ValueError`` (one line) when the folder exists, is not empty and holds no run of
        ours, or holds a folder or link the Trainer would take for a checkpoint that no run
        wrote (:func:`~isotropy.rundir.checkpoints.foreign_checkpoint`) where a run will
        train (a finished run is kept, and trains nothing, unless ``overwrite``); changes
        nothing (checked before any work; a missing folder passes)."""
        if self.path.is_dir():
            self._check_holds_a_run()
            if self.finished and not overwrite:  # nothing trains: no checkpoint is rotated
                return
            problem = foreign_checkpoint(self.path)
            if problem is None:
                problem = self._unowned_file_problem()
            if problem is not None:
                raise ValueError(f"output directory {self.path}: {problem}")

    def _drop_leftovers(self) -> None:
        """Delete what a stop left of a write in progress (``.model-*`` folders, the atomic
        writers' temporary files of the run's files): only ever in a run's own folder."""
        for p in self.path.iterdir():
            if is_leftover(p.name):
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
        entries = [p for p in self.path.iterdir() if not is_bookkeeping(p.name)]
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

    def _unowned_file_problem(self) -> str | None:
        """A user's file inside one of the run's own folders, which deleting or replacing that
        folder would take along (:func:`~isotropy.rundir.ownership.unowned_file`)."""
        try:
            results = self.read_results() if self.finished else None
        except ValueError:
            results = None
        found = unowned_file(self.path, results)
        if found is None:
            return None
        return (f"it holds {found}, a file no run wrote, inside a folder a run deletes or "
                f"replaces ({found.split('/')[0]}/): move it out first")

    def clear(self) -> None:
        """Delete the run's contents (only called on a folder holding a run): the entries a
        run writes (:func:`written_by_a_run`); not its lock, and never another file (a user's
        file inside the run's own folders is a ``ValueError`` before anything is deleted)."""
        problem = self._unowned_file_problem()
        if problem is not None:
            raise ValueError(f"{self.path}: {problem}")
        for p in self.path.iterdir():
            if is_bookkeeping(p.name) or not written_by_a_run(p.name):
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

    def records(self, name: str) -> RecordFile:
        """The JSONL record file ``name`` (``metrics.jsonl`` or ``measurements.jsonl``)."""
        return RecordFile(self.file(name))

    def check_records(self, counts: Mapping[str, int] | None, checkpoint: str) -> list[str]:
        """Check that ``metrics.jsonl`` and ``measurements.jsonl`` can be cut back to a
        checkpoint that counted ``counts`` records (``None``: a checkpoint written before
        they were counted); returns a line for each last line cut short by the stop (dropped
        on resume). ``ValueError`` (one line, naming the file and line) when a line that is
        not a whole record has whole records after it (damage, not a stop: resuming would
        drop them too), or when the file holds fewer whole records than the checkpoint
        counted (records before it are lost): :meth:`RecordFile.check`."""
        notes = []
        for name in (METRICS, MEASUREMENTS):
            counted = counts.get(name, 0) if counts is not None else None
            note = self.records(name).check(counted, self.path, checkpoint)
            if note is not None:
                notes.append(note)
        return notes

    def record_counts(self) -> dict[str, int]:
        """How many records ``metrics.jsonl`` and ``measurements.jsonl`` hold (kept with a
        checkpoint, so that resuming it keeps exactly the records written before it)."""
        return {name: self.records(name).count() for name in (METRICS, MEASUREMENTS)}

    def keep_records(self, counts: Mapping[str, int]) -> None:
        """Keep the first ``counts[name]`` records of each file (rewritten atomically); never
        a line cut short (a file that holds fewer whole records than counted keeps those)."""
        for name, n in counts.items():
            self.records(name).keep(n)

    def append_metrics(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` (flushed and synced)."""
        self.records(METRICS).append(record)

    def truncate_metrics(self, max_step: int) -> None:
        """Keep only the records up to ``max_step`` (a resumed run redoes the later ones)."""
        self.records(METRICS).truncate(max_step)

    def read_metrics(self) -> list[dict[str, Any]]:
        return self.records(METRICS).read()

    def append_measurements(self, record: Mapping[str, Any]) -> None:
        """Append one evaluation's measurements to ``measurements.jsonl`` (flushed and synced)."""
        self.records(MEASUREMENTS).append(record)

    def truncate_measurements(self, max_step: int) -> None:
        """Keep only the measurements up to ``max_step`` (a resumed run redoes the later ones)."""
        self.records(MEASUREMENTS).truncate(max_step)

    def read_measurements(self) -> list[dict[str, Any]]:
        return self.records(MEASUREMENTS).read()

    def model_files(self) -> dict[str, int]:
        """The files of ``model/`` (path relative to it) with their sizes in bytes."""
        return folder_files(self.file(MODEL))

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
