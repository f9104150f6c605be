"""One call style for every public measure (docs/measures.md, "Conventions"): the cloud is the
one positional argument and every option a keyword (old positional forms warn and still work);
every measure of a cloud takes ``attention_mask=`` and then measures the real tokens' rows of
``(batch, seq, dim)`` hidden states, ``h[attention_mask.bool()]``."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable

import pytest
import torch

import isotropy as iso

EYE = torch.eye(8, dtype=torch.float64)

# every public measure of a cloud, with options that make its value depend on the rows
CLOUD_MEASURES: dict[str, Callable[..., object]] = {
    "isoscore": iso.isoscore,
    "isoscore_star": lambda x, **kw: iso.isoscore_star(x, zeta=0.2, shrinkage=EYE, **kw),
    "participation_ratio": iso.participation_ratio,
    "avg_cosine_similarity": iso.avg_cosine_similarity,
    "cosine_regularization_term": iso.cosine_regularization_term,
    "partition_score": iso.partition_score,
    "anisotropy_spectrum": lambda x, **kw: iso.anisotropy_spectrum(x, k=3, **kw),
    "twonn": iso.twonn,
    "h0_barcode": iso.h0_barcode,
    "effective_rank": iso.effective_rank,
    "rankme": iso.rankme,
    "uniformity": iso.uniformity,
    "isoscore_without": lambda x, **kw: iso.isoscore_without(x, k=1, **kw),
    "cosine_contributions": iso.cosine_contributions,
    "rogue_dimensions": lambda x, **kw: iso.rogue_dimensions(x, k=2, **kw),
    "variance_outliers": lambda x, **kw: iso.variance_outliers(x, factor=1.5, **kw),
    "activation_outliers": lambda x, **kw: iso.activation_outliers(x, sigmas=1.0, **kw),
    "massive_activations": lambda x, **kw: iso.massive_activations(
        x, min_magnitude=2.0, ratio=2.0, **kw),
    "top_variance_dimensions": lambda x, **kw: iso.top_variance_dimensions(x, k=3, **kw),
}

# the public measures whose first argument is something else than one cloud (or a cloud
# among other inputs), with the arguments they take by position
OTHER_MEASURES = {
    "alignment": 2,  # the two clouds of positive pairs
    "persistent_entropy": 1, "prominent_features": 1,  # bars
    "effective_rank_from_stats": 1, "rankme_from_stats": 1, "variance_outliers_from_stats": 1,
    "activation_outliers_from_stats": 1, "cosine_contributions_from_stats": 1,
    "massive_activations_from_stats": 1,
    "isoscore_from_covariance": 1, "participation_ratio_from_covariance": 1,
    "layernorm_outliers": 1,  # the stacked LayerNorm weights
}


def _hidden_states() -> tuple[torch.Tensor, torch.Tensor]:
    """(3, 7, 8) float64 hidden states with 4, 7 and 5 real tokens; the padding rows are large
    and of another direction, so that measuring them would change every value."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 7, 8, generator=g, dtype=torch.float64)
    h[..., 1] *= 4.0  # one dimension of large variance
    h = h + torch.linspace(0.0, 3.0, 8, dtype=torch.float64)  # and of large mean magnitude
    h[0, 0, 5] = 40.0  # one massive activation among the real tokens
    mask = torch.zeros(3, 7, dtype=torch.long)
    for row, n in enumerate((4, 7, 5)):
        mask[row, :n] = 1
    pad = ~mask.bool()
    h[pad] = 50.0 * torch.randn(int(pad.sum()), 8, generator=g, dtype=torch.float64) - 30.0
    return h, mask


def _same(a: object, b: object) -> bool:
    if isinstance(a, iso.Outliers):  # the same dimensions with the same scores
        return isinstance(b, iso.Outliers) and a == b
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)


@pytest.mark.parametrize("name", list(CLOUD_MEASURES))
def test_a_measure_of_hidden_states_under_a_mask_is_that_of_the_real_tokens_rows(name):
    h, mask = _hidden_states()
    measure = CLOUD_MEASURES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        masked = measure(h, attention_mask=mask)
        rows = measure(h[mask.bool()])  # the 16 real tokens, row-major
        boolean = measure(h, attention_mask=mask.bool())
        padded = measure(h.reshape(-1, 8))
    assert _same(masked, rows), name
    assert _same(boolean, rows), name
    assert not _same(padded, rows), f"{name}: the padding rows should have changed the value"


def test_the_masked_rows_keep_the_gradient():
    h, mask = _hidden_states()
    h.requires_grad_(True)
    iso.isoscore(h, attention_mask=mask).backward()
    assert h.grad is not None
    assert torch.count_nonzero(h.grad[~mask.bool()]) == 0  # padding takes no part
    assert torch.count_nonzero(h.grad[mask.bool()]) > 0


