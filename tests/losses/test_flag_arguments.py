"""Yes/no options of the API take ``True``/``False`` only, and numeric options refuse
booleans: ``'false'`` or ``'no'`` is never silently true, ``zeta=True`` never the zeta = 1
score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from isotropy import isoscore_star
from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.models.regularized import RegularizedModel


@pytest.mark.parametrize("make,name", [
    (lambda v: IStarLoss(-1.0, include_padding=v), "include_padding"),
    (lambda v: IStarLoss(-1.0, sync_dist=v), "sync_dist"),
    (lambda v: CosRegLoss(1.0, include_padding=v), "include_padding"),
    (lambda v: PersistentEntropyLoss(select_features=v), "select_features"),
    (lambda v: PersistentEntropyLoss(sync_dist=v), "sync_dist"),
    (lambda v: RegularizedModel(torch.nn.Linear(2, 2), {}, regularize_eval=v),
     "regularize_eval"),
])
@pytest.mark.parametrize("value", ["false", "no", "0", 0, 1, None])
def test_a_flag_must_be_a_boolean(make, name, value):
    with pytest.raises(TypeError, match=f"{name} must be True or False, got {value!r}"):
        make(value)


def test_numpy_booleans_are_booleans():
    assert IStarLoss(-1.0, include_padding=np.bool_(True)).include_padding is True
    assert PersistentEntropyLoss(select_features=np.False_).select_features is False


@pytest.mark.parametrize("make,name", [
    (lambda v: isoscore_star(torch.randn(12, 3, dtype=torch.float64), zeta=v), "zeta"),
    (lambda v: IStarLoss(-1.0, zeta=v), "zeta"),
    (lambda v: IStarLoss(v), "tuning"),
    (lambda v: PersistentEntropyLoss(weight=v), "weight"),
    (lambda v: PersistentEntropyLoss(in_cluster_weight=v), "in_cluster_weight"),
])
@pytest.mark.parametrize("value", [True, False])
def test_a_number_is_not_a_boolean(make, name, value):
    with pytest.raises(TypeError, match=name):
        make(value)
