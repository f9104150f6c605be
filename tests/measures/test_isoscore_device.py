"""The sync-free IsoScore* route against the eager one (itself tested against the authors'
package and an eigenvalue route): values and gradients over shapes, ζ, scales and dtypes;
NaN exactly where the eager route raises; and no host synchronisation and no device mix-up,
checked on fake CUDA tensors (``FakeTensorMode``: a host read of a value raises there)."""

from __future__ import annotations

import math

import pytest
import torch
from _reference import spd

from isotropy.measures.isoscore import isoscore_star, participation_ratio
from isotropy.measures.isoscore_device import (
    isoscore_star_device,
    same_rows,
    scale_exponent,
    shrinkage_exponent,
    star_grad,
    star_terms,
)

SHAPES = [(40, 8), (5, 12), (300, 16)]
ZETAS = [0.0, 0.2, 0.6, 1.0]
SCALES = [1e-30, 1e-3, 1.0, 1e3, 1e30]


@pytest.fixture(autouse=True)
def _threads(one_thread):
    """Small tensors: one thread."""


def _cloud(n, d, seed, dtype=torch.float64, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + 0.5
    x[:, 0] *= 20.0
    return (x * scale).to(dtype)


@pytest.mark.parametrize(("n", "d"), SHAPES)
@pytest.mark.parametrize("zeta", ZETAS)
@pytest.mark.parametrize("scale", SCALES)
def test_value_and_gradient_equal_the_eager_route(n, d, zeta, scale):
    s = torch.as_tensor(spd(d, seed=d), dtype=torch.float64) * scale**2
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        x = _cloud(n, d, seed=n + d, dtype=dtype, scale=scale)
        a = x.clone().requires_grad_()
        b = x.clone().requires_grad_()
        want = isoscore_star(a, zeta=zeta, shrinkage=s)
        got = isoscore_star_device(b, zeta, s)
        assert got.dtype == want.dtype
        assert float(got) == pytest.approx(float(want), abs=tol)
        if zeta < 1.0:
            want.backward()
            got.backward()
            err = float((a.grad - b.grad).abs().max()) / float(a.grad.abs().max())
            assert err <= 1e3 * tol, (dtype, err)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rows_accumulate_in_float32(dtype):
    x = _cloud(200, 12, seed=3, dtype=dtype, scale=300.0)
    s = torch.as_tensor(spd(12, seed=1), dtype=torch.float32) * 300.0**2
    got = isoscore_star_device(x, 0.2, s)
    assert got.dtype == torch.float32
    assert float(got) == pytest.approx(float(isoscore_star(x, zeta=0.2, shrinkage=s)), abs=1e-6)


def test_participation_ratio_and_identity_fallback():
    x = _cloud(50, 6, seed=4)
    assert float(isoscore_star_device(x, kind="pr")) == pytest.approx(
        float(participation_ratio(x)), abs=1e-12)
    assert float(isoscore_star_device(x, 0.3)) == pytest.approx(float(isoscore_star(x, zeta=0.3)),
                                                                abs=1e-12)


def test_nan_exactly_where_the_eager_route_raises():
    same = torch.ones(10, 4, dtype=torch.float64) * 3.0
    with pytest.raises(ValueError, match="zero variance|covariance is zero"):
        isoscore_star(same)
    assert math.isnan(float(isoscore_star_device(same)))
    # zeta > 0: Sigma_X = 0 exactly, the score of Sigma_S alone, as the eager route
    s = torch.as_tensor(spd(4, seed=0))
    assert float(isoscore_star_device(same, 0.5, s)) == pytest.approx(
        float(isoscore_star(same, zeta=0.5, shrinkage=s)), abs=1e-12)
    bad = _cloud(10, 4, seed=1)
    bad[3, 2] = math.nan
    with pytest.raises(ValueError):
        isoscore_star(bad)
    assert math.isnan(float(isoscore_star_device(bad)))
    assert math.isnan(float(isoscore_star_device(bad, 0.2, s)))
    assert bool(same_rows(same, same - same.mean(0)))
    assert not bool(same_rows(bad[:3], bad[:3] - bad[:3].mean(0)))


def test_scale_guard_is_a_power_of_two_on_the_device():
    x = _cloud(20, 3, seed=5, dtype=torch.float32, scale=1e30)  # window: |e| <= 16
    e = scale_exponent(x, 0.0, shrinkage_exponent(None))
    assert e.dtype == torch.int64 and e.ndim == 0
    assert 0.5 <= float(x.abs().max()) * 2.0 ** -int(e) < 1.0
    assert int(scale_exponent(_cloud(20, 3, seed=5), 0.0, 1)) == 0  # inside the window


def _fake_cuda():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def test_no_host_sync_and_one_device_on_fake_cuda():
    """The whole forward and backward arithmetic on fake CUDA tensors: a host read of a
    value (``float``, ``bool``, ``.item()``) or a CPU tensor mixed in would raise."""
    s_host = torch.as_tensor(spd(16, seed=2), dtype=torch.float32)
    exp = shrinkage_exponent(s_host)  # once, when Sigma_S is set
    with _fake_cuda():
        x = torch.randn(300, 16, device="cuda", dtype=torch.bfloat16)
        s = torch.randn(16, 16, device="cuda")
        xa = x.float()
        e = scale_exponent(xa, 0.2, exp)
        xs = xa * torch.ldexp(torch.ones((), device="cuda"), -e)
        xc = xs - xs.mean(0)
        keep = 1.0 - same_rows(xs, xc).float()
        value, sigma, a, b = star_terms(xc, s, 0.2, torch.ones((), device="cuda"), keep)
        grad = star_grad(xc, sigma, a, b, 0.2, torch.ones((), device="cuda"))
        assert value.device.type == grad.device.type == "cuda"
        assert grad.shape == (300, 16)
        with torch.no_grad():  # the public function, autograd aside
            out = isoscore_star_device(x, 0.2, s, shrinkage_exp=exp)
        assert out.device.type == "cuda" and out.dtype == torch.float32
        with pytest.raises(Exception, match="mismatch|device"):
            star_terms(xc, s_host, 0.2, torch.ones(()), keep)  # a CPU Sigma_S is refused


def test_shapes_are_refused_as_the_eager_route_refuses_them():
    with pytest.raises(ValueError, match="at least 2 points"):
        isoscore_star_device(torch.ones(1, 4))
    with pytest.raises(ValueError, match="dimension >= 2"):
        isoscore_star_device(torch.randn(5, 1))
    with pytest.raises(ValueError, match="2-D"):
        isoscore_star_device(torch.randn(5))


# ------------------------------------------------------------------ bfloat16 products

U_BF16 = 2.0**-8  # bfloat16's unit roundoff (8 significant bits)


def _hidden_state_like(kind: str, n: int = 4096, d: int = 192) -> torch.Tensor:
    """float64 clouds of the shapes transformer layers give: a large common offset with
    spread scales, one whose offset dwarfs its spread (centring must come before rounding),
    one outlier dimension, a low-rank cloud, a Gaussian one, and one whitened exactly
    (covariance I: the gradient vanishes, its error does not)."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    if kind == "offset":
        return x * torch.linspace(0.05, 3.0, d, dtype=torch.float64) + 5.0
    if kind == "far_offset":
        return 0.05 * x + 100.0
    if kind == "whitened":
        xc = x - x.mean(0)
        chol = torch.linalg.cholesky(xc.T @ xc / (n - 1))
        return torch.linalg.solve_triangular(chol, xc.T, upper=False).T
    if kind == "outlier":
        x[:, 7] *= 30.0
        return x + 10.0 * torch.randn(d, generator=g, dtype=torch.float64)
    if kind == "low_rank":
        return (x[:, :8] @ torch.randn(8, d, generator=g, dtype=torch.float64)
                + 0.01 * torch.randn(n, d, generator=g, dtype=torch.float64))
    return x


@pytest.mark.parametrize("kind", ["offset", "far_offset", "outlier", "low_rank", "isotropic",
                                  "whitened"])
@pytest.mark.parametrize("zeta", [0.0, 0.2])
def test_bfloat16_products_stay_within_the_stated_bounds(kind, zeta):
    """The score and the gradient of the bfloat16-product route against float64 (the eager
    route, autograd): the module's first-order bounds (u = 2^-8), |Δι| <= 4u(1 + sqrt(PR))(ι +
    1/(d-1)) and ||Δg||_F <= 8u(1 + sqrt(PR)) c ||X_c||_F (|a| sqrt(d) + |b|(||Σ_ζ||_F +
    tr Σ_ζ)); and, closer to what is seen, |Δι| <= 2e-5 and, away from isotropy, the
    gradient within 2% of its norm (rounding before centring, or the product's result to
    bfloat16, breaks these)."""
    x64 = _hidden_state_like(kind)
    n, d = x64.shape
    s64 = torch.as_tensor(spd(d, seed=3), dtype=torch.float64) * float(x64.var(0).mean())
    ref_x = x64.clone().requires_grad_()
    ref = isoscore_star(ref_x, zeta=zeta, shrinkage=s64)
    ref.backward()
    x = x64.float().requires_grad_()
    got = isoscore_star_device(x, zeta, s64.float(), product_dtype=torch.bfloat16)
    got.backward()
    assert got.dtype == torch.float32
    # the bounds' quantities, in float64
    xc = x64 - x64.mean(0)
    cov = (1 - zeta) * (xc.T @ xc) / (n - 1) + zeta * s64
    tr, fro = torch.trace(cov), (cov * cov).sum()
    pr = float(tr * tr / fro)
    iota = float(ref)
    value_err = abs(float(got) - iota)
    assert value_err <= 4 * U_BF16 * (1 + math.sqrt(pr)) * (iota + 1 / (d - 1)), value_err
    a, b = float(2 * tr / (fro * (d - 1))), float(-2 * tr * tr / (fro * fro * (d - 1)))
    c = 2 * (1 - zeta) / (n - 1)
    grad_err = float((x.grad.double() - ref_x.grad).norm())
    scale = abs(a) * math.sqrt(d) + abs(b) * (float(fro.sqrt()) + float(tr))
    assert grad_err <= 8 * U_BF16 * (1 + math.sqrt(pr)) * c * float(xc.norm()) * scale
    assert value_err <= 2e-5, value_err
    if kind != "whitened":
        assert grad_err <= 0.02 * float(ref_x.grad.norm()), grad_err / float(ref_x.grad.norm())
    # the option changes the arithmetic: the float32 route is closer still
    f32 = x64.float().requires_grad_()
    isoscore_star_device(f32, zeta, s64.float()).backward()
    assert float((f32.grad.double() - ref_x.grad).norm()) < grad_err


def test_bfloat16_products_take_float32_sums_on_fake_cuda():
    """On CUDA the products are ``torch.mm(..., out_dtype=torch.float32)`` of bfloat16
    operands (tensor cores, float32 sums and result), with no host read."""
    with _fake_cuda():  # no CUDA autograd here: the forward and backward arithmetic
        x = torch.randn(300, 16, device="cuda")
        s = torch.randn(16, 16, device="cuda")
        xc = (x - x.mean(0)).to(torch.bfloat16)
        one = torch.ones((), device="cuda")
        value, sigma, a, b = star_terms(xc, s, 0.2, one, one)
        grad = star_grad(xc, sigma, a, b, 0.2, one)
        assert sigma.dtype == grad.dtype == torch.float32
        assert value.device.type == grad.device.type == "cuda" and grad.shape == (300, 16)
        with torch.no_grad():
            out = isoscore_star_device(x, 0.2, s, shrinkage_exp=1, product_dtype=torch.bfloat16)
        assert out.dtype == torch.float32 and out.device.type == "cuda"


def test_product_dtype_is_none_or_bfloat16():
    with pytest.raises(ValueError, match="product_dtype must be None or torch.bfloat16"):
        isoscore_star_device(torch.randn(5, 3), product_dtype=torch.float16)
    x = _cloud(40, 8, seed=4)  # float64 rows keep float64 products
    assert torch.equal(isoscore_star_device(x, product_dtype=torch.bfloat16),
                       isoscore_star_device(x))


# ------------------------------------------------------------- a row mask instead of a selection


@pytest.mark.parametrize("zeta", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_row_mask_scores_the_rows_it_keeps_as_their_selection_does(zeta, dtype):
    x = _cloud(300, 16, seed=6, dtype=dtype)
    mask = torch.rand(300, generator=torch.Generator().manual_seed(1)) < 0.4
    x[~mask] = 1e6 * torch.randn(int((~mask).sum()), 16, dtype=dtype)  # far-off padding rows
    x[torch.nonzero(~mask)[:3, 0]] = float("nan")  # and some hold NaN
    s = torch.as_tensor(spd(16, seed=2), dtype=dtype)
    chosen = x[mask].clone().requires_grad_()
    want = isoscore_star_device(chosen, zeta, s)
    whole = x.clone().requires_grad_()
    got = isoscore_star_device(whole, zeta, s, row_mask=mask)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert float(got) == pytest.approx(float(want), rel=tol, abs=tol)
    if zeta < 1.0:
        want.backward()
        got.backward()
        assert torch.count_nonzero(whole.grad[~mask]) == 0
        f32 = dtype == torch.float32
        torch.testing.assert_close(whole.grad[mask], chosen.grad, rtol=1e-4 if f32 else 1e-10,
                                   atol=(1e-6 if f32 else 1e-12) * float(chosen.grad.abs().max()))


def test_a_row_mask_gives_nan_where_the_selection_would_be_refused():
    x = _cloud(50, 8, seed=7)
    s = torch.as_tensor(spd(8, seed=1), dtype=torch.float64)
    none = torch.zeros(50, dtype=torch.bool)
    one = none.clone()
    one[3] = True
    for mask in (none, one):  # fewer than 2 rows: "at least 2 points" on the eager route
        for zeta in (0.0, 0.3):
            assert math.isnan(float(isoscore_star_device(x, zeta, s, row_mask=mask)))
    same = x.clone()
    same[:10] = same[0]  # the kept rows all equal: undefined at zeta = 0, Sigma_S's at 0.3
    ten = torch.arange(50) < 10
    assert math.isnan(float(isoscore_star_device(same, 0.0, row_mask=ten)))
    assert float(isoscore_star_device(same, 0.3, s, row_mask=ten)) == pytest.approx(
        float(isoscore_star_device(same[:10], 0.3, s)), rel=1e-12)
    assert float(isoscore_star_device(x, row_mask=torch.ones(50, dtype=torch.long))) == \
        pytest.approx(float(isoscore_star_device(x)), rel=1e-12)
    with pytest.raises(ValueError, match=r"row_mask must be a tensor of shape \(50,\)"):
        isoscore_star_device(x, row_mask=torch.ones(49, dtype=torch.bool))
    with pytest.raises(ValueError, match="row_mask must hold 0 and 1"):
        isoscore_star_device(x, row_mask=torch.full((50,), 2))


def test_a_row_mask_needs_no_host_read_on_fake_cuda():
    with _fake_cuda():
        x = torch.randn(300, 16, device="cuda")
        real = torch.rand(300, device="cuda") < 0.5
        s = torch.randn(16, 16, device="cuda")
        with torch.no_grad():
            out = isoscore_star_device(x, 0.2, s, shrinkage_exp=1, row_mask=real,
                                       product_dtype=torch.bfloat16)
        assert out.device.type == "cuda" and out.dtype == torch.float32
        xs = torch.where(real.unsqueeze(1), x, x.new_zeros(()))
        n = real.sum().float()
        xc = torch.where(real.unsqueeze(1), xs - xs.sum(0) / n, xs.new_zeros(()))
        keep = 1.0 - same_rows(xs, xc, real).float()
        one = torch.ones((), device="cuda")
        value, sigma, a, b = star_terms(xc, s, 0.2, one, keep, n=n)
        assert star_grad(xc, sigma, a, b, 0.2, one, n).shape == (300, 16)
