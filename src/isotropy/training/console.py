"""What ``isotropy train`` prints while it trains: one short line per evaluation.

An evaluation logs some forty values (task metrics, IsoScore and IsoScore* of every layer,
TwoNN, cosine, ...). The Hugging Face ``Trainer`` prints every log as a dict, through its
``PrinterCallback`` (``--disable_tqdm``) or ``ProgressCallback``. :func:`use_console_log`
puts a :class:`ConsoleLogCallback` in that printer's place: an evaluation log becomes one
line (step, epoch, the task's main metric, IsoScore* of the layer union, whether the
classifier collapsed), any other log goes to the printer as before. The full logs still go to
``metrics.jsonl`` and TensorBoard, whose callbacks are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from isotropy.data.task_metrics import NEAR_COLLAPSE

__all__ = ["ConsoleLogCallback", "format_eval_line", "is_eval_log", "use_console_log"]

_EVENTS = [name for name in vars(TrainerCallback) if name.startswith("on_") and name != "on_log"]


def is_eval_log(logs: Mapping[str, Any]) -> bool:
    """Whether a Trainer log is an evaluation's (its keys carry the ``eval_`` prefix).

    >>> is_eval_log({"eval_loss": 0.7, "epoch": 1.0}), is_eval_log({"loss": 0.7})
    (True, False)
    """
    return any(str(k).startswith("eval_") for k in logs)


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:.4f}" if math.isfinite(value) else str(value)


def format_eval_line(logs: Mapping[str, Any], main_metric: str, step: int,
                     epoch: float | None = None) -> str:
    """One line of an evaluation log: step, epoch, the main metric, IsoScore* of the layer
    union and the collapsed flag with the majority class's share of the predictions, marked
    NEAR COLLAPSE from :data:`~isotropy.data.task_metrics.NEAR_COLLAPSE` (90%) on (left out
    where the task has none, as SQuAD).

    >>> format_eval_line({"eval_accuracy": 0.8125, "eval_isoscore_star_union": 0.15321,
    ...                   "eval_collapsed": 0.0, "epoch": 2.0}, "accuracy", step=120)
    'eval step 120 (epoch 2.00): accuracy 0.8125, IsoScore* union 0.1532, collapsed no'
    >>> format_eval_line({"eval_accuracy": 0.53, "eval_collapsed": 0.0,
    ...                   "eval_majority_fraction": 0.94}, "accuracy", step=8).split(", ")[-1]
    'collapsed no (majority class 94.0% NEAR COLLAPSE)'
    """
    epoch = logs.get("epoch", epoch)
    where = f"step {step}" + ("" if epoch is None else f" (epoch {float(epoch):.2f})")
    parts = [f"{main_metric} {_number(logs.get(f'eval_{main_metric}'))}",
             f"IsoScore* union {_number(logs.get('eval_isoscore_star_union'))}"]
    collapsed = logs.get("eval_collapsed")
    share = logs.get("eval_majority_fraction")
    if collapsed:
        parts.append("collapsed YES (every prediction is one class)")
    elif collapsed is not None and isinstance(share, (int, float)):
        near = " NEAR COLLAPSE" if share >= NEAR_COLLAPSE else ""
        parts.append(f"collapsed no (majority class {100 * share:.1f}%{near})")
    elif collapsed is not None:
        parts.append("collapsed no")
    return f"eval {where}: " + ", ".join(parts)


class ConsoleLogCallback(TrainerCallback):
    """Prints one line per evaluation log (:func:`format_eval_line`) on the main process;
    hands every other log, and every other event, to ``printer``, the Trainer's
    ``PrinterCallback`` or ``ProgressCallback`` it replaces (``None``: other logs are not
    printed). Under a progress bar the line is written through the bar, which stays intact.

    ``write`` (default: ``print``, or the progress bar's ``write``) receives each line.
    """

    def __init__(self, main_metric: str, printer: TrainerCallback | None = None,
                 write: Callable[[str], None] | None = None) -> None:
        self.main_metric = main_metric
        self.printer = printer
        self.write = write

    def _write(self, line: str) -> None:
        if self.write is not None:
            self.write(line)
            return
        bar = getattr(self.printer, "training_bar", None)
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        if logs and is_eval_log(logs):
            if state.is_world_process_zero:
                self._write(format_eval_line(logs, self.main_metric, state.global_step,
                                             state.epoch))
            return control
        if self.printer is not None:
            return self.printer.on_log(args, state, control, logs=logs, **kwargs)
        return control


def _delegate(name: str) -> Callable[..., Any]:
    def event(self: ConsoleLogCallback, args: Any, state: Any, control: Any, **kwargs: Any):
        if self.printer is None:
            return None
        return getattr(self.printer, name)(args, state, control, **kwargs)

    event.__name__ = name
    event.__doc__ = f"The replaced printer's ``{name}`` (progress bars)."
    return event


for _name in _EVENTS:
    setattr(ConsoleLogCallback, _name, _delegate(_name))


def use_console_log(trainer: Any, main_metric: str) -> ConsoleLogCallback:
    """Put a :class:`ConsoleLogCallback` in place of the trainer's ``PrinterCallback`` or
    ``ProgressCallback`` (added, printing evaluations only, where it has neither); returns
    it. Call it after the ``Trainer`` is built, before ``train()``."""
    callbacks = trainer.callback_handler.callbacks
    for i, cb in enumerate(callbacks):
        if isinstance(cb, (PrinterCallback, ProgressCallback)):
            console = ConsoleLogCallback(main_metric, printer=cb)
            callbacks[i] = console
            return console
    console = ConsoleLogCallback(main_metric)
    trainer.add_callback(console)
    return console
