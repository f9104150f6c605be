"""Sigma_S from a partial forward pass: exactly the requested rows, compared with np.cov."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from _models import random_inputs, tiny_bert
from transformers import BertModel

from isotropy.losses.istar import IStarLoss
from isotropy.models.regularized import RegularizedModel
from isotropy.models.shrinkage import (
    ShrinkageRefreshCallback,
    collect_covariance,
    collect_layer_shrinkage,
    estimate_shrinkage,
    refresh_shrinkage,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_bert(BertModel, vocab_size=50)


def make_batches(n_batches: int = 6, batch: int = 4, seq: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [
        random_inputs(g, batch=batch, seq=seq, vocab_size=50, min_length=2)
        for _ in range(n_batches)
    ]


def rows_by_loop(model, batches, layer_ids, n):
    """The first n rows: tokens in reading order, each token's layers in the given order."""
    rows = []
    model.eval()
    with torch.no_grad():
        for batch in batches:
            hs = model(**batch, output_hidden_states=True).hidden_states
            mask = batch["attention_mask"]
            for b in range(mask.shape[0]):
                for t in range(mask.shape[1]):
                    if not mask[b, t]:
                        continue
                    for layer in layer_ids:
                        if len(rows) < n:
                            rows.append(hs[layer][b, t].double().numpy())
            if len(rows) >= n:
                break
    return np.array(rows)


