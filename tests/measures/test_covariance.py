"""Streaming covariance statistics against ``np.cov`` / ``np.mean`` of all rows."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isotropy.measures.covariance import CovarianceStats


def rows(n: int, d: int, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + offset


def split(n: int, n_chunks: int, seed: int) -> list[int]:
    """Random cut points (empty and one-row chunks included)."""
    cuts = np.sort(np.random.default_rng(seed).integers(0, n + 1, size=n_chunks - 1))
    return [0, *cuts.tolist(), n]


def assert_matches(stats: CovarianceStats, x: np.ndarray, rtol: float = 1e-12) -> None:
    assert stats.count == x.shape[0]
    scale = np.abs(np.cov(x, rowvar=False)).max()
    np.testing.assert_allclose(stats.mean.numpy(), x.mean(0), rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(
        stats.covariance().numpy(), np.cov(x, rowvar=False), rtol=rtol, atol=rtol * scale
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 80), st.integers(1, 9), st.integers(1, 12))
def test_merge_of_random_chunks_equals_np_cov(seed, n, d, n_chunks):
    x = rows(n, d, seed)
    cuts = split(n, n_chunks, seed + 1)
    parts = [CovarianceStats.from_batch(torch.tensor(x[a:b])) for a, b in pairwise(cuts)]
    # sequential update, left fold and a balanced tree of merges all give the same statistics
    seq = CovarianceStats.empty(d)
    for a, b in pairwise(cuts):
        assert seq.update(torch.tensor(x[a:b])) is seq
    assert_matches(seq, x)
    while len(parts) > 1:
        parts = [
            parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    assert_matches(parts[0], x)


def test_large_offset_is_numerically_stable():
    x = rows(3000, 4, seed=1, offset=1e8)  # a raw sum of squares would lose every digit
    s = CovarianceStats.empty(4)
    for chunk in np.array_split(x, 17):
        s.update(chunk)
    assert_matches(s, x, rtol=1e-8)


def test_ddof_zero():
    x = rows(50, 3)
    s = CovarianceStats.from_batch(x)
    np.testing.assert_allclose(s.covariance(ddof=0).numpy(), np.cov(x, rowvar=False, bias=True))


def test_masked_rows_are_ignored():
    rng = np.random.default_rng(3)
    h = rng.standard_normal((4, 9, 5))  # (batch, seq, dim)
    mask = rng.random((4, 9)) < 0.6
    mask[0, :2] = True
    s = CovarianceStats.from_batch(torch.tensor(h), torch.tensor(mask))
    assert_matches(s, h[mask])
    h2 = h.copy()
    h2[~mask] = rng.standard_normal((int((~mask).sum()), 5)) * 1e6
    h2[np.nonzero(~mask)[0][0], np.nonzero(~mask)[1][0], 0] = np.nan  # NaN padding is fine too
    s2 = CovarianceStats.from_batch(torch.tensor(h2), torch.tensor(mask.astype(np.int64)))
    assert s2.count == s.count
    assert torch.equal(s2.mean, s.mean)
    assert torch.equal(s2.comoment, s.comoment)


def test_mask_must_match_leading_shape():
    with pytest.raises(ValueError, match=r"mask shape \(4, 8\) must equal the leading shape"):
        CovarianceStats.from_batch(torch.randn(4, 9, 5), torch.ones(4, 8))


def test_all_masked_gives_empty_statistics():
    s = CovarianceStats.from_batch(torch.randn(2, 3, 4), torch.zeros(2, 3))
    assert s.count == 0 and s.dim == 4
    assert torch.equal(s.comoment, torch.zeros(4, 4, dtype=torch.float64))


def test_merge_with_empty():
    x = rows(20, 3)
    s = CovarianceStats.from_batch(x)
    e = CovarianceStats.empty(3)
    assert_matches(s.merge(e), x)
    assert_matches(e.merge(s), x)
    both = e.merge(CovarianceStats.empty(3))
    assert both.count == 0
    merged = e.merge(s)
    merged.comoment.add_(1.0)  # a merge never aliases its inputs
    assert_matches(s, x)


def test_too_few_rows():
    with pytest.raises(ValueError, match=r"needs more than 1 row\(s\) \(ddof=1\), have 1"):
        CovarianceStats.from_batch(torch.ones(1, 3)).covariance()
    with pytest.raises(ValueError, match="have 0"):
        CovarianceStats.empty(3).covariance()
    with pytest.raises(ValueError, match="have 0"):
        CovarianceStats.empty(3).covariance(ddof=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_input_accumulates_in_float32(dtype):
    x = torch.tensor(300.0 * rows(400, 6, seed=5) / 3).to(dtype)
    assert float((x.float().T @ x.float()).abs().max()) > torch.finfo(torch.float16).max
    s = CovarianceStats.empty(6)
    for chunk in torch.split(x, 64):
        s.update(chunk)
    exact = x.double().numpy()
    assert s.mean.dtype == torch.float64 and s.comoment.dtype == torch.float64
    assert_matches(s, exact, rtol=2e-6)


def test_gradients_are_not_tracked():
    x = torch.randn(10, 3, requires_grad=True)
    s = CovarianceStats.from_batch(x)
    assert not s.comoment.requires_grad and not s.mean.requires_grad


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_rows_raise(bad):
    x = torch.randn(6, 8, 3)
    x[2, 5, 1] = bad
    with pytest.raises(ValueError, match=r"x contains 1 NaN or infinite value\(s\)"):
        CovarianceStats.from_batch(x)
    with pytest.raises(ValueError, match=r"x contains 1 NaN or infinite value\(s\)"):
        CovarianceStats.empty(3).update(x.double())
    mask = torch.ones(6, 8, dtype=torch.bool)
    mask[2, 5] = False
    assert CovarianceStats.from_batch(x, mask).count == 47


def test_float32_values_whose_squares_overflow_float32():
    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(0)) * 1e30
    ref = np.cov(x.double().numpy(), rowvar=False)
    got = CovarianceStats.from_batch(x).covariance().numpy()
    assert np.allclose(got, ref, rtol=1e-5, atol=0)


def test_float64_co_moment_overflow_raises():
    with pytest.raises(ValueError, match="too large for float64 statistics"):
        CovarianceStats.from_batch(torch.randn(5, 2, dtype=torch.float64) * 1e200)


def test_bad_shapes():
    with pytest.raises(ValueError, match="at least 2 axes"):
        CovarianceStats.from_batch(torch.randn(5))
    with pytest.raises(ValueError, match="dim must be >= 1"):
        CovarianceStats.empty(0)
    with pytest.raises(ValueError, match="cannot merge dimension 3 with 4"):
        CovarianceStats.empty(3).merge(CovarianceStats.from_batch(torch.randn(5, 4)))


def test_all_reduce_without_distributed_is_a_copy():
    x = rows(12, 3)
    s = CovarianceStats.from_batch(x)
    r = s.all_reduce()
    r.comoment.add_(1.0)
    assert_matches(s, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_rows_give_exactly_zero_comoment(dtype: torch.dtype) -> None:
    x = torch.full((7, 5), 0.1, dtype=dtype)
    s = CovarianceStats.from_batch(x).merge(CovarianceStats.from_batch(x[:3]))
    assert torch.equal(s.comoment, torch.zeros(5, 5, dtype=torch.float64))
    assert torch.equal(s.mean, x[0].double())
    from isotropy.measures.isoscore import isoscore_from_covariance

    with pytest.raises(ValueError, match=r"zero variance \(all points identical\)"):
        isoscore_from_covariance(s.covariance())


def test_constant_column_is_exact() -> None:
    x = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[:, 1] = 0.1
    c = CovarianceStats.from_batch(x).covariance()
    assert torch.equal(c[1], torch.zeros(3, dtype=torch.float64))
    assert np.allclose(c.numpy(), np.cov(x.numpy(), rowvar=False), rtol=1e-12, atol=1e-15)


def test_statistics_whose_parts_disagree_are_refused():
    # a hand-built CovarianceStats with a (2, 2) co-moment and a mean of 3 was scored as d = 3
    with pytest.raises(ValueError, match=r"mean of shape \(d,\) and a co-moment of shape "
                                          r"\(d, d\), got \(3,\) and \(2, 2\)"):
        CovarianceStats(5, torch.zeros(3, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="dim must be an integer, got 2.5"):
        CovarianceStats.empty(2.5)
    with pytest.raises(TypeError, match="can merge CovarianceStats only, got NoneType"):
        CovarianceStats.empty(3).merge(None)
