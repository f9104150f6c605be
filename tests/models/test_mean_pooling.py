"""``MeanPooledClassifier`` (``--classifier_pooling mean``) against hand-computed readouts, and
``isotropy train`` under it end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from _models import random_inputs, save_tiny_bert, tiny_bert
from _training import WORDS, write_sst2
from _training import run_train as _run
from _training import train_argv as _argv

from isotropy.models.mean_pooling import MeanPooledClassifier, set_classifier_pooling

VOCAB = 40


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


def _bert(num_labels: int = 3, seed: int = 0):
    from transformers import BertForSequenceClassification

    return tiny_bert(BertForSequenceClassification, vocab_size=VOCAB, seed=seed,
                     num_labels=num_labels).eval()


def _batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return random_inputs(g, batch=5, seq=12, vocab_size=VOCAB, min_length=2)


def _means_by_slicing(encoder, batch) -> torch.Tensor:
    """Each example run alone, cut to its real tokens, averaged over positions."""
    rows = []
    for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True):
        n = int(mask.sum())
        h = encoder(input_ids=ids[None, :n]).last_hidden_state[0]
        rows.append(h.mean(0))
    return torch.stack(rows)


def test_bert_head_reads_the_mean_of_the_real_tokens_not_the_pooler():
    model = _bert()
    net = MeanPooledClassifier(model).eval()
    batch = _batch()
    with torch.no_grad():
        logits = net(**batch).logits
        expected = _means_by_slicing(model.bert, batch) @ model.classifier.weight.T \
            + model.classifier.bias
        cls_logits = _bert()(**batch).logits  # the same weights, its own [CLS] head
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(logits, cls_logits, atol=1e-3)  # not the [CLS] readout


def test_roberta_head_reads_the_mean_through_dense_tanh_and_projection():
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=40, num_labels=2, pad_token_id=0)
    model = RobertaForSequenceClassification(cfg).eval()
    net = MeanPooledClassifier(model).eval()
    batch = _batch(seed=2)
    batch["input_ids"] = batch["input_ids"].clamp(min=2) * batch["attention_mask"]
    head = model.classifier
    with torch.no_grad():
        mean = _means_by_slicing(model.roberta, batch)
        expected = head.out_proj(torch.tanh(head.dense(mean)))
        torch.testing.assert_close(net(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_the_readout_of_an_example_does_not_depend_on_its_batch_padding():
    net = MeanPooledClassifier(_bert()).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        alone = net(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        padded = net(input_ids=torch.tensor([[5, 6, 7, 8, 0, 0, 0]]),
                     attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0, 0]])).logits
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)


def test_losses_are_cross_entropy_and_mean_squared_error_computed_by_hand():
    batch = _batch()
    net = MeanPooledClassifier(_bert(num_labels=3)).eval()
    labels = torch.tensor([0, 2, 1, 1, 0])
    with torch.no_grad():
        out = net(**batch, labels=labels)
    z = out.logits.double().numpy()
    by_hand = np.mean([math.log(np.exp(r).sum()) - r[y] for r, y in zip(z, labels.tolist(),
                                                                        strict=True)])
    assert float(out.loss) == pytest.approx(by_hand, rel=1e-5)

    reg = MeanPooledClassifier(_bert(num_labels=1)).eval()
    scores = torch.tensor([0.5, 4.0, 2.5, 1.0, 3.3])
    with torch.no_grad():
        out = reg(**batch, labels=scores)
    pred = out.logits[:, 0].double().numpy()
    assert float(out.loss) == pytest.approx(np.mean((pred - scores.double().numpy()) ** 2),
                                            rel=1e-5)


def test_every_parameter_gets_a_gradient_the_unused_pooler_is_gone():
    net = MeanPooledClassifier(_bert()).train()
    net(**_batch(), labels=torch.tensor([0, 1, 2, 0, 1])).loss.backward()
    grads = {n: p.grad for n, p in net.named_parameters()}
    assert not any(".pooler." in n for n in grads)  # (DDP refuses parameters without one)
    assert all(g is not None and float(g.abs().sum()) > 0 for g in grads.values())


def test_multi_label_models_are_refused():
    model = _bert()
    model.config.problem_type = "multi_label_classification"
    with pytest.raises(ValueError, match="multi-label"):
        MeanPooledClassifier(model)


def test_a_regularized_mean_readout_saves_a_given_state_dict_under_the_models_own_keys(
        tmp_path):
    from transformers import AutoModelForSequenceClassification

    from isotropy import CosRegLoss, RegularizedModel

    wrapped = RegularizedModel(MeanPooledClassifier(_bert()), CosRegLoss(tuning=1.0))
    wrapped.save_pretrained(str(tmp_path / "m"), state_dict=wrapped.state_dict())  # FSDP's way
    back = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "m"))
    for name, value in wrapped.model.model.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], value, rtol=0, atol=0)


def test_hidden_states_are_returned_when_asked_for_the_regularizers():
    net = MeanPooledClassifier(_bert()).eval()
    with torch.no_grad():
        out = net(**_batch(), output_hidden_states=True)
        plain = net(**_batch())
    assert len(out.hidden_states) == 3  # embeddings + 2 layers
    assert plain.hidden_states is None


def test_save_and_load_round_trip_keeps_the_mean_readout(tmp_path):
    from transformers import AutoModelForSequenceClassification

    net = MeanPooledClassifier(_bert())
    net.save_pretrained(tmp_path / "m")
    back = MeanPooledClassifier.from_pretrained(str(tmp_path / "m")).eval()
    batch = _batch()
    with torch.no_grad():
        torch.testing.assert_close(back(**batch).logits, net.eval()(**batch).logits)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["classifier_pooling"] \
        == "mean"
    _bert().save_pretrained(tmp_path / "cls")
    with pytest.raises(ValueError, match="AutoModelForSequenceClassification"):
        MeanPooledClassifier.from_pretrained(str(tmp_path / "cls"))
    assert AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "m")) is not None


def test_unsupported_heads_and_values_are_refused():
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.classifier = torch.nn.Sequential(torch.nn.Linear(4, 2))

    with pytest.raises(ValueError, match="BERT kind"):
        MeanPooledClassifier(Odd())
    with pytest.raises(TypeError, match="torch.nn.Module"):
        MeanPooledClassifier("bert")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cls, mean"):
        set_classifier_pooling(_bert(), "max")
    model = _bert()
    assert set_classifier_pooling(model, "cls") is model


# --------------------------------------------------------------------------- isotropy train


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("meanhead")
    model = save_tiny_bert(root, WORDS)
    glue = write_sst2(root / "glue", [("train", 32), ("dev", 16)], seed=0)
    return model, glue


def test_train_with_a_mean_readout_records_it_and_saves_a_loadable_classifier(tiny, tmp_path):
    model, glue = tiny
    out = tmp_path / "run"
    res = _run(_argv(model, glue, out, "--task", "sst2", "--num_train_epochs", "1",
                     "--classifier_pooling", "mean", "--regularizer", "istar"))
    assert res.status == "trained"
    config = json.loads((out / "config.json").read_text())
    assert config["settings"]["isotropy"]["classifier_pooling"] == "mean"
    net = MeanPooledClassifier.from_pretrained(str(out / "model")).eval()
    rows = (out / "eval_predictions.csv").read_text().splitlines()
    assert len(rows) == 17  # a header and 16 predictions
    assert math.isfinite(res.results["final"]["eval_accuracy"])
    assert net.head_kind == "linear"


def test_classifier_pooling_is_checked_before_any_work(tiny, tmp_path):
    from isotropy.training.config import default_run_name
    from isotropy.training.settings import parse_train_args

    model, glue = tiny
    with pytest.raises(ValueError, match="--classifier_pooling must be cls or mean"):
        parse_train_args(_argv(model, glue, tmp_path / "a", "--classifier_pooling", "max"))
    with pytest.raises(ValueError, match="SQuAD"):
        parse_train_args(_argv(model, glue, tmp_path / "b", "--task", "squad",
                               "--classifier_pooling", "mean"))
    assert default_run_name({"task": "mrpc", "model": "minilm", "seed": 0,
                             "classifier_pooling": "mean"}) == "mrpc-minilm-none+meanhead-seed0"


def test_a_resumed_mean_readout_run_equals_the_uninterrupted_run(tiny, tmp_path):
    from _training import crash_and_resume
    from safetensors.torch import load_file

    model, glue = tiny
    extra = ["--task", "sst2", "--classifier_pooling", "mean", "--save_strategy", "steps",
             "--save_steps", "3"]
    full, broken, res = crash_and_resume(model, glue, tmp_path, extra, at=5)
    assert res.results["train"]["resumed_from"].endswith("checkpoint-3")
    a, b = (json.loads((d / "results.json").read_text()) for d in (full, broken))
    for key in ("eval_loss", "eval_accuracy"):
        assert b["final"][key] == pytest.approx(a["final"][key], rel=1e-5, abs=1e-7)
    wa, wb = (load_file(d / "model" / "model.safetensors") for d in (full, broken))
    assert sorted(wa) == sorted(wb) and any("classifier" in k for k in wa)
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6)
