"""Average cosine similarity and the CosReg term against brute-force pairwise cosines."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isotropy.measures.cosine import avg_cosine_similarity, cosine_regularization_term


def _brute_cosines(x: np.ndarray) -> np.ndarray:
    """All pairwise cosines from the full matrix (scipy's cosine distance, 1 - cos)."""
    from scipy.spatial.distance import cdist

    return 1.0 - cdist(x, x, metric="cosine")


def _brute_mean(x: np.ndarray) -> float:
    c = _brute_cosines(x)
    n = len(x)
    iu = np.triu_indices(n, k=1)
    return float(c[iu].mean())


def _cloud(n: int, d: int, seed: int, shift: float = 0.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) + shift


@pytest.mark.parametrize(("n", "d"), [(2, 3), (10, 2), (200, 16), (57, 300)])
def test_exact_matches_brute_force(n: int, d: int) -> None:
    x = _cloud(n, d, seed=n)
    assert float(avg_cosine_similarity(x)) == pytest.approx(_brute_mean(x), abs=1e-12)


def test_known_values() -> None:
    assert float(avg_cosine_similarity(torch.eye(5))) == pytest.approx(0.0, abs=1e-15)
    assert float(avg_cosine_similarity(torch.ones(7, 3))) == pytest.approx(1.0)
    assert float(avg_cosine_similarity(torch.tensor([[1.0, 0.0], [-3.0, 0.0]]))) == -1.0
    # a regular simplex: every pair has cosine -1/(n-1), the lowest mean possible
    n = 6
    simplex = torch.eye(n, dtype=torch.float64) - 1.0 / n
    assert float(avg_cosine_similarity(simplex)) == pytest.approx(-1.0 / (n - 1), abs=1e-14)


def test_dtypes() -> None:
    x = _cloud(20, 4, seed=1)
    assert avg_cosine_similarity(torch.as_tensor(x)).dtype == torch.float64
    assert avg_cosine_similarity(torch.as_tensor(x, dtype=torch.float32)).dtype == torch.float32
    half = torch.as_tensor(x, dtype=torch.float16)
    value = avg_cosine_similarity(half)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(_brute_mean(half.double().numpy()), abs=1e-6)


def test_sampled_estimate() -> None:
    x = _cloud(300, 8, seed=2)
    exact = _brute_mean(x)
    c = _brute_cosines(x)
    sd = c[np.triu_indices(300, k=1)].std()
    n_pairs = 40_000
    est = float(avg_cosine_similarity(x, n_pairs=n_pairs, seed=0))
    assert abs(est - exact) < 5 * sd / math.sqrt(n_pairs)
    again = float(avg_cosine_similarity(x, n_pairs=n_pairs, seed=0))
    assert est == again
    assert float(avg_cosine_similarity(x, n_pairs=n_pairs, seed=1)) != est
    assert math.isfinite(float(avg_cosine_similarity(x, n_pairs=5)))


def test_sampled_pairs_are_distinct() -> None:
    # with i == j a pair would contribute +1; two opposite points only have cosine -1
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert float(avg_cosine_similarity(x, n_pairs=1000, seed=3)) == -1.0


def test_sampled_pairs_are_uniform() -> None:
    # one-hot rows with distinct labels: mean of cos over sampled pairs of a block structure
    x = np.zeros((4, 2))
    x[:2, 0] = 1.0
    x[2:, 1] = 1.0  # pairs (0,1) and (2,3) have cosine 1, the other 4 pairs 0: mean 1/3
    est = float(avg_cosine_similarity(x, n_pairs=200_000, seed=4))
    assert est == pytest.approx(1.0 / 3.0, abs=0.005)


def test_gradients_match_brute_force() -> None:
    x0 = torch.as_tensor(_cloud(30, 5, seed=5))
    x = x0.clone().requires_grad_(True)
    avg_cosine_similarity(x).backward()
    y = x0.clone().requires_grad_(True)
    u = y / y.norm(dim=1, keepdim=True)
    c = u @ u.T
    ((c.sum() - c.diagonal().sum()) / (30 * 29)).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-10, atol=1e-12)


