"""What differs between the transformers versions we support (4.48.3 up to 5.x), in one place.

The ``Trainer`` subclasses and mixins of this package reach every version-dependent
function or attribute of ``transformers`` through here; their overrides of the ``Trainer``'s
methods pass on the arguments that differ between versions (``*args``) unchanged.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import transformers

__all__ = [
    "GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT",
    "TRANSFORMERS_VERSION",
    "accumulation_steps",
    "check_resumable_on_these_processes",
    "group_by_length",
    "loss_scaled_for_accumulation",
    "rotate_checkpoints",
]


def _version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``"4.57.6"`` or ``"5.0.0.dev0"``."""
    major, minor = text.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


TRANSFORMERS_VERSION = _version(transformers.__version__)

# transformers 4.x: ``TrainingArguments.group_by_length`` (a flag of its own, which would clash
# with ``isotropy train``'s); from 5.0: ``train_sampling_strategy="group_by_length"``
GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT = "group_by_length" in {
    f.name for f in fields(transformers.TrainingArguments)}


def group_by_length(train_args: Any) -> None:
    """Have the ``Trainer`` of ``train_args`` draw length-grouped batches."""
    if GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT:
        train_args.group_by_length = True
    else:
        train_args.train_sampling_strategy = "group_by_length"


def rotate_checkpoints(trainer: Any, output_dir: str) -> None:
    """Delete the oldest checkpoints of ``output_dir`` beyond ``trainer.args.save_total_limit``,
    keeping the newest and the best, by the ``Trainer``'s own rule:
    ``transformers.trainer_utils.rotate_checkpoints`` from 5.2 on, the ``Trainer``'s
    ``_rotate_checkpoints`` method before."""
    try:
        from transformers.trainer_utils import rotate_checkpoints as rotate
    except ImportError:  # transformers < 5.2
        trainer._rotate_checkpoints(use_mtime=False, output_dir=output_dir)
        return
    rotate(output_dir=output_dir, save_total_limit=trainer.args.save_total_limit,
           best_model_checkpoint=trainer.state.best_model_checkpoint, use_mtime=False)


def accumulation_steps(trainer: Any) -> int:
    """The number of micro-batches the ``Trainer`` divides a loss by in the current optimizer
    step: ``current_gradient_accumulation_steps`` where it has one (a shorter last cycle of
    an epoch counts its own micro-batches), ``args.gradient_accumulation_steps`` before."""
    steps = getattr(trainer, "current_gradient_accumulation_steps", None)
    return int(steps if steps is not None else trainer.args.gradient_accumulation_steps)


def loss_scaled_for_accumulation(trainer: Any, num_items_in_batch: Any) -> bool:
    """Whether the ``Trainer`` backpropagates a micro-batch's loss as is, not divided by the
    accumulation steps: ``loss_is_scaled_for_ga`` where it has one; else a model that takes
    ``num_items_in_batch`` (from 4.53 on: and was given it) or a ``compute_loss_func``."""
    scaled = getattr(trainer, "loss_is_scaled_for_ga", None)
    if scaled is not None:
        return bool(scaled)
    counted = num_items_in_batch is not None or TRANSFORMERS_VERSION < (4, 53)
    return bool((trainer.model_accepts_loss_kwargs and counted)
                or trainer.compute_loss_func is not None)


def check_resumable_on_these_processes(train_args: Any, run_path: Any) -> None:
    """Raise ``ValueError`` where this ``transformers`` cannot resume the run at ``run_path``
    on the processes of ``train_args``: 4.x (4.48.3 and 4.57.6 read) loads a checkpoint's
    optimizer state onto ``args.device`` under several processes, which for CPU processes is
    an indexed device (``cpu:0``) that ``torch.load`` refuses; 5.0 on load onto ``"cpu"``."""
    device = train_args.device
    if TRANSFORMERS_VERSION < (5, 0) and train_args.world_size > 1 and \
            device.type == "cpu" and device.index is not None:
        raise ValueError(
            f"transformers {transformers.__version__} cannot resume {run_path} on "
            f"{train_args.world_size} CPU processes: it loads the checkpoint's optimizer state "
            f"onto {device}, which torch refuses; resume it with transformers >= 5 (nothing in "
            "the run directory was changed)")
