r"""One verdict per claim (the summary of ``claims.md``, and ``claims.json``), from the per-task
units the claims' tables record (:class:`~isotropy.reporting.claim_tally.Tally`).

Per claim, three tests of its values, each value oriented so that > 0 is the claimed direction:

- the **pooled sign test** (:func:`~isotropy.reporting.claim_stats.sign_test`) over every
  task-seed value: "no effect on any task" against "an effect somewhere";
- the **task-level sign test** over one value per task, its mean over seeds: the papers'
  "on most tasks". With 5 tasks its smallest p is 1/32, with 4 tasks 1/16: it cannot
  decide a claim of fewer than 5 tasks at 0.05, and is shown, not used for the verdict;
- **Holm's step-down adjustment** (:func:`~isotropy.reporting.claim_stats.holm`) of the pooled
  tests' deciding p across all the claims of one report that reach a test (the family), which
  holds the chance of any false verdict among them at 0.05. The verdict word uses the
  adjusted p.

A claim's deciding p is that of a two-sided sign test, twice the smaller of its two one-sided
pooled p-values (capped at 1), where either verdict can be reached: a claimed direction
(*supported* or *contradicted*) or "on par" (only *contradicted* or *not contradicted*).
For a claim that something does not rise only a rise can decide, and the deciding p is the
one-sided p of a rise. So each claim's chance of a wrong verdict under no effect is at most
0.05, and Holm's adjustment holds that for the whole family. A unit comparing a cell that
predicted one class at the final evaluation on every seed (:func:`constant_predictor`) is
shown in its table but left out of its claim's counts, and listed; since leaving it out can
change a verdict, the summary also gives each such claim's verdict with those units counted
(the whole family adjusted again that way).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from isotropy.reporting.claim_bounds import bound_field
from isotropy.reporting.claim_primary import decide as decide_primary
from isotropy.reporting.claim_primary import primary_field
from isotropy.reporting.claim_registry import CLAIMS, NEEDS
from isotropy.reporting.claim_stats import (
    ALPHA,
    CONFIDENCE,
    MIN_SEEDS,
    deciding_p,
    holm,
    mean_interval,
    sign_test,
    verdict_word,
)
from isotropy.reporting.claim_tally import Tally, task_means
from isotropy.reporting.runs import Run

__all__ = ["ClaimRow", "claim_rows", "claim_rows_with_left_out", "claims_json",
           "constant_predictor", "summary", "summary_markdown"]


def constant_predictor(runs: Sequence[Run]) -> bool:
    """Whether every run of a cell predicted one class for the whole dev set at its final
    evaluation (``eval_majority_fraction`` = 1; regression tasks have none: never)."""
    shares = [r.value("majority_fraction", "final") for r in runs]
    return bool(shares) and all(s is not None and s >= 1.0 for s in shares)


@dataclass
class ClaimRow:
    """One claim's line of the summary, as data (``claims.json``)."""

    claim: str
    tested: str
    sign: int
    tasks: int
    k: int
    n: int
    p: float | None  # the pooled test's p in the claimed direction (for "no rise": a rise)
    p_decide: float | None  # deciding_p: two-sided, or for "no rise" the one-sided p of a rise
    p_holm: float | None  # p_decide, Holm-adjusted across the report's tested claims
    task_k: int
    task_n: int
    task_p: float | None
    supported: int
    contradicted: int
    left_out: list[str]
    verdict: str
    verdict_unadjusted: str
    # with the left-out units counted (the whole family adjusted that way), where any
    counted_k: int | None = None
    counted_n: int | None = None
    counted_p_holm: float | None = None
    counted_verdict: str | None = None
    # a metric claim's one-sided 95% bounds on the mean effect (claim_bounds.bound_field)
    effect_bound: dict[str, Any] | None = None
    # a metric claim's primary test of the confirmatory plan (claim_primary.primary_field)
    primary: dict[str, Any] | None = None


