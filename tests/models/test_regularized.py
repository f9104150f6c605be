"""RegularizedModel: the loss it returns, save_pretrained, and a few Trainer steps on CPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from _models import random_inputs, tiny_bert
from transformers import (
    AutoModelForSequenceClassification,
    BertForSequenceClassification,
    BertModel,
    Trainer,
    TrainingArguments,
)

from isotropy.losses.cosreg import CosRegLoss
from isotropy.losses.istar import IStarLoss
from isotropy.models.regularized import RegularizedModel
from isotropy.models.shrinkage import ShrinkageRefreshCallback

ref = pytest.importorskip("IsoScore.IsoScore")


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(seed: int = 0) -> BertForSequenceClassification:
    return tiny_bert(
        BertForSequenceClassification,
        vocab_size=60,
        seed=seed,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def make_batch(batch: int = 6, seq: int = 9, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = random_inputs(g, batch=batch, seq=seq, vocab_size=60, min_length=3)
    labels = torch.randint(0, 2, (batch,), generator=g)
    return {**inputs, "labels": labels}


def ref_isoscore_star(points: torch.Tensor, c0: torch.Tensor, zeta: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(ref.IsoScore_star(points.double().numpy(), c0.double(), zeta))


def test_loss_is_task_loss_plus_regularizers():
    model = tiny_model()
    batch = make_batch()
    c0 = torch.eye(32) * 0.5 + 0.1
    istar = IStarLoss(tuning=-2.0, zeta=0.3, shrinkage=c0)
    wrapped = RegularizedModel(model, [istar, CosRegLoss(tuning=1.0)])
    wrapped.train()
    out = wrapped(**batch)

    with torch.no_grad():
        plain = model(**batch, output_hidden_states=True)
    m = batch["attention_mask"].bool()
    union = torch.cat([plain.hidden_states[i][m] for i in (1, 2)])
    iso = ref_isoscore_star(union, c0, 0.3)
    last = plain.hidden_states[2][m].double()
    u = last / last.norm(dim=1, keepdim=True)
    cos_term = float((u @ u.T).sum() - u.shape[0]) / u.shape[0] ** 2
    expected = float(plain.loss) + -2.0 * (1 - iso) + cos_term

    assert float(out.loss.detach()) == pytest.approx(expected, abs=2e-5)
    assert float(out.task_loss.detach()) == pytest.approx(float(plain.loss), abs=1e-6)
    assert set(out.regularizer_losses) == {"istar", "cosreg"}
    assert out.regularizer_logs["istar/isoscore_star"] == pytest.approx(iso, abs=2e-6)
    assert wrapped.last_logs["task_loss"] == pytest.approx(float(plain.loss), abs=1e-6)
    assert wrapped.last_logs["loss"] == pytest.approx(expected, abs=2e-5)
    torch.testing.assert_close(out.logits, plain.logits)
    assert "hidden_states" not in out
    assert list(out.keys())[0] == "loss"


def test_gradient_is_that_of_the_sum():
    batch = make_batch(seed=1)
    a, b = tiny_model(), tiny_model()
    c0 = torch.eye(32)
    RegularizedModel(a, IStarLoss(-1.0, zeta=0.2, shrinkage=c0))(**batch).loss.backward()
    out = b(**batch, output_hidden_states=True)
    m = batch["attention_mask"].bool()
    union = torch.cat([out.hidden_states[i][m] for i in (1, 2)])
    # IsoScore* by the participation ratio of the shrunk covariance, through torch.cov
    cov = 0.8 * torch.cov(union.T) + 0.2 * c0
    pr = torch.trace(cov) ** 2 / (cov * cov).sum()
    (out.loss + -1.0 * (1 - (pr - 1) / 31)).backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        if pa.grad is None:
            assert pb.grad is None or float(pb.grad.abs().max()) == 0.0, name
        else:
            torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_eval_mode_returns_the_task_loss_unless_asked():
    model = tiny_model()
    batch = make_batch(seed=2)
    reg = CosRegLoss(tuning=10.0)
    wrapped = RegularizedModel(model, reg).eval()
    with torch.no_grad():
        plain = float(model(**batch).loss)
        out = wrapped(**batch)
        assert float(out.loss) == pytest.approx(plain, abs=1e-6)
        assert out.regularizer_losses == {}
        both = RegularizedModel(model, reg, regularize_eval=True).eval()(**batch)
        assert float(both.loss) > plain + 1.0


@torch.no_grad()
def test_hidden_states_kept_when_asked_and_tuple_outputs():
    model = tiny_model()
    batch = make_batch(seed=3)
    wrapped = RegularizedModel(model, CosRegLoss())
    out = wrapped(**batch, output_hidden_states=True)
    assert len(out.hidden_states) == 3
    tup = wrapped(**batch, return_dict=False)
    assert isinstance(tup, tuple)
    assert float(tup[0]) == pytest.approx(float(out.loss), abs=1e-6)
    no_labels = {k: v for k, v in batch.items() if k != "labels"}
    out = wrapped(**no_labels)
    assert out.task_loss is None
    assert float(out.loss) == pytest.approx(float(out.regularizer_losses["cosreg"]))


def test_save_pretrained_and_attribute_passthrough(tmp_path):
    model = tiny_model()
    wrapped = RegularizedModel(model, IStarLoss(-1.0, shrinkage=torch.eye(32)))
    assert wrapped.config is model.config
    assert wrapped.num_parameters() == model.num_parameters()
    wrapped.save_pretrained(tmp_path)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    batch = make_batch(seed=4)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model.eval()(**batch).logits)
    with pytest.raises(AttributeError):
        _ = wrapped.no_such_attribute


def test_bad_regularizers():
    model = tiny_model()
    with pytest.raises(TypeError, match="regularizers"):
        RegularizedModel(model, "istar")
    with pytest.raises(TypeError, match="nn.Module"):
        RegularizedModel(model, [lambda h: h])
    with pytest.raises(ValueError, match="names"):
        RegularizedModel(model, {"a.b": CosRegLoss()})
    with pytest.raises(TypeError, match="model"):
        RegularizedModel("bert", CosRegLoss())
    two = RegularizedModel(model, [CosRegLoss(), CosRegLoss(layer=1)])
    assert list(two.regularizers) == ["cosreg", "cosreg_1"]


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict[str, torch.Tensor]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.rows[i]


def test_trainer_runs_with_the_wrapper_and_the_refresh_callback(tmp_path):
    model = tiny_model(seed=5)
    batch = make_batch(batch=24, seed=5)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(24)]
    istar = IStarLoss(tuning=-1.0, zeta=0.2)
    wrapped = RegularizedModel(model, istar)
    before = [p.detach().clone() for p in model.parameters()]
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=24,
        num_train_epochs=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    cb = ShrinkageRefreshCallback(n_tokens=100)
    trainer = Trainer(
        model=wrapped,
        args=args,
        train_dataset=_ListDataset(rows),
        eval_dataset=_ListDataset(rows),
        callbacks=[cb],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no identity fallback: Sigma_S is set
        warnings.filterwarnings("ignore", message=".*(pin_memory|torch.cuda|accelerator).*")
        result = trainer.train()
    assert result.global_step == 12
    assert istar.shrinkage is not None and istar.shrinkage.shape == (32, 32)
    torch.testing.assert_close(cb.last_shrinkage[0], istar.shrinkage)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 12 and all(np.isfinite(losses))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))

    metrics = trainer.evaluate()
    model.eval()
    with torch.no_grad():
        task = float(model(**batch).loss)
    assert metrics["eval_loss"] == pytest.approx(task, abs=1e-5)

    trainer.save_model(str(tmp_path / "saved"))
    wrapped.save_pretrained(tmp_path / "hf")
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)


def entropy_loss_by_label(pooled: torch.Tensor, labels: torch.Tensor | None) -> float:
    """-sum over label groups of the persistent entropy of the group's H0 bars (all bars).

    Independent route: the bars are the edge lengths of scipy's Euclidean minimum spanning
    tree, and H = -sum p log p with p = bar / sum(bars).
    """
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial.distance import pdist, squareform

    x = pooled.detach().double().numpy()
    keys = np.zeros(len(x), dtype=int) if labels is None else labels.numpy()
    total = 0.0
    for g in np.unique(keys):
        bars = minimum_spanning_tree(squareform(pdist(x[keys == g]))).data
        p = bars / bars.sum()
        total -= float(-(p * np.log(p)).sum())
    return total


def labelled_batch(seed: int = 7) -> dict[str, torch.Tensor]:
    """12 sentences, three classes of four (every class group is scored)."""
    batch = make_batch(batch=12, seed=seed)
    return {**batch, "labels": torch.tensor([0, 1, 2] * 4)}


def three_class_model() -> BertForSequenceClassification:
    return tiny_bert(
        BertForSequenceClassification,
        vocab_size=60,
        seed=8,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def test_persistent_entropy_is_grouped_by_the_labels_given_to_the_wrapper():
    from isotropy.losses.entropy import PersistentEntropyLoss

    model = three_class_model()
    batch = labelled_batch()
    wrapped = RegularizedModel(
        model, {"entropy": PersistentEntropyLoss(weight=1.0, select_features=False)}
    )
    out = wrapped(**batch)
    with torch.no_grad():
        cls = model(**batch, output_hidden_states=True).hidden_states[-1][:, 0]
    by_label = entropy_loss_by_label(cls, batch["labels"])
    one_group = entropy_loss_by_label(cls, None)
    assert abs(by_label - one_group) > 0.5  # the check can tell the two groupings apart
    assert out.regularizer_logs["entropy/n_groups"] == 3.0
    assert float(out.regularizer_losses["entropy"].detach()) == pytest.approx(by_label, rel=1e-5)


def test_trainer_trains_the_label_grouped_persistent_entropy(tmp_path):
    from isotropy.losses.entropy import PersistentEntropyLoss

    batch = labelled_batch(seed=9)
    with torch.no_grad():
        plain = three_class_model()(**batch, output_hidden_states=True)
    cls = plain.hidden_states[-1][:, 0]
    expected = float(plain.loss) + entropy_loss_by_label(cls, batch["labels"])

    wrapped = RegularizedModel(
        three_class_model(), {"entropy": PersistentEntropyLoss(weight=1.0, select_features=False)}
    )
    rows = [{k: v[i] for k, v in batch.items()} for i in range(12)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=12,  # one step over the whole batch (in shuffled order)
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=wrapped, args=args, train_dataset=_ListDataset(rows))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(pin_memory|torch.cuda|accelerator).*")
        trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert wrapped.last_logs["entropy/n_groups"] == 3.0
    assert logged == [pytest.approx(expected, rel=1e-5)]


def test_labels_to_a_model_without_a_task_head_are_an_error_not_a_regularizer_only_loss():
    bare = tiny_bert(BertModel, vocab_size=60, seed=3)  # AutoModel: no head, no loss
    batch = make_batch(batch=6, seed=3)
    labels = batch.pop("labels")
    wrapped = RegularizedModel(bare, CosRegLoss()).train()
    with pytest.raises(ValueError, match="labels given, but BertModel returned no loss"):
        wrapped(**batch, labels=labels)
    # without targets (unsupervised shaping) or with the regularizers off (eval): as before
    out = wrapped(**batch)
    assert out.task_loss is None
    torch.testing.assert_close(out.loss, out.regularizer_losses["cosreg"])
    assert wrapped.eval()(**batch, labels=labels).get("loss") is None
    # on purpose: the regularizers alone, the labels still reaching them
    alone = RegularizedModel(bare, CosRegLoss(), require_task_loss=False).train()
    out = alone(**batch, labels=labels)
    torch.testing.assert_close(out.loss, out.regularizer_losses["cosreg"])
    with pytest.raises(TypeError, match="require_task_loss"):
        RegularizedModel(bare, CosRegLoss(), require_task_loss="no")
