"""IsoScore / IsoScore* / participation ratio against the authors' package (IsoScore 2.0.1),
an eigenvalue route (Algorithm 2 written out on ``eigvalsh``), invariances and known cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isotropy.measures.isoscore import (
    isoscore,
    isoscore_from_covariance,
    isoscore_star,
    participation_ratio,
    participation_ratio_from_covariance,
)

ref = pytest.importorskip("IsoScore.IsoScore")

F64 = torch.float64
# (n, d): n >= d (covariance route), n < d/2 (Gram route, with or without Sigma_S) and
# d/2 <= n < d (Gram route without Sigma_S, covariance route with it).
SHAPES = [(40, 8), (5, 12), (9, 12)]
ZETAS = [0.0, 0.2, 0.5, 1.0]


# ----------------------------------------------------------------- independent routes
def iota_from_eigenvalues(lam: torch.Tensor) -> torch.Tensor:
    """Steps 4-7 of Algorithm 2 (Rudman et al.) on the eigenvalues, written out."""
    d = lam.shape[0]
    sd = math.sqrt(d)
    lam_hat = sd * lam / torch.linalg.vector_norm(lam)
    delta = torch.linalg.vector_norm(lam_hat - 1.0) / math.sqrt(2 * (d - sd))
    phi = (d - delta**2 * (d - sd)) ** 2 / d**2
    return (d * phi - 1) / (d - 1)


def shrunk_covariance(x: torch.Tensor, zeta: float, s: torch.Tensor | None) -> torch.Tensor:
    x = x.to(F64)
    n, d = x.shape
    xc = x - x.mean(0)
    cov = xc.T @ xc / (n - 1)
    s = torch.eye(d, dtype=F64) if s is None else torch.as_tensor(s, dtype=F64)
    return (1 - zeta) * cov + zeta * s


def eig_route(x: torch.Tensor, zeta: float = 0.0, s: torch.Tensor | None = None) -> torch.Tensor:
    """IsoScore* through ``eigvalsh`` of the shrunk covariance (differentiable)."""
    return iota_from_eigenvalues(torch.linalg.eigvalsh(shrunk_covariance(x, zeta, s)))


def eig_pr(cov: torch.Tensor) -> float:
    lam = np.linalg.eigvalsh(np.asarray(cov, dtype=np.float64))
    return float(lam.sum() ** 2 / (lam**2).sum())


def ref_star(x: np.ndarray, zeta: float, s: np.ndarray | None) -> float:
    d = x.shape[1]
    c0 = torch.eye(d, dtype=F64) if s is None else torch.as_tensor(s, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(ref.IsoScore_star(x, c0, zeta))


def cloud(n: int, d: int, seed: int = 0) -> np.ndarray:
    """An anisotropic, correlated, off-centre Gaussian sample."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) * rng.exponential(size=d)
    return rng.standard_normal((n, d)) @ mix + rng.standard_normal(d)


