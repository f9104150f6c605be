"""The mini-batch stability experiment (I-STAR Figure 2) on small dimensions."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from isotropy import isoscore_from_covariance
from isotropy.paper.stability import (
    figure2_variances,
    format_stability_table,
    run_stability,
    write_stability,
)


@pytest.fixture(scope="module")
def small_run():
    return run_stability(dim=64, sizes=[16, 32, 4000], zetas=[0.0, 0.4, 0.8],
                         shrinkage_points=20_000, repeats=3, seed=0)


def test_variances_and_population_value() -> None:
    v = figure2_variances(768)
    assert v[:5].tolist() == [10.0, 6.0, 4.0, 4.0, 1.0] and v.shape == (768,)
    # closed form: tr = 24 + 764, ||.||_F^2 = 168 + 764
    expected = (788.0**2 / 932.0 - 1.0) / 767.0
    pop = float(isoscore_from_covariance(torch.diag(v)))
    assert pop == pytest.approx(expected, rel=1e-12)
    assert round(pop, 3) == 0.867
    with pytest.raises(ValueError, match=">= 4"):
        figure2_variances(3)


def test_values_bounded_and_shaped(small_run) -> None:
    r = small_run
    assert r.sizes == [16, 32, 4000] and r.zetas == [0.0, 0.4, 0.8]
    for vals in r.values.values():
        assert len(vals) == 3
        assert all(0.0 <= v <= 1.0 for v in vals)
    assert r.population == pytest.approx(float(isoscore_from_covariance(
        torch.diag(figure2_variances(64)))))


def test_shrinkage_is_closer_at_small_n(small_run) -> None:
    r = small_run
    pop = r.population
    for n in (16, 32):
        err0 = abs(r.mean(n, 0.0) - pop)
        err8 = abs(r.mean(n, 0.8) - pop)
        # the paper's claim: IsoScore (zeta=0) underestimates badly when n is not >> d
        assert r.mean(n, 0.0) < pop - 0.2
        assert err8 < err0 - 0.15
        assert r.mean(n, 0.0) < r.mean(n, 0.4) < r.mean(n, 0.8)
    # with n >> d plain IsoScore is close to the population value
    assert abs(r.mean(4000, 0.0) - pop) < 0.03


def test_deterministic_and_shrinkage_sample_independent_of_subsamples() -> None:
    kw = dict(dim=8, sizes=[5, 10], zetas=[0.0, 0.5], repeats=2, seed=3)
    a = run_stability(shrinkage_points=500, **kw)
    b = run_stability(shrinkage_points=500, **kw)
    assert a.values == b.values
    c = run_stability(shrinkage_points=900, **kw)
    assert c.values[(5, 0.0)] == a.values[(5, 0.0)]  # zeta = 0 ignores Sigma_S
    assert c.values[(5, 0.5)] != a.values[(5, 0.5)]


def test_writes_files(tmp_path: Path, small_run) -> None:
    paths = write_stability(small_run, tmp_path / "out")
    assert {p.name for p in paths.values()} == {"stability.csv", "stability.json",
                                                "stability.png"}
    with open(paths["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9
    assert set(rows[0]) >= {"n_points", "zeta", "mean", "std", "population"}
    assert all(0.0 <= float(r["mean"]) <= 1.0 for r in rows)
    doc = json.loads(paths["json"].read_text())
    assert doc["config"]["dim"] == 64 and len(doc["values"]) == 9
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
    table = format_stability_table(small_run)
    assert "zeta=0.8" in table and "population" in table


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": [1]}, "sub-sample size"),
        ({"sizes": []}, "sizes is empty"),
        ({"zetas": [1.5]}, r"\[0, 1\]"),
        ({"repeats": 0}, "repeats"),
        ({"repeats": 1}, "repeats must be >= 2"),
        ({"shrinkage_points": 1}, "shrinkage_points"),
        ({"dim": 2}, ">= 4"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    base = dict(dim=8, sizes=[4], zetas=[0.0], shrinkage_points=100, repeats=2)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        run_stability(**base)


def test_a_dimension_beyond_this_machines_memory_is_refused_before_any_draw(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine of 1 GiB: d = 20,000 needs 8 · (4 · 20,000² + 2 · (8,192 + 4) · 20,000) =
    15.42e9 bytes ≈ 14.4 GiB, and is refused in one line; a small run still goes."""
    import isotropy.paper.stability as stability

    monkeypatch.setattr(stability, "_physical_memory", lambda: 2**30)
    monkeypatch.setattr(stability.torch, "randn", None)  # any draw would fail loudly
    with pytest.raises(ValueError, match=r"^dim 20000 with sub-samples of up to 4 rows needs "
                                         r"about 14\.4 GiB .* this machine has 1\.0 GiB$"):
        run_stability(dim=20000, sizes=[4], zetas=[0.0], shrinkage_points=100, repeats=2)
    monkeypatch.undo()
    monkeypatch.setattr(stability, "_physical_memory", lambda: 2**30)
    assert run_stability(dim=8, sizes=[4], zetas=[0.0], shrinkage_points=100, repeats=2,
                         progress=False).dim == 8
