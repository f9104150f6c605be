"""H0 barcode, persistent entropy and prominent-feature selection."""

from __future__ import annotations

import itertools
import math

import gudhi
import numpy as np
import pytest
import ripser
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import pdist, squareform

from isotropy.measures.topology import h0_barcode, persistent_entropy, prominent_features

# --------------------------------------------------------------------------- reference routes


def _pad(deaths: np.ndarray, n_bars: int) -> np.ndarray:
    """Descending deaths padded with the zero-length bars a reference may leave out."""
    deaths = np.sort(np.asarray(deaths, dtype=np.float64))[::-1]
    assert len(deaths) <= n_bars
    return np.concatenate([deaths, np.zeros(n_bars - len(deaths))])


def gudhi_h0(X: np.ndarray) -> np.ndarray:
    st_ = gudhi.RipsComplex(points=X).create_simplex_tree(max_dimension=1)
    pairs = st_.persistence(min_persistence=-1)
    deaths = [d for dim, (_, d) in pairs if dim == 0 and math.isfinite(d)]
    return _pad(np.array(deaths), len(X) - 1)


def ripser_h0(X: np.ndarray) -> np.ndarray:
    dgm = ripser.ripser(X, maxdim=0)["dgms"][0]
    return _pad(dgm[np.isfinite(dgm[:, 1]), 1], len(X) - 1)


def scipy_h0(X: np.ndarray) -> np.ndarray:
    mst = minimum_spanning_tree(squareform(pdist(X)))  # zero weights = no edge: distinct points
    assert mst.nnz == len(X) - 1
    return np.sort(mst.data)[::-1]


def brute_force_h0(X: np.ndarray) -> np.ndarray:
    """Sorted weights of the lightest spanning tree among all (n-1)-edge subsets."""
    n = len(X)
    D = squareform(pdist(X))
    edges = list(itertools.combinations(range(n), 2))
    best, best_w = None, math.inf
    for subset in itertools.combinations(edges, n - 1):
        parent = list(range(n))

        def find(u: int, parent: list[int] = parent) -> int:
            while parent[u] != u:
                u = parent[u]
            return u

        ok = True
        for a, b in subset:
            ra, rb = find(a), find(b)
            if ra == rb:
                ok = False
                break
            parent[ra] = rb
        if ok:
            w = sum(D[a, b] for a, b in subset)
            if w < best_w:
                best, best_w = subset, w
    assert best is not None
    return np.sort([D[a, b] for a, b in best])[::-1]


# --------------------------------------------------------------------------- h0_barcode


@pytest.mark.parametrize(
    ("n", "d", "seed"), [(2, 1, 0), (3, 2, 1), (10, 1, 2), (25, 3, 3), (60, 16, 4), (150, 50, 5)]
)
def test_h0_matches_gudhi_ripser_scipy(n: int, d: int, seed: int) -> None:
    X = np.random.default_rng(seed).normal(size=(n, d))
    ours = h0_barcode(torch.from_numpy(X)).numpy()
    assert ours.shape == (n - 1,)
    np.testing.assert_allclose(ours, gudhi_h0(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours, scipy_h0(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours, ripser_h0(X), rtol=1e-5, atol=1e-6)  # ripser: fp32 values


@pytest.mark.parametrize("seed", range(4))
def test_h0_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    X = rng.normal(size=(6, 2))
    np.testing.assert_allclose(h0_barcode(X).numpy(), brute_force_h0(X), rtol=1e-12)


@pytest.mark.parametrize(("n_unique", "copies", "d"), [(5, 2, 2), (20, 3, 8), (1, 4, 3)])
def test_h0_with_duplicates(n_unique: int, copies: int, d: int) -> None:
    rng = np.random.default_rng(n_unique)
    base = rng.normal(size=(n_unique, d))
    X = rng.permutation(np.repeat(base, copies, axis=0))
    ref = gudhi_h0(X)
    np.testing.assert_allclose(h0_barcode(X).numpy(), ref, atol=1e-12)
    np.testing.assert_allclose(h0_barcode(X).numpy(), ripser_h0(X), rtol=1e-5, atol=1e-6)
    # each duplicate gives one zero bar
    assert int((ref == 0).sum()) == n_unique * (copies - 1)


def test_h0_duplicates_have_zero_gradient_and_no_nan() -> None:
    X = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 2.0]], requires_grad=True)
    bars = h0_barcode(X)
    assert bars.tolist() == [2.0, 1.0, 0.0]
    (g,) = torch.autograd.grad(bars[-1], X)
    assert torch.equal(g, torch.zeros_like(X))
    (g,) = torch.autograd.grad(persistent_entropy(h0_barcode(X)), X)
    assert torch.isfinite(g).all()


