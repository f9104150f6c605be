"""Training throughput of ``isotropy train`` with each regularizer vs a plain ``Trainer``.

Run: ``python benchmarks/bench_train_throughput.py`` (CPU, ~10 minutes on 2 cores; prints a
markdown table). ``--quick``: 256 examples, one round (about two minutes).

Same process, model, data, batch size and ``TrainingArguments`` for every configuration:

* plain Trainer: ``transformers.Trainer`` on ``AutoModelForSequenceClassification`` (no
  hidden states requested, no wrapper, no callbacks of ours);
* ``isotropy train`` (:func:`isotropy.training.run.run_training`) with ``--regularizer``
  none, istar (lambda=-1, zeta=0.2, all layers, Sigma_S estimated before the epoch from up to
  250,000 union rows), cosreg, entropy (64 [CLS] points: batch 32, window 2).

Model: the offline MiniLM-L6-H384; data: the first ``--examples`` SST-2 training sentences
from the local GLUE copy (``$GLUE_DIR``, else ``../shared/glue_data``), dynamic padding,
``max_seq_length`` 128, batch 32, one epoch, fp32, no evaluation, no checkpoints, logging
every 10 steps (TensorBoard off for all). Configurations run round-robin (``--rounds``), the
order rotated every round, so load from other processes hits all alike; the median over
rounds is reported.

Examples per second counts the training loop only (``train_runtime`` of ``Trainer.train``).
For I-STAR it includes the Sigma_S estimate before the epoch, which is also reported alone:
on a short benchmark epoch it weighs far more than on a real one, so the table also gives
I-STAR's steady-state rate (training loop minus the Sigma_S estimate) and the Sigma_S cost,
scaled to 250,000 rows at its measured per-row rate, as a share of one full SST-2 epoch
(67,349 examples) at the measured steady rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

SST2_TRAIN = 67_349
GLUE = Path(
    os.environ.get("GLUE_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "glue_data"
)

CONFIGS: dict[str, dict[str, Any]] = {
    "isotropy none": {"regularizer": ["none"]},
    "isotropy istar": {"regularizer": ["istar"], "tuning": -1.0, "zeta": 0.2},
    "isotropy cosreg": {"regularizer": ["cosreg"]},
    "isotropy entropy": {"regularizer": ["entropy"], "entropy_accumulation": "window",
                         "entropy_window": 2},  # 64 [CLS] points: this batch + the previous
}


def common_settings(examples: int, workdir: Path) -> dict[str, Any]:
    return {
        "task": "sst2", "model": "minilm", "data_dir": str(GLUE),
        "max_train_samples": examples, "max_eval_samples": 32, "max_seq_length": 128,
        "per_device_train_batch_size": 32, "num_train_epochs": 1, "learning_rate": 3e-5,
        "eval_strategy": "no", "save_strategy": "no", "logging_steps": 10,
        "report_to": "none", "disable_tqdm": True, "seed": 0, "output_dir": str(workdir),
    }


def run_isotropy(name: str, settings: dict[str, Any]) -> dict[str, float]:
    """One ``run_training``; returns the training-loop seconds and the Sigma_S seconds."""
    import isotropy.training.callbacks as callbacks_module
    import isotropy.training.run as run_module
    from isotropy.training.settings import args_from_dict

    iso_args, train_args = args_from_dict({**settings, **CONFIGS[name], "overwrite": True})
    spent = {"shrinkage": 0.0}
    cls = callbacks_module.IsotropyStateCallback
    original = cls.on_epoch_begin

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent["shrinkage"] += time.perf_counter() - t0

    import isotropy.models.shrinkage as shrinkage_module

    collect = shrinkage_module.collect_covariance
    rows = {"n": 0}

    def counted(*args, **kwargs):
        stats = collect(*args, **kwargs)
        rows["n"] += int(stats.count)
        return stats

    cls.on_epoch_begin = timed
    shrinkage_module.collect_covariance = counted
    try:
        result = run_module.run_training(iso_args, train_args, echo=lambda _: None)
    finally:
        cls.on_epoch_begin = original
        shrinkage_module.collect_covariance = collect
    return {"train": float(result.results["train"]["train_runtime"]),
            "shrinkage": spent["shrinkage"], "rows": rows["n"]}


def run_plain(settings: dict[str, Any]) -> dict[str, float]:
    """The same data, model and arguments through ``transformers.Trainer`` alone."""
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        set_seed,
    )

    from isotropy.data.glue import get_task
    from isotropy.data.sources import load_task_data
    from isotropy.models.loading import resolve_model
    from isotropy.training.features import tokenize_examples
    from isotropy.training.settings import args_from_dict

    iso_args, train_args = args_from_dict({**settings, "regularizer": ["none"]})
    spec = get_task(iso_args.task)
    data = load_task_data(iso_args, train_args.seed)
    path = resolve_model(iso_args.model)
    set_seed(train_args.seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=spec.num_labels)
    train = tokenize_examples(data.train, tokenizer, spec, iso_args.max_seq_length)
    trainer = Trainer(model=model, args=train_args, train_dataset=train,
                      data_collator=DataCollatorWithPadding(tokenizer))
    out = trainer.train()
    return {"train": float(out.metrics["train_runtime"]), "shrinkage": 0.0, "rows": 0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=None, help="training examples (1024)")
    ap.add_argument("--rounds", type=int, default=None, help="round-robin rounds (3)")
    ap.add_argument("--quick", action="store_true", help="256 examples, one round")
    args = ap.parse_args(argv)
    examples = args.examples or (256 if args.quick else 1024)
    rounds = args.rounds or (1 if args.quick else 3)
    if not (GLUE / "SST-2" / "train.tsv").is_file():
        sys.exit(f"needs SST-2 train.tsv under {GLUE} (set GLUE_DIR)")
    torch.set_flush_denormal(True)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    names = ["plain Trainer", *CONFIGS]
    times: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        settings = common_settings(examples, Path(tmp) / "run")
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                t = run_plain(settings) if name == "plain Trainer" else run_isotropy(
                    name, settings)
                times[name].append(t)
                print(f"round {r + 1}: {name}: {t['train']:.1f} s "
                      f"(Sigma_S {t['shrinkage']:.1f} s)", file=sys.stderr)
    med = {n: statistics.median(t["train"] for t in times[n]) for n in names}
    shrink = statistics.median(t["shrinkage"] for t in times["isotropy istar"])
    rate = {n: examples / med[n] for n in names}
    print(f"\nMiniLM-L6-H384, SST-2, {examples} examples, batch 32, 1 epoch, fp32, "
          f"{torch.get_num_threads()} threads, median of {rounds} round(s)\n")
    print("| configuration | examples/s | vs plain Trainer | vs isotropy none |")
    print("|---|---|---|---|")
    for n in names:
        print(f"| {n} | {rate[n]:.1f} | {rate[n] / rate['plain Trainer']:.3f} | "
              f"{rate[n] / rate['isotropy none']:.3f} |")
    steady = examples / (med["isotropy istar"] - shrink)
    print(f"| isotropy istar without the Sigma_S estimate | {steady:.1f} | "
          f"{steady / rate['plain Trainer']:.3f} | {steady / rate['isotropy none']:.3f} |")
    n_rows = statistics.median(t["rows"] for t in times["isotropy istar"])
    full = shrink * 250_000 / n_rows
    epoch = SST2_TRAIN / steady
    print(f"\nSigma_S estimate: {shrink:.1f} s for {n_rows:.0f} union rows (the benchmark's "
          f"epoch holds fewer than 250,000); at that rate 250,000 rows take {full:.0f} s = "
          f"{full / epoch:.1%} of one full SST-2 epoch ({epoch:.0f} s at the steady rate)")


if __name__ == "__main__":
    main()
