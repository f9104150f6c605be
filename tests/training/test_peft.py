"""A PEFT (LoRA) model inside ``RegularizedModel`` with the ``Trainer``: only the adapter
trains, the regularizers' gradient reaches it, what is saved is the adapter that
``PeftModel.from_pretrained`` loads, and ``RegularizedTrainer`` resumes a checkpoint to the
uninterrupted run's weights and loads the best checkpoint at the end."""

from __future__ import annotations

import warnings

import pytest
import torch
from _models import labelled_rows, tiny_bert
from _training import own_trainer_args

from isotropy import CosRegLoss, IStarLoss, RegularizedModel, RegularizedTrainer
from isotropy.training.peft_checkpoints import peft_model_inside

peft = pytest.importorskip("peft", reason="needs peft (the test extras)")

VOCAB = 30


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _lora(seed: int = 0, adapter_seed: int = 0) -> torch.nn.Module:
    """The tiny BERT of ``seed`` (frozen under LoRA: a resumed run rebuilds the same one, as
    from_pretrained does) with LoRA adapters drawn with ``adapter_seed``."""
    from transformers import BertForSequenceClassification

    inner = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=seed, num_labels=2)
    torch.manual_seed(adapter_seed)  # LoRA's A matrices and the new head are drawn at random
    return peft.get_peft_model(inner, peft.LoraConfig(
        r=4, target_modules=["query", "value"], task_type="SEQ_CLS"))


def _wrapped(seed: int = 0, adapter_seed: int = 0) -> RegularizedModel:
    return RegularizedModel(_lora(seed, adapter_seed), [IStarLoss(tuning=-1.0, zeta=0.0),
                                                        CosRegLoss(tuning=1.0)])


def _args(out, **kw):
    return own_trainer_args(out, **{"learning_rate": 1e-2, **kw})


def _fit(trainer, **kw) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(**kw)


def test_only_the_adapter_trains_and_the_regularizer_reaches_it(tmp_path):
    model = _wrapped()
    assert peft_model_inside(model) is model.model
    assert peft_model_inside(RegularizedModel(torch.nn.Linear(2, 2))) is None
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = RegularizedTrainer(model=model, args=_args(tmp_path), train_dataset=labelled_rows(
        32, 0, vocab_size=VOCAB, seq=10))
    _fit(trainer)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert changed and changed <= trainable
    assert any("lora_A" in n for n in changed) and any("lora_B" in n for n in changed)
    assert not any("lora" not in n and "classifier" not in n for n in trainable)
    assert "istar/isoscore_star" in trainer.state.log_history[0]
    # the regularizers alone give the adapter a gradient (no labels: no task loss)
    fresh = _wrapped(seed=1)
    batch = labelled_rows(8, 0, vocab_size=VOCAB, seq=10)
    inputs = {k: torch.stack([r[k] for r in batch]) for k in ("input_ids", "attention_mask")}
    out = fresh(**inputs)
    assert out.task_loss is None
    out.loss.backward()
    grads = [p.grad for n, p in fresh.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_save_model_writes_the_adapter_that_from_pretrained_loads(tmp_path):
    from transformers import BertForSequenceClassification, Trainer

    model = _wrapped()
    trainer = Trainer(model=model, args=_args(tmp_path / "run"),
                      train_dataset=labelled_rows(32, 0, vocab_size=VOCAB, seq=10))
    _fit(trainer)
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "final" / "model.safetensors").exists()
    base = tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=0, num_labels=2)
    loaded = peft.PeftModel.from_pretrained(base, str(tmp_path / "final"))
    for name, value in model.model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0)


def test_regularized_trainer_resumes_to_the_uninterrupted_weights(tmp_path):
    data = labelled_rows(32, 0, vocab_size=VOCAB, seq=10)
    full = _wrapped()
    _fit(RegularizedTrainer(model=full, args=_args(tmp_path / "full"), train_dataset=data))
    resumed = _wrapped(adapter_seed=3)  # other adapter weights: all must come from the file
    assert not torch.equal(*(m.model.state_dict()[k] for m in (resumed, _wrapped())
                             for k in ["base_model.model.bert.encoder.layer.0.attention.self."
                                       "query.lora_A.default.weight"]))
    trainer = RegularizedTrainer(model=resumed, args=_args(tmp_path / "full"),
                                 train_dataset=data)
    _fit(trainer, resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert trainer.state.global_step == 4
    for name, value in full.model.state_dict().items():
        if "lora" in name or "classifier" in name:
            torch.testing.assert_close(resumed.model.state_dict()[name], value,
                                       rtol=0, atol=0, msg=name)


def test_regularized_trainer_loads_the_best_adapter_at_the_end(tmp_path):
    from safetensors.torch import load_file

    data = labelled_rows(32, 0, vocab_size=VOCAB, seq=10)
    model = _wrapped()
    trainer = RegularizedTrainer(
        model=model, train_dataset=data, eval_dataset=data,
        args=_args(tmp_path, eval_strategy="steps", eval_steps=2, load_best_model_at_end=True,
                   # the larger eval loss is "best": the first checkpoint, not the last one
                   metric_for_best_model="loss", greater_is_better=True))
    _fit(trainer)
    best = trainer.state.best_model_checkpoint
    assert best is not None
    saved = load_file(f"{best}/adapter_model.safetensors")
    now = peft.get_peft_model_state_dict(model.model)  # peft's names of the saved weights
    assert saved and set(saved) == set(now)
    for key, value in saved.items():
        torch.testing.assert_close(now[key], value, rtol=0, atol=0, msg=key)
    # the best checkpoint is not the last one: loading it changed the weights
    last = load_file(tmp_path / f"checkpoint-{trainer.state.global_step}" /
                     "adapter_model.safetensors")
    assert best.endswith("checkpoint-2") and any(
        not torch.equal(last[k], saved[k]) for k in saved)
