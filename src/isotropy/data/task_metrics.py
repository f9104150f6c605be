"""Task metrics of the GLUE-style tasks, computed by scikit-learn and scipy.

Classification: accuracy (``sklearn.metrics.accuracy_score``), binary F1 of class 1 for MRPC
and QQP (``f1_score``), Matthews correlation for CoLA (``matthews_corrcoef``). Regression
(STS-B): Pearson and Spearman correlation (``scipy.stats``). SQuAD's exact match and F1 live
in :mod:`isotropy.data.squad`.

A classifier that predicts one class for every example ("collapsed") is reported by
:func:`prediction_summary`; a correlation of constant predictions is undefined and reported as
``None`` with the reason in ``undefined``, never as NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from isotropy.data.glue import TaskSpec, get_task

__all__ = ["compute_task_metrics", "prediction_summary", "predictions_from_logits"]


def _as_spec(task: str | TaskSpec) -> TaskSpec:
    return task if isinstance(task, TaskSpec) else get_task(task)


def predictions_from_logits(task: str | TaskSpec, logits: Any) -> np.ndarray:
    """Class indices (argmax over the last axis) or regression values (the single output).

    >>> predictions_from_logits("rte", [[0.1, 2.0], [3.0, -1.0]]).tolist()
    [1, 0]
    >>> predictions_from_logits("stsb", [[4.5], [0.25]]).tolist()
    [4.5, 0.25]
    """
    spec = _as_spec(task)
    arr = np.asarray(logits, dtype=np.float64)
    if spec.kind == "span":
        raise ValueError("SQuAD predictions are spans: use isotropy.data.squad.postprocess")
    if arr.ndim != 2 or arr.shape[1] != spec.num_labels:
        raise ValueError(
            f"{spec.display_name} logits must have shape (n_examples, {spec.num_labels}), "
            f"got {arr.shape}"
        )
    if spec.kind == "regression":
        return arr[:, 0]
    return arr.argmax(axis=1)


def _check_pair(spec: TaskSpec, predictions: Any, references: Any) -> tuple[np.ndarray, ...]:
    pred = np.asarray(predictions, dtype=np.float64).reshape(-1)
    ref = np.asarray(references, dtype=np.float64).reshape(-1)
    if pred.size == 0:
        raise ValueError("no predictions: the evaluation set is empty")
    if pred.shape != ref.shape:
        raise ValueError(
            f"{pred.size} predictions but {ref.size} references: they must match one to one"
        )
    for name, arr in (("predictions", pred), ("references", ref)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contain NaN or infinite values")
    if spec.kind == "classification":
        for name, arr in (("predictions", pred), ("references", ref)):
            bad = (arr != np.round(arr)) | (arr < 0) | (arr >= spec.num_labels)
            if bad.any():
                raise ValueError(
                    f"{name} must be class indices in [0, {spec.num_labels}) for "
                    f"{spec.display_name}; found {arr[bad][0]!r}"
                )
        return pred.astype(np.int64), ref.astype(np.int64)
    return pred, ref


def compute_task_metrics(
    task: str | TaskSpec, predictions: Sequence[float] | np.ndarray, references: Any
) -> dict[str, Any]:
    """The task's metrics (``TaskSpec.metrics``) of predicted labels or values vs the gold ones.

    >>> m = compute_task_metrics("mrpc", [1, 1, 0, 1], [1, 0, 0, 1])
    >>> round(m["accuracy"], 4), round(m["f1"], 4)
    (0.75, 0.8)
    >>> compute_task_metrics("stsb", [1.0, 1.0, 1.0], [0.0, 2.5, 5.0])["undefined"]
    {'pearson': 'constant predictions', 'spearman': 'constant predictions'}
    """
    from scipy import stats
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    spec = _as_spec(task)
    if spec.kind == "span":
        raise ValueError("SQuAD metrics need answer texts: use isotropy.data.squad.squad_metrics")
    pred, ref = _check_pair(spec, predictions, references)
    out: dict[str, Any] = {}
    undefined: dict[str, str] = {}
    for name in spec.metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(ref, pred))
        elif name == "f1":
            out[name] = float(f1_score(ref, pred, pos_label=1, zero_division=0.0))
        elif name == "matthews_correlation":
            out[name] = float(matthews_corrcoef(ref, pred))
        elif name in ("pearson", "spearman"):
            constant = [w for w, a in (("predictions", pred), ("references", ref))
                        if np.ptp(a) == 0]
            if constant or pred.size < 2:
                out[name] = None
                undefined[name] = f"constant {constant[0]}" if constant else "fewer than 2 pairs"
                continue
            fn = stats.pearsonr if name == "pearson" else stats.spearmanr
            out[name] = float(fn(pred, ref)[0])
        else:  # pragma: no cover - the registry only names the metrics above
            raise ValueError(f"no implementation of metric {name!r}")
    if undefined:
        out["undefined"] = undefined
    return out


# a classifier putting at least this share of its predictions in one class is "near collapse":
# far above the majority-class share of every dev set here (at most 0.69: CoLA; MRPC 0.68,
# QQP 0.63, RTE 0.53, SST-2 0.51, QNLI 0.51)
NEAR_COLLAPSE = 0.9


def prediction_summary(task: str | TaskSpec, predictions: Any) -> dict[str, Any]:
    """Share of the most frequent predicted class, whether every prediction is that class
    (``collapsed``), and whether at least :data:`NEAR_COLLAPSE` (90%) of them are but not all
    (``near_collapse``).

    A *collapsed* classifier predicts a single class for the whole evaluation set (its
    accuracy is then the majority-class rate; its Matthews correlation is 0). For regression,
    ``collapsed`` means every prediction is the same value.

    >>> prediction_summary("sst2", [1, 1, 1])
    {'majority_class': 1, 'majority_fraction': 1.0, 'collapsed': True, 'near_collapse': False}
    >>> prediction_summary("sst2", [1] * 19 + [0])["near_collapse"]
    True
    """
    spec = _as_spec(task)
    pred = np.asarray(predictions).reshape(-1)
    if pred.size == 0:
        raise ValueError("no predictions: the evaluation set is empty")
    if spec.kind == "regression":
        return {"collapsed": bool(np.ptp(pred.astype(np.float64)) == 0)}
    values, counts = np.unique(pred.astype(np.int64), return_counts=True)
    top = int(counts.argmax())
    return {
        "majority_class": int(values[top]),
        "majority_fraction": float(counts[top] / pred.size),
        "collapsed": bool(values.size == 1),
        "near_collapse": bool(values.size > 1 and counts[top] >= NEAR_COLLAPSE * pred.size),
    }
