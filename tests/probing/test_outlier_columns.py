"""The outlier columns of a row: streamed over batches (``TokenCloudStats``) equal to the whole
cloud's, massive activations counted and ordered, and undefined values ``None`` with a
reason."""

from __future__ import annotations

import pytest
import torch

from isotropy.measures.cloud import TokenCloudStats
from isotropy.probing.outlier_columns import (
    OUTLIER_KEYS,
    outlier_columns,
    outlier_columns_of_rows,
)


def _cloud() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 16, generator=g) * 0.1 + 0.05
    x[:, 4] += 3.0  # a large-mean dimension: the rogue one
    x[:, 9] *= 20.0  # a high-variance one
    x[[3, 50, 120], 2] = 500.0  # massive: > 100 and > 1000 x the token's median |x|
    x[7, 11] = -800.0
    return x


def test_streamed_columns_equal_the_whole_clouds_with_massive_activations():
    x = _cloud()
    acc = TokenCloudStats(16)
    for part in x.split(33):
        acc.update(part)
    errors: list[str] = []
    streamed = outlier_columns("t", acc.stats, acc.outliers, None, errors)
    whole = outlier_columns_of_rows("t", x, None, errors)
    assert not errors
    assert set(streamed) == set(OUTLIER_KEYS)
    for key in OUTLIER_KEYS:
        if isinstance(whole[key], float):
            assert streamed[key] == pytest.approx(whole[key], rel=1e-6), key
        else:
            assert streamed[key] == whole[key], key
    assert whole["massive_activations"] == 4
    assert whole["massive_dims"] == "2 11"  # three in dimension 2, one in 11
    assert whole["rogue_dims"].split()[0] == "4"
    assert whole["outlier_dims_variance"].split()[:2] == ["2", "11"]  # the massive ones


def test_undefined_values_are_none_with_the_reason():
    errors: list[str] = []
    row = outlier_columns_of_rows("layer 0 cls", torch.ones(5, 4), "zero variance", errors)
    assert row["outliers_variance"] is None and row["isoscore_without_top1"] is None
    assert row["outliers_activation"] == 0  # defined: no dimension stands out
    assert any(e.startswith("layer 0 cls outliers_variance: zero variance") for e in errors)
    errors = []
    two = outlier_columns_of_rows("c", torch.tensor([[1.0, 0.0], [1.0, 0.1], [1.0, -0.1]]),
                                  None, errors)
    assert two["rogue_share_3"] is None  # fewer than 3 dimensions: no top-3 share
    assert two["isoscore_without_top1"] is None and two["isoscore_without_top3"] is None
    empty = outlier_columns_of_rows("c", torch.empty(0, 4), None, errors)
    assert all(v is None for v in empty.values()) and errors[-1] == "c outliers: no row"
