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
