"""Independent reference routes (NumPy, scikit-dimension) that the measures are tested against."""

from __future__ import annotations

import warnings

import numpy as np
import pytest


def iota(cov: np.ndarray) -> float:
    """IsoScore of a covariance from its eigenvalues: ((sum l)^2 / sum l^2 - 1) / (d - 1)."""
    lam = np.linalg.eigvalsh(cov)
    return float((lam.sum() ** 2 / (lam**2).sum() - 1) / (lam.size - 1))


def mean_cosine(x: np.ndarray) -> float:
    """Mean cosine similarity over all ordered pairs i != j (explicit pairwise matrix)."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = u @ u.T
    n = len(x)
    return float((g.sum() - np.trace(g)) / (n * (n - 1)))


def spectrum(x: np.ndarray, k: int, center: bool) -> np.ndarray:
    """sigma_i^2 / sum sigma^2 from NumPy's SVD."""
    y = x - x.mean(0) if center else x
    s = np.linalg.svd(y, compute_uv=False) ** 2
    return s[:k] / s.sum()


def skdim_twonn(x: np.ndarray) -> float:
    skdim = pytest.importorskip("skdim")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(skdim.id.TwoNN().fit(x).dimension_)


def spd(d: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((d, 2 * d))
    return a @ a.T / (2 * d)


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p's, written out: sort, scale the i-th (from 0) by m - i,
    running maximum, capped at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out
