"""The exact persistent-entropy objective under gradient accumulation (two-pass cache)
against plain autograd routes: the concatenated batch, and every micro-batch's graph kept
alive (the authors' retained-graph way)."""

from __future__ import annotations

import pytest
import torch
from _models import padding_mask, tiny_bert
from transformers import BertForSequenceClassification

from isotropy.losses.entropy import PersistentEntropyLoss
from isotropy.models.regularized import RegularizedModel, prepare_exact_cycle
from isotropy.runtime import set_rng_state

pytestmark = pytest.mark.usefixtures("one_thread")

K, B, SEQ, VOCAB = 4, 4, 7, 40


def micro_batches(seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(K):
        lengths = torch.randint(3, SEQ + 1, (B,), generator=g)
        mask = padding_mask(lengths, SEQ)
        ids = torch.randint(1, VOCAB, (B, SEQ), generator=g) * mask
        labels = torch.tensor([0, 1, 0, 1]) if i % 2 else torch.tensor([1, 1, 0, 0])
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def model(dropout: float) -> BertForSequenceClassification:
    m = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2,
                  hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return m.double().train()


def grads(m: torch.nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    m.zero_grad(set_to_none=True)
    return out


def cycle_route(m, batches, beta, select=True):
    """Ours: prepare_exact_cycle, then every micro-batch's loss / K backwarded on its own."""
    reg = PersistentEntropyLoss(weight=beta, accumulation_steps=K, select_features=select,
                                sync_dist=False)
    wrapped = RegularizedModel(m, reg).train()
    states = prepare_exact_cycle(wrapped, batches, loss_divisor=K)
    total = 0.0
    for state, batch in zip(states, batches, strict=True):
        set_rng_state(state)
        out = wrapped(**batch)
        (out.loss / K).backward()
        total += float(out.loss.detach()) / K
    return grads(m), total


def entropy_of(e, labels, beta, select=True):
    """-beta sum_g H(features) of one cloud by the plain (no accumulation) path."""
    plain = PersistentEntropyLoss(weight=beta, select_features=select, sync_dist=False,
                                  accumulation="window")
    return plain.forward_embeddings(e, labels).loss


def retained_route(m, batches, beta, select=True):
    """Every micro-batch forwarded with its graph kept; one backward of
    mean task loss + entropy of the whole cycle's [CLS] cloud."""
    task, cls = 0.0, []
    for batch in batches:
        out = m(**batch, output_hidden_states=True)
        task = task + out.loss / K
        cls.append(out.hidden_states[-1][:, 0])
    labels = torch.cat([b["labels"] for b in batches])
    total = task + entropy_of(torch.cat(cls), labels, beta, select)
    total.backward()
    return grads(m), float(total.detach())


def concatenated_route(m, batches, beta):
    """One forward of the concatenated batch (equal micro-batch sizes: its mean task loss is
    the mean of the micro-batch means)."""
    cat = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    out = m(**cat, output_hidden_states=True)
    total = out.loss + entropy_of(out.hidden_states[-1][:, 0], cat["labels"], beta)
    total.backward()
    return grads(m), float(total.detach())


def assert_same(a, b, tol=1e-8):
    """Equal to ``tol`` relative to the largest gradient entry (a parameter whose gradient is
    0 in exact arithmetic, such as an attention key bias, holds only rounding noise)."""
    assert len(a) == len(b)
    scale = max(float(y.abs().max()) for y in b)
    worst = max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True)) / scale
    assert worst < tol, worst


def test_without_dropout_equals_the_concatenated_batch():
    m = model(0.0)
    batches = micro_batches()
    ours, loss_ours = cycle_route(m, batches, beta=1.0)
    ref, loss_ref = concatenated_route(m, batches, beta=1.0)
    assert_same(ours, ref)
    assert loss_ours == pytest.approx(loss_ref, rel=1e-10)


@pytest.mark.parametrize("select", [True, False])
def test_with_dropout_equals_the_retained_graph_route(select):
    m = model(0.1)
    batches = micro_batches(1)
    torch.manual_seed(123)
    ours, loss_ours = cycle_route(m, batches, beta=1.0, select=select)
    after_ours = torch.rand(3)
    torch.manual_seed(123)
    ref, loss_ref = retained_route(m, batches, beta=1.0, select=select)
    assert_same(ours, ref)
    assert loss_ours == pytest.approx(loss_ref, rel=1e-10)
    # the extra pass leaves the random stream where the plain route leaves it
    assert torch.equal(after_ours, torch.rand(3))


def test_beta_two_doubles_the_entropy_part():
    m = model(0.0)
    batches = micro_batches(2)
    g0, _ = cycle_route(m, batches, beta=0.0)
    g1, _ = cycle_route(m, batches, beta=1.0)
    g2, _ = cycle_route(m, batches, beta=2.0)
    twice = [c - a for c, a in zip(g2, g0, strict=True)]
    once = [b - a for b, a in zip(g1, g0, strict=True)]
    assert_same(twice, [2 * d for d in once])
    assert max(float(d.abs().max()) for d in once) > 1e-6  # the entropy part is not nothing


def test_the_window_weights_the_entropy_by_one_over_k():
    """The sliding window (divided by K like the task loss) is a different, weaker objective:
    at the last micro-step its window is the cycle, but the term is divided by K."""
    m = model(0.0)
    batches = micro_batches(3)
    reg = PersistentEntropyLoss(weight=1.0, accumulation_steps=K, sync_dist=False,
                                accumulation="window")
    wrapped = RegularizedModel(m, reg).train()
    values = []
    for batch in batches:
        values.append(wrapped(**batch).regularizer_losses["persistententropy"])
    cat = torch.cat([b["labels"] for b in batches])
    with torch.no_grad():
        e = torch.cat([m(**b, output_hidden_states=True).hidden_states[-1][:, 0]
                       for b in batches])
    assert float(values[-1]) == pytest.approx(float(entropy_of(e, cat, 1.0)), rel=1e-10)


def test_exact_mode_refuses_an_unprepared_cycle_and_a_reordered_one():
    m = model(0.0)
    batches = micro_batches()
    reg = PersistentEntropyLoss(accumulation_steps=K, sync_dist=False)
    wrapped = RegularizedModel(m, reg).train()
    with pytest.raises(ValueError, match="needs prepare_cycle"):
        wrapped(**batches[0])
    prepare_exact_cycle(wrapped, batches)
    short = {k: v[:2] for k, v in batches[0].items()}
    with pytest.raises(ValueError, match="must come in the order they were prepared"):
        wrapped(**short)
    with pytest.raises(ValueError, match="accumulation must be one of"):
        PersistentEntropyLoss(accumulation="sliding")
