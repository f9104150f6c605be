"""IStarLoss against the authors' IsoScore 2.0.1 package and an eigenvalue route."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from isotropy.losses.istar import IStarLoss

ref = pytest.importorskip("IsoScore.IsoScore")


pytestmark = pytest.mark.usefixtures("one_thread")


# The package computes sqrt(d) in float32 (torch.sqrt of an integer tensor): agreement is
# to ~1e-7; the eigenvalue route below is checked to 1e-10.
REF_TOL = 1e-6


def ref_isoscore_star(points: np.ndarray, c0: np.ndarray, zeta: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(
            ref.IsoScore_star(np.asarray(points, dtype=np.float64), torch.tensor(c0), zeta)
        )


def eig_isoscore(cov: np.ndarray) -> float:
    """Algorithm 2 of Rudman et al. step by step on the eigenvalues."""
    lam = np.linalg.eigvalsh(cov)
    d = lam.shape[0]
    lam_hat = math.sqrt(d) * lam / np.linalg.norm(lam)
    delta = np.linalg.norm(lam_hat - 1.0) / math.sqrt(2 * (d - math.sqrt(d)))
    phi = (d - delta**2 * (d - math.sqrt(d))) ** 2 / d**2
    return (d * phi - 1) / (d - 1)


def make_batch(seed: int = 0, batch: int = 5, seq: int = 7, d: int = 6, layers: int = 3):
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.3, 3.0, d, dtype=torch.float64)
    hs = tuple(
        torch.randn(batch, seq, d, generator=g, dtype=torch.float64) * scale + i
        for i in range(layers + 1)
    )
    lengths = torch.randint(2, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return hs, mask


def union_by_loop(hs, mask, layer_ids) -> np.ndarray:
    rows = []
    for layer in layer_ids:
        h = hs[layer].detach().numpy()
        for b in range(h.shape[0]):
            for t in range(h.shape[1]):
                if mask[b, t]:
                    rows.append(h[b, t])
    return np.array(rows)


def random_spd(d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, 3 * d)) * rng.uniform(0.2, 2.0, size=(d, 1))
    return a @ a.T / (3 * d)


@pytest.mark.parametrize("zeta", [0.0, 0.2, 0.7, 1.0])
@pytest.mark.parametrize("layers,ids", [("all", [1, 2, 3]), (2, [2]), ([1, -1], [1, 3]),
                                        ("last", [3])])
def test_matches_isoscore_package_with_shrinkage(zeta, layers, ids):
    hs, mask = make_batch(seed=1)
    c0 = random_spd(6, seed=2)
    loss = IStarLoss(tuning=-3.0, zeta=zeta, layers=layers, shrinkage=torch.tensor(c0))
    out = loss(hs, attention_mask=mask)
    expected = ref_isoscore_star(union_by_loop(hs, mask, ids), c0, zeta)
    assert out.logs["isoscore_star"] == pytest.approx(expected, abs=REF_TOL)
    assert float(out.loss) == pytest.approx(-3.0 * (1.0 - expected), abs=3 * REF_TOL)
    x = union_by_loop(hs, mask, ids)
    exact = eig_isoscore((1 - zeta) * np.cov(x.T) + zeta * c0)
    assert out.logs["isoscore_star"] == pytest.approx(exact, abs=1e-10)
    assert out.logs["n_points"] == len(ids) * int(mask.sum())


def test_identity_fallback_matches_package_with_identity_and_warns_once():
    hs, mask = make_batch(seed=3)
    loss = IStarLoss(tuning=2.0, zeta=0.4)
    with pytest.warns(UserWarning, match="identity fallback"):
        out = loss(hs, attention_mask=mask)
    expected = ref_isoscore_star(union_by_loop(hs, mask, [1, 2, 3]), np.eye(6), 0.4)
    assert out.logs["isoscore_star"] == pytest.approx(expected, abs=REF_TOL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(hs, attention_mask=mask)  # no second warning
        with_s = IStarLoss(tuning=2.0, zeta=0.4, shrinkage=torch.eye(6, dtype=torch.float64))
        same = with_s(hs, attention_mask=mask).logs["isoscore_star"]
        assert same == pytest.approx(out.logs["isoscore_star"], abs=1e-12)


def test_eigenvalue_route_on_shrunk_covariance():
    hs, mask = make_batch(seed=4, d=5)
    c0 = random_spd(5, seed=5)
    zeta = 0.3
    out = IStarLoss(1.0, zeta=zeta, shrinkage=torch.tensor(c0))(hs, mask)
    x = union_by_loop(hs, mask, [1, 2, 3])
    expected = eig_isoscore((1 - zeta) * np.cov(x.T) + zeta * c0)
    assert out.logs["isoscore_star"] == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("with_shrinkage", [True, False])
def test_gradcheck_float64(with_shrinkage):
    hs, mask = make_batch(seed=6, batch=3, seq=4, d=4, layers=2)
    shrink = torch.tensor(random_spd(4, seed=7)) if with_shrinkage else None
    loss = IStarLoss(tuning=-1.5, zeta=0.25, shrinkage=shrink)
    h1 = hs[1].clone().requires_grad_(True)
    h2 = hs[2].clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.autograd.gradcheck(
            lambda a, b: loss((hs[0], a, b), attention_mask=mask).loss, (h1, h2)
        )


def test_gradient_matches_autograd_through_eigenvalues():
    hs, mask = make_batch(seed=8, d=5)
    c0 = torch.tensor(random_spd(5, seed=9))
    zeta = 0.2
    h = [t.clone().requires_grad_(True) for t in hs]
    IStarLoss(-2.0, zeta=zeta, shrinkage=c0)(tuple(h), mask).loss.backward()
    g = [t.clone().requires_grad_(True) for t in hs]
    m = mask.bool()
    x = torch.cat([g[i][m] for i in (1, 2, 3)])
    cov = (1 - zeta) * torch.cov(x.T) + zeta * c0
    lam = torch.linalg.eigvalsh(cov)
    d = 5
    lam_hat = math.sqrt(d) * lam / torch.linalg.vector_norm(lam)
    delta = torch.linalg.vector_norm(lam_hat - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    phi = (d - delta**2 * (d - math.sqrt(d))) ** 2 / d**2
    (-2.0 * (1 - (d * phi - 1) / (d - 1))).backward()
    for a, b in zip(h[1:], g[1:], strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-7, atol=1e-10)
    assert h[0].grad is None or float(h[0].grad.abs().max()) == 0.0


def test_zeta_one_leaves_no_gradient():
    """At ζ = 1, Σ_ζ = Σ_S does not depend on the batch: the penalty's value is that of Σ_S alone
    and its gradient is exactly zero; just below 1 it is not."""
    hs, mask = make_batch(seed=8, d=5)
    c0 = torch.tensor(random_spd(5, seed=9))
    expected = -2.0 * (1 - eig_isoscore(c0.numpy()))
    grads = {}
    for zeta in (1.0, 0.9):
        h = [t.clone().requires_grad_(True) for t in hs]
        out = IStarLoss(-2.0, zeta=zeta, shrinkage=c0)(tuple(h), mask).loss
        if zeta == 1.0:
            assert float(out.detach()) == pytest.approx(expected, abs=1e-12)
        out.backward()
        grads[zeta] = max(float(t.grad.abs().max()) for t in h[1:])
    assert grads[1.0] == 0.0
    assert grads[0.9] > 1e-6


@pytest.mark.parametrize("with_shrinkage", [True, False])
def test_padding_never_enters_the_cloud(with_shrinkage):
    hs, mask = make_batch(seed=10)
    assert int((mask == 0).sum()) > 0
    shrink = torch.tensor(random_spd(6, seed=11)) if with_shrinkage else None
    loss = IStarLoss(1.0, zeta=0.2, shrinkage=shrink)
    h = [t.clone().requires_grad_(True) for t in hs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = loss(tuple(h), mask)
        out.loss.backward()
        pad = (mask == 0).unsqueeze(-1)
        moved = tuple(torch.where(pad, t * 100.0 + 7.0, t) for t in hs)
        out2 = loss(moved, mask)
    assert float(out2.loss.detach()) == float(out.loss.detach())
    for t in h[1:]:
        assert float(t.grad[mask == 0].abs().max()) == 0.0
        assert float(t.grad[mask == 1].abs().max()) > 0.0


def _train_cloud(tuning: float, steps: int = 300) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    scale = torch.linspace(0.4, 2.0, 8)
    start = torch.randn(64, 8, generator=g) * scale
    x = torch.nn.Parameter(start.clone())
    loss = IStarLoss(tuning=tuning, zeta=0.2, shrinkage=torch.cov(start.T))
    opt = torch.optim.Adam([x], lr=0.03)
    dummy = torch.zeros(1, 64, 8)
    for _ in range(steps):
        opt.zero_grad()
        loss((dummy, x.unsqueeze(0))).loss.backward()
        opt.step()
    before = eig_isoscore(np.cov(start.numpy().T.astype(np.float64)))
    after = eig_isoscore(np.cov(x.detach().numpy().T.astype(np.float64)))
    return before, after


def test_negative_tuning_lowers_isotropy():
    before, after = _train_cloud(-1.0)
    assert after < before - 0.3


def test_positive_tuning_raises_isotropy():
    before, after = _train_cloud(+1.0)
    assert after > before + 0.15
    assert after > 0.95


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_under_autocast_does_not_overflow(dtype):
    # |x| ~ 300: a half-precision co-moment over 2,000 rows would reach ~1e8 > 65504
    g = torch.Generator().manual_seed(12)
    h = (torch.randn(10, 200, 16, generator=g) * 300.0).to(dtype)
    mask = torch.ones(10, 200, dtype=torch.long)
    c0 = random_spd(16, seed=13) * 9e4
    loss = IStarLoss(-1.0, zeta=0.2, shrinkage=torch.tensor(c0))
    with torch.autocast("cpu", dtype=dtype):
        out = loss((h, h), mask)
    assert torch.isfinite(out.loss)
    expected = ref_isoscore_star(h.double().reshape(-1, 16).numpy(), c0, 0.2)
    assert out.logs["isoscore_star"] == pytest.approx(expected, abs=1e-5)
    hg = h.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        out = loss((h, hg), mask)
    out.loss.backward()
    assert hg.grad.dtype == dtype
    assert bool(torch.isfinite(hg.grad).all())


def test_shrinkage_buffer_is_not_saved_and_can_be_reset():
    loss = IStarLoss(1.0, shrinkage=torch.eye(3))
    assert "shrinkage" not in loss.state_dict()
    assert loss.shrinkage is not None
    loss.set_shrinkage(None)
    assert loss.shrinkage is None
    assert "identity" in repr(loss)


# ----------------------------------------------------------------------------- bad input


def test_zeta_outside_unit_interval():
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="zeta"):
            IStarLoss(1.0, zeta=bad)
    with pytest.raises(TypeError, match="zeta"):
        IStarLoss(1.0, zeta="high")


def test_bad_tuning_and_layers():
    with pytest.raises(ValueError, match="tuning"):
        IStarLoss(float("inf"))
    with pytest.raises(TypeError, match="tuning"):
        IStarLoss(True)
    with pytest.raises(ValueError, match="layers"):
        IStarLoss(1.0, layers="first")
    with pytest.raises(ValueError, match="empty"):
        IStarLoss(1.0, layers=[])
    with pytest.raises(TypeError, match="integers"):
        IStarLoss(1.0, layers=[1, 2.0])


def test_shrinkage_of_wrong_dimension():
    hs, mask = make_batch(d=6)
    loss = IStarLoss(1.0, shrinkage=torch.eye(5))
    with pytest.raises(ValueError, match=r"shrinkage has shape \(5, 5\).*dimension 6"):
        loss(hs, mask)
    with pytest.raises(ValueError, match="shrinkage"):
        loss.set_shrinkage(torch.eye(6))  # differs from the one already set
    with pytest.raises(ValueError, match="square"):
        IStarLoss(1.0, shrinkage=torch.ones(3, 4))
    with pytest.raises(ValueError, match="symmetric"):
        IStarLoss(1.0, shrinkage=torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        IStarLoss(1.0, shrinkage=torch.full((3, 3), float("nan")))


def test_nan_hidden_states():
    hs, mask = make_batch()
    bad = hs[2].clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        IStarLoss(1.0, shrinkage=torch.eye(6))((hs[0], hs[1], bad), mask)


def test_empty_batch_after_masking():
    hs, mask = make_batch()
    with pytest.raises(ValueError, match="no token"):
        IStarLoss(1.0, shrinkage=torch.eye(6))(hs, torch.zeros_like(mask))


def test_missing_hidden_states():
    loss = IStarLoss(1.0)
    with pytest.raises(ValueError, match="output_hidden_states=True"):
        loss(None)
    with pytest.raises(ValueError, match="empty"):
        loss(())
    with pytest.raises(TypeError, match="tuple"):
        loss(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="only the embedding"):
        loss((torch.zeros(2, 3, 4),))
    with pytest.raises(ValueError, match=r"\(batch, seq, dim\)"):
        loss((torch.zeros(2, 3, 4), torch.zeros(3, 4)))


def test_layer_index_out_of_range():
    hs, mask = make_batch(layers=2)
    with pytest.raises(ValueError, match="out of range"):
        IStarLoss(1.0, layers=5, shrinkage=torch.eye(6))(hs, mask)
    with pytest.raises(ValueError, match="out of range"):
        IStarLoss(1.0, layers=[1, -4], shrinkage=torch.eye(6))(hs, mask)


def _mask_warnings(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in record if "without attention_mask" in str(w.message)]


def test_warns_once_without_attention_mask():
    hs, mask = make_batch()
    loss = IStarLoss(1.0, shrinkage=torch.eye(6))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = loss(hs)
        loss(hs)
    (warned,) = _mask_warnings(record)  # once, not on the second call
    assert warned.category is UserWarning
    assert "padding included" in str(warned.message) and "counted" in str(warned.message)
    # without a mask every position is a token: the same as an all-ones mask
    everything = loss(hs, torch.ones_like(mask))
    assert float(first.loss) == pytest.approx(float(everything.loss), rel=1e-12)
    assert first.logs["n_points"] == hs[0].shape[0] * hs[0].shape[1] * (len(hs) - 1)


def test_no_mask_warning_when_mask_given():
    hs, mask = make_batch()
    loss = IStarLoss(1.0, shrinkage=torch.eye(6))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loss(hs, mask)
        loss(hs, attention_mask=mask)
    assert _mask_warnings(record) == []


def test_set_shrinkage_refuses_a_matrix_that_is_not_psd():
    loss = IStarLoss(tuning=1.0, zeta=0.5, shrinkage=torch.eye(6))
    with pytest.raises(ValueError, match="smallest eigenvalue is -1 "):
        loss.set_shrinkage(2 * torch.ones(6, 6) - torch.eye(6))
    assert torch.equal(loss.shrinkage, torch.eye(6))  # the previous matrix is kept


def test_forward_does_not_repeat_the_psd_check(monkeypatch):
    import sys

    module = sys.modules["isotropy.measures.isoscore"]
    g = torch.Generator().manual_seed(0)
    loss = IStarLoss(tuning=1.0, zeta=0.5, shrinkage=torch.eye(8))

    def refuse(*args, **kwargs):
        raise AssertionError("positive semi-definiteness checked again")

    monkeypatch.setattr(module, "check_psd", refuse)
    h = torch.randn(2, 5, 8, generator=g)
    for _ in range(3):
        loss((h, h), attention_mask=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(AssertionError, match="checked again"):  # the public function does
        module.isoscore_star(h.reshape(-1, 8), zeta=0.5, shrinkage=loss.shrinkage)
