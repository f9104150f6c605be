"""Half-precision weights load as float32 for training, float32 and float64 ones as they are,
under every transformers version (transformers 5 keeps a checkpoint's own dtype by default,
4.x loads float32), and ``analyze --dtype`` chooses the measured model's weights."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from _models import save_tiny_bert
from _training import WORDS, run_train, train_argv, write_sst2

from isotropy.models.loading import dtype_kwargs, load_model, weight_dtype


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def half_model_dir(tmp_path_factory):
    """A tiny BERT saved with float16 weights (as a bundle or a hub checkpoint may be)."""
    return save_tiny_bert(tmp_path_factory.mktemp("half"), WORDS, dtype=torch.float16)


def test_dtype_keyword_and_names():
    (key,) = dtype_kwargs(torch.float32)
    assert key in ("dtype", "torch_dtype")
    assert weight_dtype("float16") is torch.float16 and weight_dtype(torch.bfloat16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        weight_dtype("fp8")
    with pytest.raises(ValueError, match="cannot be loaded as"):
        weight_dtype(torch.int8)


def test_load_model_upcasts_half_and_keeps_float64_unless_asked(half_model_dir, tmp_path):
    double = save_tiny_bert(tmp_path / "f64", WORDS, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net, _ = load_model(half_model_dir)
        assert {p.dtype for p in net.parameters()} == {torch.float32}
        net, _ = load_model(double)
        assert {p.dtype for p in net.parameters()} == {torch.float64}
        net, _ = load_model(double, dtype="float32")
        assert {p.dtype for p in net.parameters()} == {torch.float32}
        net, _ = load_model(half_model_dir, dtype="auto")
        assert {p.dtype for p in net.parameters()} == {torch.float16}
        net, _ = load_model(half_model_dir, dtype="bfloat16")
        assert {p.dtype for p in net.parameters()} == {torch.bfloat16}


def test_training_a_half_checkpoint_keeps_float32_master_weights(half_model_dir, tmp_path):
    glue = write_sst2(tmp_path / "glue", [("train", 24), ("dev", 8)], 0)
    out = tmp_path / "run"
    run_train(train_argv(half_model_dir, glue, out, "--num_train_epochs", "1",
                         "--task", "sst2", "--regularizer", "istar"))
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg.get("dtype", cfg.get("torch_dtype")) == "float32"
