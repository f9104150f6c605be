"""A Lightning run with ``RegularizedModel``: ``LightningShrinkageRefresh`` sets Sigma_S at
every epoch start to the covariance of the current model's token rows (checked against
``numpy.cov`` of rows gathered by hand), and ``IsoScoreMetric`` is logged through Lightning's
logger (checked against the IsoScore package on the same rows)."""

from __future__ import annotations

import csv
import textwrap
import warnings

import numpy as np
import pytest
import torch
from _models import labelled_rows, tiny_bert

lightning = pytest.importorskip("lightning")

from isotropy import IsoScoreMetric, IStarLoss, RegularizedModel  # noqa: E402
from isotropy.training.lightning_callbacks import LightningShrinkageRefresh  # noqa: E402

VOCAB = 30


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _rows(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    return labelled_rows(n, seed, vocab_size=VOCAB)


class _Module(lightning.LightningModule):
    def __init__(self, net: RegularizedModel) -> None:
        super().__init__()
        self.net, self.iso = net, IsoScoreMetric()
        self.epoch_weights: list[dict[str, torch.Tensor]] = []
        self.val_rows: list[torch.Tensor] = []

    def training_step(self, batch, _):
        out = self.net(**batch)
        self.log_dict({"task_loss": out.task_loss,
                       **{f"{k}_loss": v for k, v in out.regularizer_losses.items()}})
        return out.loss

    def validation_step(self, batch, _):
        out = self.net(**batch, output_hidden_states=True)
        h, mask = out.hidden_states[-1], batch["attention_mask"]
        self.iso.update(h, mask)
        self.val_rows.append(h[mask.bool()].detach().double())

    def on_validation_epoch_end(self):
        self.log("val_isoscore", self.iso.compute().float())
        self.iso.reset()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class _Snapshot(lightning.pytorch.Callback):
    """The model's weights at each epoch start (after the refresh: it does not train)."""

    def on_train_epoch_start(self, trainer, pl_module):
        pl_module.epoch_weights.append({k: v.clone() for k, v in
                                        pl_module.net.model.state_dict().items()})


def _by_hand_sigma(inner, batches) -> np.ndarray:
    """np.cov of every non-padding token row of layers 1..L (the union), by a plain loop."""
    rows = []
    inner.eval()
    with torch.no_grad():
        for b in batches:
            hs = inner(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       output_hidden_states=True).hidden_states
            keep = b["attention_mask"].bool()
            for layer in hs[1:]:
                rows.append(layer[keep].double().numpy())
    return np.cov(np.concatenate(rows), rowvar=False)


def test_lightning_refreshes_sigma_s_each_epoch_and_logs_isoscore(tmp_path):
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2)
    loss = IStarLoss(tuning=-1.0, zeta=0.5)
    module = _Module(RegularizedModel(inner, loss))
    train = DataLoader(_rows(24, 0), batch_size=8)  # no shuffling: the pass reads every row
    val = DataLoader(_rows(16, 1), batch_size=8)
    refresh = LightningShrinkageRefresh(n_tokens=10**6)
    trainer = lightning.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, logger=CSVLogger(str(tmp_path)),
        callbacks=[refresh, _Snapshot()], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        log_every_n_steps=1, deterministic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train, val)
    assert len(module.epoch_weights) == 2
    sigmas = []
    for weights in module.epoch_weights:
        probe = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2)
        probe.load_state_dict(weights)
        sigmas.append(_by_hand_sigma(probe, train))
    assert not np.allclose(sigmas[0], sigmas[1], atol=1e-6)  # training moved the model
    np.testing.assert_allclose(refresh.last_shrinkage[0].numpy(), sigmas[1], rtol=1e-5,
                               atol=1e-7)  # float32 forwards
    np.testing.assert_allclose(loss.shrinkage.double().numpy(), sigmas[1], rtol=1e-5, atol=1e-7)

    with open(next(tmp_path.rglob("metrics.csv")), newline="") as fh:
        logged = [float(r["val_isoscore"]) for r in csv.DictReader(fh) if r["val_isoscore"]]
    assert len(logged) == 2
    from IsoScore.IsoScore import IsoScore as reference  # the authors' package

    last = torch.cat(module.val_rows[-2:]).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = float(reference(last))  # rows are points
    assert logged[-1] == pytest.approx(theirs, rel=1e-5)


