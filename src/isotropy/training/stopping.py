"""Where a training run stops when asked: at once at the next step's edge (a Ctrl-C or
``SIGTERM`` that Python dropped, :func:`isotropy.runtime.stop_point`), or after a checkpoint
written at the end of the optimizer step in progress (``SIGUSR1``,
:func:`isotropy.runtime.checkpoint_on_signal`), from which ``--resume`` continues the run to
the records of an uninterrupted one."""

from __future__ import annotations

import torch
from transformers import TrainerCallback

from isotropy.distributed import all_reduce_max, is_distributed
from isotropy.runtime import StoppedAtCheckpoint, checkpoint_requested, stop_point

__all__ = ["StopPoints"]


class StopPoints(TrainerCallback):
    """Stop at the next step's edge when a stop was requested but its ``KeyboardInterrupt``
    was dropped; and, when a checkpoint-and-stop was asked for on any process (the request is
    all-reduced at every step's end where there are several, so that every rank saves at the
    same step), save a checkpoint at the step just ended, then raise
    :class:`~isotropy.runtime.StoppedAtCheckpoint` once it is written whole (by every
    process). The request stands until a checkpoint is written: where the Trainer overrides
    the save (``--save_strategy best`` after an evaluation that is not a new best), it comes
    at the next step. A request made after the last step lets the run finish."""

    def __init__(self) -> None:
        self._signum: int | None = None  # the checkpoint-and-stop under way

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: D102
        stop_point()
        return control

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
        stop_point()
        signum = _requested_anywhere(args.device)
        if signum is not None:
            self._signum = signum
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):  # noqa: D102
        if self._signum is not None:
            signum, self._signum = self._signum, None
            if is_distributed():  # no rank ends before the main one has written it all
                torch.distributed.barrier()
            raise StoppedAtCheckpoint(state.global_step, signum)
        return control


def _requested_anywhere(device: torch.device) -> int | None:
    """The checkpoint-and-stop signal asked for on this process or, where there are several,
    on any of them (the largest signal number); ``None`` where none was."""
    mine = checkpoint_requested()
    if not is_distributed():
        return mine
    flag = all_reduce_max(torch.tensor([mine or 0], device=device))
    return int(flag.item()) or None
