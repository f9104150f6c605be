"""Evaluation predictions -> task metrics (``compute_metrics``; SQuAD's n-best answer spans)
and the rows of ``eval_predictions.csv``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isotropy.data.glue import Example, TaskSpec
from isotropy.data.squad import postprocess_predictions, squad_metrics
from isotropy.data.task_metrics import (
    compute_task_metrics,
    prediction_summary,
    predictions_from_logits,
)
from isotropy.training.features import (
    TaskDataset,
)

__all__ = [
    "SPAN_LABELS",
    "SpanPredictor",
    "make_compute_metrics",
]

SPAN_LABELS = ["start_positions", "end_positions"]


@dataclass
class SpanPredictor:
    """SQuAD answer texts from the Trainer's evaluation predictions.

    The Trainer returns ``(start_logits, end_logits)``, one row per window in the order of its
    evaluation dataloader (padded with -100 beyond a window's length); ``order()`` gives the
    window index of each row (:func:`_eval_order`: sequential, or length-grouped under
    ``--group_by_length``). Rows are put back in window order, then
    :func:`~isotropy.data.squad.postprocess_predictions` picks every question's best span.
    """

    dataset: TaskDataset
    n_best: int = 20
    max_answer_length: int = 30
    order: Callable[[], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.dataset.windows is None:
            raise ValueError("a SpanPredictor needs a SQuAD dataset (tokenize_squad)")

    def answers(self, predictions: Any) -> dict[str, str]:
        """``guid -> predicted answer text`` of every evaluation question."""
        if not isinstance(predictions, (tuple, list)) or len(predictions) < 2:
            raise ValueError("SQuAD predictions must be the pair (start_logits, end_logits)")
        start, end = (np.asarray(p) for p in predictions[:2])
        n = len(self.dataset)
        order = self.order() if self.order is not None else np.arange(n)
        if start.shape[0] != n or end.shape[0] != n or len(order) != n:
            raise ValueError(
                f"{n} evaluation windows but {start.shape[0]} start and {end.shape[0]} end "
                "logit rows"
            )
        s, e = np.empty_like(start), np.empty_like(end)
        s[order], e[order] = start, end
        return postprocess_predictions(self.dataset.examples, self.dataset.windows, s, e,
                                       n_best=self.n_best,
                                       max_answer_length=self.max_answer_length)


def make_compute_metrics(
    spec: TaskSpec, span: SpanPredictor | None = None
) -> Callable[[Any], dict[str, float]]:
    """Task metrics (scikit-learn/scipy) and the collapsed-classifier flag from logits; for
    SQuAD exact match and F1 (percent, torchmetrics) of the answers ``span`` decodes."""
    if spec.kind == "span":
        if span is None:
            raise ValueError("SQuAD metrics need the evaluation windows (a SpanPredictor)")

        def compute_span(eval_pred: Any) -> dict[str, float]:
            return squad_metrics(span.answers(eval_pred.predictions), span.dataset.examples)

        return compute_span

    def compute(eval_pred: Any) -> dict[str, float]:
        logits = eval_pred.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        pred = predictions_from_logits(spec, logits)
        metrics = compute_task_metrics(spec, pred, eval_pred.label_ids)
        metrics.pop("undefined", None)
        summary = prediction_summary(spec, pred)
        metrics["collapsed"] = float(summary["collapsed"])
        if "majority_fraction" in summary:
            metrics["majority_fraction"] = summary["majority_fraction"]
        return metrics

    return compute


def _span_rows(examples: Sequence[Example], answers: Mapping[str, str]):
    """One row per question: ``guid``, gold ``answers`` and ``answer_starts`` (JSON lists,
    the torchmetrics/official SQuAD target) and the predicted text."""
    for e in examples:
        yield {"guid": e.guid,
               "answers": json.dumps([a.text for a in e.answers], ensure_ascii=False),
               "answer_starts": json.dumps([a.start for a in e.answers]),
               "prediction": answers[e.guid]}


def _predictions_rows(spec: TaskSpec, examples: Sequence[Example], logits: np.ndarray):
    pred = predictions_from_logits(spec, logits)
    for e, p, out in zip(examples, pred, logits, strict=True):
        row: dict[str, Any] = {"guid": e.guid, "label": e.label, "prediction": p.item()}
        for j, v in enumerate(np.atleast_1d(out)):
            row[f"output_{j}"] = float(v)
        yield row
