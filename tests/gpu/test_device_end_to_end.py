"""A tiny ``isotropy train`` under mixed precision with each regularizer, ``RegularizedModel``
forward and backward, and ``isotropy analyze``: on CPU with bfloat16, and (marked ``gpu``,
skipped without CUDA) on CUDA with float16 and bfloat16, against float32 on CPU."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from _models import random_inputs, save_tiny_bert, tiny_bert
from _training import WORDS, run_train, write_sst2

from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.models.regularized import RegularizedModel
from isotropy.probing.analyze import analyze

GPU = pytest.mark.gpu
PRECISIONS = [
    pytest.param("cpu", "bf16", id="cpu-bf16"),
    pytest.param("cuda", "fp16", id="cuda-fp16", marks=GPU),
    pytest.param("cuda", "bf16", id="cuda-bf16", marks=GPU),
]
REGULARIZERS = {
    "istar": ["--regularizer", "istar", "--tuning", "-1", "--zeta", "0.2"],
    "cosreg": ["--regularizer", "cosreg"],
    "entropy": ["--regularizer", "entropy", "--gradient_accumulation_steps", "2"],
}


@pytest.fixture(autouse=True)
def _threads(one_thread):
    """Tiny models: one CPU thread."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("bert"), WORDS)


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_sst2(tmp_path_factory.mktemp("glue"), [("train", 32), ("dev", 64)], 2)


@pytest.fixture(autouse=True)
def _bf16_on_any_cpu(monkeypatch):
    """``isotropy train`` refuses --bf16 on a CPU without native bf16 (20x slower there);
    these runs check correctness, not speed, so every CPU is taken as native."""
    import isotropy.runtime

    monkeypatch.setattr(isotropy.runtime, "cpu_has_native_bf16", lambda: True)


def _argv(model_dir, glue, out, device, precision, *extra):
    return ["--model", str(model_dir), "--data_dir", str(glue), "--output_dir", str(out),
            "--task", "sst2", "--max_seq_length", "24", "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "16", "--num_train_epochs", "1",
            "--learning_rate", "1e-3", "--logging_steps", "1", "--seed", "3",
            "--disable_tqdm", "true", "--report_to", "none", "--shrinkage_tokens", "300",
            "--save_strategy", "no", f"--{precision}", "true",
            *(["--use_cpu", "true"] if device == "cpu" else []), *extra]


@pytest.mark.parametrize("reg", list(REGULARIZERS))
@pytest.mark.parametrize(("device", "precision"), PRECISIONS)
def test_train_under_mixed_precision(model_dir, glue, tmp_path, device, precision, reg):
    out = tmp_path / "run"
    run_train(_argv(model_dir, glue, out, device, precision, *REGULARIZERS[reg]))
    results = json.loads((out / "results.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["settings"]["training"][precision] is True
    train_loss = results["train"]["train_loss"]
    assert math.isfinite(train_loss)
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "loss" in r and "eval_loss" not in r]
    assert steps and all(math.isfinite(r["loss"]) for r in steps)
    assert all(math.isfinite(v) for r in logs for v in r.values() if isinstance(v, float))
    assert math.isfinite(results["final"]["eval_accuracy"])


@pytest.mark.parametrize(("device", "precision"), PRECISIONS)
def test_regularized_model_step_against_cpu_float32(device, precision):
    from transformers import BertForSequenceClassification

    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    batch = random_inputs(torch.Generator().manual_seed(1), batch=8, seq=16, vocab_size=50,
                          min_length=4)
    batch["labels"] = torch.tensor([0, 1] * 4)

    def step(dev: str, half: bool):
        model = tiny_bert(BertForSequenceClassification, vocab_size=50, seed=0,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).to(dev)
        regs = [IStarLoss(-1.0, zeta=0.2, shrinkage=torch.eye(32, device=dev)),
                CosRegLoss(1.0), PersistentEntropyLoss(1.0, sync_dist=False)]
        wrapped = RegularizedModel(model, regs).train()
        with torch.autocast(device_type=dev, dtype=dtype, enabled=half):
            out = wrapped(**{k: v.to(dev) for k, v in batch.items()})
        out.loss.backward()
        grads = torch.cat([p.grad.flatten().float().cpu() for p in model.parameters()
                           if p.grad is not None])
        return float(out.loss.detach()), {k: float(v.detach())
                                          for k, v in out.regularizer_losses.items()}, grads

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_loss, ref_regs, ref_grads = step("cpu", False)
        loss, regs, grads = step(device, True)
    assert math.isfinite(loss) and torch.isfinite(grads).all()
    assert loss == pytest.approx(ref_loss, abs=0.05)
    for k, v in ref_regs.items():
        assert regs[k] == pytest.approx(v, abs=0.05), k
    cos = float(torch.nn.functional.cosine_similarity(grads, ref_grads, dim=0))
    assert cos > 0.98, f"gradient direction differs from float32: cosine {cos:.4f}"


@pytest.mark.parametrize(("device", "dtype"), [
    pytest.param("cpu", "bfloat16", id="cpu-bf16"),
    pytest.param("cuda", "float32", id="cuda-fp32", marks=GPU),
    pytest.param("cuda", "bfloat16", id="cuda-bf16", marks=GPU),
])
def test_analyze_against_cpu_float32(model_dir, glue, device, dtype):
    kw = dict(task="sst2", data_dir=glue, batch_size=8, zeta=0.2, shrinkage_tokens=300,
              top_k=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = analyze(model_dir, device="cpu", **kw)
        got = analyze(model_dir, device=device, dtype=dtype, **kw)
    assert got.config["weights_dtype"] == dtype
    tol = 1e-4 if dtype == "float32" else 0.05
    for a, b in zip(ref.rows, got.rows, strict=True):
        if dtype != "float32" and a["cloud"] == "cls":
            # this random model's [CLS] rows differ from each other by less than bfloat16's
            # rounding of their common offset: in bf16 the rounding noise is the cloud's shape
            continue
        for key in ("isoscore", "isoscore_star", "avg_cosine"):
            if a.get(key) is not None:
                assert b[key] == pytest.approx(a[key], abs=tol), (a["layer"], a["cloud"], key)
