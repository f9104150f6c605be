"""One dtype rule for every public measure (docs/measures.md, "Conventions"): a measure of a
cloud returns float64 for float64 input and float32 for any other float input (float32,
float16, bfloat16), whatever it computes in; a measure of statistics (``CovarianceStats``,
``OutlierStats``, ``IsoScoreMetric``'s state), which are float64, returns float64."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import isotropy as iso

EYE = torch.eye(8, dtype=torch.float64)


def _cloud(dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(60, 8, generator=g, dtype=torch.float64)
    return (base + torch.linspace(0.0, 2.0, 8, dtype=torch.float64)).to(dtype)


# every public measure of a cloud, called with its documented options
CLOUD_MEASURES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "isoscore": iso.isoscore,
    "isoscore_star": lambda x: iso.isoscore_star(x, zeta=0.2, shrinkage=EYE),
    "participation_ratio": iso.participation_ratio,
    "avg_cosine_similarity": iso.avg_cosine_similarity,
    "cosine_regularization_term": iso.cosine_regularization_term,
    "partition_score": iso.partition_score,
    "anisotropy_spectrum": lambda x: iso.anisotropy_spectrum(x, k=3),
    "twonn": iso.twonn,
    "h0_barcode": iso.h0_barcode,
    "persistent_entropy": lambda x: iso.persistent_entropy(iso.h0_barcode(x)),
    "effective_rank": iso.effective_rank,
    "rankme": iso.rankme,
    "alignment": lambda x: iso.alignment(x, x.flip(0)),
    "alignment_sum": lambda x: iso.alignment(x, x.flip(0), reduction="sum")[0],
    "uniformity": iso.uniformity,
    "isoscore_without": lambda x: iso.isoscore_without(x, k=1),
    "isoscore_without_standardise": lambda x: iso.isoscore_without(x, k=1, how="standardise"),
    "cosine_contributions": iso.cosine_contributions,
    "rogue_dimensions_shares": lambda x: iso.rogue_dimensions(x, k=2).scores,
    "variance_outliers_scores": lambda x: iso.variance_outliers(x, factor=1.0).scores,
    "top_variance_dimensions_scores": lambda x: iso.top_variance_dimensions(x, k=2).scores,
    "activation_outliers_scores": lambda x: iso.activation_outliers(x, sigmas=1.0).scores,
}

# every public measure of statistics
STATS_MEASURES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "effective_rank_from_stats":
        lambda x: iso.effective_rank_from_stats(iso.CovarianceStats.from_batch(x)),
    "rankme_from_stats": lambda x: iso.rankme_from_stats(iso.CovarianceStats.from_batch(x)),
    "isoscore_without(stats)":
        lambda x: iso.isoscore_without(iso.CovarianceStats.from_batch(x), k=1),
    "rogue_dimensions(OutlierStats)":
        lambda x: iso.rogue_dimensions(iso.OutlierStats.empty(x.shape[1]).update(x), k=2).scores,
    "variance_outliers_from_stats":
        lambda x: iso.variance_outliers_from_stats(iso.CovarianceStats.from_batch(x),
                                                   factor=1.0).scores,
    "activation_outliers_from_stats":
        lambda x: iso.activation_outliers_from_stats(iso.OutlierStats.empty(x.shape[1]).update(x),
                                                     sigmas=1.0).scores,
    "IsoScoreMetric.compute": lambda x: _metric(x),
}


def _metric(x: torch.Tensor) -> torch.Tensor:
    m = iso.IsoScoreMetric(zeta=0.0)
    m.update(x)
    return m.compute()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16,
                                   torch.float64])
@pytest.mark.parametrize("name", list(CLOUD_MEASURES))
def test_a_cloud_measure_returns_float64_for_float64_input_else_float32(name, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 rounding notes are not the point here
        value = CLOUD_MEASURES[name](_cloud(dtype))
    expected = torch.float64 if dtype == torch.float64 else torch.float32
    assert value.dtype == expected, (name, dtype, value.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(STATS_MEASURES))
def test_a_measure_of_statistics_returns_float64(name, dtype):
    value = STATS_MEASURES[name](_cloud(dtype))
    assert value.dtype == torch.float64, (name, dtype, value.dtype)


def test_the_cast_keeps_the_value_computed_in_float64():
    """float32 input: the result is the float64 computation rounded once, not a float32 one."""
    x = _cloud(torch.float32)
    for name in ("effective_rank", "rankme", "uniformity", "isoscore_without"):
        low = CLOUD_MEASURES[name](x)
        high = CLOUD_MEASURES[name](x.double())  # the same rows, exactly, in float64
        assert float(low) == float(high.float()), name


def test_the_losses_keep_their_gradient_through_the_cast():
    x = _cloud(torch.float32).requires_grad_(True)
    (iso.uniformity(x) + iso.alignment(x, x.flip(0))).backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert float(x.grad.abs().sum()) > 0