def test_h0_gradient_of_each_bar_is_the_unit_edge_vector() -> None:
    X = torch.tensor([[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    bars, pairs = h0_barcode(X, return_pairs=True)
    assert pairs.tolist() == [[1, 2], [0, 1]]  # sides 4 (points 1-2) and 3 (points 0-1)
    (g,) = torch.autograd.grad(bars[0], X)
    expected = torch.tensor([[0.0, 0.0], [0.0, -1.0], [0.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(g, expected)


def test_h0_gradcheck_with_entropy() -> None:
    X = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    X.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: persistent_entropy(h0_barcode(x)), (X,))
    assert torch.autograd.gradcheck(h0_barcode, (X,))


def test_h0_pairs_form_a_spanning_tree_with_the_given_lengths() -> None:
    X = np.random.default_rng(7).normal(size=(40, 5))
    bars, pairs = h0_barcode(X, return_pairs=True)
    assert pairs.dtype == torch.long and pairs.shape == (39, 2)
    assert bool((pairs[:, 0] < pairs[:, 1]).all())
    p = pairs.numpy()
    np.testing.assert_allclose(bars.numpy(), np.linalg.norm(X[p[:, 0]] - X[p[:, 1]], axis=1))
    assert bool((bars[:-1] >= bars[1:]).all())
    parent = list(range(40))

    def find(u: int) -> int:
        while parent[u] != u:
            u = parent[u]
        return u

    for a, b in p:
        ra, rb = find(int(a)), find(int(b))
        assert ra != rb  # no cycle, so 39 edges on 40 vertices span them all
        parent[ra] = rb


def test_h0_invariances_and_dtypes() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 6))
    ref = h0_barcode(X)
    assert ref.dtype == torch.float64
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    np.testing.assert_allclose(h0_barcode(X @ Q + 100.0).numpy(), ref.numpy(), rtol=1e-9)
    np.testing.assert_allclose(h0_barcode(X[rng.permutation(50)]).numpy(), ref.numpy())
    f32 = h0_barcode(torch.tensor(X, dtype=torch.float32))
    assert f32.dtype == torch.float32
    np.testing.assert_allclose(f32.numpy(), ref.numpy(), rtol=1e-5)
    f16 = h0_barcode(torch.tensor(X, dtype=torch.float16))
    assert f16.dtype == torch.float32  # half precision is measured in fp32
    np.testing.assert_allclose(f16.numpy(), ref.numpy(), rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((1, 3)), "at least 2"),
        (np.zeros((0, 3)), "at least 2"),
        (np.zeros(5), "2-D"),
        (np.array([[0.0, 1.0], [np.nan, 0.0]]), "NaN"),
        (np.array([[0.0, 1.0], [np.inf, 0.0]]), "NaN or infinite"),
    ],
)
def test_h0_bad_input(bad: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        h0_barcode(bad)


def test_h0_float32_distances_whose_squares_overflow() -> None:
    x = torch.tensor([[0.0, 1.0], [1e20, 0.0], [1e20, 3e19]], dtype=torch.float32)
    ref = h0_barcode(x.double() / 1e20) * 1e20  # sides 3e19 and about 1e20
    np.testing.assert_allclose(h0_barcode(x).double().numpy(), ref.numpy(), rtol=1e-6)


# --------------------------------------------------------------------------- persistent_entropy


@pytest.mark.parametrize("k", [1, 2, 7, 100])
def test_entropy_of_equal_bars_is_log_k(k: int) -> None:
    assert math.isclose(float(persistent_entropy(torch.full((k,), 0.3))), math.log(k), abs_tol=1e-6)


def test_entropy_known_values() -> None:
    assert float(persistent_entropy([0.0, 5.0, 0.0])) == 0.0
    # p = (1/4, 1/4, 1/2): H = 2 * (1/4) log 4 + (1/2) log 2 = 1.5 log 2
    h = persistent_entropy(torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64))
    assert math.isclose(float(h), 1.5 * math.log(2.0), rel_tol=1e-14)
    bars = np.random.default_rng(1).exponential(size=30)
    assert math.isclose(float(persistent_entropy(bars)), scipy.stats.entropy(bars), rel_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        st.integers(1, 40),
        elements=st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False),
    ).filter(lambda a: a.sum() > 0)
)
def test_entropy_bounds(bars: np.ndarray) -> None:
    h = float(persistent_entropy(bars))
    assert -1e-12 <= h <= math.log(len(bars)) + 1e-12
    # scale invariance
    assert math.isclose(float(persistent_entropy(bars * 3.0)), h, rel_tol=1e-9, abs_tol=1e-12)


