"""Every measure and loss on the devices and precisions users train with, against CPU float64.

Cases: CPU under ``torch.autocast`` with bfloat16 and float16, and, marked ``gpu`` (skipped
without CUDA), CUDA in float32 and under autocast with float16 and bfloat16. Inputs are what a
model produces under autocast: tensors in the half dtype, at the scales real models produce
(|x| up to 1e3, three outlier dimensions 100x the rest). The float64 reference is computed on
the *same* rounded values, so the tolerances measure our arithmetic, not the inputs' rounding:
values within ``VALUE_TOL`` (absolute, on scores in [0, 1] or losses of order 1), gradients
within ``GRAD_TOL`` of the reference gradient's largest entry. float16 gradients are taken of
the loss times 2^16, as ``GradScaler`` does (unscaled they would underflow float16: IsoScore*'s
gradient shrinks as 1/(n |x|)).
"""

from __future__ import annotations

import math

import pytest
import torch

from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore_star
from isotropy.measures.isoscore_metric import IsoScoreMetric

GPU = pytest.mark.gpu
CASES = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cpu", torch.float16, id="cpu-fp16"),
    pytest.param("cuda", torch.float32, id="cuda-fp32", marks=GPU),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=GPU),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=GPU),
]
VALUE_TOL = {torch.float32: 1e-5, torch.float16: 1e-4, torch.bfloat16: 1e-4}
# the gradient is returned in the input's dtype: its own rounding (2^-11, 2^-8) dominates
GRAD_TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}
LOSS_SCALE = {torch.float32: 1.0, torch.float16: 2.0**16, torch.bfloat16: 1.0}


@pytest.fixture(autouse=True)
def _threads(one_thread):
    """Small tensors: one CPU thread."""


def _autocast(device: str, dtype: torch.dtype):
    return torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32)


