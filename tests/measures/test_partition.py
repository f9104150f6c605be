"""Partition isotropy score against a naive fp64 evaluation and known cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from isotropy.measures.partition import partition_score


def _naive(x: np.ndarray) -> float:
    """min/max of Z(c) = sum exp(c.x) by direct exponentials, c = +-eigenvectors of X^T X."""
    _, v = np.linalg.eigh(x.T @ x)
    z = np.exp(x @ np.concatenate([v, -v], axis=1)).sum(axis=0)
    return float(z.min() / z.max())


def _log_reference(x: np.ndarray) -> float:
    _, v = np.linalg.eigh(x.T @ x)
    log_z = logsumexp(x @ np.concatenate([v, -v], axis=1), axis=0)
    return float(log_z.min() - log_z.max())


def _cloud(n: int, d: int, seed: int, scale: float = 1.0, shift: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # distinct variances per axis keep the eigenvectors of X^T X well defined
    return (rng.standard_normal((n, d)) * np.linspace(1.0, 0.3, d) + shift) * scale


@pytest.mark.parametrize(("n", "d", "scale"), [(50, 3, 1.0), (400, 10, 0.5), (30, 60, 0.2)])
def test_matches_naive_fp64(n: int, d: int, scale: float) -> None:
    x = _cloud(n, d, seed=n, scale=scale)
    assert float(partition_score(x)) == pytest.approx(_naive(x), rel=1e-10)


def test_single_point_closed_form() -> None:
    # one point x: Z(+-x/|x|) = exp(+-|x|), Z(c) = 1 otherwise -> score exp(-2|x|)
    x = torch.tensor([[3.0, 4.0, 0.0]], dtype=torch.float64) / 10.0
    assert float(partition_score(x)) == pytest.approx(math.exp(-1.0), rel=1e-12)
    big = torch.tensor([[6.0e3, 8.0e3]], dtype=torch.float64)  # |x| = 1e4
    assert float(partition_score(big, log=True)) == pytest.approx(-2.0e4, rel=1e-12)
    assert float(partition_score(big)) == 0.0  # exp(-2e4) underflows; log=True keeps it


def test_symmetric_cross() -> None:
    x = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64)
    ref = (math.cosh(1.0) + 1.0) / (math.cosh(2.0) + 1.0)
    assert float(partition_score(x)) == pytest.approx(ref, rel=1e-12)


def test_large_norms_do_not_overflow() -> None:
    x = _cloud(200, 8, seed=1)
    x = 1e4 * x / np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = _naive(x)
    assert not math.isfinite(naive) or naive == 0.0  # the direct route breaks down
    score = float(partition_score(x))
    log_score = float(partition_score(x, log=True))
    assert math.isfinite(log_score) and log_score <= 0.0
    assert log_score == pytest.approx(_log_reference(x), rel=1e-12)
    assert 0.0 <= score <= 1.0
    moderate = x / 1e4 * 30.0  # exp(30) fits in fp64: log score checked against the naive one
    assert float(partition_score(moderate, log=True)) == pytest.approx(
        math.log(_naive(moderate)), rel=1e-10
    )


def test_float32_large_norms() -> None:
    x = torch.as_tensor(_cloud(100, 6, seed=2, scale=1e3), dtype=torch.float32)
    out = partition_score(x, log=True)
    assert out.dtype == torch.float32
    assert torch.isfinite(out)


def test_isotropic_versus_shifted() -> None:
    rng = np.random.default_rng(3)
    x = 0.1 * rng.standard_normal((20000, 5)) * np.linspace(1.0, 0.9, 5)
    assert float(partition_score(x)) > 0.95
    assert float(partition_score(x + 3.0)) < 1e-3


def test_zero_cloud_is_one() -> None:
    assert float(partition_score(np.zeros((5, 3)))) == 1.0


def test_rotation_and_permutation_invariance() -> None:
    x = _cloud(80, 5, seed=4)
    q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((5, 5)))
    a = float(partition_score(x))
    assert float(partition_score(x @ q)) == pytest.approx(a, rel=1e-9)
    assert float(partition_score(x[::-1].copy())) == pytest.approx(a, rel=1e-12)


def test_no_gradient() -> None:
    x = torch.as_tensor(_cloud(10, 3, seed=6)).requires_grad_(True)
    assert not partition_score(x).requires_grad


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (np.zeros((0, 3)), "0 point"),
        (np.arange(4.0), "2-D"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
        (np.array([[1.0, -np.inf], [0.0, 1.0]]), "NaN or infinite"),
    ],
)
def test_bad_input(bad: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        partition_score(bad)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    d=st.integers(1, 8),
    seed=st.integers(0, 2**31 - 1),
    log_scale=st.floats(-3, 4),
)
def test_in_unit_interval(n: int, d: int, seed: int, log_scale: float) -> None:
    x = _cloud(n, d, seed=seed, scale=10.0**log_scale)
    log_score = float(partition_score(x, log=True))
    score = float(partition_score(x))
    assert math.isfinite(log_score) and log_score <= 0.0
    assert 0.0 <= score <= 1.0
    assert score == pytest.approx(math.exp(log_score), rel=1e-12, abs=1e-300)
    assert log_score == pytest.approx(_log_reference(x), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("n", "d"), [(1, 4), (2, 5), (3, 7), (5, 12), (8, 9)])
def test_wide_clouds_match_the_eigenvector_route(n: int, d: int) -> None:
    # d > n: thin SVD plus the null space (Z = n) against all d eigenvectors of X^T X
    x = _cloud(n, d, seed=10 * n + d)
    assert float(partition_score(x, log=True)) == pytest.approx(_log_reference(x), rel=1e-9)


def test_very_wide_cloud_never_forms_the_d_by_d_matrix() -> None:
    # X^T X would take 320 GB here; the thin SVD works on the 3 x 200000 cloud itself
    x = torch.randn(3, 200_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u, s, vh = np.linalg.svd(x.numpy(), full_matrices=False)
    proj = x.numpy() @ np.concatenate([vh.T, -vh.T], axis=1)
    log_z = np.append(logsumexp(proj, axis=0), math.log(3))  # the null space: Z = n
    want = float(log_z.min() - log_z.max())
    assert float(partition_score(x, log=True)) == pytest.approx(want, rel=1e-9)
