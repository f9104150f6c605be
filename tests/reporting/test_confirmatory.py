"""The confirmatory plan's primary test (``isotropy.reporting.confirmatory``): its exact
sign-flip p against ``scipy.stats.permutation_test`` and against brute-force enumeration,
and its verdicts under Holm's adjustment."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from isotropy.reporting import confirmatory as cf


def _scipy(groups: list[list[float]], alternative: str) -> float:
    """The same statistic under scipy's sign flips of one sample (exact: every pattern)."""
    task = np.concatenate([[i] * len(g) for i, g in enumerate(groups)])

    def mean_of_means(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean([np.mean(x[..., task == i], axis=axis) for i in range(len(groups))],
                       axis=0)

    data = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    return float(stats.permutation_test((data,), mean_of_means, permutation_type="samples",
                                        alternative=alternative, n_resamples=np.inf,
                                        vectorized=True).pvalue)


CASES = [
    [[1.0, 2.0, 3.0]],
    [[0.3, -0.1, 0.2, 0.25, -0.05]],
    [[-2.6, -1.9, -3.1], [0.4, -0.2, 0.1], [-7.4, -8.0, -6.9]],
    [[0.5, 0.0, -0.2], [1.5, 0.9], [0.1, 0.3, -0.4, 0.2]],  # a tie, unequal seeds
    [[-0.74, 0.3, -1.2, 0.0, -0.5], [0.2, -1.0, -0.4, 0.1, -0.9]],
]


@pytest.mark.parametrize("groups", CASES)
def test_p_values_are_scipys_exact_permutation_test(groups: list[list[float]]) -> None:
    s, greater, less, two = cf.sign_flip_p(groups)
    assert s == pytest.approx(np.mean([np.mean(g) for g in groups]))
    assert greater == pytest.approx(_scipy(groups, "greater"), abs=1e-12)
    assert less == pytest.approx(_scipy(groups, "less"), abs=1e-12)
    assert two == pytest.approx(_scipy(groups, "two-sided"), abs=1e-12)


def test_meet_in_the_middle_is_the_brute_force_count_on_25_values() -> None:
    # 5 tasks x 5 seeds, as the plan's runs: 2^25 patterns, counted by brute force in numpy
    # over the two halves' outer sum (a route without searchsorted).
    rng = np.random.default_rng(3)
    groups = [list(np.round(rng.normal(0.4, 1.0, 5), 2)) for _ in range(5)]
    s, greater, _, two = cf.sign_flip_p(groups)
    w = np.concatenate(groups) / 25
    first = np.array([sum(e * x for e, x in zip(signs, w[:12], strict=True))
                      for signs in itertools.product((1, -1), repeat=12)])
    second = np.array([sum(e * x for e, x in zip(signs, w[12:], strict=True))
                       for signs in itertools.product((1, -1), repeat=13)])
    count = sum(int(np.sum(a + second >= s - 1e-12)) for a in first)
    assert greater == pytest.approx(count / 2 ** 25, abs=1e-15)
    count_abs = sum(int(np.sum(np.abs(a + second) >= abs(s) - 1e-12)) for a in first)
    assert two == pytest.approx(count_abs / 2 ** 25, abs=1e-15)


def test_smallest_p_and_ties() -> None:
    # 5 tasks x 5 seeds all positive: only the observed pattern reaches S (1 / 2^25), and
    # its mirror image -S (two-sided: 2 / 2^25)
    _, greater, _, two = cf.sign_flip_p([[1.0] * 5] * 5)
    assert (greater, two) == (pytest.approx(2 ** -25), pytest.approx(2 ** -24))
    # all ties: S = 0, every pattern equal, p = 1 both ways
    assert cf.sign_flip_p([[0.0, 0.0], [0.0]])[1:] == (1.0, 1.0, 1.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        cf.sign_flip_p([[1.0], []])
    with pytest.raises(ValueError, match="at most 40"):
        cf.sign_flip_p([[1.0] * 41])
    with pytest.raises(ValueError, match="finite"):
        cf.sign_flip_p([[1.0, float("nan")]])


def test_verdicts_are_holm_adjusted_with_the_equivalence_reading() -> None:
    tests = [cf.primary_test("I-STAR", [[1.0, 2.0, 3.0, 2.5, 1.5]] * 5, paper=0.29),
             cf.primary_test("entropy", [[-0.2, 0.1, -0.3, 0.05, -0.1]] * 2)]
    (a, pa, wa), (b, pb, wb) = cf.primary_verdicts(tests)
    # Holm over two: the smaller p doubled, the larger kept (or the first, if larger)
    assert pa == pytest.approx(min(1.0, 2 * a.p)) and a.p < b.p
    assert wa == "supported"
    assert pb == pytest.approx(max(b.p, pa)) and wb.startswith("inconclusive")
    assert b.paper is None and "excluded" not in wb
    c = cf.primary_test("small", [[-0.3, -0.1, 0.0, -0.2, 0.1]], paper=0.29)
    ((_, _, wc),) = cf.primary_verdicts([c])
    assert c.upper < 0.29 and wc == "inconclusive, the paper's effect excluded"