def test_lightning_resumed_mid_epoch_keeps_the_epochs_sigma_s(tmp_path):
    # two epochs of 3 steps, a checkpoint after each step: resumed from the one at step 5
    # (epoch 1), the loss has epoch 1's Sigma_S of the uninterrupted run, the checkpoint's (not
    # one estimated from the model at step 5, nor none: Lightning resumes mid-epoch without
    # on_train_epoch_start). Lightning's own mid-epoch resume does not repeat the run's
    # weights (its data position), so they are not compared
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader
    from transformers import BertForSequenceClassification

    def fit(ckpt_path=None):
        inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2)
        loss = IStarLoss(tuning=-1.0, zeta=0.5)
        module = _Module(RegularizedModel(inner, loss))
        refresh = LightningShrinkageRefresh(n_tokens=10**6)
        saves = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1,
                                save_top_k=-1, filename="{step}")
        trainer = lightning.Trainer(
            max_epochs=2, accelerator="cpu", devices=1, logger=False,
            callbacks=[refresh, saves], enable_progress_bar=False,
            enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
            deterministic=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(module, DataLoader(_rows(24, 0), batch_size=8), ckpt_path=ckpt_path)
        return refresh, loss, inner

    first, _, _ = fit()
    (path,) = (tmp_path / "ckpt").glob("step=5*.ckpt")
    stored = torch.load(path, map_location="cpu", weights_only=False)["callbacks"]
    (state,) = [v for k, v in stored.items() if "LightningShrinkageRefresh" in k]
    assert state["epoch"] == 1
    torch.testing.assert_close(state["shrinkage"][0], first.last_shrinkage[0], rtol=0, atol=0)
    resumed, loss, _ = fit(ckpt_path=str(path))
    assert loss.shrinkage is not None and resumed.shrinkage_epoch == 1
    torch.testing.assert_close(loss.shrinkage.cpu(), first.last_shrinkage[0], rtol=0, atol=0)


def test_two_refresh_callbacks_for_different_losses_live_in_one_trainer():
    a, b = IStarLoss(tuning=-1.0, layers=[1]), IStarLoss(tuning=-1.0, layers=[2])
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[LightningShrinkageRefresh(losses=a), LightningShrinkageRefresh(losses=b)])
    keys = [cb.state_key for cb in trainer.callbacks if isinstance(cb, LightningShrinkageRefresh)]
    assert len(keys) == 2 and keys[0] != keys[1]


class _DropoutProbe(lightning.pytorch.Callback):
    """Whether every dropout module inside the module trains, at each training batch."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        drops = [m for m in pl_module.modules() if isinstance(m, torch.nn.Dropout)]
        self.seen.append(bool(drops) and all(m.training for m in drops))


def _fit_one_epoch(module, callbacks) -> list[str]:
    """One epoch of 3 batches; the messages of the warnings raised."""
    from torch.utils.data import DataLoader

    trainer = lightning.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, DataLoader(_rows(24, 0), batch_size=8))
    return [str(w.message) for w in caught]


def test_refresh_warns_of_a_model_left_in_eval_mode():
    # from_pretrained returns the model in eval mode and Lightning keeps each submodule's
    # mode: the wrapper trains, the model inside does not (dropout off). The callback says so
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2).eval()
    module = _Module(RegularizedModel(inner, IStarLoss(tuning=-1.0, zeta=0.5)))
    probe = _DropoutProbe()
    messages = _fit_one_epoch(module, [LightningShrinkageRefresh(n_tokens=10**6), probe])
    assert probe.seen == [False] * 3  # what the warning is about
    # Lightning's own "Found N module(s) in eval mode" line aside
    ours = [m for m in messages if "in eval mode" in m and "training epoch" in m]
    assert len(ours) == 1
    assert "training epoch 0" in ours[0] and "'net.model'" in ours[0] and ".train()" in ours[0]


def test_refresh_is_silent_for_a_model_in_training_mode():
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2)
    module = _Module(RegularizedModel(inner, IStarLoss(tuning=-1.0, zeta=0.5)))
    probe = _DropoutProbe()
    messages = _fit_one_epoch(module, [LightningShrinkageRefresh(n_tokens=10**6), probe])
    assert probe.seen == [True] * 3
    assert not [m for m in messages if "in eval mode" in m]


def test_the_docstring_example_trains_with_dropout(tmp_path):
    # the module docstring's example, run as written on a saved tiny model: the model from
    # from_pretrained (eval mode) trains with its dropout on, and the callback stays silent
    import re

    from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

    import isotropy.training.lightning_callbacks as docs

    tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2).save_pretrained(
        tmp_path / "model")
    example = re.search(r"::\n\n(.*?)\n\s*lightning\.Trainer\(", docs.__doc__, re.S).group(1)
    namespace = {"AutoModelForSequenceClassification": AutoModelForSequenceClassification,
                 "RegularizedModel": RegularizedModel, "IStarLoss": IStarLoss,
                 "IsoScoreMetric": IsoScoreMetric, "lightning": lightning, "torch": torch,
                 "path": str(tmp_path / "model")}
    exec(textwrap.dedent(example), namespace)  # noqa: S102 (our own docstring)
    probe = _DropoutProbe()
    messages = _fit_one_epoch(namespace["Module"](),
                              [LightningShrinkageRefresh(n_tokens=10**6), probe])
    assert probe.seen == [True] * 3
    assert not [m for m in messages if "in eval mode" in m]
