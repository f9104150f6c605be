r"""The regularizers' values in the Hugging Face ``Trainer``'s logs, for your own ``Trainer``.

A ``Trainer`` training a :class:`~isotropy.models.regularized.RegularizedModel` optimises
:math:`L = L_\text{task} + \sum_r \text{reg}_r`, but logs only :math:`L`. With
:class:`RegularizerLogMixin` before ``Trainer`` in its bases (or
:class:`~isotropy.training.regularized_trainer.RegularizedTrainer`), every training log also
holds, as means over the micro-batches since the previous log:

- ``task_loss``: :math:`L_\text{task}`;
- ``<name>/loss``: each regularizer's term, and ``<name>/<key>`` its other values (I-STAR's
  ``isoscore_star``, CosReg's ``avg_cosine``, ...).

They reach ``trainer.state.log_history`` and every logger of ``report_to`` (TensorBoard, ...)
alike, because they are added in ``Trainer.log`` before the callbacks see the logs. A value
that is not finite stops training with an error naming it, before anything is saved or
evaluated with it. Values kept on an accelerator are summed there and read once per log.

>>> from transformers import Trainer
>>> class MyTrainer(RegularizerLogMixin, Trainer):
...     pass
>>> issubclass(MyTrainer, Trainer)
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from isotropy.models.regularized import find_regularized
from isotropy.training._compat import accumulation_steps, loss_scaled_for_accumulation

__all__ = ["RegularizerLogMixin"]


class RegularizerLogMixin:
    """Adds the interval means of ``RegularizedModel.last_logs`` to the ``Trainer``'s
    training logs (module docstring). Put it before ``Trainer`` in the bases."""

    keeps_regularizer_terms = True  # read by isotropy.models.trainer_guard.check_trainer
    _log_sums: dict[str, Any]
    _log_counts: dict[str, int]

    def _add_logs(self, logs: Mapping[str, float | torch.Tensor]) -> None:
        """Sum the values of the logging interval; a tensor value (on an accelerator) is summed
        on its device and read only in :meth:`log`. A non-finite regularizer value
        (``<name>/<key>``, float or tensor) makes the interval's mean NaN, which :meth:`log`
        and the check before a save or evaluation report; any other non-finite float is left
        out."""
        sums = self.__dict__.setdefault("_log_sums", {})
        counts = self.__dict__.setdefault("_log_counts", {})
        for key, value in logs.items():
            if key == "loss":
                continue
            if isinstance(value, torch.Tensor) or "/" in key or math.isfinite(value):
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The Trainer's loss; in training, the wrapped model's logs of this micro-batch are
        added to the interval's sums.

        With ``label_smoothing_factor`` or a ``compute_loss_func`` the ``Trainer`` takes
        ``labels`` away from the model and computes the task loss from its logits, which would
        drop the regularizers' terms from the loss. Here they are kept: the labels reach the
        regularizers (``regularizer_targets``), and their sum is added to the Trainer's task
        loss, divided by the accumulation steps where the Trainer counts that loss as already
        scaled for them (so that each micro-batch's terms weigh as they do without either
        option)."""
        wrapped = find_regularized(model)
        drops = wrapped is not None and self._labels_taken_away(inputs)
        if drops:
            inputs = {**inputs, "regularizer_targets": inputs["labels"]}
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True,  # type: ignore[misc]
                                             num_items_in_batch=num_items_in_batch)
        task_log = None
        if drops:
            steps = 1.0
            if model.training and self._task_loss_scaled_for_accumulation(num_items_in_batch):
                # (evaluation's loss is a per-batch mean)
                steps = float(accumulation_steps(self))
            task_log = loss.detach() * steps  # the micro-batch's task loss, as the model's
            terms = getattr(outputs, "regularizer_losses", None) or {}
            if terms:
                loss = loss + sum(terms.values()) / steps
        if wrapped is not None and model.training:
            self._add_logs(wrapped.last_logs if task_log is None
                           else {**wrapped.last_logs, "task_loss": task_log})
        return (loss, outputs) if return_outputs else loss

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        """The Trainer's load of a resumed checkpoint, which each
        :class:`~isotropy.models.shrinkage.ShrinkageRefreshCallback` is told of (it reads the
        Sigma_S saved there)."""
        from isotropy.models.shrinkage import ShrinkageRefreshCallback

        for cb in self.callback_handler.callbacks:  # type: ignore[attr-defined]
            if isinstance(cb, ShrinkageRefreshCallback):
                cb.resume_from = str(resume_from_checkpoint)
        return super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]

    def _labels_taken_away(self, inputs: Mapping[str, Any]) -> bool:
        """Whether the ``Trainer`` takes this batch's ``labels`` away from the model (label
        smoothing, a ``compute_loss_func``)."""
        return "labels" in inputs and (
            self.label_smoother is not None  # type: ignore[attr-defined]
            or self.compute_loss_func is not None)  # type: ignore[attr-defined]

    def _task_loss_scaled_for_accumulation(self, num_items_in_batch: Any) -> bool:
        """Whether the ``Trainer`` uses its loss as is, not divided by the accumulation steps
        (its own rule: ``loss_is_scaled_for_ga``, else a loss normalised by
        ``num_items_in_batch`` or a ``compute_loss_func``)."""
        return loss_scaled_for_accumulation(self, num_items_in_batch)

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's log / save / evaluate, after a check that no regularizer value of the
        interval is NaN or infinite (one host read, at steps that log, save, evaluate or end
        training only)."""
        control, state = self.control, self.state  # type: ignore[attr-defined]
        if (control.should_log or control.should_save or control.should_evaluate
                or control.should_training_stop or state.global_step >= state.max_steps):
            self._check_regularizer_values()
        return super()._maybe_log_save_evaluate(*args, **kwargs)  # type: ignore[misc]

    def _check_regularizer_values(self) -> None:
        """Raise if a regularizer value summed on the device since the last log is not
        finite."""
        self._raise_if_not_finite(
            k for k, v in self.__dict__.get("_log_sums", {}).items()
            if "/" in k and not bool(torch.isfinite(torch.as_tensor(v))))

    def _raise_if_not_finite(self, keys: Iterable[str]) -> None:
        bad = sorted(keys)  # "<regularizer>/<value>"
        if bad:
            raise ValueError(
                f"regularizer values ({', '.join(bad)}) were not finite in the steps up to "
                f"{self.state.global_step}: the hidden states hold NaN or infinity (training "  # type: ignore[attr-defined]
                "diverged: lower the learning rate or |lambda|), a token state has norm zero "
                "(CosReg), all token states were equal at zeta = 0 (IsoScore*), or a batch "
                "held fewer than 2 tokens (IsoScore*)")

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A training log (one with ``loss``) gets the interval means; the dict is changed in
        place."""
        sums = self.__dict__.get("_log_sums")
        if "loss" in logs and sums:
            counts = self._log_counts
            for key, total in sums.items():
                logs[key] = float(total) / counts[key]
            self._log_sums, self._log_counts = {}, {}
            self._raise_if_not_finite(k for k, v in logs.items() if "/" in k
                                      and isinstance(v, float) and not math.isfinite(v))
        super().log(logs, start_time)  # type: ignore[misc]