def spd(d: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((d, 3 * d)) * rng.exponential(size=(1, 3 * d))
    c = a @ a.T / (3 * d)
    return (c + c.T) / 2


def orthogonal(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


# ----------------------------------------------------------------- reference agreement
@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("zeta", ZETAS)
@pytest.mark.parametrize("given_s", [False, True])
def test_isoscore_star_matches_package_and_eigenvalues(n, d, zeta, given_s):
    x = cloud(n, d, seed=n + d)
    s = spd(d) if given_s else None
    ours = float(isoscore_star(torch.tensor(x), zeta=zeta,
                               shrinkage=None if s is None else torch.tensor(s)))
    assert ours == pytest.approx(ref_star(x, zeta, s), abs=1e-6)
    assert ours == pytest.approx(float(eig_route(torch.tensor(x), zeta, s)), abs=1e-10)


@pytest.mark.parametrize("n,d", SHAPES)
def test_isoscore_matches_package_and_eigenvalues(n, d):
    x = cloud(n, d, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = float(ref.IsoScore(x))
    ours = float(isoscore(torch.tensor(x)))
    assert ours == pytest.approx(theirs, abs=1e-6)
    assert ours == pytest.approx(float(eig_route(torch.tensor(x))), abs=1e-10)
    assert float(isoscore_star(torch.tensor(x), zeta=0.0, shrinkage=spd(d))) == pytest.approx(
        ours, abs=1e-12)


@pytest.mark.parametrize("d", [2, 3, 10, 64])
def test_isoscore_from_covariance_matches_package(d):
    cov = spd(d, seed=d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = float(ref.IsoScore_cov(torch.tensor(cov)))
    ours = float(isoscore_from_covariance(torch.tensor(cov)))
    assert ours == pytest.approx(theirs, abs=1e-6)
    lam = torch.linalg.eigvalsh(torch.tensor(cov))
    assert ours == pytest.approx(float(iota_from_eigenvalues(lam)), abs=1e-10)
    assert float(isoscore_from_covariance(cov)) == pytest.approx(ours, abs=1e-15)  # NumPy
    f32 = isoscore_from_covariance(torch.tensor(cov, dtype=torch.float32))
    assert f32.dtype == torch.float32
    assert float(f32) == pytest.approx(ours, abs=1e-6)


@pytest.mark.parametrize("n,d", SHAPES)
def test_participation_ratio_matches_eigenvalues(n, d):
    x = cloud(n, d, seed=7)
    cov = np.cov(x, rowvar=False)
    expected = eig_pr(cov)
    assert float(participation_ratio(torch.tensor(x))) == pytest.approx(expected, rel=1e-10)
    assert float(participation_ratio_from_covariance(cov)) == pytest.approx(expected, rel=1e-10)
    iso = float(isoscore(torch.tensor(x)))
    assert expected == pytest.approx(1 + (d - 1) * iso, rel=1e-10)


def test_participation_ratio_dimension_one():
    x = torch.tensor([[1.0], [2.0], [4.0]], dtype=F64)
    assert float(participation_ratio(x)) == pytest.approx(1.0, abs=1e-15)
    x.requires_grad_(True)
    participation_ratio(x).backward()
    assert torch.allclose(x.grad, torch.zeros_like(x), atol=1e-15)
    with pytest.raises(ValueError, match="zero variance"):
        participation_ratio(torch.ones(4, 1))


def test_float32_input_accumulates_accurately():
    x = cloud(300, 16, seed=11)
    x32 = torch.tensor(x, dtype=torch.float32)
    for zeta, s in [(0.0, None), (0.3, spd(16))]:
        out = isoscore_star(x32, zeta=zeta, shrinkage=s)
        assert out.dtype == torch.float32
        assert float(out) == pytest.approx(float(eig_route(x32.double(), zeta, s)), abs=1e-5)


def test_numpy_and_list_input():
    x = cloud(30, 5, seed=2)
    expected = ref_star(x, 0.2, None)
    assert float(isoscore_star(x, zeta=0.2)) == pytest.approx(expected, abs=1e-6)
    assert float(isoscore_star(x.tolist(), zeta=0.2)) == pytest.approx(expected, abs=1e-6)
    assert float(isoscore(x)) == pytest.approx(ref_star(x, 0.0, None), abs=1e-6)


def test_non_contiguous_input():
    x = torch.tensor(cloud(6, 20, seed=4))
    xt = x.T.contiguous().T  # same values, column-major strides
    assert not xt.is_contiguous()
    assert float(isoscore_star(xt, zeta=0.3)) == pytest.approx(float(eig_route(x, 0.3)), abs=1e-10)


# ----------------------------------------------------------------- invariances and bounds
cases = st.tuples(
    st.integers(0, 2**31 - 1),  # seed
    st.integers(2, 24),  # n
    st.integers(2, 10),  # d
    st.floats(0.0, 1.0),  # zeta
    st.booleans(),  # given shrinkage
)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_rotation_invariance(case):
    seed, n, d, zeta, given_s = case
    x, q = cloud(n, d, seed), orthogonal(d, seed + 1)
    s = spd(d, seed + 2) if given_s else None
    s_rot = None if s is None else q.T @ s @ q  # Sigma_S seen in the rotated frame
    a = float(isoscore_star(torch.tensor(x), zeta=zeta, shrinkage=s))
    b = float(isoscore_star(torch.tensor(x @ q), zeta=zeta, shrinkage=s_rot))
    assert b == pytest.approx(a, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(cases, st.floats(1e-3, 1e3))
def test_scale_invariance(case, c):
    seed, n, d, zeta, given_s = case
    x = cloud(n, d, seed)
    s = spd(d, seed + 2) if given_s else np.eye(d)
    a = float(isoscore_star(torch.tensor(x), zeta=zeta, shrinkage=s))
    b = float(isoscore_star(torch.tensor(c * x), zeta=zeta, shrinkage=c * c * s))
    assert b == pytest.approx(a, abs=1e-9)
    assert float(isoscore(torch.tensor(c * x))) == pytest.approx(
        float(isoscore(torch.tensor(x))), abs=1e-9
    )


@settings(max_examples=40, deadline=None)
@given(cases, st.floats(-100.0, 100.0))
def test_mean_shift_invariance(case, shift):
    seed, n, d, zeta, given_s = case
    x = cloud(n, d, seed)
    v = shift * np.random.default_rng(seed).standard_normal(d)
    s = spd(d, seed + 2) if given_s else None
    a = float(isoscore_star(torch.tensor(x), zeta=zeta, shrinkage=s))
    b = float(isoscore_star(torch.tensor(x + v), zeta=zeta, shrinkage=s))
    assert b == pytest.approx(a, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(cases)
def test_bounds(case):
    seed, n, d, zeta, given_s = case
    x = cloud(n, d, seed)
    s = spd(d, seed + 2) if given_s else None
    value = float(isoscore_star(torch.tensor(x), zeta=zeta, shrinkage=s))
    assert -1e-12 <= value <= 1 + 1e-12
    assert 1 - 1e-12 <= float(participation_ratio(torch.tensor(x))) <= d + 1e-12


# ----------------------------------------------------------------- known cases
def test_isotropic_gaussian_is_near_one():
    x = torch.randn(20000, 8, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert float(isoscore(x)) > 0.99
    assert float(isoscore_star(x, zeta=0.5)) > 0.995


@pytest.mark.parametrize("n,d", [(50, 6), (4, 30)])
def test_points_on_a_line_score_zero(n, d):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, 1)) * rng.standard_normal((1, d)) + rng.standard_normal(d)
    assert float(isoscore(torch.tensor(x))) == pytest.approx(0.0, abs=1e-10)
    assert float(participation_ratio(torch.tensor(x))) == pytest.approx(1.0, abs=1e-10)


@pytest.mark.parametrize("d", [3, 7])
def test_k_equal_variance_dimensions(d):
    for k in range(1, d + 1):
        # all 2^k sign patterns in k dimensions: the covariance is exactly c * I_k (+) 0
        signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * k)).reshape(k, -1).T
        x = np.zeros((signs.shape[0], d))
        x[:, :k] = signs
        x = x @ orthogonal(d, seed=k) + 3.0  # rotated and shifted
        expected = (k - 1) / (d - 1)
        assert float(isoscore(torch.tensor(x))) == pytest.approx(expected, abs=1e-12)
        cov = np.diag([1.0] * k + [0.0] * (d - k))
        assert float(isoscore_from_covariance(cov)) == pytest.approx(expected, abs=1e-15)


def test_zeta_one_uses_only_the_shrinkage_matrix():
    x = torch.tensor(cloud(20, 4))
    assert float(isoscore_star(x, zeta=1.0)) == pytest.approx(1.0, abs=1e-14)
    s = np.diag([2.0, 2.0, 0.0, 0.0])
    assert float(isoscore_star(x, zeta=1.0, shrinkage=s)) == pytest.approx(1 / 3, abs=1e-14)


def test_zero_variance_with_identity_shrinkage_is_isotropic():
    x = torch.ones(10, 5, dtype=F64)
    assert float(isoscore_star(x, zeta=0.3)) == pytest.approx(1.0, abs=1e-14)


def test_huge_covariance_entries_are_rescaled():
    cov = torch.diag(torch.tensor([1e200, 1e200, 0.0], dtype=F64))
    assert float(isoscore_from_covariance(cov)) == pytest.approx(0.5, abs=1e-14)


# ----------------------------------------------------------------- gradients
GRAD_SHAPES = [(7, 4), (3, 6), (5, 8)]


@pytest.mark.parametrize("n,d", GRAD_SHAPES)
@pytest.mark.parametrize("zeta", [0.0, 0.3])
@pytest.mark.parametrize("given_s", [False, True])
def test_gradcheck(n, d, zeta, given_s):
    x = torch.tensor(cloud(n, d, seed=n * d), requires_grad=True)
    s = torch.tensor(spd(d)) if given_s else None
    assert torch.autograd.gradcheck(lambda t: isoscore_star(t, zeta=zeta, shrinkage=s), (x,))
    assert torch.autograd.gradcheck(participation_ratio, (x,))


@pytest.mark.parametrize("n,d", GRAD_SHAPES + [(40, 8)])
@pytest.mark.parametrize("zeta", [0.0, 0.2, 0.7, 1.0])
@pytest.mark.parametrize("given_s", [False, True])
def test_gradient_equals_autograd_through_eigenvalues(n, d, zeta, given_s):
    base = torch.tensor(cloud(n, d, seed=n + 2 * d))
    s = torch.tensor(spd(d)) if given_s else None
    x1 = base.clone().requires_grad_(True)
    isoscore_star(x1, zeta=zeta, shrinkage=s).backward()
    x2 = base.clone().requires_grad_(True)
    eig_route(x2, zeta, s).backward()
    assert torch.allclose(x1.grad, x2.grad, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("zeta", [0.0, 0.3])
def test_gradient_equals_package_svd_autograd(zeta):
    n, d = 40, 6
    base = cloud(n, d, seed=9)
    s = spd(d)
    x1 = torch.tensor(base, requires_grad=True)
    isoscore_star(x1, zeta=zeta, shrinkage=s).backward()
    x2 = torch.tensor(base, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = ref.istar().IsoScore_star(x2, torch.tensor(s), zeta, is_eval=False)
    theirs.backward()
    scale = float(x2.grad.abs().max())
    assert torch.allclose(x1.grad, x2.grad, rtol=1e-5, atol=1e-6 * scale)


def test_gradient_of_covariance_route():
    cov = torch.tensor(spd(5), requires_grad=True)
    isoscore_from_covariance(cov).backward()
    c2 = cov.detach().clone().requires_grad_(True)
    iota_from_eigenvalues(torch.linalg.eigvalsh(c2)).backward()
    assert torch.allclose(cov.grad, c2.grad, rtol=1e-8, atol=1e-12)
    assert torch.autograd.gradcheck(isoscore_from_covariance, (cov.detach().requires_grad_(),))


def test_backward_twice_and_upstream_gradient():
    x = torch.tensor(cloud(12, 5), requires_grad=True)
    out = isoscore_star(x, zeta=0.4)
    (3.0 * out).backward(retain_graph=True)
    g1 = x.grad.clone()
    x.grad = None
    out.backward()
    assert torch.allclose(g1, 3.0 * x.grad, rtol=1e-14, atol=0)


def test_double_backward_is_refused():
    x = torch.tensor(cloud(12, 5), requires_grad=True)
    (g,) = torch.autograd.grad(isoscore_star(x, zeta=0.4), x, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


# ----------------------------------------------------------------- half precision
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,d", [(256, 8), (6, 16)])
@pytest.mark.parametrize("zeta", [0.0, 0.2])
def test_half_precision_large_values(dtype, n, d, zeta):
    rng = np.random.default_rng(n)
    x = torch.tensor(300.0 * rng.standard_normal((n, d)) * rng.uniform(0.2, 1.0, d)).to(dtype)
    assert float((x.float().T @ x.float()).abs().max()) > torch.finfo(torch.float16).max
    s = torch.tensor(spd(d)) * 9e4
    expected = float(eig_route(x.double(), zeta, s))
    xg = x.clone().requires_grad_(True)
    out = isoscore_star(xg, zeta=zeta, shrinkage=s)
    assert out.dtype == torch.float32
    value = float(out.detach())
    assert math.isfinite(value)
    assert value == pytest.approx(expected, abs=2e-5)
    out.backward()
    assert xg.grad.dtype == dtype
    assert bool(torch.isfinite(xg.grad).all())


# ----------------------------------------------------------------- bad input
def test_bad_point_clouds():
    with pytest.raises(ValueError, match="0 point"):
        isoscore_star(torch.empty(0, 4))
    with pytest.raises(ValueError, match="1 point"):
        isoscore_star(torch.ones(1, 4))
    with pytest.raises(ValueError, match="zero variance"):
        isoscore(torch.ones(6, 4))
    with pytest.raises(ValueError, match="zero variance"):
        isoscore(torch.ones(2, 40))  # Gram route
    with pytest.raises(ValueError, match="must be 2-D"):
        isoscore(torch.arange(5.0))
    with pytest.raises(ValueError, match="dimension >= 2"):
        isoscore_star(torch.randn(10, 1), zeta=0.5)
    with pytest.raises(ValueError, match="dimension 0"):
        isoscore(torch.empty(3, 0))
    with pytest.raises(TypeError, match="array-like of numbers"):
        isoscore(np.array([["a", "b"], ["c", "d"]]))


@pytest.mark.parametrize("n,d", [(20, 4), (3, 10)])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("zeta", [0.0, 1.0])
def test_non_finite_points(n, d, bad, zeta):
    x = torch.randn(n, d)
    x[1, 2] = bad
    with pytest.raises(ValueError, match=r"X contains 1 NaN or infinite value\(s\)"):
        isoscore_star(x, zeta=zeta)


def test_float32_values_whose_squares_overflow_are_rescaled():
    x = torch.randn(10, 3, generator=torch.Generator().manual_seed(0)) * 1e30
    assert not bool(torch.isfinite(x.T @ x).all())  # the naive accumulation overflows
    expected = float(eig_route(x.double() / 1e30, 0.0, None))
    assert float(isoscore(x)) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("zeta", [-0.1, 1.5, float("nan"), float("inf")])
def test_zeta_out_of_range(zeta):
    with pytest.raises(ValueError, match=r"zeta must lie in \[0, 1\]"):
        isoscore_star(torch.randn(10, 3), zeta=zeta)


def test_zeta_not_a_number():
    with pytest.raises(TypeError, match="zeta must be a real number"):
        isoscore_star(torch.randn(10, 3), zeta=None)  # type: ignore[arg-type]


def test_bad_shrinkage():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match=r"shrinkage has shape \(3, 3\) but the point cloud"):
        isoscore_star(x, zeta=0.2, shrinkage=torch.eye(3))
    with pytest.raises(ValueError, match="shrinkage must be a square"):
        isoscore_star(x, zeta=0.2, shrinkage=torch.ones(4, 5))
    with pytest.raises(ValueError, match="shrinkage must be a square"):
        isoscore_star(x, zeta=0.2, shrinkage=torch.ones(4))
    asym = torch.tensor(spd(4))
    asym[0, 3] += 0.5
    with pytest.raises(ValueError, match="shrinkage is not symmetric"):
        isoscore_star(x, zeta=0.2, shrinkage=asym)
    with pytest.raises(ValueError, match="shrinkage is not symmetric"):
        isoscore_star(x, zeta=0.0, shrinkage=asym)  # checked even where it has no weight
    nan = torch.eye(4)
    nan[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"shrinkage contains 1 NaN or infinite value\(s\)"):
        isoscore_star(x, zeta=0.2, shrinkage=nan)
    with pytest.raises(ValueError, match="negative diagonal"):
        isoscore_star(x, zeta=0.2, shrinkage=-torch.eye(4))


def test_symmetry_check_tolerates_rounding():
    c = torch.tensor(spd(64))
    noise = 1e-9 * torch.randn(64, 64, generator=torch.Generator().manual_seed(0), dtype=F64)
    expected = float(iota_from_eigenvalues(torch.linalg.eigvalsh(c)))
    assert float(isoscore_from_covariance(c + noise * c.abs())) == pytest.approx(
        expected, abs=1e-6
    )
    for d in (64, 400):
        x32 = torch.tensor(cloud(2 * d, d), dtype=torch.float32)
        c32 = (x32 - x32.mean(0)).T @ (x32 - x32.mean(0))  # float32 product: rounding asymmetry
        lam = torch.linalg.eigvalsh((c32.double() + c32.double().T) / 2)
        assert float(isoscore_from_covariance(c32)) == pytest.approx(
            float(iota_from_eigenvalues(lam)), abs=1e-6
        )
    bad = c.clone()
    bad[5, 40] *= 1.01
    with pytest.raises(ValueError, match="cov is not symmetric"):
        isoscore_from_covariance(bad)


def test_bad_covariances():
    with pytest.raises(ValueError, match="cov must be a square"):
        isoscore_from_covariance(torch.ones(3, 4))
    with pytest.raises(ValueError, match="dimension >= 2"):
        isoscore_from_covariance(torch.ones(1, 1))
    with pytest.raises(ValueError, match="zero variance"):
        isoscore_from_covariance(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="zero variance"):
        participation_ratio_from_covariance(torch.zeros(3, 3))
    nan = torch.eye(3)
    nan[0, 2] = nan[2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"cov contains 2 NaN or infinite value\(s\)"):
        isoscore_from_covariance(nan)
    with pytest.raises(ValueError, match="negative diagonal"):
        isoscore_from_covariance(torch.diag(torch.tensor([1.0, -1.0, 1.0])))


# ----------------------------------------------------------------- identical points
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "d"), [(7, 5), (3, 10)])  # covariance and Gram routes
@pytest.mark.parametrize("value", [0.1, -1234.5678, 3e-7])
def test_identical_rows_raise_zero_variance(dtype, n, d, value):
    x = torch.full((n, d), value, dtype=dtype)
    for f in (isoscore, participation_ratio, lambda t: isoscore_star(t, zeta=0.0)):
        with pytest.raises(ValueError, match=r"zero variance \(all points identical\)"):
            f(x)


@pytest.mark.parametrize(("n", "d"), [(7, 5), (3, 10)])
def test_identical_rows_with_shrinkage_score_the_shrinkage_alone(n, d):
    s = torch.tensor(spd(d))
    x = torch.full((n, d), 0.1, dtype=F64, requires_grad=True)
    out = isoscore_star(x, zeta=0.4, shrinkage=s)
    assert float(out.detach()) == pytest.approx(float(isoscore_from_covariance(s)), rel=1e-12)
    out.backward()
    assert torch.equal(x.grad, torch.zeros_like(x))  # Sigma_X = 0: X_c = 0 exactly


def test_rows_that_differ_slightly_are_not_identical():
    x = torch.full((7, 5), 0.1, dtype=F64)
    x[0, 0] += 1e-13  # a spread far below the data's scale, far above its rounding
    assert float(isoscore(x)) == pytest.approx(0.0, abs=1e-6)  # one direction: PR = 1


# ----------------------------------------------------------------- positive semi-definiteness
@pytest.mark.parametrize("f", [isoscore_from_covariance, participation_ratio_from_covariance])
def test_covariance_that_is_not_psd(f):
    msg = "not positive semi-definite: its smallest eigenvalue is -1 "
    with pytest.raises(ValueError, match=msg):
        f(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="smallest eigenvalue is -1e-200 "):
        f(torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=F64) * 1e-200)


def test_shrinkage_that_is_not_psd():
    bad = 2 * torch.ones(6, 6) - torch.eye(6)  # eigenvalues 11 and -1 (five times)
    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="shrinkage is not positive semi-definite: its smallest "
                       "eigenvalue is -1 "):
        isoscore_star(x, zeta=0.5, shrinkage=bad)


def _with_smallest_eigenvalue(ratio: float, d: int = 5) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, d, dtype=F64, generator=torch.Generator().manual_seed(1)))
    lam = torch.linspace(1.0, 0.1, d, dtype=F64)
    lam[-1] = ratio
    c = q @ torch.diag(lam) @ q.T
    return (c + c.T) / 2