def real_scale_cloud(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """``(n, d)`` float64 rows like a transformer layer's: |x| up to ~1e3, three outlier
    dimensions 100 times the others, a common offset."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 3.0 + 1.0
    x[:, :3] *= 100.0
    return x


def _spd(d: int, seed: int) -> torch.Tensor:
    c = real_scale_cloud(4 * d, d, seed)
    return torch.cov(c.T).float()


def _on(x: torch.Tensor, device: str, dtype: torch.dtype) -> torch.Tensor:
    return x.to(device=device, dtype=dtype).detach().requires_grad_()


def _ref_isoscore_star(x64: torch.Tensor, zeta: float, s: torch.Tensor) -> torch.Tensor:
    """IsoScore* by its definition on the covariance, float64 (torch.cov, no shortcut)."""
    cov = (1 - zeta) * torch.cov(x64.T) + zeta * s.double()
    d = cov.shape[0]
    return (torch.trace(cov) ** 2 / (cov * cov).sum() - 1) / (d - 1)


def _check_grad(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """``got`` (the gradient of the loss times ``LOSS_SCALE``) against ``want``."""
    got = got.detach().double().cpu() / LOSS_SCALE[dtype]
    assert torch.isfinite(got).all(), "non-finite gradient"
    err = float((got - want).abs().max()) / float(want.abs().max())
    assert err <= GRAD_TOL[dtype], f"gradient error {err:.2e} of its largest entry"


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_isoscore_star_value_and_gradient(device, dtype):
    zeta, scale = 0.2, LOSS_SCALE[dtype]
    s = _spd(64, seed=1)
    x = _on(real_scale_cloud(512, 64), device, dtype)
    with _autocast(device, dtype):
        score = isoscore_star(x, zeta=zeta, shrinkage=s.to(device))
    assert score.dtype == torch.float32 and score.device.type == device
    (score * scale).backward()
    x64 = x.detach().double().cpu().requires_grad_()
    ref = _ref_isoscore_star(x64, zeta, s)
    ref.backward()
    assert math.isfinite(float(score))
    assert float(score) == pytest.approx(float(ref), abs=VALUE_TOL[dtype])
    _check_grad(x.grad, x64.grad, dtype)


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_istar_loss_on_hidden_states(device, dtype):
    g = torch.Generator().manual_seed(3)
    layers = [real_scale_cloud(8 * 16, 64, seed=k).reshape(8, 16, 64) for k in range(3)]
    mask = (torch.arange(16)[None, :] < torch.randint(4, 17, (8, 1), generator=g)).long()
    s = _spd(64, seed=2)
    hs = [_on(h, device, dtype) for h in layers]
    loss = IStarLoss(tuning=-1.0, zeta=0.2, shrinkage=s.to(device))
    with _autocast(device, dtype):
        out = loss(hs, attention_mask=mask.to(device))
    (out.loss * LOSS_SCALE[dtype]).backward()
    hs64 = [h.detach().double().cpu().requires_grad_() for h in hs]
    m = mask.bool()
    union = torch.cat([h[m] for h in hs64[1:]])
    ref = -1.0 * (1 - _ref_isoscore_star(union, 0.2, s))
    ref.backward()
    assert float(out.loss.detach()) == pytest.approx(float(ref), abs=VALUE_TOL[dtype])
    assert hs[0].grad is None  # the embedding output is not a layer of "all"
    for h, h64 in zip(hs[1:], hs64[1:], strict=True):
        _check_grad(h.grad, h64.grad, dtype)


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_cosreg_loss(device, dtype):
    g = torch.Generator().manual_seed(4)
    h64 = real_scale_cloud(8 * 16, 64, seed=5).reshape(8, 16, 64)
    mask = (torch.arange(16)[None, :] < torch.randint(4, 17, (8, 1), generator=g)).long()
    h = _on(h64, device, dtype)
    with _autocast(device, dtype):
        out = CosRegLoss(tuning=1.0)((h, h), attention_mask=mask.to(device))
    (out.loss * LOSS_SCALE[dtype]).backward()
    r = h.detach().double().cpu().requires_grad_()
    x = r[mask.bool()]
    u = x / x.norm(dim=1, keepdim=True)
    cos = u @ u.T
    m = x.shape[0]
    ref = (cos.sum() - cos.diagonal().sum()) / m**2  # sum over i != j, over M^2
    ref.backward()
    assert float(out.loss.detach()) == pytest.approx(float(ref), abs=VALUE_TOL[dtype])
    _check_grad(h.grad, r.grad, dtype)


def _ref_entropy(x64: torch.Tensor) -> torch.Tensor:
    """Persistent entropy of all H0 bars of ``x64`` (float64): Prim's MST by hand."""
    n = x64.shape[0]
    dist = torch.cdist(x64, x64)
    inside = [0]
    best = dist[0].clone()
    lengths = []
    best[0] = math.inf
    for _ in range(n - 1):
        j = int(torch.argmin(best))
        lengths.append(best[j])
        inside.append(j)
        best = torch.minimum(best, dist[j])
        best[inside] = math.inf
    bars = torch.stack(lengths)
    p = bars / bars.sum()
    return -(p * torch.log(p)).sum()


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_persistent_entropy_loss(device, dtype):
    x64 = real_scale_cloud(64, 96, seed=6)
    x = _on(x64, device, dtype)
    reg = PersistentEntropyLoss(weight=1.0, select_features=False, sync_dist=False)
    with _autocast(device, dtype):
        out = reg.forward_embeddings(x)
    (out.loss * LOSS_SCALE[dtype]).backward()
    r = x.detach().double().cpu().requires_grad_()
    ref = -_ref_entropy(r)
    ref.backward()
    assert float(out.loss.detach()) == pytest.approx(float(ref), abs=VALUE_TOL[dtype] * 10)
    _check_grad(x.grad, r.grad, dtype)


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_covariance_stats_and_metric(device, dtype):
    x64 = real_scale_cloud(900, 48, seed=7)
    parts = [x64[:300], x64[300:700], x64[700:]]
    stats = CovarianceStats.empty(48, device=device)
    with _autocast(device, dtype):  # as in an evaluation loop under autocast
        for p in parts[:2]:
            stats = stats.update(p.to(device=device, dtype=dtype))
        stats = stats.merge(CovarianceStats.from_batch(parts[2].to(device=device, dtype=dtype)))
    assert stats.count == 900
    rounded = x64.to(dtype).double()
    cov = stats.covariance().double().cpu()
    want = torch.cov(rounded.T)
    assert float((cov - want).abs().max()) <= 1e-5 * float(want.abs().max())
    metric = IsoScoreMetric(zeta=0.0).to(device)
    with _autocast(device, dtype):
        for p in parts:
            metric.update(p.to(device=device, dtype=dtype))
    got = float(metric.compute())
    ref = float(_ref_isoscore_star(rounded, 0.0, torch.zeros(48, 48)))
    assert got == pytest.approx(ref, abs=VALUE_TOL[dtype])
