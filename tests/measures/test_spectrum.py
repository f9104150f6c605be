"""Anisotropy spectrum against numpy's SVD."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isotropy.measures.spectrum import anisotropy_spectrum


def _svd_scores(x: np.ndarray, center: bool) -> np.ndarray:
    if center:
        x = x - x.mean(axis=0)
    s = np.linalg.svd(x, compute_uv=False)
    return s**2 / np.sum(s**2)


def _cloud(n: int, d: int, seed: int, shift: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.linspace(3.0, 0.2, d) + shift


_SHAPES = [(500, 8), (20, 64), (64, 64), (3, 2)]


@pytest.mark.parametrize(
    ("n", "d", "center"), [(n, d, c) for n, d in _SHAPES for c in (False, True)] + [(1, 5, False)]
)
def test_matches_numpy_svd(n: int, d: int, center: bool) -> None:
    x = _cloud(n, d, seed=n * d)
    ref = _svd_scores(x, center)
    got = anisotropy_spectrum(x, center=center).numpy()
    assert got.shape == (min(n, d),)
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-13)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)
    for k in (1, min(n, d)):
        np.testing.assert_allclose(
            anisotropy_spectrum(x, k=k, center=center).numpy(), ref[:k], rtol=1e-8, atol=1e-13
        )


def test_known_case() -> None:
    x = torch.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-3.0, 0.0]])
    torch.testing.assert_close(anisotropy_spectrum(x), torch.tensor([0.9, 0.1]))
    # a shared offset dominates the raw spectrum but not the centred one
    shifted = x + torch.tensor([100.0, 0.0])
    assert float(anisotropy_spectrum(shifted, k=1)[0]) > 0.999
    torch.testing.assert_close(anisotropy_spectrum(shifted, center=True), torch.tensor([0.9, 0.1]))


def test_isotropic_cloud_is_flat() -> None:
    d = 4
    x = torch.cat([torch.eye(d), -torch.eye(d)]).double()
    torch.testing.assert_close(
        anisotropy_spectrum(x), torch.full((d,), 1.0 / d, dtype=torch.float64)
    )


def test_dtypes_and_numpy_input() -> None:
    x = _cloud(30, 5, seed=1)
    assert anisotropy_spectrum(x).dtype == torch.float64
    x32 = torch.as_tensor(x, dtype=torch.float32)
    out = anisotropy_spectrum(x32)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), _svd_scores(x32.double().numpy(), False), rtol=1e-5)


def test_gradcheck() -> None:
    x = torch.as_tensor(_cloud(7, 4, seed=2)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: anisotropy_spectrum(t, k=3), (x,))
    assert torch.autograd.gradcheck(lambda t: anisotropy_spectrum(t, center=True), (x,))
    y = torch.as_tensor(_cloud(3, 6, seed=3)).requires_grad_(True)  # n < d: the n x n route
    assert torch.autograd.gradcheck(lambda t: anisotropy_spectrum(t, k=2), (y,))


@pytest.mark.parametrize("k", [0, -1, 6, 2.0, True, "3"])
def test_k_out_of_range(k: object) -> None:
    x = _cloud(10, 5, seed=4)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, min\(n_points, dim\)\]"):
        anisotropy_spectrum(x, k=k)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[1, 3\]"):
        anisotropy_spectrum(x[:3], k=4)


@pytest.mark.parametrize(
    ("bad", "kwargs", "match"),
    [
        (np.zeros((0, 3)), {}, "0 point"),
        (np.arange(4.0), {}, "2-D"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), {}, "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), {}, "NaN or infinite"),
        (np.zeros((4, 3)), {}, "all zeros"),
        (np.ones((4, 3)), {"center": True}, "all points identical"),
        (np.ones((1, 3)), {"center": True}, "all points identical"),
    ],
)
def test_bad_input(bad: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        anisotropy_spectrum(bad, **kwargs)


def test_single_point_raw() -> None:
    torch.testing.assert_close(
        anisotropy_spectrum(torch.tensor([[1.0, 2.0, 2.0]])), torch.tensor([1.0])
    )


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 40),
    d=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(1e-3, 1e3),
    center=st.booleans(),
)
def test_properties(n: int, d: int, seed: int, scale: float, center: bool) -> None:
    x = _cloud(n, d, seed=seed)
    a = anisotropy_spectrum(x, center=center).numpy()
    assert a.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(a >= 0.0) and np.all(np.diff(a) <= 1e-15)
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    b = anisotropy_spectrum(scale * x @ q, center=center).numpy()
    np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-12)
    if center:
        c = anisotropy_spectrum(x + 5.0, center=True).numpy()
        np.testing.assert_allclose(c, a, rtol=1e-7, atol=1e-11)


def test_numpy_integer_k() -> None:
    x = _cloud(10, 5, seed=8)
    np.testing.assert_allclose(
        anisotropy_spectrum(x, k=np.int64(2)).numpy(), _svd_scores(x, False)[:2], rtol=1e-8
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_rows_with_a_rounded_mean_raise(dtype: torch.dtype) -> None:
    x = torch.full((7, 5), 0.1, dtype=dtype)
    with pytest.raises(ValueError, match=r"zero variance \(all points identical\)"):
        anisotropy_spectrum(x, center=True)
    assert anisotropy_spectrum(x)[0] == pytest.approx(1.0)  # raw: one direction