def test_gradcheck() -> None:
    x = torch.as_tensor(_cloud(6, 3, seed=6)).requires_grad_(True)
    assert torch.autograd.gradcheck(avg_cosine_similarity, (x,))
    assert torch.autograd.gradcheck(cosine_regularization_term, (x,))
    assert torch.autograd.gradcheck(lambda t: avg_cosine_similarity(t, n_pairs=20, seed=0), (x,))


def test_cosreg_matches_definition() -> None:
    for m, d in [(2, 3), (40, 7), (64, 384)]:
        x = _cloud(m, d, seed=m)
        c = _brute_cosines(x)
        ref = (c.sum() - np.trace(c)) / m**2
        assert float(cosine_regularization_term(x)) == pytest.approx(ref, abs=1e-12)
        assert float(cosine_regularization_term(x)) == pytest.approx(
            (m - 1) / m * _brute_mean(x), abs=1e-12
        )


def test_cosreg_one_point_is_zero() -> None:
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    value = cosine_regularization_term(x)
    assert float(value.detach()) == 0.0
    value.backward()
    assert torch.all(x.grad == 0)


@pytest.mark.parametrize("fn", [avg_cosine_similarity, cosine_regularization_term])
@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((0, 3)), "0 point"),
        (np.arange(4.0), "2-D"),
        (np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]), r"norm zero \(rows 1\)"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "NaN or infinite"),
    ],
)
def test_bad_input(fn, bad: np.ndarray, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        fn(bad)


def test_bad_input_avg_specific() -> None:
    with pytest.raises(ValueError, match="1 point"):
        avg_cosine_similarity(np.ones((1, 3)))
    x = _cloud(5, 2, seed=7)
    for n_pairs in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="n_pairs"):
            avg_cosine_similarity(x, n_pairs=n_pairs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="norm zero"):
        avg_cosine_similarity(np.zeros((3, 2)), n_pairs=10)


_dims = st.tuples(st.integers(2, 40), st.integers(1, 12))


@settings(max_examples=40, deadline=None)
@given(shape=_dims, seed=st.integers(0, 2**31 - 1), log_scales=st.data())
def test_positive_row_scaling_invariance(shape, seed, log_scales) -> None:  # type: ignore[no-untyped-def]
    n, d = shape
    x = _cloud(n, d, seed=seed)
    s = log_scales.draw(st.lists(st.floats(-6, 6), min_size=n, max_size=n))
    scaled = x * np.exp(np.asarray(s))[:, None]
    a = float(avg_cosine_similarity(x))
    assert float(avg_cosine_similarity(scaled)) == pytest.approx(a, abs=1e-12)
    assert float(cosine_regularization_term(scaled)) == pytest.approx(
        float(cosine_regularization_term(x)), abs=1e-12
    )


@settings(max_examples=40, deadline=None)
@given(shape=_dims, seed=st.integers(0, 2**31 - 1), shift=st.floats(-3, 3))
def test_bounds_and_rotation_invariance(shape, seed, shift) -> None:  # type: ignore[no-untyped-def]
    n, d = shape
    x = _cloud(n, d, seed=seed, shift=shift)
    a = float(avg_cosine_similarity(x))
    assert -1.0 / (n - 1) - 1e-12 <= a <= 1.0 + 1e-12
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    assert float(avg_cosine_similarity(x @ q)) == pytest.approx(a, abs=1e-12)


def test_numpy_integer_n_pairs() -> None:
    x = _cloud(10, 3, seed=9)
    a = avg_cosine_similarity(x, n_pairs=np.int64(50), seed=2)
    assert float(a) == float(avg_cosine_similarity(x, n_pairs=50, seed=2))


def test_rows_of_extreme_and_mixed_norms() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 5, dtype=torch.float64, generator=g)
    u = x / x.norm(dim=1, keepdim=True)
    want = float(((u @ u.T).sum() - 8) / (8 * 7))
    factors = torch.tensor(
        [1e-300, 1e300, 1e-160, 1e160, 1.0, 3e-308, 1e307, 2.0], dtype=torch.float64
    )
    y = (x * factors.unsqueeze(1)).requires_grad_(True)
    assert float(avg_cosine_similarity(y).detach()) == pytest.approx(want, rel=1e-12)
    avg_cosine_similarity(y).backward()
    assert bool(torch.isfinite(y.grad).all())
