r"""The persistent-entropy loss's exact objective under the ``Trainer``'s gradient accumulation.

With ``gradient_accumulation_steps = k > 1`` the authors score one cloud per optimizer step:
the pooled rows of all k micro-batches, once, with weight β. A ``Trainer`` runs the k
micro-batches one at a time, so a :class:`~isotropy.losses.entropy.PersistentEntropyLoss` in
``accumulation="exact"`` mode needs the whole cycle before its first micro-batch.
:class:`ExactCycleMixin` keeps the micro-batches the ``Trainer`` fetches for a cycle
(``get_batch_samples``), runs :func:`~isotropy.models.regularized.prepare_exact_cycle` on them
(a no-grad pass under the training autocast), and replays each micro-batch's random state
before its forward, so that dropout draws the same masks as in that pass.

Before the first cycle, an exact loss whose ``accumulation_steps`` is not the ``Trainer``'s
``gradient_accumulation_steps`` is an error: with ``accumulation_steps=1`` every micro-batch
would score its own small cloud at weight β/k, the objective the authors did not train.

>>> from transformers import Trainer
>>> class MyTrainer(ExactCycleMixin, Trainer):
...     pass
>>> issubclass(MyTrainer, RegularizerLogMixin)
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from isotropy.losses import PersistentEntropyLoss
from isotropy.models.regularized import (
    exact_cycle_losses,
    find_regularized,
    prepare_exact_cycle,
)
from isotropy.runtime import RngState, set_rng_state
from isotropy.training._compat import accumulation_steps
from isotropy.training.regularizer_logs import RegularizerLogMixin

__all__ = ["ExactCycleMixin", "check_entropy_accumulation"]


def check_entropy_accumulation(model: Any, gradient_accumulation_steps: int) -> None:
    """``ValueError`` if an exact persistent-entropy loss inside ``model`` is set for another
    number of micro-batches per optimizer step than the ``Trainer``'s."""
    wrapped = find_regularized(model)
    if wrapped is None:
        return
    for loss in exact_cycle_losses(wrapped):
        if loss.accumulation_steps != gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps={gradient_accumulation_steps}, but "
                f"PersistentEntropyLoss(accumulation_steps={loss.accumulation_steps}, "
                "accumulation='exact'): pass accumulation_steps="
                f"{gradient_accumulation_steps} for the authors' objective (one cloud per "
                "optimizer step, weight beta), or accumulation='window' for a sliding window "
                "(accumulation_steps=1 there scores each micro-batch alone, weight "
                f"beta/{gradient_accumulation_steps})")


class ExactCycleMixin(RegularizerLogMixin):
    """A ``Trainer`` mixin (before ``Trainer`` in the bases) that runs the exact
    persistent-entropy cycle under gradient accumulation (module docstring); it includes
    :class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`."""

    # the state of the current cycle, reassigned (never changed in place) by the methods
    _cycle: Sequence[Any] = ()  # its micro-batches
    _cycle_pos = 0  # the next micro-batch's index
    _cycle_rng: Sequence[RngState] = ()  # their random states of the no-grad pass
    _cycle_items: Any = None  # the Trainer's num_items_in_batch of the cycle
    _exact: list[PersistentEntropyLoss] | None = None  # the exact losses of _exact_model
    _exact_model: Any = None
    _entropy_checked: Any = None  # the model whose losses' accumulation was checked

    def get_batch_samples(self, epoch_iterator, num_batches, *args):
        """The Trainer's micro-batches of one accumulation cycle, kept for the cycle's cloud
        (``args``: the device, from transformers 4.50 on)."""
        if self._entropy_checked is not self.model:  # type: ignore[attr-defined]
            check_entropy_accumulation(self.model,  # type: ignore[attr-defined]
                                       self.args.gradient_accumulation_steps)  # type: ignore[attr-defined]
            self._entropy_checked = self.model  # type: ignore[attr-defined]
        batches, num_items = super().get_batch_samples(  # type: ignore[misc]
            epoch_iterator, num_batches, *args)
        self._cycle, self._cycle_pos, self._cycle_rng = list(batches), 0, []
        self._cycle_items = num_items
        for loss in self._exact_losses():
            loss.reset()  # nothing of an earlier cycle is ever consumed
        return batches, num_items

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step; before a cycle's first micro-batch the exact persistent-entropy
        pass, and before each micro-batch its replayed random state."""
        cycle, pos = self._cycle, self._cycle_pos
        accumulating = len(cycle) > 1 or self.args.gradient_accumulation_steps > 1  # type: ignore[attr-defined]
        if pos == 0 and cycle and accumulating and self._exact_losses():
            self.model.train()  # type: ignore[attr-defined]

            def autocast() -> Any:
                return _both(self.compute_loss_context_manager(),  # type: ignore[attr-defined]
                             self.accelerator.autocast())  # type: ignore[attr-defined]

            self._cycle_rng = prepare_exact_cycle(
                find_regularized(self.model),  # type: ignore[attr-defined, arg-type]
                [self._prepare_inputs(b) for b in cycle],  # type: ignore[attr-defined]
                loss_divisor=self._loss_divisor(), context=autocast)
        if pos < len(self._cycle_rng):
            set_rng_state(self._cycle_rng[pos])
        self._cycle_pos = pos + 1
        return super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]

    def _loss_divisor(self) -> float:
        """What each micro-batch's regularizer terms end up divided by: the accumulation
        steps, except where the Trainer uses the model's loss as already scaled for them
        (:meth:`RegularizerLogMixin._task_loss_scaled_for_accumulation`). Where the Trainer
        takes the labels away (label smoothing, a ``compute_loss_func``), the terms are
        divided by the steps either way (:meth:`RegularizerLogMixin.compute_loss`)."""
        steps = float(accumulation_steps(self))
        if self._cycle and self._labels_taken_away(self._cycle[0]):
            return steps
        scaled = self._task_loss_scaled_for_accumulation(self._cycle_items)
        return 1.0 if scaled else steps

    def _exact_losses(self) -> list[PersistentEntropyLoss]:
        """The exact persistent-entropy losses of the model (found once per model: a
        ``model_init`` or a hyperparameter search gives the Trainer new ones)."""
        model = self.model  # type: ignore[attr-defined]
        found = self._exact
        if found is None or self._exact_model is not model:
            wrapped = find_regularized(model)
            found = self._exact = exact_cycle_losses(wrapped) if wrapped is not None else []
            self._exact_model = model
        return found


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Iterator[None]:
    """Enter two context managers (the Trainer's loss context and its autocast)."""
    with first, second:
        yield
