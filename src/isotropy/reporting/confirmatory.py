r"""The confirmatory plan's primary test (``docs/results.md``, "Confirmatory plan
(2026-11-28)"): a stratified sign-flip permutation test of the mean over tasks of each task's
mean seed-paired difference, exact, Holm-adjusted across the plan's family, read beside the
one-sided 95% bounds of :func:`~isotropy.reporting.claim_stats.effect_bound`.

Null hypothesis: within every seed pair the two runs' labels (method, reference) are
exchangeable, so each seed-paired difference is as likely to have either sign, independently
across pairs. The statistic S = (1/T) Σₜ (1/nₜ) Σₛ dₜₛ weighs every task equally (the paper
reports per-task means), whatever its seed count; under the null each of the 2^N sign
patterns of the N differences is equally likely, and all are enumerated (meet in the middle:
two halves of at most 2^20 sums each). A difference of exactly 0 flips to itself: it stays in
N and moves neither way (the study's one tie rule, ``claim_stats.TIE_RULE``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from isotropy.reporting.claim_stats import ALPHA, effect_bound, holm

__all__ = ["MAX_VALUES", "Primary", "primary_test", "primary_verdicts", "primary_word",
           "sign_flip_p"]

MAX_VALUES = 40  # per test: two halves of 2^20 sign patterns


def _half_sums(w: np.ndarray) -> np.ndarray:
    """Σ εᵢ wᵢ over every sign pattern ε ∈ {-1, +1}^len(w)."""
    sums = np.zeros(1)
    for x in w:
        sums = np.concatenate([sums + x, sums - x])
    return sums


def sign_flip_p(groups: Sequence[Sequence[float]]) -> tuple[float, float, float, float]:
    """``(S, p_greater, p_less, p_two_sided)``: the statistic S (the mean of the task means)
    and its exact sign-flip p-values, P(S* ≥ S), P(S* ≤ S) and P(|S*| ≥ |S|) over the 2^N
    equally likely sign patterns of the N differences (stratified: each value keeps its
    task's weight 1 / (T nₜ)).

    >>> s, hi, lo, two = sign_flip_p([[1.0, 2.0, 3.0]])  # only all-positive reaches 6/3
    >>> s, hi, lo, two
    (2.0, 0.125, 1.0, 0.25)
    """
    if not groups or any(len(g) == 0 for g in groups):
        raise ValueError("sign_flip_p needs at least one value in every task")
    t = len(groups)
    d = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    if not np.all(np.isfinite(d)):
        raise ValueError("sign_flip_p needs finite differences")
    if d.size > MAX_VALUES:
        raise ValueError(f"sign_flip_p enumerates at most {MAX_VALUES} values, got {d.size}")
    w = np.concatenate([np.full(len(g), 1.0 / (t * len(g))) for g in groups]) * d
    observed = float(w.sum())
    a, b = _half_sums(np.abs(w[: w.size // 2])), np.sort(_half_sums(np.abs(w[w.size // 2:])))
    eps = 1e-12 * max(1.0, float(np.abs(w).sum()))
    total = a.size * b.size

    def at_least(x: float) -> int:
        """How many patterns have S* ≥ x (within rounding)."""
        return int((b.size - np.searchsorted(b, x - a - eps, side="left")).sum())

    greater = at_least(observed) / total
    less = at_least(-observed) / total  # the null distribution is symmetric about 0
    two = min(1.0, 2 * at_least(abs(observed)) / total)
    return observed, greater, less, two


@dataclass(frozen=True)
class Primary:
    """One primary test: S in points, its exact two-sided p, the one-sided 95% bounds (None
    where none is honest), and the paper's own effect on the same tasks where it gives one."""

    name: str
    statistic: float
    p: float
    lower: float | None
    upper: float | None
    paper: float | None = None


def primary_test(name: str, groups: Sequence[Sequence[float]],
                 paper: float | None = None) -> Primary:
    """The plan's primary test of one comparison (``groups``: per task, its seed-paired
    differences in points, oriented so that > 0 is the claimed direction)."""
    s, _, _, p = sign_flip_p(groups)
    b = effect_bound(groups)
    return Primary(name, s, p, None if b is None else b.lower, None if b is None else b.upper,
                   paper)


def primary_verdicts(tests: Sequence[Primary]) -> list[tuple[Primary, float, str]]:
    """Each test with its Holm-adjusted p (the family: ``tests``) and its verdict:
    *supported* / *contradicted* at an adjusted p < :data:`ALPHA` on the side of S, else
    *inconclusive*; then the equivalence reading of the bounds: where the upper bound lies
    below the paper's effect, ", the paper's effect excluded".

    >>> from isotropy.reporting.confirmatory import Primary as P
    >>> [(round(a, 3), v) for _, a, v in primary_verdicts([P("a", 1.0, 0.01, 0.5, 1.5),
    ...      P("b", -0.2, 0.4, -0.6, 0.1, paper=0.29)])]
    [(0.02, 'supported'), (0.4, "inconclusive, the paper's effect excluded")]
    """
    adjusted = holm([t.p for t in tests])
    return [(t, a, primary_word(t, a, a)) for t, a in zip(tests, adjusted, strict=True)]


def primary_word(t: Primary, p_low: float, p_high: float) -> str:
    """The plan's verdict on ``t`` when its Holm-adjusted p is known to lie in
    [``p_low``, ``p_high``] (equal once every test of the family is in): *supported* /
    *contradicted* on the side of S where the whole range is below :data:`ALPHA`,
    *inconclusive* where it is not below, else undecided; with the equivalence reading.

    >>> from isotropy.reporting.confirmatory import Primary as P
    >>> primary_word(P("a", -1.0, 0.01, -1.5, -0.5, paper=0.3), 0.01, 0.04)
    "contradicted, the paper's effect excluded"
    >>> primary_word(P("a", 1.0, 0.02, 0.5, 1.5), 0.02, 0.08)[:9]
    'undecided'
    """
    if p_high < ALPHA and t.statistic != 0:
        word = "supported" if t.statistic > 0 else "contradicted"
    elif p_low >= ALPHA or t.statistic == 0:
        word = "inconclusive"
    else:
        return ("undecided until the family's other tests are complete (its Holm-adjusted p "
                f"lies between {p_low:.3g} and {p_high:.3g})")
    if t.paper is not None and t.upper is not None and not math.isnan(t.upper) \
            and t.upper < t.paper:
        word += ", the paper's effect excluded"
    return word
