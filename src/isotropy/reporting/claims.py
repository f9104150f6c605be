r"""Both papers' claims measured on a report's runs (``claims.md`` of ``isotropy report``).

I-STAR (Rudman & Eickhoff 2024): (C1) λ < 0 at the paper's ζ improves the task metric over no
regularizer and over CosReg (Table 1); (C2) IsoScore\* and the metric are inversely related
across λ (Fig. 3); (C3) CosReg centres the activations and does not raise IsoScore\* (Fig. 4);
(C4) λ < 0 lowers and λ > 0 raises the TwoNN dimension of [CLS] (Fig. 5); (C5) ζ = 0 is worse
than the best ζ ∈ (0, 1) (Fig. 7). Persistent entropy (Kudriashov et al. 2025): (P1) without a
regularizer the top-1 share of the [CLS] spectrum grows during fine-tuning and the entropy loss
holds it down (Fig. 1, Table 3); (P2) the loss raises the metric over the last 30% of training
(Table 2); (P3) prominent-feature selection matters for both.

Cells are keyed by task and method label; a task's I-STAR claims use the paper's best
(λ, ζ) for it (:data:`ISTAR_BEST`, BERT) with λ = -0.3 and +1 at that ζ. A difference pairs the
runs of two cells by seed (same data order and head initialisation); the interval of the mean
per-seed difference d̄ is Student's, d̄ ± t₀.₉₇₅(n-1) · s / √n (``scipy.stats.ttest_1samp``),
95% when the per-seed differences are normal: with 3 seeds t₀.₉₇₅(2) = 4.30, so only a
difference large against its spread across seeds excludes 0. (A percentile bootstrap over 3
seeds would be the range of the 3 differences, which misses the true mean whenever all three
fall on one side of it: 1 time in 4, not 1 in 20.) Differences without a spread (equal to
rounding) have no interval. C2's per-seed ρ over 4 runs takes few values, often equal across
seeds, so C2 is decided per task by the exact permutation test of their sum
(:func:`spearman_permutation_p`) at 2.5% on either side.

Per task (the tables), for a claim that predicts a sign: *supported* when the interval
excludes 0 on the predicted side, *contradicted* when it excludes 0 on the other side,
*inconclusive* otherwise (and with fewer than 2 paired seeds, or no interval). A claim that
something does *not* rise (C3) can only be contradicted: a difference near 0 is "not
contradicted".

Per claim (the summary at the end; :mod:`isotropy.reporting.claim_summary`): the per-seed
values of all the tasks it was tested on are pooled, each oriented so that > 0 is the claimed
direction (a paired difference; for C2 minus the Spearman ρ of one seed's runs; for P1's
growth one run's growth), and a one-sided sign test (exact binomial, ties dropped) gives its p;
Holm's adjustment of those p across the report's claims decides: *supported* when the values
in the claimed direction have an adjusted p < 0.05, *contradicted* when those in the other
direction have, *inconclusive* otherwise, and also while a task gave fewer than 2 values (with
one seed per task nothing shows whether a task's difference, however small, outlasts a change
of seed). Unadjusted, with 3 seeds it needs 6 of 6 values on 2 tasks and 12 of 15 on 5, and it
cannot decide a claim of one task (3 of 3: p = 1/8). For a claim that something does not rise
(C3) only *contradicted* is possible (a significant rise); otherwise it is *not
contradicted*, which with this few values also means "too few to see a rise". A task whose
comparison includes a cell that predicted one class on every seed (a constant predictor) is
shown but left out of its claim's counts.

C3 is judged on IsoScore\* of the last layer's token cloud, the paper's evidence (Fig. 4);
the union of layers is shown beside it as a claim of its own (*C3 no rise, union*).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from isotropy.reporting.cells import Cell
from isotropy.reporting.claim_registry import CLAIMS, ISTAR_BEST, TASKS, ZETAS
from isotropy.reporting.claim_stats import (
    CONFIDENCE,
    Diff,
    claim_verdict,
    mean_interval,
    paired,
    per_seed_spearman,
    sign_test,
    spearman_permutation_p,
)
from isotropy.reporting.claim_summary import (
    Tally,
    claim_rows,
    claims_json,
    constant_predictor,
    summary,
    summary_markdown,
)
from isotropy.reporting.claim_values import Values, mean_std_text, measured_zeta, tail_metric
from isotropy.reporting.runs import Run

__all__ = [
    "CLAIMS",
    "ISTAR_BEST",
    "Diff",
    "Tally",
    "claim_verdict",
    "claims_markdown",
    "claims_report",
    "mean_interval",
    "paired",
    "spearman_permutation_p",
    "sign_test",
    "summary",
]

Cells = dict[tuple[str, str], list[Run]]
ENTROPY_LABELS = ("entropy β=1", "entropy β=1 (all bars)")  # selected bars, all bars


def istar(lam: float, zeta: float) -> str:
    """The method label of I-STAR at ``(lam, zeta)`` (:attr:`Method.label`)."""
    return f"istar λ={lam:g} ζ={zeta:g}"


Get = Callable[[str, str], list[Run]]  # (task, method label) -> the cell's runs
Note = Callable[..., str]  # note(claim, verdict, values, task=, cells=): records a task's unit


def _no_rise(d: Diff) -> str:
    """A "no rise" claim's per-task verdict: a significant rise contradicts it."""
    if d.verdict(+1) == "supported":
        return "contradicted"
    return "not contradicted" if d.n >= 2 else "inconclusive"


