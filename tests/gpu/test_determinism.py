"""``isotropy train --full_determinism true`` on a sentence-pair task (MRPC: two token types),
twice from the same seed: the same losses at every step and the same predictions. On CUDA
(marked ``gpu``) with each regularizer, where a regularizer op without a deterministic kernel
would stop the run with torch's error naming it; on CPU with I-STAR, a check of the test
itself. Each run is its own process: ``full_determinism`` switches torch's global
deterministic mode on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _models import save_tiny_bert
from _training import WORDS

from isotropy.data.glue import default_glue_dir

GPU = pytest.mark.gpu
REGULARIZERS = {
    "none": ["--regularizer", "none"],
    "istar": ["--regularizer", "istar", "--tuning", "-1", "--zeta", "0.6"],
    "cosreg": ["--regularizer", "cosreg"],
    "entropy": ["--regularizer", "entropy", "--gradient_accumulation_steps", "2"],
}
CASES = [pytest.param("cpu", "istar", id="cpu-istar"),
         *[pytest.param("cuda", reg, id=f"cuda-{reg}", marks=GPU) for reg in REGULARIZERS]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("bert"), WORDS)


def _run(model_dir: Path, glue: Path, out: Path, device: str, reg: str) -> list[float]:
    argv = [sys.executable, "-m", "isotropy.cli.main", "train", "--model", str(model_dir),
            "--data_dir", str(glue), "--output_dir", str(out), "--task", "mrpc",
            "--max_train_samples", "32", "--max_eval_samples", "16", "--max_seq_length", "32",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16",
            "--num_train_epochs", "1", "--learning_rate", "1e-3", "--logging_steps", "1",
            "--seed", "3", "--full_determinism", "true", "--disable_tqdm", "true",
            "--report_to", "none", "--shrinkage_tokens", "300", "--save_strategy", "no",
            *(["--use_cpu", "true"] if device == "cpu" else []), *REGULARIZERS[reg]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in logs if "loss" in r and "eval_loss" not in r]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("device", "reg"), CASES)
def test_full_determinism_repeats_a_pair_task_run(model_dir, tmp_path, device, reg):
    glue = default_glue_dir()
    if glue is None or not (glue / "MRPC" / "train.tsv").is_file():
        pytest.skip("needs GLUE MRPC (../shared/glue_data or GLUE_DIR)")
    first = _run(model_dir, glue, tmp_path / "a", device, reg)
    second = _run(model_dir, glue, tmp_path / "b", device, reg)
    assert len(first) == 4 // (2 if reg == "entropy" else 1)  # 32 pairs, 8 a step
    assert first == second  # bit for bit, every logged step
    predictions = [(tmp_path / run / "eval_predictions.csv").read_text() for run in "ab"]
    assert predictions[0] == predictions[1]
