"""The values the claims read from a run, on hand-made runs with known numbers."""

from __future__ import annotations

import pytest

from isotropy.reporting.claim_values import Values, eval_spectrum_growth
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
