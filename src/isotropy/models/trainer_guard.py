r"""Which ``transformers.Trainer`` trains a
:class:`~isotropy.models.regularized.RegularizedModel`, and whether it keeps the
regularizers' terms.

The model layer finds the ``Trainer`` on the call stack (never importing the training layer)
and reads the class attribute ``keeps_regularizer_terms`` that
:class:`~isotropy.training.regularizer_logs.RegularizerLogMixin` sets. ``Trainer.compute_loss``
with ``label_smoothing_factor`` or a ``compute_loss_func`` computes the loss from the logits
alone, so it would train without the regularizers: :func:`check_trainer` refuses it.
:func:`check_computing_trainer` (at a training forward) and :func:`check_starting_trainer`
(at a callback's ``on_train_begin``) find that ``Trainer`` on the call stack and check it.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["check_computing_trainer", "check_starting_trainer", "check_trainer"]


def _trainer_class() -> type | None:
    """``transformers.Trainer`` if it was imported (else no ``Trainer`` is running)."""
    return getattr(sys.modules.get("transformers.trainer"), "Trainer", None)


def _calling_trainer(method: str) -> tuple[Any, Any, type] | None:
    """The ``transformers.Trainer`` one of whose methods named ``method`` is on the call stack
    (the innermost such frame), that frame's code and ``transformers.Trainer``; ``None``
    outside a ``Trainer``."""
    trainer_cls = _trainer_class()
    if trainer_cls is None:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == method:
            owner = frame.f_locals.get("self")
            if isinstance(owner, trainer_cls):
                return owner, frame.f_code, trainer_cls
        frame = frame.f_back
    return None


def _fix(trainer: Any) -> str:
    return ("train with isotropy.RegularizedTrainer, or put isotropy.RegularizerLogMixin "
            f"before Trainer in the bases of {type(trainer).__name__}")


def _keeps_terms(trainer: Any) -> bool:
    """Whether ``trainer`` says it adds the regularizers' terms to its loss (the class
    attribute ``keeps_regularizer_terms``, which ``RegularizerLogMixin`` sets: the model layer
    reads it without importing the training layer)."""
    return bool(getattr(type(trainer), "keeps_regularizer_terms", False))


def check_trainer(trainer: Any) -> None:
    """Raise ``ValueError`` when ``trainer`` (a ``transformers.Trainer`` training a
    :class:`~isotropy.models.regularized.RegularizedModel`) would drop the regularizers'
    terms: ``Trainer.compute_loss`` with ``label_smoothing_factor`` or a
    ``compute_loss_func`` computes the loss from the logits alone. A
    :class:`~isotropy.training.regularizer_logs.RegularizerLogMixin` (e.g.
    ``RegularizedTrainer``) keeps them: it passes."""
    if _keeps_terms(trainer):
        return
    options = [name for name, on in (
        ("label_smoothing_factor", getattr(trainer, "label_smoother", None) is not None),
        ("compute_loss_func", getattr(trainer, "compute_loss_func", None) is not None),
    ) if on]
    if options:
        raise ValueError(
            f"{type(trainer).__name__} with {' and '.join(options)} computes the loss from the "
            "logits and drops the regularizers' terms of RegularizedModel (it would train "
            f"without them): {_fix(trainer)}, which keep them")


def check_computing_trainer() -> str | None:
    """Check the ``transformers.Trainer`` whose ``compute_loss`` is on the call stack (a
    training forward of a ``RegularizedModel`` without targets).

    The ``Trainer``'s own ``compute_loss``: :func:`check_trainer` (raises where it drops the
    regularizers' terms). A subclass's own ``compute_loss`` that calls the model without
    labels may add ``outputs.loss`` itself or not: the warning to give, returned (the caller
    warns once, at its own stack level), unless the class says it keeps the terms. ``None``
    outside a ``Trainer`` and wherever nothing is to be said.

    >>> check_computing_trainer() is None  # no Trainer on the call stack
    True
    """
    found = _calling_trainer("compute_loss")
    if found is None:
        return None
    trainer, frame_code, trainer_cls = found
    if frame_code is trainer_cls.compute_loss.__code__:  # the Trainer's own compute_loss
        check_trainer(trainer)
        return None
    if _keeps_terms(trainer):
        return None
    return (f"{type(trainer).__name__}.compute_loss calls RegularizedModel in training without "
            "labels: a loss computed from the logits alone drops the regularizers' terms; add "
            f"outputs.loss (their sum) to it, or {_fix(trainer)}")


def check_starting_trainer() -> None:
    """:func:`check_trainer` of the ``transformers.Trainer`` whose training loop is on the call
    stack (a callback's ``on_train_begin``), where it keeps ``Trainer.compute_loss`` as it is;
    nothing outside a ``Trainer``.

    >>> check_starting_trainer()  # no Trainer on the call stack: nothing happens
    """
    found = _calling_trainer("_inner_training_loop")
    if found is None:
        return
    trainer, _, trainer_cls = found
    if type(trainer).compute_loss is trainer_cls.compute_loss:
        check_trainer(trainer)