def claim_rows(tally: dict[str, Tally], papers: str = "CP") -> list[ClaimRow]:
    """The summary's rows as data: per claim of ``papers`` (``C``: I-STAR, ``P``: persistent
    entropy), the pooled and task-level sign tests, Holm's adjustment and the verdict."""
    unknown = set(tally) - set(CLAIMS)
    if unknown:
        raise ValueError(f"units recorded under no claim of CLAIMS: {sorted(unknown)}")
    rows: list[ClaimRow] = []
    tested: list[tuple[int, float, float]] = []  # rows in the family, with p_for, p_against
    for key, (what, sign) in CLAIMS.items():
        if key[0] not in papers:
            continue
        t = tally.get(key, Tally([], []))
        k, n, p_for, p_against = sign_test(t.values)
        means = task_means(t)
        tk, tn, tp, _ = sign_test(means)
        sup, con = t.verdicts.count("supported"), t.verdicts.count("contradicted")
        decide = deciding_p(sign, p_for, p_against)
        if t.values and min(s for s in t.seeds if s) < MIN_SEEDS:
            verdict = f"inconclusive (a task with fewer than {MIN_SEEDS} seeds)"
        elif not t.values and not t.verdicts:
            verdict = (f"not judged: every task left out ({'; '.join(t.left_out)})"
                       if t.left_out else f"not run: needs {NEEDS[key]}")
        elif t.values:
            verdict = ""  # decided below, once the family is known
            tested.append((len(rows), p_for, p_against))
        else:
            verdict = "inconclusive"
        has = bool(t.values)  # all ties (n = 0) test too, with p = 1
        rows.append(ClaimRow(key, what, sign, len(t.verdicts), k, n, p_for if has else None,
                             decide if has else None, None, tk, tn, tp if tn else None, sup,
                             con, list(t.left_out), verdict, verdict,
                             effect_bound=bound_field(key, t) if has else None,
                             primary=primary_field(key, sign, t) if has else None))
    adjusted = holm([rows[i].p_decide for i, _, _ in tested])  # type: ignore[misc]
    for (i, p_for, p_against), p_adj in zip(tested, adjusted, strict=True):
        r = rows[i]
        r.p_holm = p_adj
        r.verdict = verdict_word(r.sign, p_for, p_against, p_adj)
        r.verdict_unadjusted = verdict_word(r.sign, p_for, p_against, r.p_decide)  # type: ignore[arg-type]
    primary = [r for r in rows if r.primary is not None and r.primary["why_none"] is None]
    for r, p_adj in zip(primary, holm([r.primary["p_decide"] for r in primary]),  # type: ignore[index]
                        strict=True):
        decide_primary(r.primary, r.sign, p_adj)  # type: ignore[arg-type]
    return rows


