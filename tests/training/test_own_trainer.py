"""The user's own ``transformers.Trainer`` with ``RegularizedModel``: what it saves loads as the
wrapped model would, checkpoints resume into the wrapper, and ``RegularizedTrainer`` (the
``RegularizerLogMixin``) puts the regularizers' values in ``log_history`` and TensorBoard."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from _models import labelled_rows, tiny_bert
from _training import own_trainer_args

from isotropy import CosRegLoss, IStarLoss, RegularizedModel, RegularizedTrainer
from isotropy.training._compat import TRANSFORMERS_VERSION

VOCAB = 30
# transformers 4.x logs the Trainer's loss rounded to 4 decimals; 5.x logs it as computed
LOGGED_LOSS_ABS = 5e-5 if TRANSFORMERS_VERSION < (5, 0) else 1e-5


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _data(n: int = 32) -> list[dict[str, torch.Tensor]]:
    return labelled_rows(n, 0, vocab_size=VOCAB, seq=10)


def _wrapped(seed: int = 0) -> RegularizedModel:
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=seed, num_labels=2)
    return RegularizedModel(inner, [IStarLoss(tuning=-1.0, zeta=0.0), CosRegLoss(tuning=1.0)])


_args = own_trainer_args


def _train(trainer_cls, out, **kw):
    model = _wrapped()
    trainer = trainer_cls(model=model, args=_args(out, **kw), train_dataset=_data())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer, model


def test_a_plain_trainer_saves_what_from_pretrained_loads(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification, Trainer

    trainer, model = _train(Trainer, tmp_path / "run")
    trainer.save_model(str(tmp_path / "final"))
    assert json.loads((tmp_path / "final" / "config.json").read_text())["model_type"] == "bert"
    keys = load_file(tmp_path / "final" / "model.safetensors")
    assert not any(k.startswith("model.") for k in keys)  # the wrapped model's own keys
    loaded = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "final"))
    for name, value in model.model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0)
    # a checkpoint, too, is a model directory of the wrapped model
    step2 = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "run" /
                                                                   "checkpoint-2"))
    assert not torch.equal(step2.classifier.weight, loaded.classifier.weight)


def test_a_checkpoint_loads_back_into_a_fresh_wrapper(tmp_path):
    from safetensors.torch import load_file
    from transformers import Trainer

    _train(Trainer, tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoint-2"
    fresh = _wrapped(seed=5)
    trainer = Trainer(model=fresh, args=_args(tmp_path / "again"), train_dataset=_data())
    trainer._load_from_checkpoint(str(checkpoint))
    saved = load_file(checkpoint / "model.safetensors")
    for name, value in saved.items():
        torch.testing.assert_close(fresh.model.state_dict()[name], value, rtol=0, atol=0)
    # the wrapper's own state dict loads too (strict: every key matched)
    other = _wrapped(seed=6)
    result = other.load_state_dict(fresh.state_dict())
    assert not result.missing_keys and not result.unexpected_keys


def test_a_resumed_plain_trainer_ends_with_the_uninterrupted_weights(tmp_path):
    from transformers import Trainer

    _, full = _train(Trainer, tmp_path / "full")
    model = _wrapped()
    trainer = Trainer(model=model, args=_args(tmp_path / "full"), train_dataset=_data())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    for name, value in full.model.state_dict().items():
        torch.testing.assert_close(model.model.state_dict()[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.floor
def test_regularized_trainer_logs_each_term_and_they_add_up_to_the_loss(tmp_path):
    trainer, _ = _train(RegularizedTrainer, tmp_path / "run")
    logs = [r for r in trainer.state.log_history if "loss" in r]
    assert [r["step"] for r in logs] == [1, 2, 3, 4]
    for r in logs:
        for key in ("task_loss", "istar/loss", "istar/isoscore_star", "cosreg/loss",
                    "cosreg/avg_cosine"):
            assert np.isfinite(r[key]), key
        # the Trainer's own loss (logging every step, no accumulation) is the sum of ours
        assert r["loss"] == pytest.approx(r["task_loss"] + r["istar/loss"] + r["cosreg/loss"],
                                          rel=1e-4, abs=LOGGED_LOSS_ABS)
        # I-STAR: lambda (1 - IsoScore*), lambda = -1
        assert r["istar/loss"] == pytest.approx(-(1.0 - r["istar/isoscore_star"]), rel=1e-5)


def test_regularized_trainer_means_over_the_logging_interval(tmp_path):
    every, _ = _train(RegularizedTrainer, tmp_path / "every")
    pairs, _ = _train(RegularizedTrainer, tmp_path / "pairs", logging_steps=2)
    one = {r["step"]: r for r in every.state.log_history if "loss" in r}
    two = {r["step"]: r for r in pairs.state.log_history if "loss" in r}
    assert sorted(two) == [2, 4]
    for step in (2, 4):
        for key in ("task_loss", "istar/isoscore_star", "cosreg/avg_cosine"):
            want = (one[step - 1][key] + one[step][key]) / 2
            assert two[step][key] == pytest.approx(want, rel=1e-5), (step, key)


def test_regularized_trainer_values_reach_tensorboard(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import TrainingArguments

    # where the Trainer writes TensorBoard's files: logging_dir up to transformers 4.x, an
    # environment variable from 5.0 (logging_dir is gone)
    where = ({"logging_dir": str(tmp_path / "tb")}
             if "logging_dir" in TrainingArguments.__dataclass_fields__ else {})
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    trainer, _ = _train(RegularizedTrainer, tmp_path / "run", report_to="tensorboard", **where)
    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert events
    acc = EventAccumulator(str(events[0].parent), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"train/istar/isoscore_star", "train/task_loss", "train/cosreg/loss"} <= set(tags)
    logged = {r["step"]: r["istar/isoscore_star"] for r in trainer.state.log_history
              if "istar/isoscore_star" in r}
    written = {e.step: e.value for e in acc.Scalars("train/istar/isoscore_star")}
    assert sorted(written) == sorted(logged)
    for step, value in logged.items():
        assert written[step] == pytest.approx(value, rel=1e-6)  # events store float32


def test_a_non_finite_regularizer_value_stops_training_naming_it(tmp_path):
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, num_labels=2)
    model = RegularizedModel(inner, CosRegLoss(tuning=1.0, eager_checks=False))
    data = _data()
    for row in data:  # every token the padding id, with its embedding zeroed: norm zero
        row["input_ids"] = torch.zeros_like(row["input_ids"])
    with torch.no_grad():
        for p in inner.parameters():
            p.zero_()
    trainer = RegularizedTrainer(model=model, args=_args(tmp_path / "run"), train_dataset=data)
    with pytest.raises(ValueError, match="cosreg/.*not finite"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()


def test_weights_of_another_model_are_refused_rather_than_loaded_as_nothing():
    model = _wrapped()
    with pytest.raises(ValueError, match="none of the 2 weights"):
        model.load_state_dict({"encoder.w": torch.zeros(2), "head.b": torch.zeros(1)},
                              strict=False)  # what the Trainer passes


def test_a_plain_torch_module_inside_is_saved_as_its_state_dict(tmp_path):
    from safetensors.torch import load_file

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, 4)

        def forward(self, input_ids, attention_mask=None, labels=None,
                    output_hidden_states=False, return_dict=True):
            e = self.emb(input_ids)
            return {"loss": e.pow(2).mean(), "hidden_states": (e, e.tanh())}

    model = RegularizedModel(Toy(), CosRegLoss(tuning=1.0))
    model.save_pretrained(str(tmp_path / "toy"))
    saved = load_file(tmp_path / "toy" / "model.safetensors")
    assert list(saved) == ["emb.weight"]
    torch.testing.assert_close(saved["emb.weight"], model.model.emb.weight.detach())


def test_embedding_methods_reach_the_wrapped_model():
    from transformers import BertForMaskedLM

    inner = tiny_bert(BertForMaskedLM, vocab_size=VOCAB)
    model = RegularizedModel(inner, CosRegLoss(tuning=1.0))
    model.resize_token_embeddings(VOCAB + 5)
    model.tie_weights()
    assert inner.get_input_embeddings().weight.shape[0] == VOCAB + 5
    assert inner.get_output_embeddings().weight is inner.get_input_embeddings().weight
    assert model.get_input_embeddings() is inner.get_input_embeddings()


@pytest.mark.floor
def test_label_smoothing_keeps_the_regularizers_in_the_loss(tmp_path):
    # the Trainer takes the labels away under label smoothing and computes the task loss from
    # the logits: the regularizers' terms must stay in the loss. At learning rate 0 the logged
    # loss of the single step (the whole dataset as one batch) is the smoothed cross-entropy,
    # by torch, plus the regularizers' values on the same hidden states, by the losses
    import torch.nn.functional as F
    from transformers import BertForSequenceClassification

    from isotropy import PersistentEntropyLoss

    data = _data(16)
    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=0, num_labels=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    entropy = PersistentEntropyLoss(weight=1.0)
    model = RegularizedModel(inner, [IStarLoss(tuning=-1.0, zeta=0.0), entropy])
    trainer = RegularizedTrainer(model=model, train_dataset=data, args=_args(
        tmp_path / "run", per_device_train_batch_size=16, max_steps=1, learning_rate=0.0,
        label_smoothing_factor=0.1, save_strategy="no"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    logged = trainer.state.log_history[0]
    batch = {k: torch.stack([row[k] for row in data]) for k in data[0]}
    inner.train()
    with torch.no_grad():
        out = inner(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    output_hidden_states=True)
        task = F.cross_entropy(out.logits, batch["labels"], label_smoothing=0.1)
        istar = IStarLoss(tuning=-1.0, zeta=0.0)(out.hidden_states, batch["attention_mask"])
        ent = PersistentEntropyLoss(weight=1.0)(out.hidden_states, batch["attention_mask"],
                                                labels=batch["labels"])
    assert logged["loss"] == pytest.approx(float(task + istar.loss + ent.loss), rel=1e-5,
                                           abs=LOGGED_LOSS_ABS)
    assert logged["task_loss"] == pytest.approx(float(task), rel=1e-5)
    # the entropy loss got the labels: one group per class
    assert logged["persistententropy/n_groups"] == 2.0
    # the regularizers' labels are not among the label names the Trainer requires of a batch
    # (else it would compute no evaluation loss)
    assert trainer.label_names == ["labels"]


@pytest.mark.slow
@pytest.mark.floor
def test_compute_loss_func_under_accumulation_weighs_the_regularizers_as_without_it(tmp_path):
    # a compute_loss_func normalised over the whole accumulation cycle (the Trainer then does
    # not divide by the accumulation steps) gives the same objective as the model's own mean
    # loss divided by them; the regularizers must weigh the same in both: same weights
    import torch.nn.functional as F

    def summed_ce(outputs, labels, num_items_in_batch=None):
        return F.cross_entropy(outputs.logits, labels, reduction="sum") / num_items_in_batch

    weights = []
    for kw in ({}, {"compute_loss_func": summed_ce}):
        model = _wrapped()
        trainer = RegularizedTrainer(model=model, train_dataset=_data(), args=_args(
            tmp_path / f"run{len(weights)}", per_device_train_batch_size=4,
            gradient_accumulation_steps=2, save_strategy="no", learning_rate=1e-2), **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    # without the regularizers in the second run, the weights differ by far more than this
    torch.testing.assert_close(weights[1], weights[0], rtol=0, atol=1e-5)


def _no_dropout_entropy_model(accumulation_steps: int, accumulation: str = "exact"
                              ) -> RegularizedModel:
    from transformers import BertForSequenceClassification

    from isotropy import PersistentEntropyLoss

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=0, num_labels=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return RegularizedModel(inner, PersistentEntropyLoss(
        weight=1.0, accumulation_steps=accumulation_steps, accumulation=accumulation))


@pytest.mark.slow
def test_regularized_trainer_scores_the_exact_entropy_of_the_accumulated_batch(tmp_path):
    # one optimizer step of 2 micro-batches of 4 with the exact entropy loss gives the weights
    # of one step on the batch of 8 without accumulation: the task loss's mean over 8 is the
    # mean of the two means over 4, and the entropy scores the 8-point cloud once, weight 1.
    # Scoring each micro-batch alone (a window of 1) is another objective: other weights
    weights, logs = [], []
    for batch, steps, model in ((8, 1, _no_dropout_entropy_model(1)),
                                (4, 2, _no_dropout_entropy_model(2)),
                                (4, 2, _no_dropout_entropy_model(1, "window"))):
        trainer = RegularizedTrainer(model=model, train_dataset=_data(), args=_args(
            tmp_path / f"run{len(weights)}", per_device_train_batch_size=batch, max_steps=1,
            gradient_accumulation_steps=steps, save_strategy="no", learning_rate=1e-2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        logs.append(trainer.state.log_history[0])
    assert logs[1]["persistententropy/n_points"] == 8.0
    assert logs[1]["persistententropy/loss"] == pytest.approx(logs[0]["persistententropy/loss"],
                                                              rel=1e-5)
    # Adam's first step moves every weight by about the learning rate (1e-2): float rounding
    # of the two routes' gradients stays far below that
    torch.testing.assert_close(weights[1], weights[0], rtol=0, atol=1e-5)
    assert float((weights[2] - weights[0]).abs().max()) > 1e-3


def test_an_entropy_loss_set_for_other_accumulation_is_refused_before_training(tmp_path):
    model = _no_dropout_entropy_model(1)
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    trainer = RegularizedTrainer(model=model, train_dataset=_data(), args=_args(
        tmp_path / "run", per_device_train_batch_size=4, gradient_accumulation_steps=2,
        save_strategy="no"))
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=2, but "
                       r"PersistentEntropyLoss\(accumulation_steps=1"):
        trainer.train()
    assert torch.equal(torch.cat([p.detach().flatten() for p in model.parameters()]), before)


def _istar_model() -> RegularizedModel:
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=0, num_labels=2)
    return RegularizedModel(inner, IStarLoss(tuning=-1.0, zeta=0.2))


def _train_with_refresh(out, resume=None, warned=None, **kw):
    """The I-STAR model trained with the refresh callback; the warnings' texts are appended
    to ``warned``."""
    from isotropy import ShrinkageRefreshCallback

    model = _istar_model()
    trainer = RegularizedTrainer(model=model, args=_args(out, per_device_train_batch_size=4, **kw),
                                 train_dataset=_data(16),
                                 callbacks=[ShrinkageRefreshCallback(n_tokens=60)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(resume_from_checkpoint=resume)
    if warned is not None:
        warned.extend(str(w.message) for w in caught)
    return model


@pytest.mark.slow
def test_a_run_resumed_mid_epoch_keeps_the_epochs_shrinkage(tmp_path):
    # 4 steps in one epoch, a checkpoint at step 2: resumed there, the run ends with the
    # uninterrupted run's weights, because the epoch's Sigma_S comes from the checkpoint
    # instead of being estimated again from the model at step 2
    full = _train_with_refresh(tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoint-2"
    assert (checkpoint / "shrinkage_refresh.pt").is_file()
    resumed = _train_with_refresh(tmp_path / "run", resume=str(checkpoint))
    for name, value in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=1e-5,
                                   atol=1e-6)
    # without the file the resumed run re-estimates Sigma_S, says so, and ends elsewhere
    (checkpoint / "shrinkage_refresh.pt").unlink()
    from isotropy import ShrinkageRefreshCallback

    model = _istar_model()
    trainer = RegularizedTrainer(model=model, args=_args(tmp_path / "run",
                                                         per_device_train_batch_size=4),
                                 train_dataset=_data(16),
                                 callbacks=[ShrinkageRefreshCallback(n_tokens=60)])
    with pytest.warns(UserWarning, match="Sigma_S of the current epoch is estimated from the "
                                         "resumed model"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert max(float((model.model.state_dict()[k] - v).abs().max())
               for k, v in full.model.state_dict().items()) > 1e-5


@pytest.mark.slow
def test_a_resume_from_a_checkpoint_moved_elsewhere_keeps_its_shrinkage(tmp_path):
    # the Trainer tells the callback which checkpoint it resumes: its Sigma_S is found there
    import shutil

    full = _train_with_refresh(tmp_path / "run")
    moved = tmp_path / "elsewhere" / "checkpoint-2"
    shutil.copytree(tmp_path / "run" / "checkpoint-2", moved)
    warned: list[str] = []
    resumed = _train_with_refresh(tmp_path / "other-out", resume=str(moved), warned=warned)
    assert not [w for w in warned if "Sigma_S of the current epoch" in w]
    for name, value in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=1e-5,
                                   atol=1e-6)


def test_a_saved_shrinkage_of_other_weights_is_not_taken(tmp_path):
    # a file saved with other weights (another run's, in the same place) is refused: the
    # resumed run warns and re-estimates Sigma_S rather than use a foreign one
    from isotropy import ShrinkageRefreshCallback

    _train_with_refresh(tmp_path / "run")
    path = tmp_path / "run" / "checkpoint-2" / "shrinkage_refresh.pt"
    saved = torch.load(path, weights_only=True)
    saved["fingerprint"] += 1.0
    torch.save(saved, path)
    trainer = RegularizedTrainer(model=_istar_model(), args=_args(
        tmp_path / "run", per_device_train_batch_size=4), train_dataset=_data(16),
        callbacks=[ShrinkageRefreshCallback(n_tokens=60)])
    with pytest.warns(UserWarning, match="without a Sigma_S saved with these weights"):
        trainer.train(resume_from_checkpoint=str(path.parent))


@pytest.mark.slow
def test_evaluation_with_a_compute_loss_func_adds_the_terms_undivided(tmp_path):
    # evaluation's loss is a per-batch mean: the regularizers (regularize_eval) are added as
    # they are, before training and after training with accumulation alike
    import torch.nn.functional as F
    from transformers import BertForSequenceClassification

    def summed_ce(outputs, labels, num_items_in_batch=None):
        n = num_items_in_batch if num_items_in_batch is not None else labels.numel()
        return F.cross_entropy(outputs.logits, labels, reduction="sum") / n

    data = _data(16)
    values = []
    for kw in ({}, {"compute_loss_func": summed_ce}):
        inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=0, num_labels=2)
        model = RegularizedModel(inner, CosRegLoss(tuning=1.0), regularize_eval=True)
        args = _args(tmp_path / f"run{len(values)}", per_device_train_batch_size=4,
                     per_device_eval_batch_size=16, gradient_accumulation_steps=4,
                     learning_rate=0.0, save_strategy="no")
        trainer = RegularizedTrainer(model=model, train_dataset=data, eval_dataset=data,
                                     args=args, **kw)
        before = trainer.evaluate()["eval_loss"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        values.append((before, trainer.evaluate()["eval_loss"]))
    assert values[1][0] == pytest.approx(values[0][0], rel=1e-5)
    assert values[1][1] == pytest.approx(values[0][1], rel=1e-5)


def _smoothed_ce(outputs, labels, num_items_in_batch=None):
    import torch.nn.functional as F

    return F.cross_entropy(outputs.logits, labels, label_smoothing=0.1)


@pytest.mark.parametrize("kw", [{"label_smoothing_factor": 0.1},
                                {"compute_loss_func": _smoothed_ce}],
                         ids=["label_smoothing", "compute_loss_func"])
@pytest.mark.floor
def test_a_plain_trainer_that_would_drop_the_regularizers_is_refused_before_a_step(tmp_path, kw):
    # the Trainer takes the labels away and computes the loss from the logits alone: the
    # wrapper's loss (task + regularizers) would never be used. Refused at the first training
    # forward, naming the fix, before any weight changes
    from transformers import Trainer

    model = _wrapped()
    before = [p.detach().clone() for p in model.parameters()]
    args = {k: v for k, v in kw.items() if k != "compute_loss_func"}
    trainer = Trainer(model=model, args=_args(tmp_path / "run", save_strategy="no", **args),
                      train_dataset=_data(), compute_loss_func=kw.get("compute_loss_func"))
    option = next(iter(kw))
    with pytest.raises(ValueError, match=f"Trainer with {option} computes the loss from the "
                       "logits and drops the regularizers.*isotropy.RegularizedTrainer"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert trainer.state.global_step == 0
    for a, b in zip(before, model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_own_compute_loss_without_labels_is_warned_of_once(tmp_path):
    # a Trainer subclass computing its own loss from the logits (e.g. class weights) drops the
    # regularizers unless it adds outputs.loss: a warning names that, once
    import torch.nn.functional as F
    from transformers import Trainer

    class Weighted(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = F.cross_entropy(outputs.logits, labels, weight=torch.tensor([1.0, 2.0]))
            return (loss, outputs) if return_outputs else loss

    trainer = Weighted(model=_wrapped(), args=_args(tmp_path / "run", save_strategy="no"),
                       train_dataset=_data())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    ours = [w for w in caught if "without labels" in str(w.message)]
    assert len(ours) == 1 and issubclass(ours[0].category, UserWarning)
    assert "add outputs.loss" in str(ours[0].message)
    assert "Weighted.compute_loss" in str(ours[0].message)
    assert trainer.state.global_step == 4  # it trains: the loss may be what the user wants


def test_a_training_forward_without_labels_outside_a_trainer_is_silent():
    # a loop adding the wrapper's loss (the regularizers' terms) to its own task loss
    model = _wrapped().train()
    batch = {k: torch.stack([r[k] for r in _data(8)]) for k in ("input_ids", "attention_mask")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(**batch)
    # (the regularizer's own notice that Sigma_S was never set may come; nothing of labels)
    assert not [w for w in caught if "label" in str(w.message)], [str(w.message) for w in caught]
    assert out.task_loss is None
    assert torch.isclose(out.loss, sum(out.regularizer_losses.values()))


def test_the_refresh_callback_refuses_such_a_trainer_before_its_first_pass(tmp_path):
    # with ShrinkageRefreshCallback, the refusal comes at on_train_begin: no batch is read for
    # Sigma_S (a pass of minutes at the paper's size) before the error
    from transformers import Trainer

    from isotropy import ShrinkageRefreshCallback

    class Counted(list):
        reads = 0

        def __iter__(self):
            Counted.reads += 1
            return super().__iter__()

    data = _data()
    batches = Counted([{k: torch.stack([r[k] for r in data[:8]]) for k in data[0]}])
    trainer = Trainer(model=_wrapped(), train_dataset=data,
                      args=_args(tmp_path / "run", label_smoothing_factor=0.1,
                                 save_strategy="no"),
                      callbacks=[ShrinkageRefreshCallback(dataloader=batches, n_tokens=50)])
    with pytest.raises(ValueError, match="label_smoothing_factor computes the loss"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert Counted.reads == 0


@pytest.mark.floor
def test_regularized_trainer_with_the_refresh_callback_and_label_smoothing_trains(tmp_path):
    from isotropy import ShrinkageRefreshCallback

    trainer = RegularizedTrainer(
        model=_wrapped(), train_dataset=_data(),
        args=_args(tmp_path / "run", label_smoothing_factor=0.1, save_strategy="no"),
        callbacks=[ShrinkageRefreshCallback(n_tokens=50)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert trainer.state.global_step == 4
    assert all("istar/loss" in r for r in trainer.state.log_history if "loss" in r)
