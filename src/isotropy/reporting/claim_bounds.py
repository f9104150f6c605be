r"""What the runs exclude: for each claim whose quantity is a difference in the task metric
(:data:`~isotropy.reporting.claim_registry.METRIC_CLAIMS`), the one-sided 95% bounds on the
mean effect Δ = method minus reference, in points (the metric x 100), per task and pooled
over the claim's counted tasks (:func:`~isotropy.reporting.claim_stats.effect_bound`:
stratified by task, the tasks fixed, Welch-Satterthwaite degrees of freedom), said in words
and set beside the paper's own effect where it gives one
(:data:`~isotropy.reporting.claim_registry.PAPER_EFFECT`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from isotropy.reporting.claim_registry import METRIC_CLAIMS, PAPER_EFFECT
from isotropy.reporting.claim_stats import CONFIDENCE, Bound, effect_bound

if TYPE_CHECKING:
    from isotropy.reporting.claim_tally import Tally

__all__ = ["METHOD", "bound_field", "bound_words", "bounds_markdown", "task_groups"]

METHOD = ("one-sided 95% Student-t bounds on the mean over tasks of each task's mean "
          "seed-paired difference (points), stratified by task: the tasks fixed, each task's "
          "variance from its seeds, Welch-Satterthwaite degrees of freedom; per task, "
          "Student's one-sided bounds over its seeds")


def bound_words(lower: float, upper: float) -> str:
    """The bounds in words, gain side first.

    >>> bound_words(-1.234, 0.5)
    'a gain above 0.50 points is excluded; a loss beyond 1.23 points is excluded'
    >>> bound_words(-3.0, -0.2)
    'any gain is excluded (the effect is below -0.20 points); a loss beyond 3.00 points is excluded'
    """
    gain = (f"a gain above {upper:.2f} points is excluded" if upper >= 0 else
            f"any gain is excluded (the effect is below {upper:+.2f} points)")
    loss = (f"a loss beyond {-lower:.2f} points is excluded" if lower <= 0 else
            f"any loss is excluded (the effect is above {lower:+.2f} points)")
    return f"{gain}; {loss}"


def task_groups(t: Tally, factor: int) -> list[tuple[str, list[float]]]:
    """(task, 100 · ``factor`` · value per seed) of each unit of ``t`` that gave values: with
    the claim's ``factor``, Δ per seed in points."""
    out, start = [], 0
    for i, n in enumerate(t.seeds):
        if n:
            task = t.tasks[i] if i < len(t.tasks) else f"unit {i + 1}"  # tasks: where known
            out.append((task, [100 * factor * v for v in t.values[start:start + n]]))
        start += n
    return out


def _bound_dict(b: Bound | None) -> dict[str, Any] | None:
    return None if b is None else {"mean": b.mean, "lower": b.lower, "upper": b.upper,
                                   "df": b.df, "words": bound_words(b.lower, b.upper)}


def _why_none(units: Sequence[tuple[str, list[float]]]) -> str:
    if not units:
        return "no counted task"
    if any(len(v) < 2 for _, v in units):
        return "a task with fewer than 2 seeds: no spread to bound it by"
    return "no spread: every difference equal on every seed (a constant predictor's collapse)"


def bound_field(key: str, t: Tally) -> dict[str, Any] | None:
    """``claims.json``'s ``effect_bound`` of claim ``key`` (``None`` unless a metric claim):
    the pooled bounds over its counted tasks (``null`` with ``why_none`` where none is honest),
    each task's own (counted or not), and the paper's effect on the pooled tasks."""
    if key not in METRIC_CLAIMS:
        return None
    factor = METRIC_CLAIMS[key]
    counted = task_groups(t, factor)
    left = task_groups(t.left_out_units, factor) if t.left_out_units is not None else []
    pooled = effect_bound([v for _, v in counted]) if counted else None
    paper = PAPER_EFFECT.get(key)
    on = [task for task, _ in counted if paper and task in paper]
    per_task = [{"task": task, "counted": c, "n": len(v), **(_bound_dict(effect_bound([v])) or
                {"mean": sum(v) / len(v), "lower": None, "upper": None, "df": None,
                 "words": _why_none([(task, v)])}),
                 "paper": paper.get(task) if paper else None}
                for c, units in ((True, counted), (False, left)) for task, v in units]
    out: dict[str, Any] = {
        "unit": "points", "delta": "method minus reference", "confidence": CONFIDENCE,
        "method": METHOD, "tasks": [task for task, _ in counted],
        "pooled": _bound_dict(pooled),
        "why_none": None if pooled else _why_none(counted),
        "single_task": len(counted) == 1,
        "per_task": per_task,
        "paper_mean": (round(sum(paper[task] for task in on) / len(on), 4) if on else None),
        "paper_excluded": None}
    if pooled and out["paper_mean"] is not None:
        out["paper_excluded"] = not pooled.lower <= out["paper_mean"] <= pooled.upper
    return out


def _cell(b: dict[str, Any] | None) -> str:
    if b is None or b.get("lower") is None:
        return "–"
    return f"{b['mean']:+.2f} [{b['lower']:+.2f}, {b['upper']:+.2f}]"


def bounds_markdown(rows: Iterable[Any]) -> list[str]:
    """The section of ``claims.md`` giving each metric claim's bounds (rows of
    :func:`~isotropy.reporting.claim_summary.claim_rows` with their ``effect_bound``)."""
    rows = [r for r in rows if r.effect_bound is not None]
    if not rows:
        return []
    out = ["", "## What the runs exclude: one-sided 95% bounds on the mean effect", "",
           f"Δ = method minus reference, in points (the metric x 100): {METHOD}. Each bound "
           "is one-sided at 95%: the mean effect is below the upper one with 95% confidence, "
           "and above the lower one with 95% confidence. Pooled: the claim's counted tasks "
           "(those the summary counts). \"paper\": its own Δ on the same tasks (I-STAR, "
           "Table 1, BERT), where it gives one.", "",
           "| claim | pooled Δ [lower, upper] | in words | per task Δ [lower, upper] | paper's "
           "Δ (mean of the pooled tasks) | the paper's Δ outside the bounds |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        e = r.effect_bound
        words = (e["pooled"]["words"] if e["pooled"] else f"no bound: {e['why_none']}")
        if e["single_task"] and e["pooled"]:
            words += " (one task: says nothing of the others)"
        tasks = "; ".join(f"{u['task']}{'' if u['counted'] else ' (left out)'} {_cell(u)}"
                          for u in e["per_task"]) or "–"
        paper = "–" if e["paper_mean"] is None else f"{e['paper_mean']:+.2f}"
        excluded = {None: "–", True: "yes", False: "no"}[e["paper_excluded"]]
        out.append(f"| {r.claim} | {_cell(e['pooled'])} | {words} | {tasks} | {paper} | "
                   f"{excluded} |")
    return out
