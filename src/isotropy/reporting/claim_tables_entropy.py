"""The persistent-entropy claims' tables of ``claims.md`` (:func:`entropy_tables`): P1-P4
per task, each task's verdict recorded through ``note`` for the summary
(:mod:`isotropy.reporting.claims` states the rules)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from isotropy.reporting.claim_stats import Diff, mean_interval, paired
from isotropy.reporting.claim_tables_istar import ENTROPY_LABELS, Get, Note
from isotropy.reporting.claim_values import Values, mean_std_text, tail_metric

__all__ = ["entropy_tables", "on_par"]


def on_par(d: Diff) -> str:
    """An "on par" claim's per-task verdict: an interval that excludes 0 either way
    contradicts it."""
    if d.verdict(+1) in ("supported", "contradicted"):
        return "contradicted"
    return "not contradicted" if d.n >= 2 else "inconclusive"


def entropy_tables(get: Get, tasks: Sequence[str], note: Note, v: Values) -> list[str]:
    """The persistent-entropy claims' tables (P1-P4) of ``tasks``."""
    out: list[str] = []
    sel, allbars = ENTROPY_LABELS
    out += ["## Persistent entropy", "",
            "| task | method | metric, last 30% mean | Δ vs base [95% CI] | verdict (selected, "
            "P2: Δ > 0; all bars, P4: on par) | top-1 raw [CLS] spectrum, last 30% | Δ vs base "
            "| verdict (P1: Δ < 0) | top-1 centred, last 30% | Δ vs base | verdict (P1 "
            "centred: Δ < 0) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        base = get(task, "none")
        if not base:
            continue
        for label in ("none", sel, allbars):
            rs = get(task, label)
            if not rs:
                continue
            at = {"task": task, "cells": ("none", label)}
            dm = paired(base, rs, tail_metric) if label != "none" else None
            ds = paired(base, rs, v.top1) if label != "none" else None
            dc = paired(base, rs, v.top1_centred) if label != "none" else None
            p2 = p1 = p1c = ""  # P1 and P2 are the paper's method; all bars its ablation
            if label == sel:
                p2 = note("P2", dm.verdict(+1), dm.values, **at) if dm else ""
                p1 = (note("P1 held down", ds.verdict(-1), [-x for x in ds.values], **at)
                      if ds else "")
                p1c = (note("P1 held down, centred", dc.verdict(-1), [-x for x in dc.values],
                            **at) if dc else "")
            elif label == allbars and dm:
                p2 = note("P4 all bars on par", on_par(dm), dm.values, **at)
            out.append(f"| {task} | {label} | {mean_std_text(rs, tail_metric)} | "
                       f"{dm.text() if dm else ''} | {p2} | "
                       f"{mean_std_text(rs, v.top1)} | {ds.text() if ds else ''} | {p1} | "
                       f"{mean_std_text(rs, v.top1_centred)} | {dc.text() if dc else ''} | "
                       f"{p1c} |")
    out += ["", "### P1: growth of the top-1 [CLS] spectrum without a regularizer "
            "(last 30% mean minus first log)", "",
            "| task | spectrum | runs | growth mean ± std | 95% CI | verdict (> 0) |",
            "|---|---|---|---|---|---|"]
    for task in tasks:
        base = get(task, "none")
        for kind in ("raw", "centred"):
            g = [x for r in base if (x := v.growth(r, kind)) is not None]
            if g:
                d = mean_interval(g)
                verdict = note(f"P1 grows, {kind}", d.verdict(+1), g, task=task,
                               cells=("none",))
                out.append(f"| {task} | {kind} | {len(g)} | {_growth_text(g)} | "
                           f"{d.interval_text()} | {verdict} |")
    out += _growth_from_start(get, tasks, v)
    out += ["", "### P3: feature selection: selected bars minus all bars", "",
            "| task | Δ metric, last 30% [95% CI] | verdict (Δ > 0) "
            "| Δ top-1 raw spectrum, last 30% [95% CI] | verdict (Δ < 0) "
            "| Δ top-1 centred spectrum [95% CI] | verdict (Δ < 0) |",
            "|---|---|---|---|---|---|---|"]
    for task in tasks:
        a, b = get(task, allbars), get(task, sel)
        dm, ds, dc = paired(a, b, tail_metric), paired(a, b, v.top1), paired(a, b, v.top1_centred)
        if dm or ds or dc:
            at = {"task": task, "cells": (allbars, sel)}
            vm = note("P3 metric", dm.verdict(+1), dm.values, **at) if dm else ""
            vs = note("P3 spectrum", ds.verdict(-1), [-x for x in ds.values], **at) if ds else ""
            vc = (note("P3 spectrum, centred", dc.verdict(-1), [-x for x in dc.values], **at)
                  if dc else "")
            out.append(f"| {task} | {dm.text() if dm else '–'} | {vm} | "
                       f"{ds.text() if ds else '–'} | {vs} | {dc.text() if dc else '–'} | "
                       f"{vc} |")
    return out


def _growth_from_start(get: Get, tasks: Sequence[str], v: Values) -> list[str]:
    """P1 read from the pre-trained model (:meth:`Values.growth_from_start`), for the base runs
    evaluated at step 0; nothing where none was."""
    rows = []
    for task in tasks:
        base = get(task, "none")
        for kind in ("raw", "centred"):
            g = [x for r in base if (x := v.growth_from_start(r, kind)) is not None]
            if g:
                d = mean_interval(g)
                rows.append(f"| {task} | {kind} | {len(g)} of {len(base)} | {_growth_text(g)} | "
                            f"{d.interval_text()} | {d.verdict(+1)} |")
    if not rows:
        return []
    return ["", "### P1 from the pre-trained model: the evaluation set's top-1 [CLS] share",
            "", "Base runs evaluated at step 0 (`--eval_on_start`): the mean over the "
            "evaluations of the last 30% of training minus the evaluation at step 0, one "
            "measure at both ends (the same examples, in evaluation mode); a run without an "
            "evaluation at step 0 or with a failed measurement in the window is left out "
            "(runs: read, of the base runs). Read per task (the 95% Student-t interval over "
            "seeds), not in the summary below.", "",
            "| task | spectrum | runs | growth mean ± std | 95% CI | reading (> 0) |",
            "|---|---|---|---|---|---|", *rows]


def _growth_text(g: Sequence[float]) -> str:
    """``mean ± sample std`` of the per-run growths (the mean alone for one run)."""
    sd = f" ± {np.std(g, ddof=1):.4f}" if len(g) > 1 else ""
    return f"{np.mean(g):+.4f}{sd}"
