r"""Add regularizers to any Hugging Face model without touching its code.

:class:`RegularizedModel` calls the wrapped model with ``output_hidden_states=True`` and
returns its output with

.. math::  \text{loss} = L_\text{task} + \sum_r \text{reg}_r(\text{hidden\_states},
           \text{attention\_mask}, \text{labels}),

so a plain training loop and the Hugging Face ``Trainer`` train the regularized objective
unchanged. A ``Trainer`` that computes the loss from the logits itself
(``label_smoothing_factor``, a ``compute_loss_func``) would drop the regularizers: it is
refused at its first training step (:meth:`RegularizedModel._check_trainer_keeps_terms`);
``RegularizedTrainer`` keeps them. The task loss and every regularizer's logs stay available
on the output (``outputs.task_loss``, ``outputs.regularizer_logs``) and on the wrapper
(``last_logs``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from isotropy._validation import check_flag
from isotropy.clouds import get_hidden_states
from isotropy.losses.base import Regularizer
from isotropy.losses.entropy import PersistentEntropyLoss
from isotropy.models.pretrained_wrapper import WrappedPreTrainedModel
from isotropy.models.trainer_guard import check_computing_trainer
from isotropy.runtime import RngState, get_rng_state, set_rng_state

__all__ = ["RegularizedModel", "exact_cycle_losses", "find_regularized",
           "prepare_exact_cycle"]


def _default_name(reg: torch.nn.Module) -> str:
    name = type(reg).__name__
    if name.endswith("Loss") and len(name) > 4:
        name = name[:-4]
    return name.lower()


def _named_regularizers(
    regularizers: Regularizer | Sequence[Regularizer] | Mapping[str, Regularizer] | None,
) -> dict[str, Regularizer]:
    if regularizers is None:
        return {}
    if isinstance(regularizers, torch.nn.Module):
        items: list[tuple[str | None, Any]] = [(None, regularizers)]
    elif isinstance(regularizers, Mapping):
        items = list(regularizers.items())
    elif isinstance(regularizers, Sequence) and not isinstance(regularizers, str):
        items = [(None, r) for r in regularizers]
    else:
        raise TypeError(
            "regularizers must be a Regularizer, a list of them or a dict name -> Regularizer, "
            f"got {type(regularizers).__name__}"
        )
    named: dict[str, Regularizer] = {}
    for name, reg in items:
        if not isinstance(reg, torch.nn.Module) or not callable(reg):
            raise TypeError(f"a regularizer must be a torch.nn.Module, got {type(reg).__name__}")
        if name is None:
            base = _default_name(reg)
            name, k = base, 1
            while name in named:
                name, k = f"{base}_{k}", k + 1
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(
                f"regularizer names must be non-empty strings without '.', got {name!r}"
            )
        if name in named:
            raise ValueError(f"duplicate regularizer name {name!r}")
        named[name] = reg
    return named


def log_value(value: float | torch.Tensor) -> float | torch.Tensor:
    """A logged value: a float, or a detached 0-d tensor when it lives on an accelerator (a
    ``float()`` there would make the host wait for the device at every step; it is read when
    logged).

    >>> log_value(torch.tensor(2.0, requires_grad=True) * 1)
    2.0
    """
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return float(value) if value.device.type == "cpu" else value
    return float(value)


class RegularizedModel(WrappedPreTrainedModel):
    r"""``model`` with regularizers added to its loss: ``loss = task_loss + sum(reg.loss)``.

    Args:
        model: any Hugging Face model (``AutoModelFor...``) or module that accepts
            ``output_hidden_states=True`` and ``return_dict=True`` and returns
            ``hidden_states`` (and ``loss`` when given labels).
        regularizers: one :class:`~isotropy.losses.base.Regularizer`, a list, or a dict
            name -> regularizer (default names: ``istar``, ``cosreg``, ...).
        regularize_eval: also add the regularizers in eval mode (default ``False``: in eval
            mode the loss is the task loss, so evaluation losses compare across settings).
        require_task_loss: with targets given (``labels``, ``start_positions``,
            ``end_positions``) and the regularizers on, an output without ``loss`` is a
            ``ValueError`` (default ``True``): a model without a task head (``AutoModel``
            rather than ``AutoModelFor...``) would otherwise train on the regularizers alone.
            ``False`` allows that on purpose.

    The returned output is the model's own output class with ``loss`` replaced, plus the
    attributes ``task_loss`` (tensor or ``None``), ``regularizer_losses`` (name -> tensor) and
    ``regularizer_logs`` (``"name/key"`` -> float); ``hidden_states`` is kept only if the
    caller asked for it. ``last_logs`` holds the floats of the latest call.

    The wrapper is a ``transformers.PreTrainedModel`` that a plain ``Trainer`` saves as the
    wrapped model alone, and whose other attributes are the wrapped model's
    (:class:`~isotropy.models.pretrained_wrapper.WrappedPreTrainedModel`). For the
    ``Trainer`` the wrapper declares no loss kwargs (the Trainer scales the loss for gradient
    accumulation itself); question answering needs
    ``TrainingArguments(label_names=["start_positions", "end_positions"])``.

    >>> from types import SimpleNamespace
    >>> from isotropy.losses.cosreg import CosRegLoss
    >>> class Toy(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.emb = torch.nn.Embedding(10, 4)
    ...     def forward(self, input_ids, attention_mask=None, labels=None,
    ...                 output_hidden_states=False, return_dict=True):
    ...         e = self.emb(input_ids)
    ...         return {"loss": e.pow(2).mean(), "hidden_states": (e, e.tanh())}
    >>> model = RegularizedModel(Toy(), CosRegLoss(tuning=1.0))
    >>> out = model(input_ids=torch.tensor([[1, 2, 3]]))
    >>> bool(torch.isclose(out["loss"], out.task_loss + out.regularizer_losses["cosreg"]))
    True
    >>> sorted(model.last_logs)[:3]
    ['cosreg/avg_cosine', 'cosreg/cosreg_term', 'cosreg/loss']
    """

    accepts_loss_kwargs = False

    def __init__(
        self,
        model: torch.nn.Module,
        regularizers: Regularizer | Sequence[Regularizer] | Mapping[str, Regularizer] | None = None,
        *,
        regularize_eval: bool = False,
        require_task_loss: bool = True,
    ) -> None:
        super().__init__(model)
        self.regularizers = torch.nn.ModuleDict(_named_regularizers(regularizers))
        self.regularize_eval = check_flag(regularize_eval, "regularize_eval")
        self.require_task_loss = check_flag(require_task_loss, "require_task_loss")
        self.last_logs: dict[str, float] = {}

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        regularizer_targets: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the model with hidden states and add every regularizer to its loss.
        ``regularizer_targets`` are labels that reach the regularizers only (where ``labels``
        are not given): for a ``Trainer`` that takes ``labels`` away to compute the task loss
        itself (:class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`). Its name
        holds no "label", so that the ``Trainer`` does not count it among the label names it
        finds in this signature."""
        named = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            "inputs_embeds": inputs_embeds,
            "labels": labels,
            "start_positions": start_positions,
            "end_positions": end_positions,
        }
        inputs = {k: v for k, v in named.items() if v is not None}
        want_hidden = kwargs.pop("output_hidden_states", None)
        return_dict = kwargs.pop("return_dict", None)
        inputs.update(kwargs)
        regularize = len(self.regularizers) > 0 and (self.training or self.regularize_eval)
        outputs = self.model(
            **inputs,
            output_hidden_states=True if regularize else want_hidden,
            return_dict=True,
        )
        if not isinstance(outputs, Mapping):
            raise TypeError(
                f"{type(self.model).__name__} returned {type(outputs).__name__}; "
                "RegularizedModel needs a dict-like output (return_dict=True)"
            )
        targets = [k for k in ("labels", "start_positions", "end_positions")
                   if named[k] is not None]
        if regularize and targets and outputs.get("loss") is None and self.require_task_loss:
            raise ValueError(
                f"{', '.join(targets)} given, but {type(self.model).__name__} returned no loss "
                "(a model without a task head?): the loss would be the regularizers' alone. "
                "Wrap an AutoModelFor... model, or pass require_task_loss=False to train on "
                "the regularizers alone on purpose")
        if regularize and self.training and not targets and regularizer_targets is None \
                and not torch.compiler.is_compiling():
            self._check_trainer_keeps_terms()
        reg_labels = labels if labels is not None else regularizer_targets
        reg_losses, reg_logs = (self._regularizer_losses(outputs, attention_mask, reg_labels)
                                if regularize else ({}, {}))
        result = self._with_losses(outputs, reg_losses, reg_logs, keep_hidden=bool(want_hidden))
        if return_dict is False and hasattr(result, "to_tuple"):
            return result.to_tuple()
        return result

    def _check_trainer_keeps_terms(self) -> None:
        """Refuse (or warn of) a ``transformers.Trainer`` that drops the regularizers' terms.

        Called on a training forward without targets. A ``Trainer`` with
        ``label_smoothing_factor`` or a ``compute_loss_func`` takes ``labels`` away from the
        model and computes the loss from the logits alone, so the returned ``loss`` (task loss
        + regularizers) is never used. That configuration always trains without the
        regularizers, so it is a ``ValueError`` naming the fix
        (:func:`~isotropy.models.trainer_guard.check_trainer`), raised
        at the first training forward, before any optimizer step: a warning would scroll past
        while the run trains the wrong objective. A ``Trainer`` subclass whose own
        ``compute_loss`` calls the model without labels may add ``outputs.loss`` itself or not:
        a one-time warning. A :class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`
        (e.g. ``RegularizedTrainer``) keeps the terms and passes; so does a plain ``Trainer``
        on data without labels (it trains on ``outputs.loss``)."""
        message = check_computing_trainer()
        if message is None or self.__dict__.get("_warned_own_loss"):
            return
        self.__dict__["_warned_own_loss"] = True
        warnings.warn(message, UserWarning, stacklevel=3)

    def _regularizer_losses(self, outputs: Mapping[str, Any], attention_mask: torch.Tensor | None,
                            labels: torch.Tensor | None
                            ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Every regularizer's loss on the output's hidden states, and its logs under
        ``<name>/<key>``."""
        hidden_states = get_hidden_states(outputs)
        reg_losses: dict[str, torch.Tensor] = {}
        reg_logs: dict[str, float] = {}
        for name, reg in self.regularizers.items():
            out = reg(hidden_states, attention_mask=attention_mask, labels=labels)
            reg_losses[name] = out.loss
            reg_logs[f"{name}/loss"] = log_value(out.loss)
            for key, value in out.logs.items():
                reg_logs[f"{name}/{key}"] = log_value(value)
        return reg_losses, reg_logs

    def _with_losses(self, outputs: Mapping[str, Any], reg_losses: dict[str, torch.Tensor],
                     reg_logs: dict[str, float], *, keep_hidden: bool) -> Any:
        """The output with ``loss`` = task loss + regularizer losses (and ``task_loss``,
        ``regularizer_losses``, ``regularizer_logs`` attributes); sets ``last_logs``."""
        task_loss = outputs.get("loss")
        total = task_loss
        for value in reg_losses.values():
            total = value if total is None else total + value
        fields = {k: v for k, v in outputs.items() if k != "loss"}
        if not keep_hidden:
            fields.pop("hidden_states", None)
        result = self._rebuild(outputs, total, fields)
        for attr, value in (
            ("task_loss", task_loss),
            ("regularizer_losses", reg_losses),
            ("regularizer_logs", reg_logs),
        ):
            object.__setattr__(result, attr, value)
        logs = dict(reg_logs)
        if task_loss is not None:
            logs["task_loss"] = log_value(task_loss)
        if total is not None:
            logs["loss"] = log_value(total)
        self.last_logs = logs
        return result

    @staticmethod
    def _rebuild(outputs: Mapping[str, Any], total: Any, fields: dict[str, Any]) -> Any:
        """A new output of the same class with ``loss`` first (``None`` fields left out)."""
        cls = type(outputs)
        if cls is dict:
            return _Output({"loss": total, **fields} if total is not None else fields)
        try:
            return cls(loss=total, **fields)
        except TypeError:
            return _Output({"loss": total, **fields} if total is not None else fields)


class _Output(dict):
    """A plain dict output that also takes attributes (for models returning dicts)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err


def find_regularized(model: Any) -> RegularizedModel | None:
    """The :class:`RegularizedModel` inside a training loop's model (itself, or under DDP's
    ``module`` or ``torch.compile``'s ``_orig_mod``), or ``None``.

    >>> find_regularized(torch.nn.Linear(2, 2)) is None
    True
    """
    while model is not None and not isinstance(model, RegularizedModel):
        model = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
    return model


def exact_cycle_losses(model: torch.nn.Module) -> list[PersistentEntropyLoss]:
    """The persistent-entropy losses in ``accumulation="exact"`` mode inside ``model``."""
    return [m for m in model.modules()
            if isinstance(m, PersistentEntropyLoss) and m.accumulation == "exact"]


def prepare_exact_cycle(
    model: RegularizedModel,
    micro_batches: Sequence[Mapping[str, Any]],
    *,
    loss_divisor: float | None = None,
    context: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> list[RngState]:
    r"""The no-grad pass of an accumulation cycle for every exact persistent-entropy loss.

    Runs ``model.model`` (the bare model: no regularizer, no DDP wrapper) in training mode,
    without gradients and inside ``context()`` (e.g. the training loop's autocast), on each
    micro-batch (dicts of model inputs on the model's device), embeds it with each loss's
    :meth:`~isotropy.losses.entropy.PersistentEntropyLoss.embed` and hands the cycle to its
    :meth:`~isotropy.losses.entropy.PersistentEntropyLoss.prepare_cycle` (``loss_divisor``:
    what the loop divides each micro-batch's loss by; default the number of micro-batches).
    Returns the random state before each micro-batch's forward and restores the first: set
    ``states[i]`` (:func:`~isotropy.runtime.set_rng_state`) before micro-batch ``i``'s
    training forward and dropout draws the same masks as here. With no such loss it does
    nothing and returns ``[]``.

    A plain loop over one cycle::

        states = prepare_exact_cycle(wrapped, batches)
        for state, batch in zip(states, batches):
            set_rng_state(state)
            (wrapped(**batch).loss / len(batches)).backward()
        optimizer.step(); optimizer.zero_grad()
    """
    losses = exact_cycle_losses(model)
    if not losses:
        return []
    if not isinstance(model, RegularizedModel):
        raise TypeError("prepare_exact_cycle needs a RegularizedModel")
    if not micro_batches:
        raise ValueError("prepare_exact_cycle needs at least one micro-batch")
    inner = model.model
    was_training = inner.training
    inner.train()
    states: list[RngState] = []
    embeddings: dict[int, list[torch.Tensor]] = {id(loss): [] for loss in losses}
    labels: list[Any] = []
    try:
        with torch.no_grad():
            for batch in micro_batches:
                states.append(get_rng_state())
                inputs = {k: v for k, v in batch.items() if k != "output_hidden_states"}
                with context():
                    hs = get_hidden_states(inner(**inputs, output_hidden_states=True,
                                                 return_dict=True))
                for loss in losses:
                    embeddings[id(loss)].append(loss.embed(hs, inputs.get("attention_mask")))
                labels.append(inputs.get("labels"))
    finally:
        inner.train(was_training)
        if states:
            set_rng_state(states[0])
    divisor = float(len(micro_batches)) if loss_divisor is None else loss_divisor
    for loss in losses:
        loss.prepare_cycle(embeddings[id(loss)], labels, loss_divisor=divisor)
    return states

