"""Every public measure is either differentiable (its gradient matches central finite
differences of the measure itself) or warns, once and at the caller's line, when given a
tensor that requires grad while autograd records: never a silent constant. The measures page's
(docs/measures.md) table says which is which."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import isotropy
from isotropy import CovarianceStats, IsoScoreMetric, OutlierStats

pytestmark = pytest.mark.usefixtures("one_thread")


def _cloud() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    scales = torch.exp(-torch.arange(5, dtype=torch.float64) / 2)
    return torch.randn(12, 5, generator=g, dtype=torch.float64) * scales + 0.3


def _bars(x: torch.Tensor) -> torch.Tensor:
    return isotropy.h0_barcode(x)


# each maps a float64 cloud (12 x 5) to a tensor result, through the measure named
DIFFERENTIABLE = {
    "isoscore": lambda x: isotropy.isoscore(x),
    "isoscore_star": lambda x: isotropy.isoscore_star(
        x, zeta=0.3, shrinkage=torch.eye(5, dtype=x.dtype)),
    "participation_ratio": lambda x: isotropy.participation_ratio(x),
    "isoscore_from_covariance": lambda x: isotropy.isoscore_from_covariance(torch.cov(x.T)),
    "participation_ratio_from_covariance":
        lambda x: isotropy.participation_ratio_from_covariance(torch.cov(x.T)),
    "avg_cosine_similarity": lambda x: isotropy.avg_cosine_similarity(x),
    "cosine_regularization_term": lambda x: isotropy.cosine_regularization_term(x),
    "anisotropy_spectrum": lambda x: isotropy.anisotropy_spectrum(x, k=2),
    "h0_barcode": lambda x: _bars(x).sum(),
    "persistent_entropy": lambda x: isotropy.persistent_entropy(_bars(x)),
    "prominent_features": lambda x: isotropy.prominent_features(_bars(x))[0].sum(),
    "alignment": lambda x: isotropy.alignment(x[:6], x[6:]),
    "uniformity": lambda x: isotropy.uniformity(x),
}

# each maps a cloud to the measure's result; the statistics' measures take statistics built
# from the cloud, where the warning is given
NOT_DIFFERENTIABLE = {
    "partition_score": lambda x: isotropy.partition_score(x),
    "twonn": lambda x: isotropy.twonn(x),
    "effective_rank": lambda x: isotropy.effective_rank(x),
    "rankme": lambda x: isotropy.rankme(x),
    "effective_rank_from_stats":
        lambda x: isotropy.effective_rank_from_stats(CovarianceStats.from_batch(x)),
    "rankme_from_stats": lambda x: isotropy.rankme_from_stats(CovarianceStats.from_batch(x)),
    "variance_outliers": lambda x: isotropy.variance_outliers(x),
    "variance_outliers_from_stats":
        lambda x: isotropy.variance_outliers_from_stats(CovarianceStats.from_batch(x)),
    "top_variance_dimensions": lambda x: isotropy.top_variance_dimensions(x, k=2),
    "activation_outliers": lambda x: isotropy.activation_outliers(x),
    "activation_outliers_from_stats":
        lambda x: isotropy.activation_outliers_from_stats(OutlierStats.empty(5).update(x)),
    "cosine_contributions": lambda x: isotropy.cosine_contributions(x),
    "cosine_contributions_from_stats":
        lambda x: isotropy.cosine_contributions_from_stats(OutlierStats.empty(5).update(x)),
    "massive_activations_from_stats":
        lambda x: isotropy.massive_activations_from_stats(OutlierStats.empty(5).update(x)),
    "rogue_dimensions": lambda x: isotropy.rogue_dimensions(x + 5.0, k=2),
    "massive_activations": lambda x: isotropy.massive_activations(x),
    "isoscore_without": lambda x: isotropy.isoscore_without(x, k=1),
    "layernorm_outliers": lambda x: isotropy.layernorm_outliers(x),
    "CovarianceStats": lambda x: CovarianceStats.from_batch(x),
    "OutlierStats": lambda x: OutlierStats.empty(5).update(x),
    "isoscore_star_update": lambda x: isotropy.isoscore_star_update(x),
    "isoscore_star_compute":
        lambda x: isotropy.isoscore_star_compute(isotropy.isoscore_star_update(x)),
    "IsoScoreMetric": lambda x: IsoScoreMetric()(x),
}


def _measures() -> set[str]:
    return {name for name in isotropy.__all__
            if isotropy._LAZY.get(name, "").startswith("isotropy.measures")
            and name != "Outliers"}  # the outlier measures' result, no measure


def test_every_public_measure_is_classified():
    assert not DIFFERENTIABLE.keys() & NOT_DIFFERENTIABLE.keys()
    assert DIFFERENTIABLE.keys() | NOT_DIFFERENTIABLE.keys() == _measures()


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_a_differentiable_measure_has_the_gradient_of_finite_differences(name):
    f = DIFFERENTIABLE[name]
    x = _cloud().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of ours, nor any other
        value = f(x)
    assert value.requires_grad
    (grad,) = torch.autograd.grad(value.sum(), x)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    eps = 1e-6
    with torch.no_grad():
        numeric = (f(x + eps * v).sum() - f(x - eps * v).sum()) / (2 * eps)
    assert float(grad.abs().sum()) > 0
    assert float((grad * v).sum()) == pytest.approx(float(numeric), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("name", sorted(NOT_DIFFERENTIABLE))
def test_a_measure_without_gradient_warns_once_at_the_callers_line(name):
    f = NOT_DIFFERENTIABLE[name]
    x = _cloud().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(x)
    ours = [w for w in caught if "is not differentiable" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert Path(ours[0].filename) == Path(__file__)  # the line that called the measure
    assert "x.detach()" in str(ours[0].message)
    # silent for a detached tensor and under no_grad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x.detach())
        with torch.no_grad():
            f(x)


def test_the_measures_table_says_which_measures_are_differentiable():
    page = (Path(__file__).parents[2] / "docs" / "measures.md").read_text(encoding="utf-8")
    section = page.split("## Measurements", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`(\w+)", cells[0]):
                table[name] = cells[-1]
    assert {"uniformity", "alignment", "twonn", "IsoScoreMetric"} <= table.keys()
    for name, says in table.items():
        assert name in DIFFERENTIABLE or name in NOT_DIFFERENTIABLE, name
        assert says.startswith("yes" if name in DIFFERENTIABLE else "no"), (name, says)
