"""Shared pieces of the training tests: the tiny vocabulary and sentences, SST-2 files of
them, ``isotropy train`` arguments for tiny runs, an in-process run, a callback that
simulates a crash, and ``TrainingArguments`` for a user's own ``Trainer`` on a tiny model."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import TrainerCallback

from isotropy.training.run import run_training
from isotropy.training.settings import parse_train_args

WORDS = [
    "good", "bad", "fine", "awful", "great", "poor", "nice", "dull", "happy", "sad", "movie",
    "film", "plot", "actor", "story", "the", "a", "is", "was", "very", "not",
]


def sentence(rng: random.Random, label: int) -> str:
    cue = rng.choice(["good", "great", "nice", "happy"] if label else ["bad", "awful", "poor"])
    return " ".join([*rng.choices(WORDS[9:], k=rng.randint(2, 8)), cue])


def write_sst2(root: Path, sizes: Sequence[tuple[str, int]], seed: int,
               make: Callable[[random.Random, int], str] = sentence) -> Path:
    """SST-2 ``<split>.tsv`` files under ``root/SST-2`` (glue_data layout): for each
    ``(split, n)``, ``n`` rows of a random label and ``make(rng, label)``, one seeded
    ``random.Random(seed)`` drawn in that order; returns ``root``."""
    rng = random.Random(seed)
    (root / "SST-2").mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randint(0, 1)
            rows.append(f"{make(rng, y)}\t{y}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def own_trainer_args(out, **kw):
    """``TrainingArguments`` of the own-``Trainer`` tests: 4 CPU steps of 8 rows, a log every
    step and a checkpoint every 2; ``kw`` replaces or adds arguments."""
    from transformers import TrainingArguments

    base = {"output_dir": str(out), "per_device_train_batch_size": 8, "learning_rate": 1e-3,
            "max_steps": 4, "logging_steps": 1, "save_steps": 2, "report_to": "none",
            "use_cpu": True, "disable_tqdm": True, "seed": 0, "save_total_limit": None}
    base.update(kw)
    return TrainingArguments(**base)


def train_argv(model_dir, glue, out, *extra):
    return [
        "--model", str(model_dir), "--data_dir", str(glue), "--output_dir", str(out),
        "--max_seq_length", "24", "--per_device_train_batch_size", "8",
        "--per_device_eval_batch_size", "16", "--num_train_epochs", "2",
        "--learning_rate", "1e-3", "--logging_steps", "2", "--seed", "3",
        "--disable_tqdm", "true", "--report_to", "none", "--use_cpu", "true",
        "--shrinkage_tokens", "300", *extra,
    ]


def run_train(argv, callbacks=()):
    iso_args, train_args = parse_train_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_training(iso_args, train_args, callbacks=callbacks, echo=lambda s: None)


class Crash(TrainerCallback):
    """Simulate a crash after optimizer step ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise RuntimeError("simulated crash")
        return control


def crash_and_resume(model_dir, glue, root: Path, extra: Sequence[str], at: int):
    """``isotropy train`` twice with ``extra``: whole into ``root/full``, and into
    ``root/broken`` stopped after step ``at`` (:class:`Crash`) then resumed; returns the two
    folders and the resumed run's result."""
    import pytest

    full, broken = root / "full", root / "broken"
    run_train(train_argv(model_dir, glue, full, *extra))
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(train_argv(model_dir, glue, broken, *extra), callbacks=[Crash(at)])
    return full, broken, run_train(train_argv(model_dir, glue, broken, *extra, "--resume"))
