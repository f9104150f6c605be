"""Scale: every scale-invariant measurement gives the same answer for ``X * s`` as for ``X``.

The references are independent fp64 routes (NumPy / SciPy eigenvalues, distances, spanning
trees) on the unscaled cloud. For fp32 the scaled cloud is first rounded to fp32 and the
reference is taken on those values divided by ``s`` in fp64, so only the library's own
arithmetic is compared.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist
from scipy.special import logsumexp

from isotropy import (
    CovarianceStats,
    anisotropy_spectrum,
    avg_cosine_similarity,
    cosine_regularization_term,
    h0_barcode,
    isoscore,
    isoscore_from_covariance,
    isoscore_star,
    participation_ratio,
    partition_score,
    persistent_entropy,
    twonn,
)

F64 = torch.float64

# ----------------------------------------------------------------------------- references


def _pr(cov: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(cov)
    return float(lam.sum() ** 2 / (lam**2).sum())


def ref_isoscore_star(x: np.ndarray, zeta: float = 0.0, s: np.ndarray | None = None) -> float:
    d = x.shape[1]
    c = np.cov(x, rowvar=False)
    if zeta > 0:
        c = (1 - zeta) * c + zeta * (np.eye(d) if s is None else s)
    return (_pr(c) - 1) / (d - 1)


def ref_cosines(x: np.ndarray) -> tuple[float, float]:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = u @ u.T
    n = len(x)
    off = g.sum() - np.trace(g)
    return off / (n * (n - 1)), off / n**2


def ref_spectrum(x: np.ndarray, center: bool) -> np.ndarray:
    if center:
        x = x - x.mean(0)
    sv = np.linalg.svd(x, compute_uv=False) ** 2
    return sv / sv.sum()


def ref_log_partition(x_dirs: np.ndarray, x_values: np.ndarray) -> float:
    """log I with the directions of ``x_dirs`` and the partition function of ``x_values``."""
    _, vecs = np.linalg.eigh(x_dirs.T @ x_dirs)
    proj = x_values @ np.concatenate([vecs, -vecs], axis=1)
    log_z = logsumexp(proj, axis=0)
    return float(log_z.min() - log_z.max())


def ref_twonn(x: np.ndarray, f: float = 0.1) -> float:
    dist = cdist(x, x)
    np.fill_diagonal(dist, np.inf)
    dist.sort(axis=1)
    mu = np.sort(dist[:, 1] / dist[:, 0])
    n = len(mu)
    k = int(n * (1 - f))
    lx = np.log(mu[:k])
    y = -np.log1p(-np.arange(1, k + 1) / n)
    return float((lx * y).sum() / (lx * lx).sum())


def ref_h0(x: np.ndarray) -> np.ndarray:
    tree = minimum_spanning_tree(cdist(x, x)).toarray()
    return np.sort(tree[tree > 0])[::-1]


def ref_entropy(b: np.ndarray) -> float:
    p = b / b.sum()
    return float(-(p * np.log(p)).sum())


# ----------------------------------------------------------------------------- clouds


def cloud(seed: int, n: int = 14, d: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * rng.uniform(0.3, 2.0, d) + rng.standard_normal(d)


def spd(seed: int, d: int = 4) -> np.ndarray:
    a = np.random.default_rng(seed + 7).standard_normal((d, 2 * d))
    return a @ a.T / (2 * d)


def scaled(x: np.ndarray, s: float, dtype: torch.dtype) -> tuple[torch.Tensor, np.ndarray]:
    """``x * s`` in ``dtype`` and the fp64 values it holds divided by ``s`` (the reference)."""
    t = torch.tensor(x * s, dtype=F64).to(dtype)
    return t, t.double().numpy() / s


def _close(got: float | torch.Tensor, ref: float, tol: float) -> None:
    assert float(got) == pytest.approx(ref, rel=tol, abs=tol)


# ----------------------------------------------------------------------------- properties


def _iso(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    for n, d in [(14, 4), (5, 9)]:  # covariance and Gram routes
        t, ref = scaled(cloud(seed, n, d), s, dtype)
        _close(isoscore(t), ref_isoscore_star(ref), tol)
        _close(participation_ratio(t), 1 + (d - 1) * ref_isoscore_star(ref), 10 * tol)
        sig = spd(seed, d)  # fp64 (s^2 leaves the fp32 range), given with fp32 rows too
        sig_t = torch.tensor(sig * s * s, dtype=F64)
        _close(isoscore_star(t, zeta=0.3, shrinkage=sig_t), ref_isoscore_star(ref, 0.3, sig), tol)


def _cov(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    t, ref = scaled(cloud(seed), s, dtype)
    stats = CovarianceStats.from_batch(t[:5]).merge(CovarianceStats.from_batch(t[5:]))
    got = stats.covariance().numpy() / (s * s)
    want = np.cov(ref, rowvar=False)
    assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)
    cov = torch.tensor(want * s * s, dtype=F64)  # s^2 leaves the fp32 range: kept in fp64
    _close(isoscore_from_covariance(cov), (_pr(want) - 1) / 3, 1e-9)


def _cosine(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    t, ref = scaled(cloud(seed), s, dtype)
    avg, creg = ref_cosines(ref)
    _close(avg_cosine_similarity(t), avg, tol)
    _close(cosine_regularization_term(t), creg, tol)


def _spectrum(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    for n, d in [(14, 4), (3, 6)]:
        t, ref = scaled(cloud(seed, n, d), s, dtype)
        for center in (False, True):
            got = anisotropy_spectrum(t, center=center).double().numpy()
            k = min(n, d)
            assert np.allclose(got, ref_spectrum(ref, center)[:k], rtol=tol, atol=tol)


def _partition(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    # not scale invariant: log I(X s) against the reference with the directions of X
    for n, d in [(14, 4), (3, 7)]:
        t, ref = scaled(cloud(seed, n, d), s, dtype)
        want = ref_log_partition(ref, t.double().numpy())
        got = float(partition_score(t, log=True))
        assert got == pytest.approx(want, rel=1e-6 if dtype == F64 else 1e-4, abs=1e-9)


def _twonn(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    t, ref = scaled(cloud(seed, 60, 3), s, dtype)
    _close(twonn(t), ref_twonn(ref), tol)  # an fp32 result for fp32 input


def _h0(seed: int, s: float, dtype: torch.dtype, tol: float) -> None:
    t, ref = scaled(cloud(seed, 20, 3), s, dtype)
    got = h0_barcode(t).double().numpy() / s
    assert np.allclose(got, ref_h0(ref), rtol=10 * tol, atol=0)
    bars = np.random.default_rng(seed).uniform(0.0, 1.0, 9)
    b, b_ref = scaled(bars, s, dtype)
    _close(persistent_entropy(b), ref_entropy(b_ref), tol)


@pytest.mark.parametrize("check", [_iso, _cov, _cosine, _spectrum, _partition, _twonn, _h0])
@pytest.mark.parametrize(
    ("dtype", "lo", "tol"), [(torch.float64, -150.0, 1e-9), (torch.float32, -20.0, 2e-5)]
)
def test_scale_invariance(check, dtype: torch.dtype, lo: float, tol: float) -> None:
    @settings(max_examples=20, deadline=None, derandomize=True)
    @given(seed=st.integers(0, 10_000), exp=st.floats(lo, -lo))
    def run(seed: int, exp: float) -> None:
        check(seed, 10.0**exp, dtype, tol)

    run()


# ----------------------------------------------------------------------------- the reported cases


@pytest.mark.parametrize("s", [1e-60, 1e-150, 1e76, 1e150])
def test_reported_float64_scales(s: float) -> None:
    x = cloud(1)
    t = torch.tensor(x * s)
    want = ref_isoscore_star(x)
    _close(isoscore(t), want, 1e-9)
    _close(isoscore_from_covariance(torch.tensor(np.cov(x, rowvar=False) * s * s)), want, 1e-9)


def test_reported_cosine_and_entropy() -> None:
    x = cloud(2)
    _close(avg_cosine_similarity(torch.tensor(x * 1e155)), ref_cosines(x)[0], 1e-12)
    _close(persistent_entropy(torch.tensor([1e308, 1e308], dtype=F64)), math.log(2), 1e-15)


def test_covariance_of_values_near_1e_30_in_float32() -> None:
    x = cloud(3)
    t = torch.tensor(x * 1e-30, dtype=torch.float32)
    cov = CovarianceStats.from_batch(t).covariance().numpy()
    want = np.cov(t.double().numpy(), rowvar=False)
    assert np.abs(cov).max() > 0
    assert np.linalg.norm(cov - want) <= 1e-5 * np.linalg.norm(want)


@pytest.mark.parametrize("s", [1e-10, 1e10])
@pytest.mark.parametrize(("zeta", "with_s"), [(0.0, False), (0.3, True)])
@pytest.mark.parametrize(("n", "d"), [(40, 6), (5, 12)])  # covariance and Gram routes
def test_float32_gradients_at_extreme_scales(s, zeta, with_s, n, d) -> None:
    t, _ = scaled(cloud(4, n, d), s, torch.float32)
    sig = torch.tensor(spd(4, d) * s * s) if with_s else None
    x32 = t.clone().requires_grad_(True)
    isoscore_star(x32, zeta=zeta, shrinkage=None if sig is None else sig.float()).backward()
    x64 = t.double().requires_grad_(True)
    isoscore_star(x64, zeta=zeta, shrinkage=sig).backward()
    g32, g64 = x32.grad.double(), x64.grad
    assert bool(torch.isfinite(g32).all())
    assert float((g32 - g64).norm() / g64.norm()) < 1e-3
