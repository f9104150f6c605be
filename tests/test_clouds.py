"""``isotropy.clouds``: which rows a cloud holds, whatever the padding side and the mask's form."""

from __future__ import annotations

import pytest
import torch

from isotropy import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.clouds import pool, token_cloud

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])


def _hidden(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(3, 4, 5, generator=g) for _ in range(3))


def test_an_additive_mask_is_refused_not_read_as_its_padding():
    hs = _hidden()
    additive = (1 - MASK.float()) * -10000.0  # 0 = keep, -1e4 = padding
    for call in (lambda: token_cloud(hs, additive),
                 lambda: IStarLoss(tuning=1.0)(hs, additive),
                 lambda: CosRegLoss()(hs, additive),
                 lambda: pool(hs[-1], additive, "mean")):
        with pytest.raises(ValueError, match="additive mask"):
            call()
    # 0/1 masks of every dtype select the same 9 real tokens per layer
    for mask in (MASK, MASK.bool(), MASK.float(), MASK.to(torch.int32)):
        assert token_cloud(hs, mask, layers=[1]).shape == (9, 5)


def test_cls_pooling_takes_the_first_real_token_on_either_padding_side():
    h = _hidden()[-1]
    left = torch.zeros_like(h)
    left_mask = torch.zeros_like(MASK)
    for i, n in enumerate(MASK.sum(1).tolist()):  # the same tokens, padded on the left
        left[i, 4 - n:] = h[i, :n]
        left_mask[i, 4 - n:] = 1
    torch.testing.assert_close(pool(left, left_mask, "cls"), h[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(pool(h, MASK, "cls"), h[:, 0], rtol=0, atol=0)
    # the persistent-entropy loss scores the same [CLS] cloud, and its gradient reaches it
    hs = tuple(x.clone().requires_grad_(True) for x in (left, left))
    loss = PersistentEntropyLoss(weight=1.0)
    out = loss(hs, left_mask)
    ref = PersistentEntropyLoss(weight=1.0)((h, h), MASK)  # right-padded
    assert float(out.loss) == pytest.approx(float(ref.loss), rel=1e-6)
    out.loss.backward()
    grad = hs[-1].grad
    assert grad is not None and float(grad[0, 1].abs().sum()) > 0  # row 0's [CLS] (position 1)
    assert float(grad[1, 0].abs().sum()) == 0  # row 1's padding



def test_a_measure_given_hidden_states_points_to_the_padding_free_cloud():
    from isotropy import isoscore

    with pytest.raises(ValueError, match=r"h\[attention_mask.bool\(\)\]"):
        isoscore(_hidden()[-1])
    assert 0 <= float(isoscore(token_cloud(_hidden(), MASK, layers=[2]))) <= 1


def test_the_call_the_error_suggests_works_on_one_tensor_and_on_a_list_of_one():
    """The 3-D error suggests token_cloud(hidden_states, attention_mask): with one layer's
    (batch, seq, dim) tensor, or a list holding it, the cloud is its real tokens' rows."""
    h = _hidden()[-1]
    expected = h[MASK.bool()]  # the 9 real tokens, row-major
    for states in (h, [h], (h,)):
        torch.testing.assert_close(token_cloud(states, MASK), expected, rtol=0, atol=0)
        for layers in ("last", 0, -1, [0]):
            torch.testing.assert_close(token_cloud(states, MASK, layers), expected,
                                       rtol=0, atol=0)
    with pytest.raises(ValueError, match="out of range"):
        token_cloud(h, MASK, layers=1)
    with pytest.raises(ValueError, match="hidden_states is empty"):
        token_cloud([], MASK)
    with pytest.raises(ValueError, match=r"one \(batch, seq, dim\) tensor, got a tensor of "
                                         r"shape \(9, 5\)"):
        token_cloud(expected, MASK)
    # a model's outputs.hidden_states keeps its meaning: "all" leaves out the embeddings
    hs = _hidden()
    assert token_cloud(hs, MASK).shape == (2 * 9, 5)


@pytest.mark.parametrize("fill", [-10000.0, float("-inf")])
def test_every_streaming_route_refuses_an_additive_mask_with_one_message(fill):
    from isotropy.measures.covariance import CovarianceStats, packed_batch
    from isotropy.measures.isoscore_metric import IsoScoreMetric, isoscore_star_update

    h = _hidden()[-1]
    additive = torch.where(MASK.bool(), torch.tensor(0.0), torch.tensor(fill))
    calls = {
        "from_batch": lambda: CovarianceStats.from_batch(h, additive),
        "update": lambda: CovarianceStats.empty(5).update(h, additive),
        "isoscore_star_update": lambda: isoscore_star_update(h, additive),
        "metric (host route)": lambda: IsoScoreMetric().update(h, additive),
        "metric (device route)": lambda: IsoScoreMetric(eager_checks=False).update(h, additive),
        "metric forward": lambda: IsoScoreMetric()(h, additive),
        "packed_batch": lambda: packed_batch(h, additive),
        "token_cloud": lambda: token_cloud((h, h), additive),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="holds other values: an additive mask") as err:
            call()
        assert "\n" not in str(err.value), name
    # the 0/1 masks of every dtype keep the 9 real rows (counted from MASK by hand)
    for mask in (MASK, MASK.bool(), MASK.float(), MASK.to(torch.int32), MASK.to(torch.uint8)):
        assert CovarianceStats.from_batch(h, mask).count == 9
        assert float(packed_batch(h, mask)[0]) == 9.0


def test_a_row_without_a_real_token_is_refused_by_every_pooling():
    from isotropy.clouds import first_token_rows, pooled_rows
    from isotropy.probing.eval_measures import EvalMeasures

    hs = _hidden()
    empty = MASK.clone()
    empty[1] = 0  # row 1: padding only
    calls = [lambda: pool(hs[-1], empty, "cls"), lambda: pool(hs[-1], empty, "mean"),
             lambda: first_token_rows(hs[-1], empty),
             *[(lambda p=p: pooled_rows(hs[-1], empty, p)) for p in ("cls", "last", "mean")],
             lambda: PersistentEntropyLoss(weight=1.0, pooling="cls")(hs, empty),
             lambda: PersistentEntropyLoss(weight=1.0, pooling="mean")(hs, empty),
             lambda: EvalMeasures(sync=False).update(hs, empty)]
    for call in calls:
        with pytest.raises(ValueError, match="row 1 of attention_mask has no real token"):
            call()
    # a mask with a real token in every row pools as before
    assert pooled_rows(hs[-1], MASK, "last").shape == (3, 5)
