"""A run's checkpoint folders: which are whole, which were cut short, which to delete."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from isotropy.rundir.layout import CHECKPOINT_STATE, TRAINER_STATE, checkpoint_name_step

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


def checkpoint_folders(run: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of a run directory (named as the Trainer names them:
    :func:`~isotropy.rundir.layout.checkpoint_name_step`), ordered by step ``N``."""
    found = []
    if run.is_dir():
        for p in run.glob("checkpoint-*"):
            step = checkpoint_name_step(p.name)
            if p.is_dir() and step is not None:
                found.append((step, p))
    return [p for _, p in sorted(found)]


# what the Trainer's rotation takes for a checkpoint (transformers' sort_checkpoints: a folder
# globbed as checkpoint-*, its path matched by .*checkpoint-([0-9]+)), and deletes when old
_TRAINERS_CHECKPOINT = re.compile(r".*checkpoint-[0-9]+")


def foreign_checkpoint(run: Path) -> str | None:
    """Why the folder ``run`` cannot hold a run, or ``None``: an entry named like a checkpoint
    that no run wrote. A link (``checkpoint-5`` linking to another run's: a resume would read
    it); a file or anything but a folder named ``checkpoint-N`` (the Trainer's save at step N
    would fail on it); a folder such as ``checkpoint-4.bak`` or ``checkpoint-007``, which the
    Trainer's rotation (``save_total_limit``) and its end of training delete as an old
    checkpoint (their rule matches the whole path: ``.*checkpoint-<digits>``).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "checkpoint-4").mkdir(); (d / "checkpoint-notes").mkdir()
    >>> foreign_checkpoint(d) is None  # a run's checkpoint; a name the Trainer passes over
    True
    >>> (d / "checkpoint-4.bak").mkdir()
    >>> print(foreign_checkpoint(d))  # doctest: +ELLIPSIS
    it holds checkpoint-4.bak/, not a checkpoint a run wrote, which the Trainer's checkpoint \
rotation would delete ...
    """
    for p in sorted(run.glob("checkpoint-*")):
        ours = checkpoint_name_step(p.name) is not None  # a name a run writes
        if p.is_symlink():
            return (f"{p.name} is a link to {os.readlink(p)}, not a checkpoint a run wrote (the "
                    "Trainer and a resume take checkpoint-* for the run's own): remove the "
                    "link, or choose another output directory")
        if ours and not p.is_dir():
            return (f"it holds a file named {p.name}, where the Trainer writes the checkpoint "
                    "of that step: move it out, or choose another output directory")
        if not ours and p.is_dir() and any(
                _TRAINERS_CHECKPOINT.match(str(q)) for q in (p, p.absolute())):
            return (f"it holds {p.name}/, not a checkpoint a run wrote, which the Trainer's "
                    "checkpoint rotation would delete (it takes any folder named "
                    "checkpoint-<step>...): move it out, or choose another output directory")
    return None


def is_complete(checkpoint: Path) -> bool:
    """Whether a checkpoint folder was written to the end (its last file is there); a
    complete one may since have been damaged (:func:`checkpoint_problem`)."""
    return (checkpoint / CHECKPOINT_STATE).is_file()


def drop_checkpoints(run: Path, *, incomplete: bool = True, after: int | None = None
                     ) -> list[Path]:
    """Delete the incomplete checkpoints of a run directory, and with ``after`` those of
    later steps (the future a resumed run replaces); returns what was deleted. A link among
    them (not a checkpoint the run wrote) is a ``ValueError``, before anything is deleted."""
    doomed = [p for p in checkpoint_folders(run)
              if (incomplete and not is_complete(p))
              or (after is not None and int(p.name.rsplit("-", 1)[-1]) > after)]
    linked = [p for p in doomed if p.is_symlink()]
    if linked:  # a link is not a checkpoint this run wrote: neither it nor its target goes
        raise ValueError(f"{linked[0]} is a link to {os.readlink(linked[0])}, not a "
                         "checkpoint this run wrote; nothing is removed: remove the link, "
                         "or choose another output directory")
    for p in doomed:
        shutil.rmtree(p)
    return doomed