def test_entropy_gradcheck_and_zero_bar_gradient() -> None:
    bars = torch.tensor([0.5, 1.5, 2.0, 0.1], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(persistent_entropy, (bars,))
    z = torch.tensor([1.0, 3.0, 0.0], dtype=torch.float64, requires_grad=True)
    h = persistent_entropy(z)
    (g,) = torch.autograd.grad(h, z)
    assert torch.isfinite(g).all()
    # the zero bar only enters through the total S = 4: dH/dl = (1 - H)/S
    assert math.isclose(float(g[2]), (1.0 - h.item()) / 4.0, rel_tol=1e-12)
    # a positive bar: dH/dl_k = -(log p_k + H)/S
    assert math.isclose(float(g[0]), -(math.log(0.25) + h.item()) / 4.0, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ([], "empty"),
        ([1.0, -0.5], "negative"),
        ([1.0, float("nan")], "NaN"),
        ([1.0, float("inf")], "NaN or infinite"),
        ([0.0, 0.0], "zero length"),
        ([[1.0, 2.0]], "1-D"),
    ],
)
def test_entropy_bad_input(bad: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        persistent_entropy(torch.tensor(bad, dtype=torch.float64))


# --------------------------------------------------------------------------- prominent_features
# Expected answers below are worked out by hand from the selection rule:
#   L = (b1, ..., b_{n-1}, b0), alpha = b_{n-1}/b0,
#   S_i = T_i + i T_i / exp(H(L[i:])), T_i = sum L[i:], stop at the first rise of S,
#   Q = ceil(alpha m (alpha - 1 - ln alpha)/(alpha - 1)^2), rescan L[:i] + L[-2:] while Q < i,
#   features = b0..b_i.


def _i(bars: list[float]) -> int:
    return prominent_features(torch.tensor(bars, dtype=torch.float64))[2]


@pytest.mark.parametrize(("bars", "i"), [([5.0], 0), ([2.0, 0.0], 1), ([3.0, 1.0, 2.0], 2)])
def test_small_barcodes_are_all_features(bars: list[float], i: int) -> None:
    f, noise, got = prominent_features(torch.tensor(bars))
    assert got == i
    assert f.tolist() == sorted(bars, reverse=True)
    assert noise.numel() == 0


def test_one_long_bar() -> None:
    # L = (1, 1, 1, 10), S_0 = 13; i = 1: T = 12, H = (2/12) ln 12 + (10/12) ln 1.2 = 0.566,
    # S_1 = 12 + 12/e^0.566 = 18.8 > 13: S rises at i = 1.
    # alpha = 0.1: Q = ceil(0.1 * 4 * 1.4026/0.81) = ceil(0.69) = 1, not < 1: stop, i = 1.
    f, noise, i = prominent_features(torch.tensor([1.0, 10.0, 1.0, 1.0]))
    assert i == 1
    assert f.tolist() == [10.0, 1.0]
    assert noise.tolist() == [1.0, 1.0]


def test_two_long_bars() -> None:
    # [10, 9, 1, 1, 1, 1]: L = (9, 1, 1, 1, 1, 10), S_0 = 23.
    # i = 1: T = 14, H = 4 (1/14) ln 14 + (10/14) ln 1.4 = 0.994, S_1 = 14 + 14/2.703 = 19.2.
    # i = 2: T = 13, H = 3 (1/13) ln 13 + (10/13) ln 1.3 = 0.794, S_2 = 13 + 26/2.212 = 24.8.
    # S rises at i = 2. Q = ceil(0.1732 * 6) = 2, not < 2: i = 2.
    assert _i([10.0, 9.0, 1.0, 1.0, 1.0, 1.0]) == 2
    # [10, 9, 2 x 6], alpha = 0.2: S_0 = 31, S_1 = 22 + 22/e^1.666 = 26.2,
    # S_2 = 20 + 40/e^1.498 = 28.9 (rise at i = 2); Q = ceil(0.2529 * 8) = 3 >= 2: i = 2.
    assert _i([10.0, 9.0] + [2.0] * 6) == 2


def test_rescan_caps_the_number_of_features() -> None:
    # [100, 90, 60, 1 x 5]: L = (90, 60, 1, 1, 1, 1, 1, 100), S_0 = 255.
    # i = 1: T = 165, H = 0.826, S_1 = 165 + 165/2.284 = 237.2;
    # i = 2: T = 105, H = 0.268, S_2 = 105 + 210/1.307 = 265.6 > S_1: first scan gives i = 2.
    # alpha = 0.01, alpha (alpha - 1 - ln alpha)/(alpha - 1)^2 = 0.0369: Q = ceil(0.295) = 1 < 2.
    # Rescan L = (90, 60, 1, 100), m = 4: only i = 1 (S_0 = 251, S_1 = 241.3, no rise),
    # i = m - 3 = 1; Q = ceil(0.148) = 1, not < 1: i = 1.
    f, noise, i = prominent_features([100.0, 90.0, 60.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert i == 1
    assert f.tolist() == [100.0, 90.0]
    assert noise.tolist() == [60.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(("n", "i"), [(4, 1), (5, 2), (6, 3), (7, 4), (8, 4), (10, 4), (30, 4)])
def test_equal_bars_use_the_alpha_one_limit(n: int, i: int) -> None:
    # Equal bars c: S_i = (m - i)c + i (m - i)c/(m - i) = m c for every i, so S never rises and
    # each scan ends at i = m - 3. With alpha = 1, Q = ceil(m/2). Rescans (m -> m - 1 each
    # time) stop at the first m with ceil(m/2) >= m - 3, i.e. m = 7, i = 4, whenever n >= 7.
    assert _i([0.7] * n) == i
    assert _i([0.0] * n) == i  # all-zero barcode: treated as equal bars


def test_zero_shortest_bar_uses_the_alpha_zero_limit() -> None:
    # [4, 3, 2, 1, 0]: L = (3, 2, 1, 0, 4), S_0 = 10; S_1 = 7 + 7/e^0.956 = 9.69;
    # S_2 = 5 + 10/e^0.500 = 11.06: rise at i = 2. alpha = 0 gives Q = 0 < 2: rescan with
    # L = (3, 2, 0, 4): S_0 = 9, S_1 = 6 + 6/e^0.637 = 9.17, i = 1; Q = 0 < 1: rescan with
    # L = (3, 0, 4), m = 3 < 4: keep i = 1.
    f, noise, i = prominent_features(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]))
    assert (i, f.tolist(), noise.tolist()) == (1, [4.0, 3.0], [2.0, 1.0, 0.0])


def _q(bars: np.ndarray) -> int:
    a = bars.min() / bars.max()
    return math.ceil(a * len(bars) * (a - 1 - math.log(a)) / (a - 1) ** 2)


def _clusters(k: int, per: int, d: int, sep: float, std: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = sep * np.eye(k, d)
    return (centres[:, None, :] + std * rng.normal(size=(k, per, d))).reshape(k * per, d)


def _chains(k: int, per: int, sep: float, step: float) -> np.ndarray:
    """k clusters in 2k dimensions: cluster c is ``sep e_c + t step e_{k+c}``, t = 0..per-1."""
    t = np.arange(per, dtype=np.float64)
    X = np.zeros((k, per, 2 * k))
    for c in range(k):
        X[c, :, c] = sep
        X[c, :, k + c] = t * step
    return X.reshape(k * per, 2 * k)


def test_four_separated_clusters() -> None:
    # Four chains of 16 points with unit spacing, centred 20 e_c apart: every in-cluster MST edge
    # is 1 and the 3 inter-cluster edges are sqrt(20^2 + 20^2) = D = 28.284.
    X = _chains(4, 16, sep=20.0, step=1.0)
    D = math.sqrt(800.0)
    np.testing.assert_allclose(scipy_h0(X), [D] * 3 + [1.0] * 60)
    # Note T/e^H(L) = prod l^(l/T): a length-weighted geometric mean of L.
    # L = (D, D, 1 x 60, D), S_0 = 3D + 60 = 144.85.
    # i = 1: T = 2D + 60 = 116.57, T/e^H = D^(2D/T) = 5.06, S_1 = 121.63 (down).
    # i = 2: T = D + 60 = 88.28, T/e^H = D^(D/T) = 2.918, S_2 = 88.28 + 5.84 = 94.12 (down).
    # i = 3: T = D + 59 = 87.28, T/e^H = D^(D/T) = 2.954, S_3 = 87.28 + 8.86 = 96.14 (up): i = 3.
    # alpha = 1/D: Q = ceil(0.0904 * 63) = 6 >= 3, no rescan. Features b0..b3: the three
    # inter-cluster bars and one in-cluster bar (the bar at which S rises counts as a feature).
    f, noise, i = prominent_features(h0_barcode(X))
    assert i == 3
    np.testing.assert_allclose(f.numpy(), [D, D, D, 1.0])
    np.testing.assert_allclose(noise.numpy(), [1.0] * 59)


def test_four_tight_clusters_are_capped_by_q() -> None:
    # Same geometry with spacing 0.01: alpha = 0.01/D = 3.5e-4 and Q = ceil(0.00245 m) = 1 for
    # every m <= 63, so rescans continue down to i = 1: only b0, b1 are kept as features, one
    # inter-cluster bar goes to the noise. This is the documented behaviour of the rule.
    X = _chains(4, 16, sep=20.0, step=0.01)
    bars = h0_barcode(X)
    assert _q(bars.numpy()) == 1
    f, noise, i = prominent_features(bars)
    assert i == 1
    np.testing.assert_allclose(f.numpy(), [math.sqrt(800.0)] * 2)


def test_gaussian_clusters_keep_every_inter_cluster_bar() -> None:
    # 4 Gaussian clusters (unit spread, 16 points in 8-D) centred 20 sqrt(2) apart. Removing a
    # long bar (~25) replaces it by a weighted geometric mean of the rest (a few units), so S
    # falls for i = 1, 2 and the first rise comes after the long bars: i >= 3. With Q >= i there
    # is no rescan, so all 3 inter-cluster bars are features and the noise is in-cluster only.
    X = _clusters(4, 16, 8, sep=20.0, std=1.0, seed=0)
    ref = scipy_h0(X)
    assert ref[2] > 15.0 > 8.0 > ref[3]
    f, noise, i = prominent_features(h0_barcode(X))
    assert i >= 3
    assert _q(ref) >= i
    np.testing.assert_allclose(f.numpy()[:3], ref[:3])
    assert float(noise.max()) < 8.0


def test_three_far_tight_clusters_give_exactly_the_long_bars() -> None:
    # 3 clusters far apart and tight: alpha is tiny so Q = 1 for every m <= n; rescans then
    # continue until i = 1 (i never drops below 1): features = b0, b1, the two long bars.
    X = _clusters(3, 20, 8, sep=100.0, std=0.05, seed=1)
    ref = scipy_h0(X)
    assert ref[1] > 50.0 > 1.0 > ref[2]
    assert _q(ref) == 1
    f, noise, i = prominent_features(h0_barcode(X))
    assert i == 1
    np.testing.assert_allclose(f.numpy(), ref[:2])
    np.testing.assert_allclose(noise.numpy(), ref[2:])


def test_features_and_noise_are_differentiable_slices() -> None:
    bars = torch.tensor([1.0, 2.0, 10.0, 1.0, 9.0, 1.0], requires_grad=True)
    f, noise, i = prominent_features(bars)
    assert i == 2  # b0..b2 = 10, 9, 1 (see test_two_long_bars)
    (f.sum() + 2.0 * noise.sum()).backward()
    # sorted (stable) order: 10 (idx 2), 9 (4), 2 (1), 1 (0), 1 (3), 1 (5)
    assert bars.grad.tolist() == [2.0, 1.0, 1.0, 2.0, 1.0, 2.0]


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(0.0, 1e3, allow_nan=False)),
    st.integers(-8, 8),
)
def test_selection_invariants(bars: np.ndarray, k: int) -> None:
    f, noise, i = prominent_features(bars)
    n = len(bars)
    assert len(f) == i + 1 and len(noise) == n - i - 1
    assert (0 <= i <= n - 1) if n <= 3 else (1 <= i <= n - 3)
    assert np.array_equal(np.concatenate([f.numpy(), noise.numpy()]), np.sort(bars)[::-1])
    assert prominent_features(bars * 2.0**k)[2] == i  # exact rescaling
    assert prominent_features(bars[::-1].copy())[2] == i


@pytest.mark.parametrize(
    ("bad", "match"),
    [([], "empty"), ([1.0, -1.0], "negative"), ([1.0, float("nan")], "NaN"), ([[1.0]], "1-D")],
)
def test_selection_bad_input(bad: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        prominent_features(torch.tensor(bad))


# --------------------------------------------------------------------------- double backward
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_double_backward_matches_finite_differences(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 3, dtype=torch.float64, generator=g).requires_grad_(True)
    assert torch.autograd.gradgradcheck(lambda t: h0_barcode(t), (x,))
    assert torch.autograd.gradgradcheck(lambda t: persistent_entropy(h0_barcode(t)), (x,))
    bars = torch.rand(6, dtype=torch.float64, generator=g).add_(0.1).requires_grad_(True)
    assert torch.autograd.gradgradcheck(persistent_entropy, (bars,))
    big = (bars.detach() * 1e300).requires_grad_(True)  # scaled internally: still exact
    (gb,) = torch.autograd.grad(persistent_entropy(big), big, create_graph=True)
    (g1,) = torch.autograd.grad(persistent_entropy(bars), bars, create_graph=True)
    assert torch.allclose(gb * 1e300, g1, rtol=1e-12, atol=0)
