"""Task metrics against hand-computed values (counts and textbook formulas)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from isotropy.data.task_metrics import (
    compute_task_metrics,
    prediction_summary,
    predictions_from_logits,
)

PRED = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1]
GOLD = [1, 0, 0, 1, 0, 1, 1, 0, 1, 0]
# by hand: TP = 4 (idx 0, 3, 5, 8), TN = 3 (1, 4, 7), FP = 2 (2, 9), FN = 1 (6)
TP, TN, FP, FN = 4, 3, 2, 1


def test_accuracy_and_f1_match_counts():
    m = compute_task_metrics("mrpc", PRED, GOLD)
    assert m["accuracy"] == pytest.approx((TP + TN) / 10)
    assert m["f1"] == pytest.approx(2 * TP / (2 * TP + FP + FN))
    assert set(m) == {"accuracy", "f1"}


def test_matthews_matches_formula():
    m = compute_task_metrics("cola", PRED, GOLD)
    mcc = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    assert m["matthews_correlation"] == pytest.approx(mcc)


def test_collapsed_classifier_scores_majority_rate_and_zero_mcc():
    gold = [1, 1, 1, 0, 1]
    m = compute_task_metrics("cola", [1] * 5, gold)
    assert m["matthews_correlation"] == 0.0
    assert compute_task_metrics("sst2", [1] * 5, gold)["accuracy"] == pytest.approx(0.8)
    s = prediction_summary("cola", [1] * 5)
    assert s == {"majority_class": 1, "majority_fraction": 1.0, "collapsed": True,
                 "near_collapse": False}
    assert prediction_summary("cola", PRED)["collapsed"] is False
    assert prediction_summary("cola", PRED)["majority_fraction"] == pytest.approx(0.6)
    assert prediction_summary("cola", PRED)["near_collapse"] is False
    # 9 of 10 in one class: near collapse at the stated 90%; 8 of 10 is not
    assert prediction_summary("cola", [1] * 9 + [0])["near_collapse"] is True
    assert prediction_summary("cola", [1] * 8 + [0] * 2)["near_collapse"] is False


def test_multiclass_accuracy_sst5():
    pred, gold = [0, 1, 2, 3, 4, 4], [0, 1, 2, 3, 3, 3]
    assert compute_task_metrics("sst5", pred, gold) == {"accuracy": pytest.approx(4 / 6)}


def test_regression_correlations_match_numpy_ranks():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 50)
    pred = gold + rng.normal(0, 1, 50)
    m = compute_task_metrics("stsb", pred, gold)
    assert m["pearson"] == pytest.approx(np.corrcoef(pred, gold)[0, 1], rel=1e-12)
    rank = lambda a: np.argsort(np.argsort(a)).astype(float)  # noqa: E731  (no ties here)
    assert m["spearman"] == pytest.approx(np.corrcoef(rank(pred), rank(gold))[0, 1], rel=1e-12)


def test_constant_regression_is_undefined_not_nan():
    m = compute_task_metrics("stsb", [2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    assert m["pearson"] is None and m["spearman"] is None
    assert m["undefined"]["pearson"] == "constant predictions"
    assert prediction_summary("stsb", [2.0, 2.0])["collapsed"] is True


def test_predictions_from_logits():
    assert predictions_from_logits("sst5", np.eye(5)[[3, 1]]).tolist() == [3, 1]
    with pytest.raises(ValueError, match=r"shape \(n_examples, 2\)"):
        predictions_from_logits("rte", [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="postprocess"):
        predictions_from_logits("squad", [[1.0]])


@pytest.mark.parametrize(
    ("pred", "gold", "match"),
    [
        ([], [], "empty"),
        ([1, 0], [1], "2 predictions but 1 references"),
        ([1, 2], [1, 0], r"class indices in \[0, 2\)"),
        ([1, 0.5], [1, 0], "class indices"),
        ([1, float("nan")], [1, 0], "NaN"),
    ],
)
def test_bad_input(pred, gold, match):
    with pytest.raises(ValueError, match=match):
        compute_task_metrics("sst2", pred, gold)


def test_unknown_task_and_span_task():
    with pytest.raises(ValueError, match="unknown task"):
        compute_task_metrics("mnli-xx", [1], [1])
    with pytest.raises(ValueError, match="squad_metrics"):
        compute_task_metrics("squad", [1], [1])