def assert_cov_close(ours: torch.Tensor, expected: np.ndarray) -> None:
    assert ours.dtype == torch.float64
    scale = np.abs(expected).max()
    np.testing.assert_allclose(ours.numpy(), expected, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("layers,ids,n", [("all", [1, 2], 157), ([-1], [2], 50),
                                          ([2, 0, 1], [2, 0, 1], 100)])
def test_exactly_the_requested_rows(model, layers, ids, n):
    batches = make_batches()
    total = sum(int(b["attention_mask"].sum()) for b in batches) * len(ids)
    assert total > n + 40  # the data does not run out
    stats = collect_covariance(model, batches, layers=layers, n_tokens=n)
    assert stats.count == n
    rows = rows_by_loop(model, batches, ids, n)
    assert rows.shape[0] == n
    assert_cov_close(stats.covariance(), np.cov(rows.T))
    np.testing.assert_allclose(stats.mean.numpy(), rows.mean(0), atol=1e-6)


def test_the_last_batch_is_cut_inside_a_token(model):
    batches = make_batches()
    first = int(batches[0]["attention_mask"].sum())
    n = 2 * first + 3  # all of batch 0 (2 layers) and 3 rows of batch 1: 2 tokens, 1 layer
    cov = estimate_shrinkage(model, batches, layers="all", n_tokens=n)
    assert_cov_close(cov, np.cov(rows_by_loop(model, batches, [1, 2], n).T))


def per_layer_rows_by_loop(model, batches, n_layers, n):
    """Layer by layer, the rows of the first n union rows (layers 1..L, token-major, as
    rows_by_loop); the embedding output takes the token positions of layer 1; and every
    pooled [CLS] row (position 0) of every batch read, per layer."""
    tokens = [[] for _ in range(n_layers + 1)]
    cls = [[] for _ in range(n_layers + 1)]
    used = 0
    model.eval()
    with torch.no_grad():
        for batch in batches:
            hs = model(**batch, output_hidden_states=True).hidden_states
            mask = batch["attention_mask"]
            for layer in range(n_layers + 1):
                cls[layer].extend(hs[layer][:, 0].double().numpy())
            for b in range(mask.shape[0]):
                for t in range(mask.shape[1]):
                    if not mask[b, t]:
                        continue
                    for layer in range(1, n_layers + 1):
                        if used < n:
                            tokens[layer].append(hs[layer][b, t].double().numpy())
                            if layer == 1:
                                tokens[0].append(hs[0][b, t].double().numpy())
                            used += 1
            if used >= n:
                break
    return [np.array(r) for r in tokens], [np.array(r) for r in cls]


@pytest.mark.parametrize("n", [157, 10_000])
def test_per_layer_sigma_s_holds_each_layers_own_rows(model, n):
    """Each layer's token Sigma_S is np.cov of that layer's rows among the first n union
    rows (the last batch cut inside a token); pooled ones of every [CLS] row read; the union
    is the union's (collect_covariance's rows)."""
    batches = make_batches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n = 10,000: the data runs out (warned)
        shrink = collect_layer_shrinkage(model, batches, n_tokens=n)
    tokens, cls = per_layer_rows_by_loop(model, batches, 2, n)
    assert [st.count for st in shrink.token] == [len(r) for r in tokens]
    assert [st.count for st in shrink.pooled] == [len(r) for r in cls]
    if n == 157:
        assert [len(r) for r in tokens] == [79, 79, 78]
    covs = shrink.covariances()
    for layer in (1, 2):
        assert_cov_close(covs["token"][layer], np.cov(tokens[layer].T))
        assert_cov_close(covs["pooled"][layer], np.cov(cls[layer].T))
    assert_cov_close(covs["token"][0], np.cov(tokens[0].T))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        union = collect_covariance(model, batches, layers="all", n_tokens=n)
    assert shrink.union.count == union.count
    assert_cov_close(covs["union"], union.covariance().numpy())
    described = shrink.describe()
    assert described["union_rows"] == union.count and described["sigma_s"] == "per layer"


def test_per_layer_sigma_s_bad_input(model):
    with pytest.raises(ValueError, match="pooling must be one of"):
        collect_layer_shrinkage(model, make_batches(), n_tokens=10, pooling="max")
    with pytest.raises(ValueError, match="n_tokens must be >= 2"):
        collect_layer_shrinkage(model, make_batches(), n_tokens=1)


def test_refresh_sets_the_loss_and_restores_the_mode(model):
    batches = make_batches()
    loss = IStarLoss(tuning=-1.0, zeta=0.2, layers="all")
    model.train()
    cov = refresh_shrinkage(model, batches, loss, n_tokens=120)
    assert model.training
    assert loss.shrinkage is not None
    torch.testing.assert_close(loss.shrinkage, cov)
    assert_cov_close(cov, np.cov(rows_by_loop(model, batches, [1, 2], 120).T))
    model.eval()
    refresh_shrinkage(model, batches, loss, n_tokens=120)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    model.train()


def test_a_torch_dataloader_and_a_wrapped_model(model):
    batches = make_batches()
    data = [{k: v[i] for k, v in b.items()} for b in batches for i in range(4)]
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=False)
    loss = IStarLoss(tuning=1.0, layers="last")
    wrapped = RegularizedModel(model, loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the wrapper's own loss is not evaluated
        cov = refresh_shrinkage(wrapped, loader, loss, n_tokens=77)
    assert_cov_close(cov, np.cov(rows_by_loop(model, batches, [2], 77).T))


def test_warns_when_the_data_runs_out(model):
    batches = make_batches(n_batches=2)
    total = sum(int(b["attention_mask"].sum()) for b in batches) * 2
    with pytest.warns(UserWarning, match=f"ran out after {total} of the requested 10000"):
        cov = estimate_shrinkage(model, batches, n_tokens=10_000)
    assert_cov_close(cov, np.cov(rows_by_loop(model, batches, [1, 2], total).T))


def test_callback_refreshes_every_istar_loss_in_the_model(model):
    batches = make_batches()
    a = IStarLoss(tuning=-1.0, layers="all")
    b = IStarLoss(tuning=-1.0, layers=[1])
    wrapped = RegularizedModel(model, {"a": a, "b": b})
    cb = ShrinkageRefreshCallback(n_tokens=90)
    cb.on_epoch_begin(None, None, None, model=wrapped, train_dataloader=batches)
    assert_cov_close(a.shrinkage, np.cov(rows_by_loop(model, batches, [1, 2], 90).T))
    assert_cov_close(b.shrinkage, np.cov(rows_by_loop(model, batches, [1], 90).T))
    own = ShrinkageRefreshCallback(losses=a, dataloader=batches[:1], n_tokens=20)
    own.on_epoch_begin(None, None, None, model=wrapped)
    assert_cov_close(a.shrinkage, np.cov(rows_by_loop(model, batches[:1], [1, 2], 20).T))


def test_bad_input(model):
    batches = make_batches()
    with pytest.raises(ValueError, match="n_tokens"):
        estimate_shrinkage(model, batches, n_tokens=1)
    with pytest.raises(TypeError, match="n_tokens"):
        estimate_shrinkage(model, batches, n_tokens=1000.0)
    with pytest.raises(TypeError, match="dicts"):
        estimate_shrinkage(model, [(b["input_ids"],) for b in batches], n_tokens=10)
    examples = [{k: v[0] for k, v in b.items()} for b in batches]  # rows of a dataset
    with pytest.raises(ValueError, match=r"2-D \(batch, sequence\), got shape \(10,\).*not "
                                         "single examples"):
        estimate_shrinkage(model, examples, n_tokens=10)
    with pytest.raises(TypeError, match="IStarLoss"):
        refresh_shrinkage(model, batches, torch.nn.MSELoss(), n_tokens=10)
    empty = [{"input_ids": b["input_ids"], "attention_mask": 0 * b["attention_mask"]}
             for b in batches]
    with pytest.raises(ValueError, match="no non-padding token"):
        estimate_shrinkage(model, empty, n_tokens=10)
    with pytest.raises(ValueError, match="out of range"):
        estimate_shrinkage(model, batches, layers=[5], n_tokens=10)
    loss = IStarLoss(1.0, shrinkage=torch.eye(7))
    with pytest.raises(ValueError, match="shrinkage"):
        refresh_shrinkage(model, batches, loss, n_tokens=10)  # hidden size 32, not 7
    with pytest.raises(ValueError, match="no IStarLoss"):
        ShrinkageRefreshCallback().on_epoch_begin(
            None, None, None, model=model, train_dataloader=batches
        )


def test_padding_in_the_clouds_as_the_authors_code(model):
    """include_padding: Sigma_S, I-STAR's and CosReg's clouds take every position of the
    (batch, seq, dim) tensor, padding included (np.cov / the plain formula on the flattened
    tensor); without it the mask leaves padding out, and the two differ."""
    from isotropy.losses.cosreg import CosRegLoss
    from isotropy.measures.isoscore import isoscore_star

    batches = make_batches()
    n = sum(b["input_ids"].numel() for b in batches) * 2
    stats = collect_covariance(model, batches, layers="all", n_tokens=n, include_padding=True)
    model.eval()
    with torch.no_grad():
        hs = [model(**b, output_hidden_states=True).hidden_states for b in batches]
    flat = torch.cat([torch.cat([h[1].reshape(-1, 32), h[2].reshape(-1, 32)]) for h in hs])
    assert stats.count == flat.shape[0] == n
    assert_cov_close(stats.covariance(), np.cov(flat.double().numpy().T))
    h, mask = hs[0], batches[0]["attention_mask"]
    assert int(mask.sum()) < mask.numel()  # the batch has padding
    sigma = torch.eye(32, dtype=torch.float64)
    padded = IStarLoss(tuning=1.0, zeta=0.2, shrinkage=sigma, include_padding=True)
    union = torch.cat([h[1].reshape(-1, 32), h[2].reshape(-1, 32)])
    expected = 1.0 - float(isoscore_star(union.double(), zeta=0.2, shrinkage=sigma))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "called without attention_mask" warning
        got = float(padded(h, attention_mask=mask).loss)
        assert got == pytest.approx(expected, rel=1e-5)
        masked = float(IStarLoss(tuning=1.0, zeta=0.2, shrinkage=sigma)(h, mask).loss)
        assert abs(masked - got) > 1e-4
        x = h[2].reshape(-1, 32).double()
        u = x / x.norm(dim=1, keepdim=True)
        m = x.shape[0]
        term = (float((u @ u.T).sum()) - m) / m**2
        cos = CosRegLoss(include_padding=True)(h, attention_mask=mask)
        assert float(cos.loss) == pytest.approx(term, rel=1e-5)
    loss = IStarLoss(tuning=1.0, include_padding=True)
    refresh_shrinkage(model, batches, loss, n_tokens=n)
    assert_cov_close(loss.shrinkage, np.cov(flat.double().numpy().T))


def _rows(batches):
    return [{k: v[i] for k, v in b.items()} for b in batches for i in range(len(b["input_ids"]))]


def test_the_sigma_s_pass_leaves_the_global_random_state_as_it_was(model):
    """A DataLoader draws its seed from torch's global state on every iteration, even without
    shuffling: the pass must put that state back, or the training after it changes."""
    from torch.utils.data import DataLoader

    loader = DataLoader(_rows(make_batches()), batch_size=4, shuffle=False)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    refresh_shrinkage(model, loader, IStarLoss(tuning=-1.0), n_tokens=20)  # stops early
    assert torch.equal(torch.get_rng_state(), before)
    collect_layer_shrinkage(model, loader, n_tokens=20)
    assert torch.equal(torch.get_rng_state(), before)
    iter(loader)  # what the pass would otherwise have done to it
    assert not torch.equal(torch.get_rng_state(), before)


def test_a_refresh_that_feeds_no_loss_of_the_model_leaves_its_training_unchanged(tmp_path):
    """A Trainer with ShrinkageRefreshCallback on an IStarLoss outside the model trains the
    very weights it trains without the callback (dropout and all)."""
    from _training import own_trainer_args
    from transformers import BertForSequenceClassification, Trainer

    from isotropy.losses.cosreg import CosRegLoss

    g = torch.Generator().manual_seed(1)
    data = _rows([random_inputs(g, batch=32, seq=10, vocab_size=50, min_length=2)])
    for i, row in enumerate(data):
        row["labels"] = torch.tensor(i % 2)

    def train(callbacks):
        net = tiny_bert(BertForSequenceClassification, vocab_size=50, num_labels=2)
        trainer = Trainer(model=RegularizedModel(net, CosRegLoss()), train_dataset=data,
                          args=own_trainer_args(tmp_path / str(len(callbacks)), save_steps=100,
                                                num_train_epochs=2, max_steps=-1),
                          callbacks=callbacks)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(pin_memory|accelerator).*")
            trainer.train()
        return [p.detach().clone() for p in net.parameters()]

    alone = train([])
    refreshed = train([ShrinkageRefreshCallback(losses=IStarLoss(tuning=-1.0), n_tokens=50)])
    assert all(torch.equal(a, b) for a, b in zip(alone, refreshed, strict=True))
