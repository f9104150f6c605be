"""What differs between the transformers versions we support (>= 4.40, up to 5.x)."""

from __future__ import annotations

import pytest
import transformers

from isotropy.training.trainer import IsotropyTrainer


@pytest.mark.parametrize(("accepts_kwargs", "items", "loss_func", "divisor"), [
    (False, None, None, 4.0),  # the Trainer divides each micro-batch's loss by the steps
    (True, None, None, 4.0),
    (True, 64, None, 1.0),  # scaled by num_items_in_batch in the model
    (False, 64, None, 4.0),
    (False, None, object(), 1.0),  # a compute_loss_func scales it
])
def test_loss_divisor_without_loss_is_scaled_for_ga(monkeypatch, accepts_kwargs, items,
                                                    loss_func, divisor):
    """``Trainer.loss_is_scaled_for_ga`` exists from transformers 5.20 on only (on 5.17 the
    exact entropy cycle raised AttributeError): without it, the divisor follows the rule of
    the older ``training_step`` (divide unless the model took ``num_items_in_batch`` or a
    ``compute_loss_func`` is set)."""
    monkeypatch.delattr(transformers.Trainer, "loss_is_scaled_for_ga", raising=False)
    trainer = object.__new__(IsotropyTrainer)
    trainer.model_accepts_loss_kwargs = accepts_kwargs
    trainer._cycle_items = items
    trainer.compute_loss_func = loss_func
    trainer.current_gradient_accumulation_steps = 4
    assert not hasattr(trainer, "loss_is_scaled_for_ga")
    assert trainer._loss_divisor() == divisor
