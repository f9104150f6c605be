"""The running loss that a resumed run's first log starts from, where the Trainer's loop keeps
it in a local variable (:meth:`ResumedLossMixin._running_loss_from`): known cases worked by
hand. The end-to-end check against the real loop is in ``test_train.py``
(``test_a_non_finite_loss_just_after_a_resume_is_replaced_as_in_the_uninterrupted_run``)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from isotropy.training.resumed_loss import ResumedLossMixin


def _rebuilt(start: float, losses: list[tuple[float, int]], last_logged: int = 0,
             nan_filter: bool = True) -> torch.Tensor:
    mixin = object.__new__(ResumedLossMixin)
    mixin.args = SimpleNamespace(logging_nan_inf_filter=nan_filter)
    mixin._globalstep_last_logged = last_logged
    mixin._losses_since_resume = [(torch.tensor(v), step) for v, step in losses]
    return mixin._running_loss_from(start, torch.tensor(0.0))


def test_the_checkpoints_part_comes_first_as_in_the_uninterrupted_loop():
    # float32: (1 + 2^-24) + 2^-24 rounds to 1 at each addition (ties to even), while
    # (2^-24 + 2^-24) + 1 = 1 + 2^-23: the order of the additions shows in the last bit
    tiny = 2.0**-24
    got = _rebuilt(1.0, [(tiny, 2), (tiny, 2)])
    assert got.dtype == torch.float32 and got.item() == 1.0
    resumed_order = (torch.tensor(tiny) + torch.tensor(tiny)) + torch.tensor(1.0)
    assert resumed_order.item() == 1.0 + 2.0**-23


def test_a_non_finite_loss_adds_the_intervals_mean_with_the_checkpoints_part():
    # steps 1-2 logged nothing yet (last log at step 0) and summed 3.0; step 3's first
    # micro-batch is NaN: 3 + 3 / (1 + 2 - 0) = 4, then its second adds 0.5
    assert _rebuilt(3.0, [(float("nan"), 2), (0.5, 2)]).item() == 4.5
    # an infinite one alike; the last log at step 1: 3 + 3 / (1 + 2 - 1) = 4.5
    assert _rebuilt(3.0, [(float("inf"), 2)], last_logged=1).item() == 4.5
    # without the filter the NaN is added as it is
    assert torch.isnan(_rebuilt(3.0, [(float("nan"), 2)], nan_filter=False))


def test_nothing_since_the_resume_leaves_the_checkpoints_part():
    assert _rebuilt(2.25, []).item() == 2.25