def test_a_mask_of_another_shape_or_additive_or_on_statistics_is_refused():
    h, mask = _hidden_states()
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of X without its "
                                         r"last dimension \(batch, seq\) = \(3, 7\), got \(3, 6\)"):
        iso.isoscore(h, attention_mask=mask[:, :6])
    with pytest.raises(ValueError, match="additive mask"):
        iso.isoscore(h, attention_mask=(1.0 - mask.double()) * -1e4)
    with pytest.raises(TypeError, match="attention_mask applies to hidden states"):
        iso.isoscore_without(iso.CovarianceStats.from_batch(h[0]), k=1, attention_mask=mask)
    # a 2-D cloud takes a mask of one entry per row
    x = h[mask.bool()]
    keep = torch.arange(x.shape[0]) % 2
    assert torch.equal(iso.isoscore(x, attention_mask=keep), iso.isoscore(x[keep.bool()]))


def _public_measures() -> dict[str, Callable[..., object]]:
    names = [*CLOUD_MEASURES, *OTHER_MEASURES]
    return {name: getattr(iso, name) for name in names}


def test_every_public_measure_takes_its_options_by_keyword_only():
    for name, fn in _public_measures().items():
        params = list(inspect.signature(fn).parameters.values())
        n_positional = OTHER_MEASURES.get(name, 1)
        kinds = [p.kind for p in params]
        assert all(k == inspect.Parameter.POSITIONAL_OR_KEYWORD
                   for k in kinds[:n_positional]), name
        assert all(k == inspect.Parameter.KEYWORD_ONLY for k in kinds[n_positional:]), (
            name, [p.name for p in params[n_positional:] if p.kind != p.KEYWORD_ONLY])
        if name in CLOUD_MEASURES:
            assert "attention_mask" in inspect.signature(fn).parameters, name


def test_every_measure_public_from_isotropy_is_in_one_of_the_lists():
    from isotropy import _LAZY

    measures = {name for name, module in _LAZY.items()
                if module.startswith("isotropy.measures.") and inspect.isfunction(
                    getattr(iso, name)) and not name.startswith("isoscore_star_")}
    assert measures == set(_public_measures())


X = torch.randn(40, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64) \
    + torch.linspace(0.0, 4.0, 6, dtype=torch.float64)
S = torch.cov(X.T) + torch.eye(6, dtype=torch.float64)

# the options that were positional, and the old call forms beside the keyword forms
OLD_FORMS = {
    "isoscore_star": (lambda: iso.isoscore_star(X, 0.3, S),
                      lambda: iso.isoscore_star(X, zeta=0.3, shrinkage=S)),
    "isoscore_star (zeta)": (lambda: iso.isoscore_star(X, 0.3, shrinkage=S),
                             lambda: iso.isoscore_star(X, zeta=0.3, shrinkage=S)),
    "rogue_dimensions": (lambda: iso.rogue_dimensions(X, 2),
                         lambda: iso.rogue_dimensions(X, k=2)),
    "anisotropy_spectrum": (lambda: iso.anisotropy_spectrum(X, 3, center=True),
                            lambda: iso.anisotropy_spectrum(X, k=3, center=True)),
    "top_variance_dimensions": (lambda: iso.top_variance_dimensions(X, 2),
                                lambda: iso.top_variance_dimensions(X, k=2)),
    "isoscore_without": (lambda: iso.isoscore_without(X, 1, how="standardise"),
                         lambda: iso.isoscore_without(X, k=1, how="standardise")),
}


@pytest.mark.parametrize("name", list(OLD_FORMS))
def test_an_option_given_by_position_still_works_and_warns(name):
    old, new = OLD_FORMS[name]
    with pytest.warns(FutureWarning, match=r"pass the option by keyword, (k|zeta)="):
        value = old()
    assert _same(value, new())


def test_too_many_positions_or_an_option_given_twice_is_a_type_error():
    with pytest.raises(TypeError, match=r"takes 1 positional argument \(the cloud\) but 3"):
        iso.rogue_dimensions(X, 2, 3)
    with pytest.raises(TypeError, match="got multiple values for 'k'"):
        iso.rogue_dimensions(X, 2, k=2)


def test_every_cloud_is_named_x_and_the_old_name_still_works_with_a_warning():
    for name in CLOUD_MEASURES:
        assert next(iter(inspect.signature(getattr(iso, name)).parameters)) == "X", name
    with pytest.warns(FutureWarning, match=r"isoscore_without\(cloud=...\): the cloud is X now"):
        old = iso.isoscore_without(cloud=X, k=1)
    assert torch.equal(old, iso.isoscore_without(X, k=1))
    with pytest.warns(FutureWarning, match="the cloud is X now"):
        assert iso.top_variance_dimensions(cloud=X, k=2) == iso.top_variance_dimensions(X, k=2)
    with pytest.raises(TypeError, match=r"got the cloud twice \(X and cloud\)"):
        iso.isoscore_without(X, cloud=X, k=1)
