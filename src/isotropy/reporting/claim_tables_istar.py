r"""The I-STAR claims' tables of ``claims.md`` (:func:`istar_tables`): C1-C9 per task, each
task's verdict recorded through ``note`` for the summary (:mod:`isotropy.reporting.claims`
states the rules)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from isotropy.reporting.claim_registry import ISTAR_BEST, ZETAS
from isotropy.reporting.claim_stats import (
    CONFIDENCE,
    Diff,
    paired,
    per_seed_spearman,
    spearman_permutation_p,
)
from isotropy.reporting.claim_values import Values, mean_std_text
from isotropy.reporting.runs import Run

__all__ = ["ENTROPY_LABELS", "Get", "Note", "istar", "istar_labels", "istar_tables", "no_rise"]

ENTROPY_LABELS = ("entropy β=1", "entropy β=1 (all bars)")  # selected bars, all bars


def istar(lam: float, zeta: float) -> str:
    """The method label of I-STAR at ``(lam, zeta)`` (:attr:`Method.label`)."""
    return f"istar λ={lam:g} ζ={zeta:g}"


Get = Callable[[str, str], list[Run]]  # (task, method label) -> the cell's runs
Note = Callable[..., str]  # note(claim, verdict, values, task=, cells=): records a task's unit
Value = Callable[[Run], float | None]


def no_rise(d: Diff) -> str:
    """A "no rise" claim's per-task verdict: a significant rise contradicts it."""
    if d.verdict(+1) == "supported":
        return "contradicted"
    return "not contradicted" if d.n >= 2 else "inconclusive"


