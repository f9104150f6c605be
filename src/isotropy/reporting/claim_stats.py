r"""The statistics of :mod:`isotropy.reporting.claims` (its module doc states the rules): the
per-task Student-t interval of a mean per-seed difference (:func:`mean_interval`,
:func:`paired`), the claim-level one-sided sign test (:func:`sign_test`,
:func:`claim_verdict`), Holm's adjustment of a family's p-values (:func:`holm`), and C2's
per-seed Spearman ρ with its exact permutation test."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from isotropy.reporting.runs import Run

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "MIN_SEEDS",
    "TIE_RULE",
    "Bound",
    "Diff",
    "claim_verdict",
    "deciding_p",
    "effect_bound",
    "holm",
    "mean_interval",
    "paired",
    "per_seed_spearman",
    "sign_test",
    "spearman_permutation_p",
    "verdict_word",
]


CONFIDENCE = 0.95  # of the per-task intervals


@dataclass
class Diff:
    """The mean over seeds of one per-seed value (a seed-paired difference ``b - a`` of two
    cells, or a run's growth) and its interval; ``low`` and ``high`` are NaN where there is
    none (one value, or no spread)."""

    mean: float
    low: float
    high: float
    n: int
    values: tuple[float, ...] = ()  # the per-seed differences

    def verdict(self, sign: int) -> str:
        if self.n < 2 or math.isnan(self.low):
            return "inconclusive"
        if (sign > 0 and self.low > 0) or (sign < 0 and self.high < 0):
            return "supported"
        if (sign > 0 and self.high < 0) or (sign < 0 and self.low > 0):
            return "contradicted"
        return "inconclusive"

    def interval_text(self, digits: int = 4) -> str:
        """``[low, high]``, or why there is none: ``–`` (one value) or ``no spread``."""
        if self.n < 2:
            return "–"
        if math.isnan(self.low):
            return "no spread"
        return f"[{self.low:+.{digits}f}, {self.high:+.{digits}f}]"

    def text(self, digits: int = 4) -> str:
        if self.n < 2:
            return f"{self.mean:+.{digits}f} (n={self.n})"
        if math.isnan(self.low):
            return f"{self.mean:+.{digits}f} (n={self.n}, no spread)"
        return f"{self.mean:+.{digits}f} {self.interval_text(digits)} (n={self.n})"


ALPHA = 0.05  # the claim-level sign test's level
# One tie rule for every sign test of the study (the report's, the review phase's, the GPU
# phase's): a seed-paired difference of exactly 0 is a seed on which the method did not move
# the metric, so it stays in n and counts for neither side. With a discrete metric a tie has
# a positive chance under no effect, P(d > 0) = P(d < 0) <= 1/2, so each one-sided p stays
# valid (conservative), and a tie can never strengthen a verdict.
TIE_RULE = "a difference of exactly 0 stays in n and counts for neither side"
MIN_SEEDS = 2  # a claim's verdict needs at least this many values from each of its tasks

def sign_test(values: Sequence[float]) -> tuple[int, int, float, float]:
    """``(k, n, p_for, p_against)``: ``k`` of the ``n`` finite values are > 0, and the exact
    one-sided binomial p-values of that many (or more) > 0 and < 0 under a median of 0.

    The tie rule (:data:`TIE_RULE`, shared with ``docs/results/review_verdicts.py`` and
    ``gpu_phase.py``): a value of exactly 0 stays in ``n`` and counts for neither side.

    >>> sign_test([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])  # 6 of 6: 1/64
    (6, 6, 0.015625, 1.0)
    >>> k, n, p, q = sign_test([1.0] * 12 + [-1.0] * 3 + [0.0])  # a tie stays in n
    >>> (k, n, round(p * 2 ** 16))  # C(16,12) + C(16,13) + ... + C(16,16) = 2517
    (12, 16, 2517)
    """
    finite = [v for v in values if math.isfinite(v)]  # a NaN decides nothing
    n, k, below = len(finite), sum(v > 0 for v in finite), sum(v < 0 for v in finite)
    if n == 0:
        return 0, 0, 1.0, 1.0
    p_for = float(stats.binomtest(k, n, 0.5, alternative="greater").pvalue)
    p_against = float(stats.binomtest(below, n, 0.5, alternative="greater").pvalue)
    return k, n, p_for, p_against


def claim_verdict(values: Sequence[float], sign: int = +1) -> str:
    """A claim's verdict from its pooled per-seed values (> 0: the claimed direction, or for
    ``sign`` 0 a rise), by the two-sided sign test at :data:`ALPHA` (for ``sign`` 0 the
    one-sided test of a rise), unadjusted for other claims.

    >>> claim_verdict([0.1] * 6)
    'supported'
    >>> claim_verdict([0.1] * 5 + [-0.1])  # p = 7/64
    'inconclusive'
    >>> claim_verdict([-0.1] * 12 + [0.1] * 3)
    'contradicted'
    >>> claim_verdict([0.01, -0.02, 0.03], sign=0), claim_verdict([0.1] * 6, sign=0)
    ('not contradicted', 'contradicted')
    >>> claim_verdict([])
    'not run'
    """
    if not values:
        return "not run"
    _, _, p_for, p_against = sign_test(values)
    return verdict_word(sign, p_for, p_against, deciding_p(sign, p_for, p_against))


def deciding_p(sign: int, p_for: float, p_against: float) -> float:
    """The p a claim is decided by, from its two one-sided p-values: two-sided (twice the
    smaller, capped at 1) where either verdict can be reached (``sign`` +1: a direction, 2: on
    par); for ``sign`` 0 (does not rise) the one-sided p of a rise.

    >>> deciding_p(+1, 1 / 64, 1.0), deciding_p(0, 1 / 64, 1.0), deciding_p(2, 0.9, 0.6)
    (0.03125, 0.015625, 1.0)
    """
    return p_for if sign == 0 else min(1.0, 2 * min(p_for, p_against))


def verdict_word(sign: int, p_for: float, p_against: float, p: float) -> str:
    """The verdict at a (possibly adjusted) deciding p ``p``: for ``sign`` +1 *supported* or
    *contradicted* on the side of the smaller one-sided p, else *inconclusive*; for 0 and 2
    *contradicted* or *not contradicted*."""
    if sign in (0, 2):
        return "contradicted" if p < ALPHA else "not contradicted"
    if p >= ALPHA:
        return "inconclusive"
    return "supported" if p_for <= p_against else "contradicted"


def mean_interval(values: Sequence[float]) -> Diff:
    """The mean of per-seed ``values`` with its Student-t interval at :data:`CONFIDENCE`,
    mean ± t(n-1) · s / √n. One value has no interval, and neither have values equal to
    1e-12 relative (s = 0: Student's interval needs a spread, and a spread of rounding noise
    would make any difference look certain), so both are *inconclusive*.

    >>> d = mean_interval([1.0, 2.0, 3.0])  # s = 1, t₀.₉₇₅(2) = 4.3027
    >>> round(d.low, 4), round(d.high, 4)
    (-0.4841, 4.4841)
    >>> mean_interval([0.5, 0.5]).text(1), mean_interval([0.5, 0.5]).verdict(+1)
    ('+0.5 (n=2, no spread)', 'inconclusive')
    """
    d = np.asarray(values, dtype=float)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"mean_interval needs a non-empty list of values, got shape {d.shape}")
    mean, n, kept = float(d.mean()), int(d.size), tuple(float(x) for x in d)
    if n < 2 or np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):
        return Diff(mean, float("nan"), float("nan"), n, kept)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(CONFIDENCE)
    return Diff(mean, float(ci.low), float(ci.high), n, kept)


def paired(a: Sequence[Run], b: Sequence[Run], value: Callable[[Run], float | None]) -> Diff | None:
    """``value(b) - value(a)`` over the seeds both cells ran (:func:`mean_interval`)."""
    va = {r.seed: value(r) for r in a}
    vb = {r.seed: value(r) for r in b}
    d = [vb[s] - va[s] for s in sorted(set(va) & set(vb))
         if va[s] is not None and vb[s] is not None
         and math.isfinite(va[s]) and math.isfinite(vb[s])]
    return mean_interval(d) if d else None


def _seed_groups(pts: Sequence[tuple[int, float, float]]) -> list[tuple[int, np.ndarray,
                                                                         np.ndarray]]:
    """``(seed, x, y)`` of each seed whose points can give a Spearman ρ: at least 3, with
    neither column constant."""
    out = []
    for seed in sorted({p[0] for p in pts}):
        x = np.array([p[1] for p in pts if p[0] == seed], dtype=float)
        y = np.array([p[2] for p in pts if p[0] == seed], dtype=float)
        if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
            out.append((seed, x, y))
    return out


def per_seed_spearman(pts: Sequence[tuple[int, float, float]]) -> list[float]:
    """Spearman ρ of ``(seed, x, y)`` points within each seed (seeds with a constant column or
    fewer than 3 points give none).

    >>> per_seed_spearman([(0, 1, 3), (0, 2, 2), (0, 3, 1), (1, 1, 1), (1, 2, 2), (1, 3, 3)])
    [-1.0, 1.0]
    """
    return [float(stats.spearmanr(x, y).statistic) for _, x, y in _seed_groups(pts)]


MAX_EXACT_RUNS = 8  # per seed, for the exact permutation test (8! = 40,320 orders)


def spearman_permutation_p(pts: Sequence[tuple[int, float, float]]) -> tuple[float, float, int]:
    """``(p_low, p_high, seeds)``: the exact one-sided p-values of the sum S of the per-seed
    Spearman ρ of ``(seed, x, y)`` points (the seeds :func:`per_seed_spearman` uses), under
    no association within any seed: each seed's ``y`` in any of its n! orders over its ``x``,
    all equally likely and independent across seeds. ``p_low = P(S ≤ s)``, ``p_high =
    P(S ≥ s)``. Exact even where ρ takes few values (4 runs per seed: 24 orders).

    >>> spearman_permutation_p([(0, 1, 4), (0, 2, 3), (0, 3, 2), (0, 4, 1)])  # 1 of 24
    (0.041666666666666664, 1.0, 1)
    >>> p, _, _ = spearman_permutation_p([(s, x, -x) for s in (0, 1) for x in (1, 2, 3, 4)])
    >>> round(p * 24 ** 2, 6)
    1.0
    """
    groups = _seed_groups(pts)
    counts, observed, total = {0.0: 1}, 0.0, 1  # S -> number of orders giving it
    for seed, x, y in groups:
        if len(x) > MAX_EXACT_RUNS:
            raise ValueError(f"seed {seed} has {len(x)} runs; the exact permutation test "
                             f"enumerates at most {MAX_EXACT_RUNS}")
        rx, ry = stats.rankdata(x), stats.rankdata(y)
        orders = np.array(list(itertools.permutations(range(len(x)))))
        rhos = [float(np.corrcoef(rx, ry[o])[0, 1]) for o in orders]
        observed += float(np.corrcoef(rx, ry)[0, 1])
        step: dict[float, int] = {}
        for sum_so_far, count in counts.items():
            for rho in rhos:
                key = round(sum_so_far + rho, 9)
                step[key] = step.get(key, 0) + count
        counts, total = step, total * len(rhos)
    eps = 1e-9
    low = sum(c for v, c in counts.items() if v <= observed + eps)
    high = sum(c for v, c in counts.items() if v >= observed - eps)
    return low / total, high / total, len(groups)


@dataclass(frozen=True)
class Bound:
    """The one-sided bounds at :data:`CONFIDENCE` on the mean effect over tasks: the effect is
    above ``lower`` with that confidence, and below ``upper`` with it (each one-sided; together
    a two-sided interval at twice the miss rate). ``df``: the Student-t degrees of freedom."""

    mean: float
    lower: float
    upper: float
    df: float
    tasks: int
    n: int


def effect_bound(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE
                 ) -> Bound | None:
    """One-sided bounds on the mean over tasks of each task's mean seed-paired difference
    (``groups``: one list of per-seed differences per task), stratified by task: the tasks are
    fixed (the claim is about them), the seeds are the replication. Mean m = (1/T) Σ mₜ, its
    variance (1/T²) Σ sₜ²/nₜ, and m ∓ t_conf(ν) · se with Welch-Satterthwaite's ν =
    (Σ vₜ)² / Σ vₜ²/(nₜ - 1), vₜ = sₜ²/nₜ. One task: Student's one-sided bound on its mean.
    ``None`` where there is no honest bound: a task with fewer than 2 values, or no spread in
    any task (every difference equal to rounding).

    >>> b = effect_bound([[1.0, 2.0, 3.0]])  # s = 1, t₀.₉₅(2) = 2.9200
    >>> round(b.lower, 4), round(b.upper, 4), b.df
    (0.3141, 3.6859, 2.0)
    >>> effect_bound([[0.5, 0.5]]) is None, effect_bound([[1.0, 2.0], [3.0]]) is None
    (True, True)
    """
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.ndim != 1 or a.size < 2 for a in arrays):
        return None
    if any(not np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("effect_bound needs finite differences")
    tasks = len(arrays)
    v = np.array([float(np.var(a, ddof=1)) / a.size for a in arrays])
    scale = max(1.0, max(float(np.abs(a).max()) for a in arrays))
    if all(np.ptp(a) <= 1e-12 * scale for a in arrays):
        return None
    v[[bool(np.ptp(a) <= 1e-12 * scale) for a in arrays]] = 0.0  # rounding is no spread
    mean = float(np.mean([a.mean() for a in arrays]))
    se = math.sqrt(float(v.sum())) / tasks
    df = float(v.sum() ** 2 / sum(vt ** 2 / (a.size - 1) for vt, a in zip(v, arrays,
                                                                           strict=True)))
    half = float(stats.t.ppf(confidence, df)) * se
    return Bound(mean, mean - half, mean + half, df, tasks, sum(a.size for a in arrays))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: with the m p-values sorted, p₍ᵢ₎ becomes
    maxⱼ≤ᵢ min(1, (m - j + 1) p₍ⱼ₎); rejecting where the adjusted p < α holds the
    family-wise error rate at α under any dependence.

    >>> holm([0.01, 0.04, 0.03])  # sorted 0.01, 0.03, 0.04: 3·0.01, 2·0.03, max(0.06, 0.04)
    [0.03, 0.06, 0.06]
    >>> holm([0.5, 0.5]), holm([0.001, 0.2]), holm([])
    ([1.0, 1.0], [0.002, 0.2], [])
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"holm needs a list of p-values in [0, 1], got {list(pvalues)}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return [round(float(x), 15) for x in adjusted]