def test_psd_tolerance_is_relative_to_the_largest_eigenvalue():
    for scale in (1e-150, 1.0, 1e150):
        isoscore_from_covariance(_with_smallest_eigenvalue(-1e-7) * scale)  # rounding: accepted
        with pytest.raises(ValueError, match="smallest eigenvalue"):
            isoscore_from_covariance(_with_smallest_eigenvalue(-1e-2) * scale)


def test_a_shrinkage_modified_in_place_is_checked_again():
    x = torch.randn(20, 4, generator=torch.Generator().manual_seed(2))
    s = torch.eye(4)
    isoscore_star(x, zeta=0.5, shrinkage=s)
    s[0, 1] = s[1, 0] = 2.0  # in place: the earlier check no longer holds
    with pytest.raises(ValueError, match="not positive semi-definite"):
        isoscore_star(x, zeta=0.5, shrinkage=s)


def test_identity_shrinkage_warns_that_the_score_depends_on_scale() -> None:
    import warnings

    from isotropy import IsoScoreMetric

    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 4, generator=g, dtype=torch.float64) * torch.tensor([3.0, 1, 1, 0.1])
    with pytest.warns(UserWarning, match="depends on the scale"):
        small = float(isoscore_star(X, zeta=0.5))
    with pytest.warns(UserWarning, match="depends on the scale"):
        large = float(isoscore_star(10 * X, zeta=0.5))
    assert small != pytest.approx(large, abs=1e-3)  # what the warning says
    with pytest.warns(UserWarning, match="IsoScoreMetric"):
        IsoScoreMetric(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zeta = 0, or a Sigma_S given: nothing to warn of
        isoscore_star(X, zeta=0.0)
        isoscore_star(X, zeta=0.5, shrinkage=torch.eye(4, dtype=torch.float64))
        IsoScoreMetric(0.0)
        IsoScoreMetric(0.5, torch.eye(4))
