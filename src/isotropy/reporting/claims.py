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
direction (a paired difference; for C2 minus the Spearman ρ of one seed's runs; for P1's growth
one run's growth), and a one-sided sign test (exact binomial; a tie stays in n and counts for
neither side) gives its p; Holm's adjustment of those p across the report's claims decides:
*supported* when the values in the claimed direction have an adjusted p < 0.05, *contradicted*
when those in the other direction have, *inconclusive* otherwise, and also while a task gave
fewer than 2 values (with one seed per task nothing shows whether a task's difference, however
small, outlasts a change of seed). Unadjusted, with 3 seeds it needs 6 of 6 values on 2 tasks
and 12 of 15 on 5, and it cannot decide a claim of one task (3 of 3: p = 1/8). For a claim that
something does not rise (C3) only *contradicted* is possible (a significant rise); otherwise it
is *not contradicted*, which with this few values also means "too few to see a rise". A task
whose comparison includes a cell that predicted one class on every seed (a constant predictor)
is shown but left out of its claim's counts.

C3 is judged on IsoScore\* of the last layer's token cloud, the paper's evidence (Fig. 4);
the union of layers is shown beside it as a claim of its own (*C3 no rise, union*).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from isotropy.reporting.cells import Cell
from isotropy.reporting.claim_bounds import bounds_markdown
from isotropy.reporting.claim_primary import primary_markdown
from isotropy.reporting.claim_registry import CLAIMS, ISTAR_BEST, TASKS
from isotropy.reporting.claim_stats import (
    Diff,
    claim_verdict,
    mean_interval,
    paired,
    sign_test,
    spearman_permutation_p,
)
from isotropy.reporting.claim_summary import (
    claim_rows_with_left_out,
    claims_json,
    constant_predictor,
    summary,
    summary_markdown,
)
from isotropy.reporting.claim_tables_entropy import entropy_tables
from isotropy.reporting.claim_tables_istar import (
    ENTROPY_LABELS,
    istar_labels,
    istar_tables,
)
from isotropy.reporting.claim_tally import Tally
from isotropy.reporting.claim_values import Values, measured_zeta
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
    "padding_protocol",
    "spearman_permutation_p",
    "sign_test",
    "summary",
]

PADDING = " with padding"  # the end of an I-STAR or CosReg part of a method label


def padding_protocol(by_label: dict[tuple[str, str], list[Run]]
                     ) -> tuple[dict[tuple[str, str], list[Run]], bool]:
    """``(by_label, True)`` with " with padding" left out of every label when every I-STAR and
    CosReg cell of the report has the authors' padding (``--include_padding``): the claims
    then read those cells as the papers' (one protocol per report, as the I-STAR authors'
    code runs it); the cells as they are and ``False`` otherwise (a report with cells of both
    protocols compares the cells without padding, and lists the others as compared by no
    claim).

    >>> cells = {("mrpc", "none"): [], ("mrpc", "istar λ=-1 ζ=0.6 with padding"): []}
    >>> padding_protocol(cells)
    ({('mrpc', 'none'): [], ('mrpc', 'istar λ=-1 ζ=0.6'): []}, True)
    >>> padding_protocol({**cells, ("mrpc", "cosreg λ=1"): []})[1]
    False
    """
    regularized = [label for _, label in by_label if "istar" in label or "cosreg" in label]
    parts = [part for label in regularized for part in label.split(" + ")
             if part.startswith(("istar", "cosreg"))]
    if not parts or not all(part.endswith(PADDING) for part in parts):
        return by_label, False
    return {(task, label.replace(PADDING, "")): runs
            for (task, label), runs in by_label.items()}, True


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
    by_label, padded = padding_protocol({(c.task, c.method.label): list(c.runs) for c in cells})
    labels = {task: {lab for (t, lab) in by_label if t == task} for task in {c.task for c in cells}}
    istar_tasks = [t for t in TASKS if "none" in labels.get(t, ())
                   and set(istar_labels(t)) & labels[t]]
    entropy_tasks = sorted(t for t, labs in labels.items() if "none" in labs
                           and set(ENTROPY_LABELS) & labs)
    if not istar_tasks and not entropy_tasks:
        return [], None, ("no task has a run without a regularizer next to CosReg λ = 1 or "
                          "I-STAR at the paper's (λ, ζ) for the task (known for "
                          f"{', '.join(TASKS)}), or next to the entropy loss (β = 1, exact)")
    used = {("none", t) for t in istar_tasks + entropy_tasks}
    used |= {(lab, t) for t in istar_tasks for lab in istar_labels(t)}
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
    if padded:
        out.append("Protocol: the authors' padding. Every I-STAR and CosReg cell of these runs "
                   "puts the padding positions in its clouds (`--include_padding`), so the "
                   "claims read them as the papers' cells; their labels below leave out "
                   "\"with padding\".")
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
            if t.left_out_units is None:
                t.left_out_units = Tally([], [])
            t.left_out_units.add(verdict, values, task)
            return f"{verdict} (left out: constant predictor)"
        t.add(verdict, values, task)
        return verdict

    def get(task: str, label: str) -> list[Run]:
        return by_label.get((task, label), [])

    if istar_tasks:
        out += [*istar_tables(get, istar_tasks, note, v), ""]
    if entropy_tasks:
        out += [*entropy_tables(get, entropy_tasks, note, v), ""]
    if constant:
        out += ["Cells that predicted one class for the whole dev set at the final evaluation "
                "on every seed (shown in the tables, left out of their claims' counts): "
                + "; ".join(f"{t}: {lab}" for t, lab in sorted(constant)) + ".", ""]
    papers = ("C" if istar_tasks else "") + ("P" if entropy_tasks else "")
    rows = claim_rows_with_left_out(tally, papers)
    data = claims_json(rows, tally, which=which, seeds_per_cell=seeds,
                       **({"include_padding": True} if padded else {}),
                       constant_predictors=[f"{t}: {lab}" for t, lab in sorted(constant)])
    return [*out, *summary_markdown(rows), *bounds_markdown(rows), *primary_markdown(rows)], \
        data, None
