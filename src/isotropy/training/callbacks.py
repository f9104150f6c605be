"""The ``Trainer`` callbacks of ``isotropy train``: the run's ``metrics.jsonl``, and the
harness's own state saved with every checkpoint (written last, atomically, as the mark of a
whole checkpoint) and restored on resume; TensorBoard's event directory."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from isotropy._validation import one_line
from isotropy.losses import IStarLoss, PersistentEntropyLoss
from isotropy.models.shrinkage import (
    ShrinkageRefreshCallback,
    epoch_index,
)
from isotropy.progress import stage
from isotropy.rundir import (
    CHECKPOINT_STATE,
    RunDirectory,
    checkpoint_problem,
)
from isotropy.runtime import fault_point

__all__ = [
    "IsotropyStateCallback",
    "MetricsFileCallback",
    "check_checkpoint",
    "read_checkpoint_state",
    "resume_advice",
]


class MetricsFileCallback(TrainerCallback):
    """Append every Trainer log, with its step and epoch, to ``metrics.jsonl``."""

    def __init__(self, run_dir: RunDirectory, trainer: Any = None) -> None:
        self.run_dir = run_dir
        self.trainer = trainer  # an IsotropyTrainer whose record_evaluations may switch it off

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        if self.trainer is not None and not self.trainer.record_evaluations:
            return control
        if state.is_world_process_zero and logs:
            self.run_dir.append_metrics({"step": state.global_step, "epoch": state.epoch, **logs})
            evaluation = any(k.startswith("eval_") for k in logs)
            fault_point("evaluation_logged" if evaluation else "training_logged")
        return control


class IsotropyStateCallback(ShrinkageRefreshCallback):
    r"""Sigma_S before every epoch from a seeded pass over the training set, and the state a
    resumed run needs saved with every checkpoint.

    The Sigma_S pass reads the training set in an order drawn from its own generator
    (seed + epoch), so it leaves the global random state, and hence training, untouched.
    ``isotropy_state.pt`` in each checkpoint (:meth:`payload`, written by
    :meth:`IsotropyTrainer._save_checkpoint`) holds Sigma_S (and the epoch it was estimated
    for) and the persistent-entropy windows: resuming mid-epoch reuses that epoch's Sigma_S
    instead of estimating it from the mid-epoch model.
    """

    def __init__(self, istar: Sequence[IStarLoss], entropy: Sequence[PersistentEntropyLoss],
                 make_loader: Callable[[int], Any], n_tokens: int,
                 resume_state: Mapping[str, Any] | None = None) -> None:
        super().__init__(losses=list(istar) or None, n_tokens=n_tokens)
        self.istar = list(istar)
        self.entropy = list(entropy)
        self.make_loader = make_loader
        self.shrinkage_epoch: int | None = None
        self._restored = resume_state  # the resumed checkpoint's isotropy_state.pt

    def on_save(self, args, state, control, **kwargs):
        """Nothing: this state goes into ``isotropy_state.pt`` (:meth:`payload`)."""
        return control

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        if self._restored is not None:
            for loss, window in zip(self.entropy, self._restored["entropy_windows"],
                                    strict=True):
                loss.load_window_state(window)
        return control

    def on_epoch_begin(self, args, state, control, **kwargs):  # noqa: D102
        epoch = epoch_index(state)
        restored = self._restored
        self._restored = None
        if restored is not None and restored["shrinkage_epoch"] == epoch and self.istar:
            for loss, cov in zip(self.istar, restored["shrinkage"], strict=True):
                loss.set_shrinkage(cov)
            self.shrinkage_epoch = epoch
            return control
        if self.istar:
            main = state.is_world_process_zero
            # the pass shows a bar of its rows out of n_tokens (ShrinkageRefreshCallback)
            with stage(f"Sigma_S pass of I-STAR (epoch {epoch + 1})", bar=False,
                       echo=print if main else None) as counted:
                self.dataloader = counted(self.make_loader(epoch))
                super().on_epoch_begin(args, state, control, **kwargs)
            self.shrinkage_epoch = epoch
        return control

    def payload(self) -> dict[str, Any]:
        """What a checkpoint keeps of the regularizers' state."""
        return {
            "shrinkage_epoch": self.shrinkage_epoch,
            "shrinkage": [loss.shrinkage for loss in self.istar],
            "entropy_windows": [loss.window_state() for loss in self.entropy],
        }


def read_checkpoint_state(checkpoint: str | Path) -> dict[str, Any] | None:
    """The ``isotropy_state.pt`` of a checkpoint folder (``None`` if absent); ``ValueError``
    (one line naming the file and what to do) when it is not a whole torch file."""
    path = Path(checkpoint) / CHECKPOINT_STATE
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # cut short or overwritten: zip, pickle or EOF errors
        raise ValueError(f"{path} is damaged ({type(err).__name__}: {one_line(err, 160)}); "
                         f"{resume_advice(Path(checkpoint))}") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} is damaged (it holds a {type(state).__name__}, not the "
                         f"checkpoint's state); {resume_advice(Path(checkpoint))}")
    return state


def resume_advice(checkpoint: Path) -> str:
    """What to do about a damaged checkpoint (the words used for damaged weights too)."""
    return (f"cannot resume from {checkpoint.name}: delete {checkpoint} to resume from the "
            "checkpoint before it, or pass --overwrite to start again")


def check_checkpoint(checkpoint: Path) -> dict[str, Any] | None:
    """The state of the checkpoint a run resumes from, once every file it was written with is
    there whole (:func:`isotropy.rundir.checkpoint_problem`) and its weights are whole;
    ``ValueError`` (one line) otherwise, before anything is changed."""
    from isotropy.models.loading import check_weight_files

    check_weight_files(str(checkpoint), advice=resume_advice(checkpoint))  # names the cut
    state = read_checkpoint_state(checkpoint)
    problem = checkpoint_problem(checkpoint, (state or {}).get("files"))
    if problem is not None:
        raise ValueError(f"checkpoint {checkpoint} is damaged: {problem}; "
                         f"{resume_advice(checkpoint)}")
    return state


def _sync_folder(folder: Path) -> None:
    """Flush every file of a checkpoint folder to the disk (the Trainer does not), so that its
    last file marks a checkpoint that survives a lost machine too."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())


def _write_checkpoint_state(folder: Path, payload: Mapping[str, Any]) -> None:
    """``isotropy_state.pt`` written aside, synced, then renamed into place: the last file of
    a checkpoint, whose presence marks it complete."""
    tmp = folder / f".{CHECKPOINT_STATE}.tmp"
    with tmp.open("wb") as f:
        torch.save(dict(payload), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / CHECKPOINT_STATE)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- trainer


def _point_tensorboard(trainer: Trainer) -> None:
    """Write TensorBoard events to ``args.logging_dir``: transformers 5 dropped that argument
    (its callback reads ``TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs/<date>``), so
    the callback is pointed at it unless that environment variable is set."""
    from transformers.integrations import TensorBoardCallback

    logging_dir = getattr(trainer.args, "logging_dir", None)
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback) and logging_dir and \
                getattr(cb, "logging_dir", None) is None:
            cb.logging_dir = logging_dir