def istar_tables(get: Get, tasks: Sequence[str], note: Note, v: Values) -> list[str]:
    """The I-STAR claims' tables (C1-C9) of ``tasks``."""
    out: list[str] = []

    out += ["## I-STAR", "",
            "| task | method | metric mean ± std | Δ metric vs base [95% CI] | verdict (paper's "
            "λ, C1: Δ > 0; CosReg, C7: no rise; λ = +1, C6: Δ < 0) | IsoScore* | Δ IsoScore* vs "
            "base | TwoNN [CLS] last | Δ TwoNN vs base |",
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
            c1 = ""  # λ = -0.3's difference is shown, not judged
            at = {"task": task, "cells": ("none", label)}
            if dm and label == istar(lam, zeta):
                c1 = note("C1 vs none", dm.verdict(+1), dm.values, **at)
            elif dm and label == "cosreg λ=1":
                c1 = note("C7 CosReg no gain", no_rise(dm), dm.values, **at)
            elif dm and label == istar(1, zeta):
                c1 = note("C6 λ = +1 hurts", dm.verdict(-1), [-x for x in dm.values], **at)
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

    out += _spearman_rows(get, tasks, note, "C2", "IsoScore*", v.iso, v.metric)
    out += _spearman_rows(get, tasks, note, "C8", "TwoNN of [CLS]", v.twonn, v.metric)

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
        rise = rise_union = centres = ""
        if di:
            rise = note("C3 no rise", no_rise(di), di.values, **c3)
        if du:
            rise_union = note("C3 no rise, union", no_rise(du), du.values, **c3)
        if dz:
            centres = note("C3 centres", dz.verdict(-1), [-x for x in dz.values], **c3)
        if di or du or dz:
            out.append(f"| {task} | {di.text() if di else '–'} | {rise} | "
                       f"{du.text() if du else '–'} | {rise_union} | "
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

    # Fig. 6: λ > 0 raises IsoScore* of the early layers more than that of the last one.
    out += ["", "### C9: λ = +1 minus base, IsoScore* of layer 1 and of the last layer "
            "(Fig. 6: λ > 0 mainly changes early layers)", "",
            "| task | Δ IsoScore* layer 1 [95% CI] | Δ IsoScore* last layer [95% CI] | "
            "Δ layer 1 - Δ last [95% CI] | verdict (> 0) |", "|---|---|---|---|---|"]
    for task in tasks:
        a, b = get(task, "none"), get(task, istar(1, ISTAR_BEST[task][1]))
        d1, dl = paired(a, b, v.iso_first), paired(a, b, v.iso_last)
        dd = paired(a, b, v.iso_first_minus_last)
        if dd:
            verdict = note("C9 early layers", dd.verdict(+1), dd.values, task=task,
                           cells=("none", istar(1, ISTAR_BEST[task][1])))
            out.append(f"| {task} | {d1.text() if d1 else '–'} | {dl.text() if dl else '–'} | "
                       f"{dd.text()} | {verdict} |")

    # C5 (a ζ grid): at lambda = -1, the best zeta in (0, 1) against zeta = 0 and zeta = 1.
    c5 = ["", "### C5: I-STAR λ = -1, best ζ ∈ (0, 1) minus ζ = 0 (a ζ grid)", "",
          "The best ζ is the one of highest mean metric, picked on the same seeds it is then "
          "compared on: this favours it, so only a clear difference counts.", "",
          "| task | metric by ζ (mean, n) | best ζ | Δ best - ζ=0 [95% CI] | verdict (Δ > 0) "
          "| Δ best - ζ=1 [95% CI] | verdict (App. D: Δ > 0) |",
          "|---|---|---|---|---|---|---|"]
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
        d1 = paired(by_zeta[1.0], by_zeta[best], v.metric)
        shown = ", ".join(f"{z:g}: {means[z]:.4f} ({len(by_zeta[z])})" for z in ZETAS
                          if z in means)
        if d:
            verdict = note("C5", d.verdict(+1), d.values, task=task,
                           cells=(istar(-1, 0.0), istar(-1, best)))
            v1 = (note("C5 ζ = 1", d1.verdict(+1), d1.values, task=task,
                       cells=(istar(-1, 1.0), istar(-1, best))) if d1 else "")
            c5.append(f"| {task} | {shown} | {best:g} | {d.text()} | {verdict} | "
                      f"{d1.text() if d1 else '–'} | {v1} |")
    if len(c5) == rows:
        c5[3:] = ["No task has I-STAR λ = -1 runs at ζ = 0 and at a ζ in (0, 1)."]
    return out + c5


def _spearman_rows(get: Get, tasks: Sequence[str], note: Note, claim: str, name: str,
                   x: Value, y: Value) -> list[str]:
    """Across the λ cells at the paper's ζ (the base run as λ = 0), Spearman ρ of ``x`` and
    ``y`` over all runs, and within each seed: their sum's exact permutation test decides the
    task (few runs per seed: ρ takes few values). The claim: ρ < 0."""
    out = ["", f"### {claim}: Spearman ρ({name}, metric) over the runs of λ ∈ {{paper's λ, "
           "-0.3, 0 (base), +1}", "", "Per task: the per-seed ρ, and the exact p of their sum "
           "under no association within a seed (every order of a seed's metrics over its runs "
           "equally likely); decided when one side is below 2.5%.", "",
           "| task | runs | ρ, all runs | ρ per seed | p (ρ < 0), p (ρ > 0) | verdict (ρ < 0) |",
           "|---|---|---|---|---|---|"]
    for task in tasks:
        lam, zeta = ISTAR_BEST[task]
        lams = [istar(la, zeta) for la in (lam, -0.3, 1.0) if get(task, istar(la, zeta))]
        if not lams:  # no λ but the base run's 0: nothing to correlate
            continue
        cells = ("none", *lams)
        group = [r for label in cells for r in get(task, label)]
        pts = [(r.seed, x(r), y(r)) for r in group]
        pts = [p for p in pts if p[1] is not None and p[2] is not None]
        if len(pts) < 4:
            if group:
                out.append(f"| {task} | {len(pts)} | fewer than 4 runs with both values | | | "
                           f"{note(claim, 'inconclusive', task=task, cells=cells)} |")
            continue
        xs, ys = [p[1] for p in pts], [p[2] for p in pts]
        if np.ptp(xs) == 0 or np.ptp(ys) == 0:
            out.append(f"| {task} | {len(pts)} | undefined (a constant column) | | | "
                       f"{note(claim, 'inconclusive', task=task, cells=cells)} |")
            continue
        rho = float(stats.spearmanr(xs, ys).statistic)
        per_seed = per_seed_spearman(pts)
        p_low, p_high, n_seeds = spearman_permutation_p(pts)
        shown = ", ".join(f"{r:+.3f}" for r in per_seed) or "– (no seed of 3 varying runs)"
        verdict = ("inconclusive" if n_seeds < 2 else "supported" if p_low < (1 - CONFIDENCE) / 2
                   else "contradicted" if p_high < (1 - CONFIDENCE) / 2 else "inconclusive")
        ps = f"{p_low:.3g}, {p_high:.3g}" if n_seeds else "–"
        out.append(f"| {task} | {len(pts)} | {rho:+.3f} | {shown} | {ps} | "
                   f"{note(claim, verdict, [-r for r in per_seed], task=task, cells=cells)} |")
    return out


def istar_labels(task: str) -> list[str]:
    """The cells the I-STAR claims compare on ``task``: CosReg λ = 1, and I-STAR at the paper's
    best (λ, ζ) for the task and at λ = -0.3 and +1 there, and λ = -1 over :data:`ZETAS`."""
    lam, zeta = ISTAR_BEST[task]
    return ["cosreg λ=1", *(istar(la, zeta) for la in (lam, -0.3, 1.0)),
            *(istar(-1, z) for z in ZETAS)]
