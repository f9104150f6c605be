r"""What the claims (:mod:`isotropy.reporting.claims`) read from a run: the task metric,
IsoScore\* (last layer and union), the TwoNN dimension of [CLS], the centring of the last
layer, and the training [CLS] spectrum (:class:`Values`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isotropy.reporting.runs import LAST_FRACTION, Run, mean_std, tail_evaluations
from isotropy.reporting.tables import spectrum_tail_means

__all__ = ["Values", "eval_spectrum_growth", "mean_std_text", "measured_zeta", "tail_metric"]


def mean_std_text(runs: Sequence[Run], value: Callable[[Run], float | None]) -> str:
    """``mean ± sample std (n)`` of ``value`` over the runs (``report``'s :func:`mean_std`)."""
    v = [x for r in runs if (x := value(r)) is not None]
    if not v:
        return "–"
    mean, std = mean_std(v)
    return f"{mean:.4f} (n=1)" if std is None else f"{mean:.4f} ± {std:.4f} (n={len(v)})"


def tail_metric(r: Run) -> float | None:
    """The main metric averaged over the evaluations of the last 30% of training (the
    persistent-entropy paper's Table 2)."""
    total = r.total_steps
    v = tail_evaluations(r.evaluations, total) if total else []
    return float(np.mean(v)) if v else None


def eval_spectrum_growth(records: Sequence[Mapping[str, Any]], total_steps: float,
                         kind: str = "raw", fraction: float = LAST_FRACTION) -> float | None:
    r"""Growth of the evaluation set's top-1 [CLS] share :math:`\sigma_1^2 / \sum_i
    \sigma_i^2` (``kind`` ``raw`` or ``centred``) over training: its mean over the
    measurement ``records`` at steps :math:`t \ge (1-f)\,T` minus its value at step 0
    (``None`` without a record at step 0, or without one in the window, or where one of them
    has no spectrum: a measurement that failed). One record per step, the first (as
    :func:`~isotropy.reporting.runs.eval_history` counts evaluations).

    >>> recs = [{"step": s, "last": {"cls_spectrum_raw": [v, 0.1]}}
    ...         for s, v in ((0, 0.5), (50, 0.9), (80, 0.6), (100, 0.8))]
    >>> round(eval_spectrum_growth(recs, 100), 6)  # (0.6 + 0.8) / 2 - 0.5
    0.2
    >>> eval_spectrum_growth(recs[1:], 100) is None
    True
    """
    def top1(rec: Mapping[str, Any]) -> float | None:
        spectrum = (rec.get("last") or {}).get(f"cls_spectrum_{kind}")
        return float(spectrum[0]) if spectrum else None

    first: dict[float, Mapping[str, Any]] = {}
    for rec in records:
        step = rec.get("step")
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            first.setdefault(float(step), rec)
    start = first.get(0.0)
    tail = [top1(rec) for step, rec in first.items()
            if step > 0 and step >= (1.0 - fraction) * total_steps]
    v0 = None if start is None else top1(start)
    if v0 is None or not tail or any(v is None for v in tail):
        return None
    return float(np.mean(tail)) - v0


def measured_zeta(r: Run) -> float | None:
    """The ζ the run's evaluation IsoScore* was measured with (``measurements.jsonl``)."""
    z = (r.last_measurement or {}).get("zeta")
    return float(z) if isinstance(z, (int, float)) else None


@dataclass
class Values:
    """What the claims read from a run: the evaluation ``which`` (final or best) for the
    metric, IsoScore* (union), the TwoNN dimension of [CLS] and the centring; IsoScore* only
    for tasks whose runs measured it with one ζ (``iso_tasks``), the training spectrum only
    when ``spectrum`` (the runs' measurement formats agree)."""

    which: str = "final"
    iso_tasks: frozenset[str] = frozenset()
    spectrum: bool = True

    def metric(self, r: Run) -> float | None:
        return r.value(r.main_metric, self.which)

    def iso(self, r: Run) -> float | None:
        """IsoScore* of the union of layers' token clouds."""
        return r.value("isoscore_star_union", self.which) if r.task in self.iso_tasks else None

    def iso_last(self, r: Run) -> float | None:
        """IsoScore* of the last layer's token cloud (I-STAR Fig. 4's measure)."""
        return r.value("isoscore_star_last", self.which) if r.task in self.iso_tasks else None

    def twonn(self, r: Run) -> float | None:
        return r.value("twonn_cls_last", self.which)

    def centring(self, r: Run) -> float | None:
        """Mean over dimensions of |mean activation| of the last layer's token cloud (I-STAR
        Fig. 4's quantity, one number: CosReg is said to centre it), measured at the
        evaluation ``which`` (the measurement record of its step)."""
        if self.which == "final":
            rec = r.last_measurement
        else:
            step = r.best.get("step")
            rec = next((m for m in reversed(r.measurement_records) if m.get("step") == step),
                       None)
        m = ((rec or {}).get("last") or {}).get("token_mean")
        return float(np.mean(np.abs(m))) if m else None

    def top1(self, r: Run, kind: str = "raw") -> float | None:
        """Top-1 share of the ``raw`` (or ``centred``) [CLS] spectrum over the last 30% of
        training (Table 3)."""
        m = spectrum_tail_means(r.spectrum_logs, r.total_steps) if self.spectrum else None
        return m[f"cls_spectrum_{kind}_1"] if m else None

    def top1_centred(self, r: Run) -> float | None:
        """:meth:`top1` of the centred spectrum."""
        return self.top1(r, "centred")

    def iso_first(self, r: Run) -> float | None:
        """IsoScore* of the first transformer layer's token cloud (Fig. 6's layer 1)."""
        ok = r.task in self.iso_tasks
        return r.value("isoscore_star_token_layer1", self.which) if ok else None

    def iso_first_minus_last(self, r: Run) -> float | None:
        """:meth:`iso_first` minus :meth:`iso_last`."""
        first, last = self.iso_first(r), self.iso_last(r)
        return None if first is None or last is None else first - last

    def growth(self, r: Run, kind: str = "raw") -> float | None:
        """Top-1 share of the ``raw`` or ``centred`` [CLS] spectrum: last-30% mean minus the
        first training log (Table 3 gives both kinds). A log is the mean over the optimizer
        steps since the previous one: the first is that of steps 1 to ``logging_steps``."""
        logs = r.spectrum_logs if self.spectrum else []
        tail = spectrum_tail_means(logs, r.total_steps)
        if not logs or not tail:
            return None
        return tail[f"cls_spectrum_{kind}_1"] - logs[0][f"cls_spectrum_{kind}_1"]

    def growth_from_start(self, r: Run, kind: str = "raw") -> float | None:
        """Top-1 share of the ``raw`` or ``centred`` [CLS] spectrum of the evaluation set
        (``measurements.jsonl``): the mean over the evaluations of the last 30% of training
        minus the evaluation at step 0, the pre-trained model (``None`` for a run not
        evaluated at step 0). Unlike :meth:`growth`, one measure at both ends: the same
        examples, in evaluation mode (:func:`eval_spectrum_growth`), at the evaluations an
        uninterrupted run makes (:meth:`Run.uninterrupted`)."""
        total = r.total_steps
        records = [rec for rec in r.measurement_records
                   if isinstance(rec.get("step"), (int, float)) and r.uninterrupted(rec["step"])]
        return eval_spectrum_growth(records, total, kind) if total else None
