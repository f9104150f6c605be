r"""A resumed run's training loss continues the uninterrupted run's.

A checkpoint keeps the summed training loss of every step so far (``loss_sum``) and the
logging interval in progress (``log_interval``: the regularizer and spectrum sums, every
rank's loss since the last log, that log's step). The resumed run starts from them, so that
its first log averages the same steps as the uninterrupted run's, and ``train_loss`` (the
mean over every step of the run, :math:`\sum_s \ell_s / S`) equals it to the last bit: its
additions happen in the uninterrupted run's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

__all__ = ["ResumedLossMixin"]


class ResumedLossMixin:
    """A ``Trainer`` mixin (before ``Trainer`` in the bases) whose checkpoints keep the loss
    sums and whose resumed runs continue them. The host writes and reads the checkpoint's
    state: it puts :meth:`_loss_payload` (given :meth:`_unlogged_losses`, called in its
    save) into it and hands a resumed one to :meth:`_restore_loss_state`; and it keeps the
    interval sums of the regularizer logs (``_log_sums``, ``_log_counts``:
    :class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`)."""

    _resumed_loss_sum: float | None = None
    _resumed_interval: dict[str, Any] | None = None
    _unlogged_loss: torch.Tensor | None = None  # the running loss during a save call
    _pending_unlogged: tuple[float, float] | None = None  # (this rank's, logged sum)
    _losses_since_resume: Sequence[tuple[torch.Tensor, int]] = ()  # (loss, its step)
    _whole_run_loss = False  # whether _total_loss_scalar sums every step of the run
    _first_step = 0  # the step this train() call began at

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_callback(_ContinueLossSum(self))  # type: ignore[attr-defined]

    def _unlogged_losses(self) -> list[float] | None:
        """Every rank's training loss summed since the last log (the Trainer's running loss
        passed to this step's save call), gathered from each process in rank order; None
        outside that call. Every process calls it (a collective under several)."""
        unlogged = self._unlogged_loss
        if not isinstance(unlogged, torch.Tensor):
            return None
        mine = unlogged.detach().reshape(1)
        every = (self.accelerator.gather(mine)  # type: ignore[attr-defined]
                 if self.args.world_size > 1 else mine)  # type: ignore[attr-defined]
        return [float(x) for x in every.cpu()]

    def _loss_payload(self, unlogged: list[float] | None) -> dict[str, Any]:
        """A checkpoint's loss sums: ``loss_sum``, and ``log_interval`` with ``unlogged``
        (every rank's loss since the last log, :meth:`_unlogged_losses`)."""
        # the summed training loss of every step so far (logged, plus rank 0's steps since
        # the last log), which train_loss of the resumed run continues (:meth:`log`)
        logged = float(getattr(self, "_total_loss_scalar", 0.0))
        return {
            "loss_sum": logged + (unlogged[0] if unlogged else 0.0),
            # the logging interval in progress, so that the resumed run's first log averages
            # the same steps as the uninterrupted run's (:class:`_ContinueLossSum`); the loss
            # since the last log for each rank, which the Trainer averages over ranks
            "log_interval": {
                "sums": {k: float(v) for k, v in self._log_sums.items()},  # type: ignore[attr-defined]
                "counts": dict(self._log_counts),  # type: ignore[attr-defined]
                "logged_loss_sum": logged, "unlogged_losses": unlogged,
                "last_logged_step": getattr(self, "_globalstep_last_logged", None)},
        }

    def _restore_loss_state(self, state: Mapping[str, Any]) -> None:
        """Take the loss sums of a resumed checkpoint's ``isotropy_state.pt``."""
        self._resumed_loss_sum = state.get("loss_sum")
        self._resumed_interval = state.get("log_interval")

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's training; the ``training_loss`` of its ``TrainOutput`` is the
        ``train_loss`` of its metrics (:meth:`log`: the mean over every step of the run, a
        resumed one included), where the Trainer's own is the loss summed since the resume
        over the steps since the resume (transformers 5) or over every step (4)."""
        try:
            out = super().train(*args, **kwargs)  # type: ignore[misc]
        finally:  # a train() stopped before its first log leaves nothing to a later call
            self._pending_unlogged, self._losses_since_resume = None, []
        loss = out.metrics.get("train_loss") if isinstance(out.metrics, Mapping) else None
        return out if loss is None else out._replace(training_loss=loss)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """In the final summary, ``train_loss`` is the mean over every step of the run, a
        resumed one included, wherever the checkpoint kept the loss sum; else the mean over
        the steps of this process, never its sum divided by every step of the run (as
        transformers 4's own). The dict is changed in place, so the Trainer's
        ``TrainOutput.metrics`` says the same."""
        if "train_loss" in logs and self.state.global_step > 0:  # type: ignore[attr-defined]
            step = self.state.global_step  # type: ignore[attr-defined]
            total = self._total_loss_scalar  # type: ignore[attr-defined]
            steps = step if self._whole_run_loss else max(step - self._first_step, 0.001)
            logs["train_loss"] = total / steps
        super().log(logs, start_time)  # type: ignore[misc]

    def _maybe_log_save_evaluate(self, tr_loss, *args, **kwargs):
        """The Trainer's log / evaluate / save, with the running loss at hand for a
        checkpoint (:meth:`_unlogged_losses`); in the first call after a resume, where the
        running loss is the loop's local variable, that variable (changed in place) becomes
        the uninterrupted run's (:meth:`_running_loss_from`)."""
        if self._pending_unlogged is not None and isinstance(tr_loss, torch.Tensor):
            mine, logged = self._pending_unlogged
            self._pending_unlogged = None
            tr_loss.copy_(self._running_loss_from(mine, tr_loss))
            self._losses_since_resume = []
            self._total_loss_scalar = logged
        self._unlogged_loss = tr_loss
        try:
            return super()._maybe_log_save_evaluate(tr_loss, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._unlogged_loss = None

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's micro-batch step; its loss kept, with the step it belongs to, while
        the loop's running loss (a local variable) waits for the resumed checkpoint's part
        (:meth:`_running_loss_from`)."""
        loss = super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]
        if self._pending_unlogged is not None:  # reassigned, never changed in place
            step = self.state.global_step  # type: ignore[attr-defined]
            self._losses_since_resume = [*self._losses_since_resume, (loss.detach(), step)]
        return loss

    def _running_loss_from(self, start: float, like: torch.Tensor) -> torch.Tensor:
        r"""The running loss of the uninterrupted run, where the loop keeps it in a local
        variable (transformers 4, and 5.0): ``start``, this rank's loss since the last log
        kept by the checkpoint, plus the micro-batch losses since the resume, added in the
        loop's order; with ``logging_nan_inf_filter`` a NaN or infinite one adds instead the
        interval's mean so far, :math:`t / (1 + s - s_{log})` (:math:`t` the running loss,
        :math:`s` the step, :math:`s_{log}` the last logged). The resumed loop began from 0
        and replaced such a loss by a mean without ``start``."""
        from transformers.utils import is_torch_xla_available

        total = torch.tensor(start, dtype=like.dtype).to(like.device)
        filtered = (self.args.logging_nan_inf_filter  # type: ignore[attr-defined]
                    and not is_torch_xla_available())
        last_logged = self._globalstep_last_logged  # type: ignore[attr-defined]
        for loss, step in self._losses_since_resume:
            if filtered and not bool(torch.isfinite(loss)):
                total = total + total / (1 + step - last_logged)
            else:
                total = total + loss
        return total


class _ContinueLossSum(TrainerCallback):
    """At the start of training, the Trainer's running loss sum continues the resumed
    checkpoint's (``loss_sum`` of ``isotropy_state.pt``), so that its additions happen in the
    order of an uninterrupted run and ``train_loss`` equals it to the last bit (where the loop keeps
    it in a local variable, as below); and the logging interval in progress at the
    checkpoint continues (``log_interval``): the regularizer and spectrum sums, each rank's
    own loss since the last log (the Trainer averages them over ranks when it logs) and
    that log's step, so that the first log after the resume averages the same steps as the
    uninterrupted run's.

    Later transformers 5 releases (5.17 does) keep the running loss on the Trainer
    (``_tr_loss``); transformers 4 and 5.0 in a local variable of the loop, which the first
    log/save call (:meth:`ResumedLossMixin._maybe_log_save_evaluate`), after that optimizer
    step's micro-batches, sets to the uninterrupted run's: the checkpoint's part plus the
    step's micro-batch losses in the loop's order, a non-finite one replaced as
    ``logging_nan_inf_filter`` replaces it (:meth:`ResumedLossMixin._running_loss_from`)."""

    def __init__(self, trainer: ResumedLossMixin) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        t = self.trainer
        t._pending_unlogged = None  # a train() call before this one left it unused
        t._losses_since_resume = []
        resumed, t._resumed_loss_sum = t._resumed_loss_sum, None  # used once
        interval, t._resumed_interval = t._resumed_interval, None
        if resumed is not None:
            t._total_loss_scalar = resumed
        if interval is not None and state.global_step > 0:
            t._log_sums = dict(interval["sums"])
            t._log_counts = dict(interval["counts"])
            last = interval["last_logged_step"]
            mine = _own_unlogged_loss(interval, args.process_index, args.world_size)
            if resumed is not None and last is not None and mine is not None:
                logged = interval["logged_loss_sum"]
                t._globalstep_last_logged = last
                if isinstance(getattr(t, "_tr_loss", None), torch.Tensor):  # on the Trainer
                    t._tr_loss += mine
                    t._total_loss_scalar = logged
                else:  # a local variable of the loop, given at the first save call
                    t._total_loss_scalar = logged + mine  # until then (none if no step is left)
                    t._pending_unlogged = (mine, logged)
        # a run resumed without the sum (a checkpoint written before it was kept, or a caller
        # that did not restore the state) keeps the Trainer's own train_loss
        t._whole_run_loss = resumed is not None or state.global_step == 0
        t._first_step = state.global_step


def _own_unlogged_loss(interval: Mapping[str, Any], rank: int, world_size: int) -> float | None:
    """This rank's loss since the last log in a checkpoint's ``log_interval``: its entry of
    ``unlogged_losses`` (one per rank of the run that wrote it, in rank order); None where the
    checkpoint was written by another number of processes (their running losses do not map
    onto these ranks) or before the list was kept (``unlogged_loss`` alone, rank 0's, does not
    say how many processes wrote it).

    >>> _own_unlogged_loss({"unlogged_losses": [1.5, 2.5]}, rank=1, world_size=2)
    2.5
    >>> _own_unlogged_loss({"unlogged_losses": [1.5, 2.5]}, rank=0, world_size=1) is None
    True
    >>> _own_unlogged_loss({"unlogged_loss": 0.5}, rank=0, world_size=1) is None
    True
    """
    every = interval.get("unlogged_losses")
    if every is None or len(every) != world_size:
        return None
    return float(every[rank])
