"""The values the claims read from a run, on hand-made runs with known numbers."""

from __future__ import annotations

import pytest

from isotropy.reporting.claim_values import Values, eval_spectrum_growth, tail_metric
from isotropy.reporting.runs import load_run
from tests._runs import make_run

# the evaluation set's top-1 [CLS] share (raw, centred) at steps 0, 60, 80 and 100 of 100
SPECTRA = [(0, 0.5, 0.1), (60, 0.9, 0.9), (80, 0.6, 0.3), (100, 0.8, 0.5)]


def test_growth_from_start_is_the_last_30_percent_mean_minus_step_0(tmp_path):
    run = load_run(make_run(tmp_path, eval_spectra=SPECTRA, global_step=100))
    v = Values()
    # the window is t >= 70: steps 80 and 100; step 60 stays out
    assert v.growth_from_start(run) == pytest.approx((0.6 + 0.8) / 2 - 0.5)
    assert v.growth_from_start(run, "centred") == pytest.approx((0.3 + 0.5) / 2 - 0.1)


def test_growth_from_start_needs_a_measurement_at_step_0(tmp_path):
    run = load_run(make_run(tmp_path, eval_spectra=SPECTRA[1:], global_step=100))
    assert Values().growth_from_start(run) is None


def test_growth_from_start_is_none_where_a_spectrum_was_not_measured(tmp_path):
    at_start = [(0, None, 0.1), *SPECTRA[1:]]
    run = load_run(make_run(tmp_path, eval_spectra=at_start, global_step=100))
    assert Values().growth_from_start(run) is None
    assert Values().growth_from_start(run, "centred") == pytest.approx(0.3)


def test_growth_from_start_needs_an_evaluation_in_the_window():
    records = [{"step": 0, "last": {"cls_spectrum_raw": [0.5]}},
               {"step": 50, "last": {"cls_spectrum_raw": [0.9]}}]
    assert eval_spectrum_growth(records, 100) is None
    assert eval_spectrum_growth(records, 60) == pytest.approx(0.4)  # window t >= 42


START_EVALUATED = {"eval_on_start": True, "eval_strategy": "steps", "eval_steps": 20}


def test_a_resumed_runs_extra_start_evaluation_is_not_counted(tmp_path):
    """A run evaluated at step 0 and every 20 steps, resumed (by an older isotropy) from the
    checkpoints of steps 67 and 100: the Trainer evaluated again at 67 (off the grid) and at
    100 (a second record of that step). An uninterrupted run evaluates at 0, 20, ..., 100 and
    at its last step, 110: only those count, the first record of a step."""
    evals = [(0, 0.1), (20, 0.2), (40, 0.3), (60, 0.4), (67, 0.9), (80, 0.5), (100, 0.6),
             (100, 0.95), (110, 0.7)]
    spectra = [(0, 0.5, 0.1), (60, 0.9, 0.9), (67, 0.0, 0.0), (80, 0.6, 0.3), (100, 0.8, 0.5),
               (100, 0.0, 0.0), (110, 0.7, 0.2)]
    run = load_run(make_run(tmp_path / "a", evals=evals, eval_spectra=spectra, global_step=110,
                            training=START_EVALUATED))
    assert run.evaluations == [(0, 0.1), (20, 0.2), (40, 0.3), (60, 0.4), (80, 0.5), (100, 0.6),
                               (110, 0.7)]
    # the window t >= 77: 80, 100 and 110
    assert tail_metric(run) == pytest.approx((0.5 + 0.6 + 0.7) / 3)
    assert Values().growth_from_start(run) == pytest.approx((0.6 + 0.8 + 0.7) / 3 - 0.5)
    # a run without the step-0 evaluation keeps every evaluation it logged (no such resume
    # evaluation exists there): 67 counts, 100 once
    plain = load_run(make_run(tmp_path / "b", evals=evals, global_step=110,
                              training={"eval_strategy": "steps", "eval_steps": 20}))
    assert (67, 0.9) in plain.evaluations and (100, 0.6) in plain.evaluations
    assert (100, 0.95) not in plain.evaluations