def claim_rows_with_left_out(tally: dict[str, Tally], papers: str = "CP") -> list[ClaimRow]:
    """:func:`claim_rows`, and for the claims with left-out units the verdict with them counted
    (the family adjusted again with every claim's units counted)."""
    rows = claim_rows(tally, papers)
    if not any(t.left_out for t in tally.values()):
        return rows
    counted = {r.claim: r for r in claim_rows(
        {k: t.counting_left_out() for k, t in tally.items()}, papers)}
    for r in rows:
        if r.left_out:
            c = counted[r.claim]
            r.counted_k, r.counted_n, r.counted_p_holm = c.k, c.n, c.p_holm
            r.counted_verdict = c.verdict
    return rows


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def summary_markdown(rows: Iterable[ClaimRow]) -> list[str]:
    """The summary table of :func:`claim_rows`."""
    rows = list(rows)
    family = sum(r.p_holm is not None for r in rows)
    out = ["## Summary: one verdict per claim", "",
           f"Per claim: the per-seed values of all its tasks, pooled, and a one-sided sign test "
           f"(see `isotropy.reporting.claim_summary`): *k of n* values move the claimed way "
           "(for \"no rise\": rise; n counts a tie, which moves neither way), with its "
           "one-sided p; then the test's deciding p "
           "(two-sided, twice the smaller one-sided p, where either verdict can be reached, so "
           "it can be far below the one-sided p of the claimed way when the values go the "
           "other way; for \"no rise\" the one-sided p of a rise), and that p Holm-adjusted "
           "across the "
           f"{family} claims tested here, which the verdict uses at {ALPHA:g}. Beside it, the "
           "task-level test: one value per task (its "
           "mean over seeds), *k of n* tasks the claimed way and its one-sided p (shown, not "
           "used: with fewer than 5 tasks it cannot reach 0.05). Per task, as in the tables "
           f"above: *supported* when the {CONFIDENCE:.0%} Student-t interval over seeds excludes "
           "0 on the claimed side (P1 growth: of the per-run growth; C2: the exact permutation "
           "test below 2.5% on that side), *contradicted* when it excludes 0 on the other side. "
           "A task comparing a cell that predicted one class on every seed is left out of the "
           "counts (listed); the last column gives the claim's verdict with such tasks counted "
           "(every claim's, adjusted again).", "",
           "| claim | what is tested | tasks | values the claimed way | one-sided p, the "
           "claimed way | deciding p | Holm-adjusted p | tasks the claimed way (task means) | "
           "task-level p | tasks supported / contradicted / other | left out | verdict | with "
           "the left-out tasks counted |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        changed = ("" if r.p_holm is None or r.verdict == r.verdict_unadjusted
                   else f" (unadjusted: {r.verdict_unadjusted})")
        counted = ("–" if r.counted_verdict is None else
                   f"{r.counted_k} of {r.counted_n}, Holm p {_p(r.counted_p_holm)}: "
                   f"{r.counted_verdict}")
        out.append(f"| {r.claim} | {r.tested} | {r.tasks} | {r.k} of {r.n} | {_p(r.p)} | "
                   f"{_p(r.p_decide)} | {_p(r.p_holm)} | {r.task_k} of {r.task_n} | "
                   f"{_p(r.task_p)} | "
                   f"{r.supported} / {r.contradicted} / {r.tasks - r.supported - r.contradicted}"
                   f" | {'; '.join(r.left_out) or '–'} | {r.verdict}{changed} | {counted} |")
    return out


def summary(tally: dict[str, Tally], papers: str = "CP") -> list[str]:
    """:func:`summary_markdown` of :func:`claim_rows_with_left_out`."""
    return summary_markdown(claim_rows_with_left_out(tally, papers))


def claims_json(rows: Sequence[ClaimRow], tally: dict[str, Tally], **context: Any
                ) -> dict[str, Any]:
    """``claims.json``: the summary's rows and every per-task unit behind them, with
    ``context`` (what the values read, seeds per cell). A unit's ``values`` are oriented so
    that > 0 is the claimed direction (for "no rise": a rise), and its ``mean`` and
    ``interval`` (Student's, 95%; ``null`` without a spread) are of those values. NaN never
    occurs: what does not exist is ``null``."""
    units = []
    for key, t in tally.items():
        for counted, tt in ((True, t), (False, t.left_out_units or Tally([], []))):
            start = 0
            for i, n in enumerate(tt.seeds):
                values = tt.values[start:start + n]
                d = mean_interval(values) if values else None
                units.append({"claim": key, "task": tt.tasks[i] if i < len(tt.tasks) else None,
                              "verdict": tt.verdicts[i], "values": values, "counted": counted,
                              "mean": d.mean if d else None,
                              "interval": (None if d is None or math.isnan(d.low)
                                           else [d.low, d.high])})
                start += n
    data = {"generated_by": "isotropy report", "alpha": ALPHA, "min_seeds": MIN_SEEDS, **context,
            "claims": [asdict(r) for r in rows], "units": units}
    for r in data["claims"]:
        for name in ("p", "p_decide", "p_holm", "task_p", "counted_p_holm"):
            if r[name] is not None and not math.isfinite(r[name]):
                raise ValueError(f"claim {r['claim']}: {name} is not finite")
    return data