def _istar_tables(get: Get, tasks: Sequence[str], note: Note, v: Values) -> list[str]:
    """The I-STAR claims' tables (C1-C5) of ``tasks``."""
    out: list[str] = []

    out += ["## I-STAR", "",
            "| task | method | metric mean ± std | Δ metric vs base [95% CI] | verdict (C1: Δ > 0) "
            "| IsoScore* | Δ IsoScore* vs base | TwoNN [CLS] last | Δ TwoNN vs base |",
            "|---|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        base = get(task, "none")
        if not base:
            continue
        lam, zeta = ISTAR_BEST[task]
        for label in ("none", "cosreg λ=1", istar(lam, zeta), istar(-0.3, zeta), istar(1, zeta)):
            rs = get(task, label)
            if not rs:
                continue
            dm = paired(base, rs, v.metric) if label != "none" else None
            di = paired(base, rs, v.iso) if label != "none" else None
            dt = paired(base, rs, v.twonn) if label != "none" else None
            c1 = ""  # C1 is the paper's λ; the other rows' differences are shown, not judged
            if dm and label == istar(lam, zeta):
                c1 = note("C1 vs none", dm.verdict(+1), dm.values, task=task,
                          cells=("none", label))
            out.append(f"| {task} | {label} | {mean_std_text(rs, v.metric)} | "
                       f"{dm.text() if dm else ''} | {c1} | {mean_std_text(rs, v.iso)} | "
                       f"{di.text() if di else ''} | {mean_std_text(rs, v.twonn)} | "
                       f"{dt.text(2) if dt else ''} |")
    out += ["", "### C1 against CosReg: Δ metric of I-STAR (paper's λ) minus CosReg", "",
            "| task | Δ [95% CI] | verdict (Δ > 0) |", "|---|---|---|"]
    for task in tasks:
        lam, zeta = ISTAR_BEST[task]
        d = paired(get(task, "cosreg λ=1"), get(task, istar(lam, zeta)), v.metric)
        if d:
            c1 = note("C1 vs CosReg", d.verdict(+1), d.values, task=task,
                      cells=("cosreg λ=1", istar(lam, zeta)))
            out.append(f"| {task} | {d.text()} | {c1} |")

    # C2: across the lambda cells at one zeta (base = lambda 0), Spearman correlation of
    # IsoScore* and the metric over all runs, and within each seed: their sum's exact
    # permutation test decides the task (few runs per seed: ρ takes few values).
    out += ["", "### C2: Spearman ρ(IsoScore*, metric) over the runs of λ ∈ {paper's λ, -0.3, "
            "0 (base), +1}", "", "Per task: the per-seed ρ, and the exact p of their sum under "
            "no association within a seed (every order of a seed's metrics over its runs "
            "equally likely); decided when one side is below 2.5%.", "",
            "| task | runs | ρ, all runs | ρ per seed | p (ρ < 0), p (ρ > 0) | verdict (ρ < 0) |",
            "|---|---|---|---|---|---|"]
    for task in tasks:
        lam, zeta = ISTAR_BEST[task]
        lams = [istar(la, zeta) for la in (lam, -0.3, 1.0) if get(task, istar(la, zeta))]
        if not lams:  # no λ but the base run's 0: nothing to correlate
            continue
        c2_cells = ("none", *lams)
        group = [r for label in c2_cells for r in get(task, label)]
        pts = [(r.seed, v.iso(r), v.metric(r)) for r in group]
        pts = [p for p in pts if p[1] is not None and p[2] is not None]
        if len(pts) < 4:
            if group:
                out.append(f"| {task} | {len(pts)} | fewer than 4 runs with both values | | | "
                           f"{note('C2', 'inconclusive', task=task, cells=c2_cells)} |")
            continue
        xs, ys = [p[1] for p in pts], [p[2] for p in pts]
        if np.ptp(xs) == 0 or np.ptp(ys) == 0:
            out.append(f"| {task} | {len(pts)} | undefined (a constant column) | | | "
                       f"{note('C2', 'inconclusive', task=task, cells=c2_cells)} |")
            continue
        rho = float(stats.spearmanr(xs, ys).statistic)
        per_seed = per_seed_spearman(pts)
        p_low, p_high, n_seeds = spearman_permutation_p(pts)
        shown = ", ".join(f"{r:+.3f}" for r in per_seed) or "– (no seed of 3 varying runs)"
        verdict = ("inconclusive" if n_seeds < 2 else "supported" if p_low < (1 - CONFIDENCE) / 2
                   else "contradicted" if p_high < (1 - CONFIDENCE) / 2 else "inconclusive")
        ps = f"{p_low:.3g}, {p_high:.3g}" if n_seeds else "–"
        out.append(f"| {task} | {len(pts)} | {rho:+.3f} | {shown} | {ps} | "
                   f"{note('C2', verdict, [-r for r in per_seed], task=task, cells=c2_cells)} |")

    # C3: CosReg vs base, IsoScore* (predicted: not raised; the paper's evidence is the last
    # layer, the union beside it) and |mean activation| of the last layer (centred).
    out += ["", "### C3: CosReg minus base", "",
            "| task | Δ IsoScore* last layer [95% CI] | verdict (claim: no rise) | Δ IsoScore* "
            "union of layers [95% CI] | verdict (no rise) | Δ mean abs activation (last layer) "
            "| verdict (Δ < 0) |", "|---|---|---|---|---|---|---|"]
    for task in tasks:
        a, b = get(task, "none"), get(task, "cosreg λ=1")
        di, du, dz = paired(a, b, v.iso_last), paired(a, b, v.iso), paired(a, b, v.centring)
        c3 = {"task": task, "cells": ("none", "cosreg λ=1")}
        no_rise = no_rise_union = centres = ""
        if di:
            no_rise = note("C3 no rise", _no_rise(di), di.values, **c3)
        if du:
            no_rise_union = note("C3 no rise, union", _no_rise(du), du.values, **c3)
        if dz:
            centres = note("C3 centres", dz.verdict(-1), [-x for x in dz.values], **c3)
        if di or du or dz:
            out.append(f"| {task} | {di.text() if di else '–'} | {no_rise} | "
                       f"{du.text() if du else '–'} | {no_rise_union} | "
                       f"{dz.text() if dz else '–'} | {centres} |")

    # C4: TwoNN of [CLS] (last layer): lower for lambda < 0, higher for lambda > 0.
    out += ["", "### C4: TwoNN dimension of [CLS], last layer, minus base", "",
            "| task | λ | Δ TwoNN [95% CI] | verdict |", "|---|---|---|---|"]
    for task in tasks:
        lam, zeta = ISTAR_BEST[task]
        for la, sign, key in ((lam, -1, "C4 paper's λ"), (-0.3, -1, "C4 λ = -0.3"),
                              (1.0, +1, "C4 λ = +1")):
            d = paired(get(task, "none"), get(task, istar(la, zeta)), v.twonn)
            if d:
                verdict = note(key, d.verdict(sign), [sign * x for x in d.values], task=task,
                               cells=("none", istar(la, zeta)))
                out.append(f"| {task} | {la:g} | {d.text(2)} | {verdict} |")

    # C5 (a ζ grid): at lambda = -1, the best zeta in (0, 1) against zeta = 0.
    c5 = ["", "### C5: I-STAR λ = -1, best ζ ∈ (0, 1) minus ζ = 0 (a ζ grid)", "",
          "The best ζ is the one of highest mean metric, picked on the same seeds it is then "
          "compared on: this favours it, so only a clear difference counts.", "",
          "| task | metric by ζ (mean, n) | best ζ | Δ best - ζ=0 [95% CI] | verdict (Δ > 0) |",
          "|---|---|---|---|---|"]
    rows = len(c5)
    for task in tasks:
        by_zeta = {z: get(task, istar(-1, z)) for z in ZETAS}
        inner = [z for z in ZETAS if 0 < z < 1 and by_zeta[z]]
        if not by_zeta[0.0] or not inner:
            continue
        means = {z: float(np.mean(ms)) for z in ZETAS
                 if (ms := [m for r in by_zeta[z] if (m := v.metric(r)) is not None])}
        best = max((z for z in inner if z in means), key=lambda z: means[z], default=None)
        if best is None:
            continue
        d = paired(by_zeta[0.0], by_zeta[best], v.metric)
        shown = ", ".join(f"{z:g}: {means[z]:.4f} ({len(by_zeta[z])})" for z in ZETAS
                          if z in means)
        if d:
            verdict = note("C5", d.verdict(+1), d.values, task=task,
                           cells=(istar(-1, 0.0), istar(-1, best)))
            c5.append(f"| {task} | {shown} | {best:g} | {d.text()} | {verdict} |")
    if len(c5) == rows:
        c5[3:] = ["No task has I-STAR λ = -1 runs at ζ = 0 and at a ζ in (0, 1)."]
    return out + c5


def _entropy_tables(get: Get, tasks: Sequence[str], note: Note, v: Values) -> list[str]:
    """The persistent-entropy claims' tables (P1-P3) of ``tasks``."""
    out: list[str] = []
    sel, allbars = ENTROPY_LABELS
    out += ["## Persistent entropy", "",
            "| task | method | metric, last 30% mean | Δ vs base [95% CI] | verdict (P2: Δ > 0) "
            "| top-1 raw [CLS] spectrum, last 30% | Δ vs base | verdict (P1: Δ < 0) |",
            "|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        base = get(task, "none")
        if not base:
            continue
        for label in ("none", sel, allbars):
            rs = get(task, label)
            if not rs:
                continue
            dm = paired(base, rs, tail_metric) if label != "none" else None
            ds = paired(base, rs, v.top1) if label != "none" else None
            p2 = p1 = ""  # P1 and P2 are the paper's method; all bars is its ablation (P3)
            if label == sel:
                at = {"task": task, "cells": ("none", sel)}
                p2 = note("P2", dm.verdict(+1), dm.values, **at) if dm else ""
                p1 = (note("P1 held down", ds.verdict(-1), [-x for x in ds.values], **at)
                      if ds else "")
            out.append(f"| {task} | {label} | {mean_std_text(rs, tail_metric)} | "
                       f"{dm.text() if dm else ''} | {p2} | "
                       f"{mean_std_text(rs, v.top1)} | {ds.text() if ds else ''} | {p1} |")
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
                sd = f" ± {np.std(g, ddof=1):.4f}" if len(g) > 1 else ""
                out.append(f"| {task} | {kind} | {len(g)} | {np.mean(g):+.4f}{sd} | "
                           f"{d.interval_text()} | "
                           f"{verdict} |")
    out += ["", "### P3: feature selection: selected bars minus all bars", "",
            "| task | Δ metric, last 30% [95% CI] | verdict (Δ > 0) "
            "| Δ top-1 spectrum, last 30% [95% CI] | verdict (Δ < 0) |",
            "|---|---|---|---|---|"]
    for task in tasks:
        dm = paired(get(task, allbars), get(task, sel), tail_metric)
        ds = paired(get(task, allbars), get(task, sel), v.top1)
        if dm or ds:
            at = {"task": task, "cells": (allbars, sel)}
            vm = note("P3 metric", dm.verdict(+1), dm.values, **at) if dm else ""
            vs = note("P3 spectrum", ds.verdict(-1), [-x for x in ds.values], **at) if ds else ""
            out.append(f"| {task} | {dm.text() if dm else '–'} | {vm} | "
                       f"{ds.text() if ds else '–'} | {vs} |")
    return out


def _istar_labels(task: str) -> list[str]:
    """The cells the I-STAR claims compare on ``task``: CosReg λ = 1, and I-STAR at the paper's
    best (λ, ζ) for the task and at λ = -0.3 and +1 there, and λ = -1 over :data:`ZETAS`."""
    lam, zeta = ISTAR_BEST[task]
    return ["cosreg λ=1", *(istar(la, zeta) for la in (lam, -0.3, 1.0)),
            *(istar(-1, z) for z in ZETAS)]


def claims_markdown(cells: Sequence[Cell], which: str = "final", spectrum: bool = True,
                    picked: bool = False) -> tuple[list[str], str | None]:
    """:func:`claims_report`'s markdown lines and reason."""
    lines, _, why = claims_report(cells, which, spectrum, picked)
    return lines, why


def claims_report(cells: Sequence[Cell], which: str = "final", spectrum: bool = True,
                  picked: bool = False
                  ) -> tuple[list[str], dict[str, Any] | None, str | None]:
    """The claims' tables and their summary as markdown lines, the same as data for
    ``claims.json`` (:func:`~isotropy.reporting.claim_summary.claims_json`), or
    ``([], None, reason)`` when the runs cannot be read as one protocol (a task whose runs
    differ in settings, e.g. two learning rates: which of them is the base run?) or hold no
    claim's cells.

    ``which``: the evaluation read (``final`` or ``best``); ``spectrum``: whether the training
    [CLS] spectrum may be compared (``False`` when the runs' measurement formats differ: P1 and
    P3's spectrum values are left out); ``picked``: the cells hold ``--pick-best-over`` picks
    (said in the output)."""
    mixed = sorted({c.task for c in cells if c.setting})
    if mixed:
        return [], None, (f"the runs of {', '.join(mixed)} differ in settings that define the "
                    "experiment (the setting column of the tables): the claims are measured "
                    "on one protocol at a time, e.g. in each sweep's own report")
    models = sorted({c.model for c in cells})
    if len(models) > 1:
        return [], None, f"runs of several models ({', '.join(models)}): one model at a time"
    by_label: Cells = {(c.task, c.method.label): list(c.runs) for c in cells}
    labels = {task: {lab for (t, lab) in by_label if t == task} for task in {c.task for c in cells}}
    istar_tasks = [t for t in TASKS if "none" in labels.get(t, ())
                   and set(_istar_labels(t)) & labels[t]]
    entropy_tasks = sorted(t for t, labs in labels.items() if "none" in labs
                           and set(ENTROPY_LABELS) & labs)
    if not istar_tasks and not entropy_tasks:
        return [], None, ("no task has a run without a regularizer next to CosReg λ = 1 or "
                          "I-STAR at the paper's (λ, ζ) for the task (known for "
                          f"{', '.join(TASKS)}), or next to the entropy loss (β = 1, exact)")
    used = {("none", t) for t in istar_tasks + entropy_tasks}
    used |= {(lab, t) for t in istar_tasks for lab in _istar_labels(t)}
    used |= {(lab, t) for t in entropy_tasks for lab in ENTROPY_LABELS}
    unused = sorted(f"{t}: {lab}" for (t, lab) in by_label if (lab, t) not in used)
    zetas = {t: {z for (t2, _), rs in by_label.items() if t2 == t for r in rs
                 if (z := measured_zeta(r)) is not None} for t in labels}
    iso_tasks = frozenset(t for t, zs in zetas.items() if len(zs) <= 1)
    v = Values(which, iso_tasks, spectrum)
    seeds = sorted({len(rs) for rs in by_label.values()})
    read = []
    if istar_tasks:
        read.append(f"the I-STAR claims read the {which} evaluation of each run (`--metric-from`)")
    if entropy_tasks:
        read.append("the entropy claims average the evaluations and [CLS] spectrum logs of the "
                    "last 30% of training")
    out = [f"Values: {'; '.join(read)}. Seeds per cell: {', '.join(map(str, seeds))}"
           + (" (one seed: every verdict, per task and per claim, is inconclusive)"
              if seeds == [1] else "") + "."]
    if picked:
        out.append("Each cell holds its own `--pick-best-over` pick (`picks.csv`), chosen on the "
                   "seeds it is then compared on: the comparisons favour the picked cells.")
    no_iso = sorted(set(istar_tasks) - iso_tasks)
    if no_iso:
        out.append(f"IsoScore\\* not compared on {', '.join(no_iso)}: its runs measured it "
                   "with different ζ (`--measure_zeta`), which do not compare.")
    if not spectrum:
        out.append("The training [CLS] spectrum is not compared (P1, P3): the runs' measurement "
                   "formats differ.")
    other = sorted({t for t, labs in labels.items() if t not in TASKS
                    and any(lab.startswith(("istar", "cosreg")) for lab in labs)})
    if other:
        out.append(f"No I-STAR claim on {', '.join(other)}: the paper's best (λ, ζ) is known "
                   f"for {', '.join(TASKS)} only.")
    if unused:
        out.append(f"Cells no claim compares: {'; '.join(unused)}.")
    out.append("")
    tally: dict[str, Tally] = {}
    constant = {key for key, rs in by_label.items() if constant_predictor(rs)}

    def note(claim: str, verdict: str, values: Sequence[float] = (), *, task: str,
             cells: Sequence[str]) -> str:
        """Record one task's verdict and its per-seed values, oriented so that > 0 is the
        claimed direction (for "no rise": a rise), for the summary; returns the verdict. A
        comparison of a constant predictor's cell is shown but not counted."""
        t = tally.setdefault(claim, Tally([], []))
        flat = [label for label in cells if (task, label) in constant]
        if flat:
            t.left_out.append(f"{task} ({', '.join(flat)}: one class on every seed)")
            return f"{verdict} (left out: constant predictor)"
        t.verdicts.append(verdict)
        t.values.extend(values)
        t.seeds.append(len(values))
        t.tasks.append(task)
        return verdict

    def get(task: str, label: str) -> list[Run]:
        return by_label.get((task, label), [])

    if istar_tasks:
        out += [*_istar_tables(get, istar_tasks, note, v), ""]
    if entropy_tasks:
        out += [*_entropy_tables(get, entropy_tasks, note, v), ""]
    if constant:
        out += ["Cells that predicted one class for the whole dev set at the final evaluation "
                "on every seed (shown in the tables, left out of their claims' counts): "
                + "; ".join(f"{t}: {lab}" for t, lab in sorted(constant)) + ".", ""]
    papers = ("C" if istar_tasks else "") + ("P" if entropy_tasks else "")
    rows = claim_rows(tally, papers)
    data = claims_json(rows, tally, which=which, seeds_per_cell=seeds,
                       constant_predictors=[f"{t}: {lab}" for t, lab in sorted(constant)])
    return [*out, *summary_markdown(rows)], data, None
