"""Tiny model, tiny task files and tiny sweep settings shared by the sweep tests."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from _models import save_tiny_bert

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull", "movie", "film",
         "plot", "the", "a", "is", "was", "very", "not"]


def make_tiny_model(root: Path) -> Path:
    """A saved tiny random BERT encoder with a WordPiece tokenizer over ``WORDS``."""
    return save_tiny_bert(root, WORDS, name="tiny")


def write_sst2(root: Path, *, bad_label_in_train: bool = False) -> Path:
    """An SST-2 train/dev pair (16 + 8 rows, glue_data layout); optionally one train row with
    the label ``x``, which makes loading the training split fail."""
    rng = random.Random(0)
    (root / "SST-2").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 16), ("dev", 8)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            y = i % 2
            cue = "good" if y else "bad"
            label = "x" if (bad_label_in_train and split == "train" and i == 3) else str(y)
            rows.append(" ".join([*rng.choices(WORDS[8:], k=3), cue]) + f"\t{label}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def tiny_base(model: Path, glue: Path, **extra: Any) -> dict[str, Any]:
    """``isotropy train`` settings of a run of a second or two: 16 examples, 2 steps."""
    return {
        "task": "sst2", "model": str(model), "data_dir": str(glue), "max_seq_length": 12,
        "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8,
        "num_train_epochs": 1, "learning_rate": 1e-3, "logging_steps": 1,
        "report_to": "none", "use_cpu": True, "shrinkage_tokens": 50,
        "measure_max_tokens": 100, "save_strategy": "no", **extra,
    }
