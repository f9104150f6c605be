"""CosRegLoss against a brute-force double loop over pairs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from isotropy.losses.cosreg import CosRegLoss

pytestmark = pytest.mark.usefixtures("one_thread")


def make_batch(seed: int = 0, batch: int = 4, seq: int = 6, d: int = 5, layers: int = 2):
    g = torch.Generator().manual_seed(seed)
    hs = tuple(
        torch.randn(batch, seq, d, generator=g, dtype=torch.float64) + 0.5 * i
        for i in range(layers + 1)
    )
    lengths = torch.randint(1, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return hs, mask


def brute_force(h: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """(1/M^2) sum_{i != j} cos(x_i, x_j) and the mean cosine of distinct pairs, by loops."""
    rows = [h[b, t] for b in range(h.shape[0]) for t in range(h.shape[1]) if mask[b, t]]
    m = len(rows)
    total = 0.0
    for i in range(m):
        for j in range(m):
            if i != j:
                total += rows[i] @ rows[j] / (np.linalg.norm(rows[i]) * np.linalg.norm(rows[j]))
    return total / m**2, total / (m * (m - 1))


@pytest.mark.parametrize("layer", [-1, 1, 0])
def test_matches_brute_force(layer):
    hs, mask = make_batch(seed=1)
    out = CosRegLoss(tuning=1.0, layer=layer)(hs, attention_mask=mask)
    term, mean_cos = brute_force(hs[layer].numpy(), mask.numpy())
    assert float(out.loss) == pytest.approx(term, abs=1e-12)
    assert out.logs["cosreg_term"] == pytest.approx(term, abs=1e-12)
    assert out.logs["avg_cosine"] == pytest.approx(mean_cos, abs=1e-12)
    assert out.logs["n_points"] == int(mask.sum())


def test_tuning_scales_the_term_and_no_mask_means_every_token():
    hs, _ = make_batch(seed=2)
    term, _ = brute_force(hs[-1].numpy(), np.ones(hs[-1].shape[:2], dtype=bool))
    out = CosRegLoss(tuning=-2.5)(hs)
    assert float(out.loss) == pytest.approx(-2.5 * term, abs=1e-12)


def test_gradcheck_float64():
    hs, mask = make_batch(seed=3, batch=3, seq=4, d=3)
    h = hs[-1].clone().requires_grad_(True)
    loss = CosRegLoss(tuning=1.3)
    assert torch.autograd.gradcheck(lambda a: loss((hs[0], hs[1], a), mask).loss, (h,))


def test_padding_never_enters_the_cloud():
    hs, mask = make_batch(seed=4)
    assert int((mask == 0).sum()) > 0
    h = hs[-1].clone().requires_grad_(True)
    loss = CosRegLoss()
    out = loss((hs[0], hs[1], h), mask)
    out.loss.backward()
    moved = torch.where((mask == 0).unsqueeze(-1), hs[-1] * -50.0 + 3.0, hs[-1])
    assert float(loss((hs[0], hs[1], moved), mask).loss) == float(out.loss.detach())
    assert float(h.grad[mask == 0].abs().max()) == 0.0
    assert float(h.grad[mask == 1].abs().max()) > 0.0


def test_drives_mean_cosine_towards_zero():
    g = torch.Generator().manual_seed(5)
    start = torch.randn(64, 8, generator=g) + 3.0  # non-zero mean: cosines near 0.9
    x = torch.nn.Parameter(start.clone())
    loss = CosRegLoss(tuning=1.0)
    opt = torch.optim.Adam([x], lr=0.05)
    dummy = torch.zeros(1, 64, 8)
    for _ in range(300):
        opt.zero_grad()
        loss((dummy, x.unsqueeze(0))).loss.backward()
        opt.step()
    one = np.ones((1, 64), dtype=bool)
    _, before = brute_force(start.double().numpy()[None], one)
    _, after = brute_force(x.detach().double().numpy()[None], one)
    assert before > 0.8
    assert abs(after) < 0.05


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_under_autocast(dtype):
    # 4,000 unit vectors sharing a direction: ||sum||^2 ~ 1.6e7 overflows float16
    g = torch.Generator().manual_seed(6)
    h = (torch.randn(20, 200, 8, generator=g) * 50.0 + 400.0).to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        out = CosRegLoss()((h, h))
    assert torch.isfinite(out.loss)
    x = h.double().reshape(-1, 8)
    u = x / x.norm(dim=1, keepdim=True)
    m = x.shape[0]
    expected = (float(u.sum(0).pow(2).sum()) - m) / m**2
    assert float(out.loss) == pytest.approx(expected, rel=1e-5)


def test_bad_input():
    hs, mask = make_batch()
    with pytest.raises(ValueError, match="no token"):
        CosRegLoss()(hs, torch.zeros_like(mask))
    zero = hs[-1].clone()
    zero[0, 0] = 0.0
    with pytest.raises(ValueError, match="norm zero"):
        CosRegLoss()((hs[0], hs[1], zero), mask)
    nan = hs[-1].clone()
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        CosRegLoss()((hs[0], hs[1], nan), mask)
    with pytest.raises(ValueError, match="out of range"):
        CosRegLoss(layer=7)(hs, mask)
    with pytest.raises(ValueError, match="output_hidden_states=True"):
        CosRegLoss()(None, mask)
    with pytest.raises(TypeError, match="layer"):
        CosRegLoss(layer="last")
    with pytest.raises(ValueError, match="tuning"):
        CosRegLoss(tuning=float("nan"))


def _mask_warnings(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in record if "without attention_mask" in str(w.message)]


def test_warns_once_without_attention_mask():
    hs, mask = make_batch()
    loss = CosRegLoss()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = loss(hs)
        loss(hs)
    (warned,) = _mask_warnings(record)  # once, not on the second call
    assert warned.category is UserWarning
    assert "padding included" in str(warned.message) and "counted" in str(warned.message)
    # without a mask every position is a token: the brute force over an all-ones mask
    h = hs[-1].numpy()
    expected, _ = brute_force(h, np.ones(h.shape[:2], dtype=bool))
    assert float(first.loss) == pytest.approx(expected, rel=1e-10)


def test_no_mask_warning_when_mask_given():
    hs, mask = make_batch()
    loss = CosRegLoss()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loss(hs, mask)
        loss(hs, attention_mask=mask)
    assert _mask_warnings(record) == []
