"""PersistentEntropyLoss: value, gradient flow, grouping, padding, accumulation, DDP."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.stats
import torch
from _distributed import require_gloo, run_on_ranks
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import pdist, squareform

from isotropy.losses.entropy import PersistentEntropyLoss
from isotropy.measures.topology import prominent_features


def scipy_bars(X: np.ndarray) -> np.ndarray:
    """H0 deaths of distinct points via scipy's MST, longest first."""
    mst = minimum_spanning_tree(squareform(pdist(X)))
    assert mst.nnz == len(X) - 1
    return np.sort(mst.data)[::-1].copy()


def group_entropies(X: np.ndarray, y: np.ndarray, select: bool) -> list[float]:
    return [float(scipy.stats.entropy(b)) for b in group_bars(X, y, select)]


def group_bars(X: np.ndarray, y: np.ndarray, select: bool) -> list[np.ndarray]:
    out = []
    for g in np.unique(y):
        bars = scipy_bars(X[y == g])
        out.append(prominent_features(bars)[0].numpy() if select else bars)
    return out


def clusters(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """3 labelled clusters of 8 points in 8-D, stretched along the first axis."""
    g = torch.Generator().manual_seed(seed)
    centres = 4.0 * torch.randn(3, 8, generator=g, dtype=torch.float64)
    scale = torch.tensor([3.0] + [0.3] * 7, dtype=torch.float64)
    noise = torch.randn(24, 8, generator=g, dtype=torch.float64) * scale
    X = centres.repeat_interleave(8, 0) + noise
    return X, torch.arange(3).repeat_interleave(8)


# --------------------------------------------------------------------------- value


def test_value_without_selection_matches_scipy() -> None:
    X, y = clusters(1)
    reg = PersistentEntropyLoss(weight=0.7, in_cluster_weight=5.0, select_features=False)
    out = reg.forward_embeddings(X, y)
    hs = group_entropies(X.numpy(), y.numpy(), select=False)
    assert math.isclose(out.loss.item(), -0.7 * sum(hs), rel_tol=1e-10)
    assert math.isclose(out.logs["entropy_sum"], sum(hs), rel_tol=1e-10)
    assert out.logs["n_groups"] == 3.0 and out.logs["n_features"] == 21.0
    assert out.logs["n_noise"] == 0.0  # no selection: no noise, gamma adds nothing


def test_value_with_selection_and_in_cluster_term() -> None:
    X, y = clusters(2)
    out = PersistentEntropyLoss(weight=2.0, in_cluster_weight=0.5).forward_embeddings(X, y)
    expected = 0.0
    for g in range(3):
        feats, noise, _ = prominent_features(scipy_bars(X[y == g].numpy()))
        expected += -2.0 * scipy.stats.entropy(feats.numpy())
        if noise.numel():
            expected += 0.5 * float(noise.mean())
    assert math.isclose(out.loss.item(), expected, rel_tol=1e-10)


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("select", [False, True])
def test_entropy_rises_under_adam(select: bool) -> None:
    X0, y = clusters(0)
    X = X0.float().clone().requires_grad_(True)
    reg = PersistentEntropyLoss(select_features=select)
    opt = torch.optim.Adam([X], lr=0.01)
    for _ in range(200):
        out = reg.forward_embeddings(X, y)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    before = sum(group_entropies(X0.numpy(), y.numpy(), select))
    bars = group_bars(X.detach().double().numpy(), y.numpy(), select)
    after = sum(float(scipy.stats.entropy(b)) for b in bars)
    assert after > before + 0.05
    # the scored bars of each group end up (nearly) equal: H -> log(number of bars), the maximum
    assert after > sum(math.log(len(b)) for b in bars) - 1e-3
    if not select:
        assert after > 3 * math.log(7) - 1e-3


# --------------------------------------------------------------------------- grouping


def test_small_groups_are_skipped_and_counted() -> None:
    X = torch.randn(7, 4, dtype=torch.float64)
    out = PersistentEntropyLoss().forward_embeddings(X, torch.tensor([0, 0, 0, 0, 1, 1, 2]))
    assert out.logs["n_groups"] == 1.0 and out.logs["skipped_groups"] == 2.0
    assert math.isclose(
        out.loss.item(), -scipy.stats.entropy(prominent_features(scipy_bars(X[:4].numpy()))[0])
    )


def test_all_groups_skipped_gives_an_attached_zero() -> None:
    X = torch.randn(4, 3, requires_grad=True)
    out = PersistentEntropyLoss().forward_embeddings(X, torch.tensor([0, 0, 1, 1]))
    assert out.logs["skipped_groups"] == 2.0 and out.logs["n_groups"] == 0.0
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert torch.equal(X.grad, torch.zeros_like(X))
    assert out.logs["entropy_mean"] == 0.0


def test_coincident_group_is_degenerate_not_nan() -> None:
    X = torch.cat([torch.ones(3, 4), torch.randn(5, 4)]).requires_grad_(True)
    out = PersistentEntropyLoss().forward_embeddings(X, torch.tensor([0, 0, 0, 1, 1, 1, 1, 1]))
    assert out.logs["degenerate_groups"] == 1.0 and out.logs["n_groups"] == 1.0
    out.loss.backward()
    assert torch.isfinite(X.grad).all()
    assert torch.equal(X.grad[:3], torch.zeros(3, 4))


def test_float_labels_give_one_group() -> None:
    X = torch.randn(10, 5, dtype=torch.float64)
    stsb = torch.linspace(0.0, 5.0, 10)  # regression targets
    reg = PersistentEntropyLoss(select_features=False)
    a, b = reg.forward_embeddings(X, stsb), reg.forward_embeddings(X, None)
    assert a.logs["n_groups"] == 1.0 and a.loss.item() == b.loss.item()
    assert math.isclose(a.loss.item(), -scipy.stats.entropy(scipy_bars(X.numpy())))
    # (batch, 1) class labels are accepted too
    c = reg.forward_embeddings(X, torch.tensor([[0], [1]] * 5))
    assert c.logs["n_groups"] == 2.0


def test_whole_number_float_labels_warn_once() -> None:
    X = torch.randn(10, 5, dtype=torch.float64)
    reg = PersistentEntropyLoss(select_features=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # regression targets with fractions: no warning
        reg.forward_embeddings(X, torch.linspace(0.0, 5.0, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # only the first floating labels are looked at
        reg.forward_embeddings(X, torch.tensor([1.0, 2.0] * 5))
    classes = torch.tensor([0.0, 1.0] * 5)  # class labels stored as floats
    fresh = PersistentEntropyLoss(select_features=False)
    with pytest.warns(UserWarning, match=r"labels.long\(\)") as caught:
        out = fresh(X.float().unsqueeze(1).repeat(1, 3, 1), torch.ones(10, 3), classes)
    assert caught[0].filename == __file__  # names the user's line, not the library's
    assert out.logs["n_groups"] == 1.0  # still one group: the warning changes nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per instance
        fresh.forward_embeddings(X, classes)
    assert fresh.forward_embeddings(X, classes.long()).logs["n_groups"] == 2.0


# --------------------------------------------------------------------------- hidden states


def test_padding_does_not_change_mean_pooled_loss() -> None:
    g = torch.Generator().manual_seed(3)
    hs = tuple(torch.randn(6, 5, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0]] * 3 + [[1, 1, 1, 1, 1]] * 2 + [[1, 0, 0, 0, 0]])
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    reg = PersistentEntropyLoss(pooling="mean")
    ref = reg(hs, mask, y)
    noisy = tuple(h.clone() for h in hs)
    noisy[-1][mask == 0] = 1e3 * torch.randn(int((mask == 0).sum()), 4, generator=g)
    noisy[0].normal_(generator=g)  # other layers are not used
    assert reg(noisy, mask, y).loss.item() == ref.loss.item()
    # and the padded values do enter when the mask is left out: warned once, at the user's line
    with pytest.warns(UserWarning, match="without attention_mask") as caught:
        assert reg(noisy, None, y).loss.item() != ref.loss.item()
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg(noisy, None, y)  # once per instance
        PersistentEntropyLoss()(noisy, None, y)  # [CLS] pooling reads no padding: no warning


def test_cls_pooling_and_layer_choice() -> None:
    g = torch.Generator().manual_seed(4)
    hs = tuple(torch.randn(8, 4, 3, generator=g, dtype=torch.float64) for _ in range(3))
    reg = PersistentEntropyLoss(layer=1, select_features=False)
    out = reg(hs)
    assert math.isclose(out.loss.item(), -scipy.stats.entropy(scipy_bars(hs[1][:, 0].numpy())))
    changed = (hs[0], hs[1].clone(), hs[2] + 1.0)
    changed[1][:, 1:] = 0.0  # only token 0 ([CLS]) of layer 1 matters
    assert reg(changed).loss.item() == out.loss.item()
    # a bare (batch, seq, dim) tensor is one layer
    single = PersistentEntropyLoss(select_features=False)(hs[1])
    assert single.loss.item() == out.loss.item()


# --------------------------------------------------------------------------- accumulation


def test_accumulation_window_and_gradient_flow() -> None:
    g = torch.Generator().manual_seed(5)
    mbs = [torch.randn(4, 3, generator=g, dtype=torch.float64) for _ in range(4)]
    mbs = [m.requires_grad_(True) for m in mbs]
    ys = [torch.tensor([0, 1, 0, 1])] * 4
    reg = PersistentEntropyLoss(accumulation_steps=3, accumulation="window")
    outs = [reg.forward_embeddings(m, y) for m, y in zip(mbs, ys, strict=True)]
    assert [o.logs["n_points"] for o in outs] == [4.0, 8.0, 12.0, 12.0]

    # step 3 scores micro-batches 1..3 exactly as one cloud ...
    full = torch.cat(mbs[:3]).detach().requires_grad_(True)
    ref = PersistentEntropyLoss().forward_embeddings(full, torch.cat(ys[:3]))
    assert math.isclose(outs[2].loss.item(), ref.loss.item(), rel_tol=1e-12)
    # ... and only the current micro-batch receives gradient, the same as in the full cloud
    outs[2].loss.backward()
    ref.loss.backward()
    assert mbs[0].grad is None and mbs[1].grad is None
    assert torch.allclose(mbs[2].grad, full.grad[8:])
    # step 4 slides the window to micro-batches 2..4
    ref4 = PersistentEntropyLoss().forward_embeddings(torch.cat(mbs[1:]), torch.cat(ys[1:]))
    assert math.isclose(outs[3].loss.item(), ref4.loss.item(), rel_tol=1e-12)

    reg.eval()  # eval: no window
    assert reg.forward_embeddings(mbs[0], ys[0]).logs["n_points"] == 4.0
    reg.train()
    reg.reset()
    assert reg.forward_embeddings(mbs[0], ys[0]).logs["n_points"] == 4.0
    with pytest.raises(ValueError, match="labels were given"):
        reg.forward_embeddings(mbs[1], None)


def test_half_precision_embeddings() -> None:
    X, y = clusters(6)
    out = PersistentEntropyLoss().forward_embeddings(X.half().requires_grad_(True), y)
    assert out.loss.dtype == torch.float32 and math.isfinite(out.loss.item())


# --------------------------------------------------------------------------- bad input


def test_bad_input() -> None:
    reg = PersistentEntropyLoss()
    hs = (torch.randn(4, 3, 2), torch.randn(4, 3, 2))
    bad = (hs[0], hs[1].clone())
    bad[1][2, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        reg(bad)
    with pytest.raises(ValueError, match="labels must have shape"):
        reg(hs, None, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="NaN"):
        reg.forward_embeddings(torch.tensor([[0.0, 1.0], [float("inf"), 0.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        reg.forward_embeddings(torch.randn(5))
    with pytest.raises(ValueError, match="empty"):
        reg(())
    with pytest.raises(ValueError, match="pooling"):
        PersistentEntropyLoss(pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="accumulation_steps"):
        PersistentEntropyLoss(accumulation_steps=0)
    with pytest.raises(ValueError, match="weight"):
        PersistentEntropyLoss(weight=float("nan"))


# --------------------------------------------------------------------------- DDP


def _ddp_worker(rank: int, X: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    local = X[rank * 6 : (rank + 1) * 6].clone().requires_grad_(True)
    out = PersistentEntropyLoss().forward_embeddings(local, y[rank * 6 : (rank + 1) * 6])
    out.loss.backward()
    return out.loss.item(), local.grad.clone()


@pytest.mark.slow
def test_sync_dist_scores_the_global_batch(tmp_path) -> None:
    require_gloo()
    X, y = clusters(7)
    X, y = X[:12].clone(), torch.tensor([0, 1] * 6)
    results = run_on_ranks(_ddp_worker, X, y, world_size=2, out_dir=tmp_path, timeout=120)

    full = X.clone().requires_grad_(True)
    ref = PersistentEntropyLoss().forward_embeddings(full, y)
    ref.loss.backward()
    for rank, (loss, grad) in enumerate(results):
        assert math.isclose(loss, ref.loss.item(), rel_tol=1e-12)
        # each rank gets the gradient of the sum of both ranks' (identical) losses; DDP's
        # averaging of parameter gradients then gives the one-process gradient
        assert torch.allclose(grad, 2.0 * full.grad[rank * 6 : (rank + 1) * 6])


def test_the_entropy_loss_refuses_ignored_labels_rather_than_grouping_them():
    emb = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="-100 is Hugging Face's label of an ignored"):
        PersistentEntropyLoss().forward_embeddings(emb, torch.tensor([-100, -100, -100, 1, 1, 1]))
    out = PersistentEntropyLoss().forward_embeddings(emb, torch.tensor([0, 0, 0, 1, 1, 1]))
    assert out.logs["n_groups"] == 2.0
