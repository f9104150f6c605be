"""TwoNN against scikit-dimension and brute-force nearest neighbours."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from isotropy.measures.twonn import two_nearest_distances, twonn

skdim = pytest.importorskip("skdim")


def _subspace_data(n: int, k: int, d: int, seed: int, noise: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)) @ rng.standard_normal((k, d))
    return x + noise * rng.standard_normal((n, d))


def _skdim(x: np.ndarray, **kwargs: object) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(skdim.id.TwoNN(**kwargs).fit(x).dimension_)


def _brute_r1_r2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dist = cdist(x.astype(np.float64), x.astype(np.float64))
    np.fill_diagonal(dist, np.inf)
    dist.sort(axis=1)
    return dist[:, 0], dist[:, 1]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


@pytest.mark.parametrize(
    ("n", "k", "d", "dtype"),
    [
        (500, 2, 3, np.float64),  # <= 25 features: skdim uses a tree
        (800, 5, 20, np.float32),
        (1000, 5, 30, np.float64),  # > 25 features: skdim uses chunked distance matrices
        (1500, 12, 64, np.float32),
        (600, 100, 100, np.float32),
    ],
)
def test_matches_skdim(n: int, k: int, d: int, dtype: type) -> None:
    x = _subspace_data(n, k, d, seed=n + d, noise=0.01).astype(dtype)
    assert _rel(twonn(x), _skdim(x)) < 1e-6


@pytest.mark.parametrize("discard_fraction", [0.0, 0.05, 0.1, 0.3])
def test_matches_skdim_mle(discard_fraction: float) -> None:
    x = _subspace_data(700, 4, 10, seed=3)
    ours = twonn(x, discard_fraction=discard_fraction, method="mle")
    ref = _skdim(x, discard_fraction=discard_fraction, method="mle")
    assert _rel(ours, ref) < 1e-9


@pytest.mark.parametrize("discard_fraction", [0.01, 0.2, 0.5])
def test_matches_skdim_other_discard_fractions(discard_fraction: float) -> None:
    x = _subspace_data(700, 4, 10, seed=4)
    ref = _skdim(x, discard_fraction=discard_fraction)
    assert _rel(twonn(x, discard_fraction=discard_fraction), ref) < 1e-9


def test_matches_skdim_5000x384_float32() -> None:
    x = _subspace_data(5000, 10, 384, seed=0, noise=0.01).astype(np.float32)
    assert _rel(twonn(x), _skdim(x)) < 1e-6


@pytest.mark.skipif(
    os.environ.get("ISOTROPY_SLOW_TESTS") != "1", reason="set ISOTROPY_SLOW_TESTS=1 (~20 s)"
)
def test_matches_skdim_20000x384_float32() -> None:
    x = _subspace_data(20000, 10, 384, seed=0, noise=0.01).astype(np.float32)
    assert _rel(twonn(x), _skdim(x)) < 1e-6


@pytest.mark.parametrize(("k", "d"), [(1, 5), (2, 10), (3, 40), (6, 50)])
def test_recovers_subspace_dimension(k: int, d: int) -> None:
    x = _subspace_data(4000, k, d, seed=k)
    assert abs(twonn(x) - k) < 0.12 * k


def test_distances_match_brute_force() -> None:
    x = _subspace_data(400, 6, 30, seed=5).astype(np.float32)
    r1, r2 = two_nearest_distances(x)
    b1, b2 = _brute_r1_r2(x)
    np.testing.assert_allclose(r1.numpy(), b1, rtol=1e-12)
    np.testing.assert_allclose(r2.numpy(), b2, rtol=1e-12)


def test_ill_conditioned_cloud_is_exact() -> None:
    # tight clusters far from the origin and from each other: the fp32 expansion
    # ||x||^2 + ||y||^2 - 2 x.y cannot resolve the neighbour distances, so rows go to fp64
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, 64)) * 1e3
    x = centres[rng.integers(0, 30, 1500)] + 1e-3 * rng.standard_normal((1500, 64))
    x = x.astype(np.float32)
    b1, b2 = _brute_r1_r2(x)
    r1, r2 = two_nearest_distances(x)
    np.testing.assert_allclose(r1.numpy(), b1, rtol=1e-12)
    np.testing.assert_allclose(r2.numpy(), b2, rtol=1e-12)
    ref = _skdim(np.stack([b1, b2], axis=1), dist=True)
    assert _rel(twonn(x), ref) < 1e-9


@pytest.mark.parametrize("precision", ["high", "medium"])
def test_reduced_precision_matmul_setting_stays_exact(precision: str) -> None:
    x = _subspace_data(300, 5, 40, seed=12).astype(np.float32)
    b1, b2 = _brute_r1_r2(x)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(precision)
        r1, r2 = two_nearest_distances(x)
    finally:
        torch.set_float32_matmul_precision(before)
    np.testing.assert_allclose(r1.numpy(), b1, rtol=1e-12)
    np.testing.assert_allclose(r2.numpy(), b2, rtol=1e-12)


def test_chunked_equals_unchunked() -> None:
    x = torch.as_tensor(_subspace_data(300, 4, 30, seed=6), dtype=torch.float32)
    full = twonn(x, chunk_size=300)
    for chunk in (1, 7, 64, 1000, None, np.int64(13)):
        assert _rel(twonn(x, chunk_size=chunk), full) < 1e-12
    r1a, r2a = two_nearest_distances(x, chunk_size=1)
    r1b, r2b = two_nearest_distances(x, chunk_size=300)
    torch.testing.assert_close(r1a, r1b, rtol=1e-13, atol=0)
    torch.testing.assert_close(r2a, r2b, rtol=1e-13, atol=0)


def test_torch_and_numpy_and_half_inputs() -> None:
    x = _subspace_data(500, 3, 8, seed=7)
    ref = _skdim(x)
    assert _rel(twonn(torch.as_tensor(x)), ref) < 1e-9
    assert _rel(twonn(x), ref) < 1e-9
    xh = torch.as_tensor(x, dtype=torch.float16)
    assert _rel(twonn(xh), _skdim(xh.float().numpy())) < 1e-6


def test_duplicates_dropped_with_warning_like_skdim() -> None:
    x = _subspace_data(400, 3, 5, seed=8)
    x = np.vstack([x, x[:20], x[:5]])  # 20 points doubled, 5 of them tripled
    with pytest.warns(UserWarning, match="dropping 45 point"):
        ours = twonn(x)
    assert _rel(ours, _skdim(x)) < 1e-9


def test_duplicates_high_dim_exact() -> None:
    # skdim's > 25-feature route computes duplicates' distances by the expansion and may get
    # r1 ~ 1e-7 instead of 0; compare with exact distances fed to skdim instead.
    x = _subspace_data(400, 3, 40, seed=9)
    x = np.vstack([x, x[:10]])
    b1, b2 = _brute_r1_r2(x)
    assert int((b1 == 0).sum()) == 20
    with pytest.warns(UserWarning, match="duplicate"):
        ours = twonn(x)
    assert _rel(ours, _skdim(np.stack([b1, b2], axis=1), dist=True)) < 1e-9


def test_duplicate_distances_are_zero() -> None:
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    r1, r2 = two_nearest_distances(x)
    assert r1.tolist() == [0.0, 0.0, 1.0, 3.0]
    assert r2.tolist() == [1.0, 1.0, 1.0, 3.0]  # (0, 3) has two points at distance 3


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((0, 3)), "0 point"),
        (np.ones((1, 3)), "1 point"),
        (np.array([[0.0, 1.0], [1.0, 0.0]]), "2 point"),
        (np.arange(10.0), "2-D"),
        (np.array([[0.0, 1.0], [np.nan, 0.0], [1.0, 1.0]]), "NaN"),
        (np.array([[0.0, 1.0], [np.inf, 0.0], [1.0, 1.0]]), "NaN or infinite"),
    ],
)
def test_bad_input(bad: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        twonn(bad)


def test_bad_options() -> None:
    x = _subspace_data(50, 2, 3, seed=10)
    for f in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="discard_fraction"):
            twonn(x, discard_fraction=f)
    for c in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            twonn(x, chunk_size=c)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method"):
        twonn(x, method="ols")
    with pytest.raises(ValueError, match="infinite"):
        twonn(x, discard_fraction=0.0)


def test_all_duplicates_and_grid_raise() -> None:
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="all points identical"):
        twonn(np.ones((10, 3)))
    grid = np.stack([np.arange(100.0), np.zeros(100)], axis=1)  # r2 == r1 except at the ends
    with pytest.raises(ValueError, match="equals 1"):
        twonn(grid)
    with pytest.raises(ValueError, match="at least 2"):
        twonn(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]]), discard_fraction=0.5)


def test_not_differentiable_input_accepted() -> None:
    x = torch.as_tensor(_subspace_data(100, 2, 4, seed=11)).requires_grad_(True)
    r1, _ = two_nearest_distances(x)
    assert not r1.requires_grad
    out = twonn(x)
    assert isinstance(out, torch.Tensor) and out.ndim == 0 and not out.requires_grad
    assert out.dtype == torch.float64
    assert twonn(x.float()).dtype == torch.float32


def test_warning_points_at_the_caller() -> None:
    x = _subspace_data(50, 2, 3, seed=12)
    x = np.concatenate([x, x[:5]])
    with pytest.warns(UserWarning, match="duplicate") as record:
        twonn(x)
    assert record[0].filename == __file__


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    scale=st.floats(1e-3, 1e3),
    shift=st.floats(-100.0, 100.0),
)
def test_similarity_invariance(seed: int, scale: float, shift: float) -> None:
    x = _subspace_data(120, 3, 6, seed=seed)
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    moved = scale * x[rng.permutation(120)] @ q + shift
    assert _rel(twonn(moved), twonn(x)) < 1e-7


def test_one_row_of_large_norm_keeps_the_other_rows_out_of_the_float64_redo(monkeypatch):
    """A row of large norm widens the rounding bound of the fp32 candidate search; it is
    searched exactly instead, so the other rows are proven in fp32 and the distances are
    still those of a brute-force search in fp64."""
    from isotropy.measures import twonn as module

    g = torch.Generator().manual_seed(7)
    x = torch.randn(600, 24, generator=g)
    x[17] *= 1e4  # one token of a massive activation's norm
    searched: list[int] = []
    real = module._candidate_search

    def counting(*args):
        searched.append(len(args[4]))  # the rows of this call
        return real(*args)

    monkeypatch.setattr(module, "_candidate_search", counting)
    r1, r2 = module.two_nearest_distances(x)
    assert sum(searched) <= 600 + 1, searched  # at most the far row itself is redone
    d = torch.cdist(x.double(), x.double(), compute_mode="donot_use_mm_for_euclid_dist")
    d.fill_diagonal_(float("inf"))
    ref = torch.topk(d, 2, dim=1, largest=False).values
    torch.testing.assert_close(r1, ref[:, 0], rtol=1e-12, atol=0)
    torch.testing.assert_close(r2, ref[:, 1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", ["pair", "cluster", "ring"])
def test_far_rows_that_are_each_others_nearest_are_found(case):
    """Far rows are no fp32 candidates: where a far row is among a row's two nearest (far rows
    near each other, or a far row nearer than the row's candidates), its exact distance is
    still taken, as a brute-force fp64 search finds it."""
    from isotropy.measures import twonn as module

    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 16, generator=g, dtype=torch.float64)
    if case == "pair":  # two far rows close to each other
        x[5] = 50.0
        x[9] = 50.0 + 0.01 * torch.randn(16, generator=g, dtype=torch.float64)
    elif case == "cluster":  # five far rows around one far point
        x[:5] = 80.0 + 0.1 * torch.randn(5, 16, generator=g, dtype=torch.float64)
    else:  # far rows at growing norms along one direction, each nearest to the next
        for k in range(6):
            x[k] = 0.0
            x[k, 0] = 10.0 + 0.5 * k
    norms = (x - x.mean(0)).norm(dim=1)
    assert len(module._far_rows(norms, 8)) >= 2  # the case has far rows
    r1, r2 = module.two_nearest_distances(x.float())
    d = torch.cdist(x.float().double(), x.float().double(),
                    compute_mode="donot_use_mm_for_euclid_dist")
    d.fill_diagonal_(float("inf"))
    ref = torch.topk(d, 2, dim=1, largest=False).values
    torch.testing.assert_close(r1, ref[:, 0], rtol=1e-12, atol=0)
    torch.testing.assert_close(r2, ref[:, 1], rtol=1e-12, atol=0)
