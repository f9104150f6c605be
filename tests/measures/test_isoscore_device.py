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
