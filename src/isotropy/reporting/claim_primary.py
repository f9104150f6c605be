r"""The confirmatory plan's primary test (``docs/results.md``, "Confirmatory plan (2026-11-28)";
:mod:`isotropy.reporting.confirmatory`) applied to a report's metric claims
(:data:`~isotropy.reporting.claim_registry.METRIC_CLAIMS`), as ``claims.json``'s ``primary``
field and a section of ``claims.md``.

As the plan says: every unit counted (a constant predictor's too), S = the mean over tasks of
each task's mean seed-paired Δ (method minus reference, in points), its exact stratified
sign-flip p, one tie rule (a Δ of 0 stays in N and moves S neither way), Holm's adjustment
across the family, and the one-sided 95% bounds over the same units read beside the paper's
effect. Applied to runs that were seen before the plan was written, it is *exploratory*; its
family is the report's metric claims (the plan's own family, the two confirmatory tests,
holds only for the confirmatory runs). Verdicts as the summary's: for a claimed direction
*supported* / *contradicted* at a Holm-adjusted two-sided p < 0.05 on the side of S (S = 0:
*inconclusive*); for "does not rise" (deciding p: the one-sided p of a rise) and "on par"
(two-sided) *contradicted* or *not contradicted*."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from isotropy.reporting.claim_bounds import bound_words, task_groups
from isotropy.reporting.claim_registry import METRIC_CLAIMS, PAPER_EFFECT
from isotropy.reporting.claim_stats import ALPHA, effect_bound, verdict_word
from isotropy.reporting.confirmatory import MAX_VALUES, sign_flip_p

if TYPE_CHECKING:
    from isotropy.reporting.claim_tally import Tally

__all__ = ["READING", "TEST", "decide", "primary_field", "primary_markdown"]

TEST = ("stratified sign-flip permutation test of S = the mean over tasks of each task's mean "
        "seed-paired difference (points), exact over all 2^N sign patterns; every unit counted, "
        "constant predictors included; a difference of 0 stays in N and moves S neither way")
READING = ("the confirmatory plan's test (docs/results.md, 2026-11-28) with Holm's family this "
           "report's metric claims, not the plan's two primary tests: exploratory on runs seen "
           "before the plan was written, and on the plan's own runs a reading beside its "
           "verdicts (docs/results/confirm_phase.py)")


def primary_field(key: str, sign: int, t: Tally) -> dict[str, Any] | None:
    """Claim ``key``'s primary test before Holm's adjustment (``p_holm`` and ``verdict`` are
    set by :func:`decide`); ``None`` unless a metric claim with values. ``statistic``,
    ``lower`` and ``upper`` are of Δ = method minus reference in points; ``p_greater`` and
    ``p_less`` are one-sided in the claim's own direction (> 0: the claimed way, for "does not
    rise": a rise)."""
    if key not in METRIC_CLAIMS:
        return None
    units = task_groups(t.counting_left_out(), 1)  # oriented: > 0 is the claimed way
    if not units:
        return None
    factor = METRIC_CLAIMS[key]
    n = sum(len(v) for _, v in units)
    out: dict[str, Any] = {"test": TEST, "reading": READING,
                           "tasks": [task for task, _ in units], "n": n}
    if n > MAX_VALUES:
        return {**out, "why_none": f"{n} values: the exact test enumerates at most {MAX_VALUES}"}
    groups = [v for _, v in units]
    s, greater, less, two = sign_flip_p(groups)
    b = effect_bound(groups)
    lower = upper = None
    if b is not None:
        lower, upper = (b.lower, b.upper) if factor > 0 else (-b.upper, -b.lower)
    paper = PAPER_EFFECT.get(key)
    on = [task for task, _ in units if paper and task in paper]
    paper_mean = round(sum(paper[x] for x in on) / len(on), 4) if paper and on else None
    excluded = None
    if paper_mean is not None and upper is not None:
        # a claimed direction: the paper's gain above the upper bound (in the claimed way);
        # "does not rise" / "on par": the paper's effect outside the bounds
        oriented_upper = upper if factor > 0 else -lower
        excluded = (factor * paper_mean > oriented_upper if sign == 1
                    else not lower <= paper_mean <= upper)
    return {**out, "why_none": None, "statistic": factor * s, "p_greater": greater,
            "p_less": less, "p_two_sided": two,
            "p_decide": greater if sign == 0 else two, "p_holm": None, "verdict": None,
            "lower": lower, "upper": upper,
            "words": None if lower is None else bound_words(lower, upper),
            "paper_mean": paper_mean, "paper_excluded": excluded}


def decide(field: dict[str, Any], sign: int, p_holm: float) -> None:
    """Set ``field``'s Holm-adjusted p and its verdict, with the equivalence reading."""
    field["p_holm"] = p_holm
    oriented = field["p_greater"] <= field["p_less"]
    if sign in (0, 2):
        word = verdict_word(sign, field["p_greater"], field["p_less"], p_holm)
    elif p_holm >= ALPHA or field["statistic"] == 0:
        word = "inconclusive"
    else:
        word = "supported" if oriented else "contradicted"
    if field["paper_excluded"]:
        word += ", the paper's effect excluded"
    field["verdict"] = word


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def primary_markdown(rows: Iterable[Any]) -> list[str]:
    """The section of ``claims.md`` giving each metric claim's primary test (rows of
    :func:`~isotropy.reporting.claim_summary.claim_rows` with their ``primary``)."""
    rows = [r for r in rows if r.primary is not None]
    if not rows:
        return []
    out = ["", "## The confirmatory plan's primary test, applied to these runs (not the plan's "
           "verdicts)",
           "", f"Per metric claim: a {TEST}; two-sided p (for \"does not rise\": the one-sided "
           "p of a rise), Holm-adjusted across the claims below, and the one-sided 95% bounds "
           "on the mean Δ (method minus reference, points) over the same units, beside the "
           f"paper's own Δ. {READING[0].upper()}{READING[1:]}, so these verdicts are not the "
           "plan's confirmatory ones; the summary above stays the report's verdict.", "",
           "| claim | tasks (values) | S: mean Δ | deciding p | Holm-adjusted p | Δ [lower, "
           "upper] | in words | paper's Δ | verdict |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r.primary
        if f["why_none"]:
            out.append(f"| {r.claim} | {len(f['tasks'])} ({f['n']}) | – | – | – | – | "
                       f"no test: {f['why_none']} | – | – |")
            continue
        bounds = ("–" if f["lower"] is None else f"[{f['lower']:+.2f}, {f['upper']:+.2f}]")
        paper = "–" if f["paper_mean"] is None else f"{f['paper_mean']:+.2f}"
        out.append(f"| {r.claim} | {len(f['tasks'])} ({f['n']}) | {f['statistic']:+.2f} | "
                   f"{_p(f['p_decide'])} | {_p(f['p_holm'])} | {bounds} | "
                   f"{f['words'] or 'no bound: no spread'} | {paper} | {f['verdict']} |")
    return out
