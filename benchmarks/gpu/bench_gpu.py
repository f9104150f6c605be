"""The regularizers' cost at base size on a GPU, and ``analyze`` throughput on a ~1B decoder.

Usage::

    python benchmarks/gpu/bench_gpu.py --out DIR            # CUDA: the sizes below
    python benchmarks/gpu/bench_gpu.py --out DIR --cpu      # CPU, tiny sizes: checks it runs

Model: a randomly initialised BERT-base-sized encoder (12 layers x 768, 12 heads, vocabulary
30,522) for sequence classification; batches of 32 x 128 tokens (SST-2 training sentences
padded to 128 when ``--glue-dir`` and ``--tokenizer`` are given, else random token ids of
random length padded to 128); bf16 autocast on CUDA (fp32 on ``--cpu`` unless ``--bf16``);
AdamW. One step = forward + backward + ``optimizer.step()`` + ``zero_grad()``. All variants
share one model and optimizer and are timed round-robin (one step of each per round) so that
clock and thermal drift hit them alike; medians over the rounds are reported.

Rows: plain; I-STAR (``IStarLoss``, all 12 layers, with a Sigma_S; on its default
sync-free route, with ``eager_checks=True``, the CPU's route, and with
``product_dtype=torch.bfloat16``, the union's products on tensor cores); the authors' formulation
of the same penalty (``torch.cov`` of the union, ``torch.linalg.svdvals``, autograd through
the SVD); CosReg (last layer); an accumulation cycle of 8 micro-batches of 8 without and with
the exact persistent-entropy loss (``prepare_exact_cycle``, 64 [CLS] points); the Sigma_S
refresh of 250,000 union rows (``collect_covariance``) against the same forward passes alone;
one measurement of ``GeometryMonitor`` (``measure_geometry``: 256 probe texts, zeta 0.2
with each layer's Sigma_S from as many) against a plain step, as a share of training at an
interval of 100 and of 500 steps; ``isotropy analyze`` on a random Llama-style decoder of
~1B parameters saved in bf16 and measured in bf16 (``--dtype bfloat16``), texts and tokens
per second.

Writes ``bench.json`` and ``bench.md`` (the table, with the device named) to ``--out``. A
row that fails is recorded with its error and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench_training_step import AuthorsIStar  # noqa: E402

from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss  # noqa: E402
from isotropy.models.regularized import RegularizedModel, prepare_exact_cycle  # noqa: E402
from isotropy.models.shrinkage import collect_covariance  # noqa: E402
from isotropy.runtime import set_rng_state  # noqa: E402
from isotropy.training.monitor import measure_geometry  # noqa: E402

FULL = {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "batch": 32,
        "seq": 128, "rounds": 20, "warmup": 3, "refresh_rows": 250_000,
        "decoder": {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
                    "num_attention_heads": 16, "num_key_value_heads": 16},
        "decoder_large": {"hidden_size": 4096, "intermediate_size": 14336,
                          "num_hidden_layers": 32, "num_attention_heads": 32,
                          "num_key_value_heads": 8},
        "analyze_texts": 512, "analyze_shrinkage": 250_000, "profile_calls": (5, 3, 2),
        "analyze_rounds": 2, "probe_batches": 8}
TINY = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "batch": 8, "seq": 32,
        "rounds": 2, "warmup": 1, "refresh_rows": 2_000,
        "decoder": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 4},
        "decoder_large": {"hidden_size": 96, "intermediate_size": 192,
                          "num_hidden_layers": 3, "num_attention_heads": 4,
                          "num_key_value_heads": 2},
        "analyze_texts": 32, "analyze_shrinkage": 2_000, "profile_calls": (1, 1, 1),
        "analyze_rounds": 1, "probe_batches": 2}
VOCAB = 30522


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batches_of(n: int, size: dict, device: torch.device, tokenizer, sentences, seed: int
               ) -> list[dict[str, torch.Tensor]]:
    """``n`` batches of ``size['batch']`` x ``size['seq']`` tokens (padded to seq), on device."""
    g = torch.Generator().manual_seed(seed)
    b, seq = size["batch"], size["seq"]
    out = []
    for i in range(n):
        if tokenizer is not None and sentences:
            texts = [sentences[(i * b + j) % len(sentences)] for j in range(b)]
            enc = dict(tokenizer(texts, padding="max_length", truncation=True, max_length=seq,
                                 return_tensors="pt"))
        else:
            lengths = torch.randint(8, seq + 1, (b,), generator=g)
            mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
            ids = torch.randint(1000, VOCAB, (b, seq), generator=g) * mask
            enc = {"input_ids": ids, "attention_mask": mask,
                   "token_type_ids": torch.zeros_like(ids)}
        enc["labels"] = torch.randint(0, 2, (b,), generator=g)
        out.append({k: v.to(device) for k, v in enc.items()})
    return out


def sst2_sentences(glue: Path | None, limit: int) -> list[str]:
    path = None if glue is None else glue / "SST-2" / "train.tsv"
    if path is None or not path.is_file():
        return []
    rows = path.read_text(encoding="utf-8").splitlines()[1:limit + 1]
    return [r.split("\t")[0] for r in rows]


def encoder(size: dict, device: torch.device) -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=size["hidden"],
                     num_hidden_layers=size["layers"], num_attention_heads=size["heads"],
                     intermediate_size=size["intermediate"], num_labels=2)
    return BertForSequenceClassification(cfg).to(device)


def time_round_robin(steps: dict[str, Callable[[], None]], rounds: int, warmup: int,
                     device: torch.device) -> dict[str, float]:
    """Median seconds per call of each step, one call of each per round, order rotated."""
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name]()
    sync(device)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            t = time.perf_counter()
            steps[name]()
            sync(device)
            times[name].append(time.perf_counter() - t)
    return {n: statistics.median(v) for n, v in times.items()}


_HOST_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
               "Memcpy DtoH", "aten::_local_scalar_dense", "aten::item")


def _op_times(run: Callable[[], None], device: torch.device, n_steps: int
              ) -> dict[str, tuple[float, int]]:
    """``{op: (self time on the device -- the CPU on a CPU run -- in ms per step, calls per
    step)}`` over ``n_steps`` profiled calls of ``run`` (after one unprofiled call)."""
    from torch.profiler import ProfilerActivity, profile

    run()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(n_steps):
            run()
        sync(device)
    out = {}
    for ev in prof.key_averages():
        if device.type == "cuda":
            t = getattr(ev, "self_device_time_total", None)
            if t is None:
                t = getattr(ev, "self_cuda_time_total", 0.0)
        else:
            t = ev.self_cpu_time_total
        out[ev.key] = (t / 1e3 / n_steps, ev.count / n_steps)
    return out


def profile_extra(base: Callable[[], None], variant: Callable[[], None],
                  device: torch.device, n_steps: int) -> dict:
    """Where a variant's extra time over its base goes (``torch.profiler``): the operators
    with the largest extra self time per call over the base call, and the host waits per call
    (synchronisations, device-to-host copies, ``.item()``) of each."""
    a, b = _op_times(base, device, n_steps), _op_times(variant, device, n_steps)
    rows = []
    for op in set(a) | set(b):
        ta, ca = a.get(op, (0.0, 0.0))
        tb, cb = b.get(op, (0.0, 0.0))
        rows.append({"op": op, "base_ms": ta, "variant_ms": tb, "extra_ms": tb - ta,
                     "base_calls": ca, "variant_calls": cb})
    rows.sort(key=lambda r: -r["extra_ms"])
    waits = {op: {"base": a.get(op, (0.0, 0.0))[1], "variant": b.get(op, (0.0, 0.0))[1]}
             for op in set(a) | set(b) if any(w in op for w in _HOST_WAITS)}
    return {"steps": n_steps, "clock": "device" if device.type == "cuda" else "cpu",
            "total_base_ms": sum(t for t, _ in a.values()),
            "total_variant_ms": sum(t for t, _ in b.values()),
            "top": rows[:15], "host_waits_per_step": waits}


def profile_rows(pairs: dict[str, tuple[Callable[[], None], Callable[[], None]]],
                 device: torch.device, n_steps: int, record: dict) -> None:
    """``record["profiles"][name]``: :func:`profile_extra` of each (base, variant) pair; a pair
    that fails is recorded with its error and the others still run."""
    profiles = record.setdefault("profiles", {})
    for name, (base, variant) in pairs.items():
        try:
            profiles[name] = profile_extra(base, variant, device, n_steps)
        except Exception:  # noqa: BLE001 - recorded, the other profiles still run
            record["errors"][f"profile: {name}"] = traceback.format_exc()


def training_rows(size: dict, device: torch.device, autocast, tokenizer, sentences,
                  record: dict) -> None:
    model = encoder(size, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = batches_of(1, size, device, tokenizer, sentences, seed=1)[0]
    refresh_batches = batches_of(
        -(-size["refresh_rows"] // (size["batch"] * 8 * size["layers"])) + 2, size, device,
        tokenizer, sentences, seed=2)
    sigma = collect_covariance(model, refresh_batches, n_tokens=size["refresh_rows"]
                               ).covariance().float()
    regs = {"I-STAR (all layers, Sigma_S)": IStarLoss(-1.0, zeta=0.2, shrinkage=sigma),
            "I-STAR, eager checks (host reads)": IStarLoss(-1.0, zeta=0.2, shrinkage=sigma,
                                                           eager_checks=True),
            "I-STAR, bfloat16 products": IStarLoss(-1.0, zeta=0.2, shrinkage=sigma,
                                                   eager_checks=False,
                                                   product_dtype=torch.bfloat16),
            "authors' formulation (cov + svdvals)": AuthorsIStar(-1.0, 0.2, sigma.to(device)),
            "CosReg (last layer)": CosRegLoss(1.0)}
    wrapped = {name: RegularizedModel(model, reg).to(device) for name, reg in regs.items()}

    def step(net) -> Callable[[], None]:
        def run() -> None:
            with autocast():
                loss = net(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    model.train()
    steps = {"plain": step(model), **{n: step(w) for n, w in wrapped.items()}}
    record["steps"] = time_round_robin(steps, size["rounds"], size["warmup"], device)
    profile_rows({name: (steps["plain"], steps[name])
                  for name in ("I-STAR (all layers, Sigma_S)", "I-STAR, bfloat16 products",
                               "CosReg (last layer)")},
                 device, size["profile_calls"][0], record)

    # an accumulation cycle of 8 micro-batches of 8: plain, and with the exact entropy loss
    (big,) = batches_of(1, {**size, "batch": 64}, device, tokenizer, sentences, seed=3)
    micro = [{k: v[8 * i:8 * i + 8] for k, v in big.items()} for i in range(8)]
    entropy = RegularizedModel(model, PersistentEntropyLoss(1.0, accumulation_steps=8,
                                                            sync_dist=False)).to(device)

    def cycle(exact: bool) -> Callable[[], None]:
        def run() -> None:
            states = prepare_exact_cycle(entropy, micro, context=autocast) if exact else []
            for i, mb in enumerate(micro):
                if exact:
                    set_rng_state(states[i])
                with autocast():
                    loss = (entropy if exact else model)(**mb).loss / len(micro)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return run

    plain_cycle, exact_cycle = cycle(False), cycle(True)
    record["cycles"] = time_round_robin({"plain 8 x 8 cycle": plain_cycle,
                                         "exact entropy 8 x 8 cycle": exact_cycle},
                                        size["rounds"], size["warmup"], device)
    profile_rows({"exact entropy 8 x 8 cycle": (plain_cycle, exact_cycle)}, device,
                 size["profile_calls"][1], record)

    def refresh() -> None:
        with autocast():
            collect_covariance(model, refresh_batches, n_tokens=size["refresh_rows"])

    used, rows = 0, 0  # the batches collect_covariance reads for its rows
    while rows < size["refresh_rows"] and used < len(refresh_batches):
        rows += int(refresh_batches[used]["attention_mask"].sum()) * size["layers"]
        used += 1

    def forward_only() -> None:
        model.eval()
        with torch.no_grad(), autocast():
            for b in refresh_batches[:used]:
                model(**{k: v for k, v in b.items() if k != "labels"}, output_hidden_states=True)
        model.train()

    record["refresh"] = time_round_robin({"Sigma_S refresh": refresh,
                                          "forward passes alone": forward_only},
                                         max(3, size["rounds"] // 4), 1, device)
    record["refresh_rows"] = size["refresh_rows"]
    profile_rows({"Sigma_S refresh": (forward_only, refresh)}, device, size["profile_calls"][2],
                 record)

    # the geometry monitor: one measurement (a probe pass in eval mode, every layer's
    # IsoScore* with its Sigma_S, TwoNN, spectrum, ranks, outliers) against a plain step
    def unlabelled(batches: list[dict]) -> list[dict]:
        return [{k: v for k, v in b.items() if k != "labels"} for b in batches]

    probe = unlabelled(batches_of(size["probe_batches"], size, device, tokenizer, sentences,
                                  seed=4))
    shrink = unlabelled(refresh_batches[:size["probe_batches"]])

    def monitor() -> None:
        with autocast():
            measure_geometry(model, probe, shrinkage_batches=shrink, zeta=0.2)
        model.train()

    record["monitor"] = time_round_robin({"plain step": steps["plain"],
                                          "GeometryMonitor measurement": monitor},
                                         max(3, size["rounds"] // 4), 1, device)
    record["monitor_probe"] = size["probe_batches"] * size["batch"]


def analyze_row(size: dict, device: torch.device, tokenizer_dir: Path | None, glue: Path | None,
                work: Path, record: dict) -> None:
    """Save a random decoder in bf16 and time ``isotropy analyze`` on it (a subprocess, as a
    user runs it)."""
    if tokenizer_dir is None or glue is None or not (glue / "SST-2" / "dev.tsv").is_file():
        record["analyze"] = {"skipped": "needs --tokenizer and --glue-dir with SST-2"}
        return
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=512, **size["decoder"])
    with torch.device(device):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    out_dir = work / "decoder"
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(out_dir)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    cmd = [sys.executable, "-m", "isotropy.cli.main", "analyze", str(out_dir), "--task", "sst2",
           "--data-dir", str(glue), "--dtype", "bfloat16", "--device", str(device),
           "--max-texts", str(size["analyze_texts"]), "--shrinkage-tokens",
           str(size["analyze_shrinkage"]), "--output-dir", str(work / "analyze")]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    rec = {"command": " ".join(cmd), "params": n_params, "seconds": seconds,
           "exit": proc.returncode, "output": (proc.stdout + proc.stderr)[-3000:]}
    result = work / "analyze" / "analyze.json"
    if proc.returncode == 0 and result.is_file():
        cfg_out = json.loads(result.read_text())["config"]
        rec.update(measure_seconds=json.loads(result.read_text()).get("seconds"),
                   texts=cfg_out.get("n_texts"), tokens=cfg_out.get("n_tokens"),
                   shrinkage_rows=cfg_out.get("shrinkage", {}).get("n_rows"),
                   weights_dtype=cfg_out.get("weights_dtype"))
    record["analyze"] = rec
    from isotropy.probing.analyze import prepare_analyze

    load_s, inputs = _timed(lambda: prepare_analyze(
        out_dir, task="sst2", data_dir=glue, dtype="bfloat16", device=str(device),
        max_texts=size["analyze_texts"]), device)
    rec["phases"] = {"load_s": load_s, **analyze_phases(inputs, device, size, work)}
    del inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()


def analyze_large_row(size: dict, device: torch.device, tokenizer_dir: Path | None,
                      glue: Path | None, work: Path, record: dict) -> None:
    """``analyze``'s measurement on a random Llama-style decoder of ~7B parameters (the
    shape of an 8B Llama with a 30,522-token vocabulary), built in bf16 on the device (no
    weights written or read), against plain forward passes over the same tokens."""
    if tokenizer_dir is None or glue is None or not (glue / "SST-2" / "dev.tsv").is_file():
        record["analyze_large"] = {"skipped": "needs --tokenizer and --glue-dir with SST-2"}
        return
    from transformers import AutoTokenizer, LlamaConfig, LlamaModel

    from isotropy.data.glue import get_task
    from isotropy.models.loading import ensure_pad_token
    from isotropy.probing.analyze import AnalyzeInputs, _read_texts

    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=512, **size["decoder_large"])
    with torch.device(device):
        torch.manual_seed(0)
        model = LlamaModel(cfg).to(torch.bfloat16).eval()
    texts, train, _ = _read_texts({}, get_task("sst2"), "dev", glue, None, 0.2,
                                  size["analyze_texts"])
    tok = ensure_pad_token(AutoTokenizer.from_pretrained(tokenizer_dir))
    inputs = AnalyzeInputs(model, tok, texts, train, "last", True, 128, {})
    rec = {"params": sum(p.numel() for p in model.parameters()), "shape": size["decoder_large"]}
    record["analyze_large"] = rec
    rec.update(analyze_phases(inputs, device, size, work, profile=False))
    del model, inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _timed(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t, out


def analyze_phases(inputs, device: torch.device, size: dict, work: Path,
                   profile: bool = True) -> dict:
    """``analyze``'s measurement timed in this process beside a plain forward pass over the
    same tokens in the same batches (``hidden_state_batches`` over the Sigma_S pass's batches
    and the measured texts' batches, hidden states returned, nothing measured), alternated
    ``size["analyze_rounds"]`` times (the last round is reported: the first warms the
    kernels), plus the phases: tokenising both passes' batches, writing the results; and
    (``profile``) a ``torch.profiler`` breakdown of one measurement over the plain forward passes.
    ``statistics`` = measurement - plain forward - tokenising."""
    from isotropy.models.forward import hidden_state_batches
    from isotropy.probing.analyze import DEFAULT_BATCH_SIZE, analyze_model, write_analyze
    from isotropy.probing.batches import ordered_batches

    bs, budget = DEFAULT_BATCH_SIZE, size["analyze_shrinkage"]
    n_layers = inputs.model.config.num_hidden_layers

    def batches(texts):
        return ordered_batches(inputs.tokenizer, texts, batch_size=bs,
                               max_length=inputs.max_length, decoder=inputs.decoder)

    def tokenise() -> list[dict]:
        read, rows = [], 0  # the Sigma_S pass reads batches until the union has its rows
        for b in batches(inputs.train_texts):
            read.append(b)
            rows += int(b["attention_mask"].sum()) * n_layers
            if rows >= budget:
                break
        return read + list(batches(inputs.texts))

    tokenise_s, all_batches = _timed(tokenise, device)
    tokens = sum(int(b["attention_mask"].sum()) for b in all_batches)
    padded = sum(b["attention_mask"].numel() for b in all_batches)

    def forward() -> None:
        for _ in hidden_state_batches(inputs.model, all_batches):
            pass

    def measure():
        return analyze_model(inputs, shrinkage_tokens=budget)

    times: dict[str, list[float]] = {"plain forward": [], "analyze (measurement)": []}
    result = None
    for _ in range(size["analyze_rounds"]):
        times["plain forward"].append(_timed(forward, device)[0])
        sec, result = _timed(measure, device)
        times["analyze (measurement)"].append(sec)
    write_s, _ = _timed(lambda: write_analyze(result, work / "analyze-inproc"), device)
    fwd, meas = times["plain forward"][-1], times["analyze (measurement)"][-1]
    out = {"tokens": tokens, "padded_tokens": padded, "batches": len(all_batches),
           "batch_size": bs, "rows_sigma_s": result.config["shrinkage"].get("n_rows"),
           "texts": result.config["n_texts"], "tokenise_s": tokenise_s,
           "plain_forward_s": fwd, "measurement_s": meas, "write_s": write_s,
           "statistics_s": meas - fwd - tokenise_s, "ratio": meas / fwd,
           "rounds": times, "sigma_s_pass_s": result.config["shrinkage"].get("seconds")}
    if profile:
        out["profile"] = profile_extra(forward, measure, device, 1)
    return out


def markdown(record: dict) -> str:
    steps, cycles, refresh = record.get("steps", {}), record.get("cycles", {}), \
        record.get("refresh", {})
    lines = [f"Device: {record['device_name']}; torch {record['torch']}, transformers "
             f"{record['transformers']}; precision {record['precision']}; size "
             f"{record['size']['layers']} x {record['size']['hidden']}, batch "
             f"{record['size']['batch']} x {record['size']['seq']}; {record['size']['rounds']} "
             "rounds, medians.", "",
             "| row | median (ms) | vs plain | overhead |", "|---|---|---|---|"]
    plain = steps.get("plain")
    for name, sec in steps.items():
        ratio = f"{sec / plain:.3f}x" if plain else ""
        over = f"{100 * (sec - plain) / plain:+.1f}%" if plain and name != "plain" else ""
        lines.append(f"| {name} | {1e3 * sec:.2f} | {ratio} | {over} |")
    ours = steps.get("I-STAR (all layers, Sigma_S)")
    theirs = steps.get("authors' formulation (cov + svdvals)")
    if plain and ours and theirs and ours > plain:
        lines.append(f"| authors' penalty / ours | | {(theirs - plain) / (ours - plain):.1f}x | |")
    base = cycles.get("plain 8 x 8 cycle")
    for name, sec in cycles.items():
        over = f"{100 * (sec - base) / base:+.1f}%" if base and name != "plain 8 x 8 cycle" \
            else ""
        lines.append(f"| {name} | {1e3 * sec:.2f} | | {over} |")
    fwd = refresh.get("forward passes alone")
    for name, sec in refresh.items():
        over = f"{100 * (sec - fwd) / fwd:+.1f}%" if fwd and name != "forward passes alone" \
            else ""
        lines.append(f"| {name} ({record.get('refresh_rows', 0):,} rows) | {1e3 * sec:.2f} | "
                     f"| {over} |")
    mon = record.get("monitor", {})
    if mon.get("plain step") and "GeometryMonitor measurement" in mon:
        t, step = mon["GeometryMonitor measurement"], mon["plain step"]
        lines.append(f"| GeometryMonitor, one measurement ({record.get('monitor_probe')} probe "
                     f"texts, Sigma_S from as many) | {1e3 * t:.2f} | {t / step:.1f} steps | "
                     f"{100 * t / (100 * step):.2f}% of training every 100 steps, "
                     f"{100 * t / (500 * step):.2f}% every 500 |")
    a = record.get("analyze", {})
    if "seconds" in a:
        if a.get("exit") == 0 and a.get("tokens"):
            inner = a.get("measure_seconds") or a["seconds"]
            lines.append(f"| analyze, {a['params'] / 1e6:,.0f}M-parameter decoder in bf16 | "
                         f"{1e3 * a['seconds']:.0f} (process) | | {a['texts']} texts, "
                         f"{a['tokens']:,} tokens, Sigma_S from {a.get('shrinkage_rows')} rows: "
                         f"{a['tokens'] / inner:,.0f} tokens/s over analyze's own "
                         f"{inner:.1f} s |")
        else:
            lines.append(f"| analyze | failed (exit {a.get('exit')}) | | |")
    for name, err in record.get("errors", {}).items():
        lines.append(f"| {name} | failed: {err.splitlines()[-1][:120]} | | |")
    lines += _phase_lines("analyze, ~1B decoder",
                          a.get("phases") and {"params": a.get("params", 0), **a["phases"]})
    lines += _phase_lines("analyze, ~7B (8B-shaped) decoder", record.get("analyze_large"))
    for name, prof in record.get("profiles", {}).items():
        lines += _profile_lines(name, prof)
    if a.get("phases", {}).get("profile"):
        lines += _profile_lines("analyze's measurement over plain forward passes",
                                a["phases"]["profile"])
    return "\n".join(lines) + "\n"


def _phase_lines(title: str, ph: dict | None) -> list[str]:
    """``analyze``'s phases against a plain forward pass over the same tokens."""
    if not ph or "measurement_s" not in ph:
        return [] if not ph else ["", f"{title}: {ph.get('skipped', 'not run')}"]
    rate = ph["tokens"] / ph["measurement_s"]
    fwd_rate = ph["tokens"] / ph["plain_forward_s"]
    lines = ["", f"{title} ({ph.get('params', 0) / 1e6:,.0f}M parameters), in this process: "
             f"{ph['texts']} texts and the Sigma_S pass's batches ({ph['rows_sigma_s']} union "
             f"rows), {ph['tokens']:,} tokens ({ph['padded_tokens']:,} with padding) in "
             f"{ph['batches']} batches of {ph['batch_size']}:", "",
             "| phase | seconds | tokens/s |", "|---|---|---|"]
    if "load_s" in ph:
        lines.append(f"| load (prepare_analyze) | {ph['load_s']:.2f} | |")
    lines += [f"| tokenise (both passes) | {ph['tokenise_s']:.2f} | |",
              f"| plain forward, same batches | {ph['plain_forward_s']:.2f} | {fwd_rate:,.0f} |",
              f"| analyze's measurement (tokenise + forward + statistics) | "
              f"{ph['measurement_s']:.2f} | {rate:,.0f} |",
              f"| of which Sigma_S pass | {ph.get('sigma_s_pass_s') or 0:.2f} | |",
              f"| statistics (measurement - forward - tokenise) | {ph['statistics_s']:.2f} | |",
              f"| write | {ph['write_s']:.2f} | |",
              f"| measurement / plain forward | {ph['ratio']:.2f}x | |"]
    return lines


def _profile_lines(name: str, prof: dict | None) -> list[str]:
    """The profiler's breakdown of a variant's extra time over its base, as a table."""
    if not prof:
        return []
    lines = ["", f"Where the extra time of {name} goes (torch.profiler, {prof['steps']} calls "
             f"each, self {prof['clock']} time per call; totals {prof['total_base_ms']:.2f} ms "
             f"base, {prof['total_variant_ms']:.2f} ms {name}):", "",
             "| operator | base (ms) | variant (ms) | extra (ms) | calls base / variant |",
             "|---|---|---|---|---|"]
    for r in prof["top"]:
        lines.append(f"| {r['op'][:60]} | {r['base_ms']:.3f} | {r['variant_ms']:.3f} | "
                     f"{r['extra_ms']:+.3f} | {r['base_calls']:g} / {r['variant_calls']:g} |")
    waits = prof.get("host_waits_per_step") or {}
    lines += ["", "Host waits per call (base / variant): " + (", ".join(
        f"{op} {w['base']:g} / {w['variant']:g}" for op, w in sorted(waits.items())) or "none")]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="CPU, tiny sizes")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast on --cpu too")
    ap.add_argument("--glue-dir", type=Path, default=None)
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="a BERT WordPiece tokenizer directory (vocabulary 30,522)")
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["training", "analyze", "analyze-large"])
    args = ap.parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        sys.exit("bench_gpu: CUDA is not available (use --cpu for the tiny CPU run)")
    device = torch.device("cpu" if args.cpu else "cuda")
    size = TINY if args.cpu else FULL
    bf16 = not args.cpu or args.bf16
    if device.type == "cpu":
        torch.set_flush_denormal(True)

    def autocast():
        return (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16
                else nullcontext())

    import transformers

    args.out.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({os.cpu_count()} cores)",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "precision": "bf16 autocast" if bf16 else "fp32", "size": size, "errors": {}}
    tokenizer = None
    if args.tokenizer is not None:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    sentences = sst2_sentences(args.glue_dir, 4096)
    record["data"] = "SST-2 train sentences" if tokenizer is not None and sentences \
        else "random token ids"

    def save() -> str:  # after each part: a part cut off by a time limit leaves the others
        (args.out / "bench.json").write_text(json.dumps(record, indent=2, default=str))
        md = markdown(record)
        (args.out / "bench.md").write_text(md)
        return md

    if "training" not in args.skip:
        try:
            training_rows(size, device, autocast, tokenizer, sentences, record)
        except Exception:  # noqa: BLE001 - recorded, the other rows still run
            record["errors"]["training rows"] = traceback.format_exc()
            print(record["errors"]["training rows"], file=sys.stderr)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        save()
    if "analyze" not in args.skip:
        try:
            analyze_row(size, device, args.tokenizer, args.glue_dir, args.out / "work", record)
        except Exception:  # noqa: BLE001
            record["errors"]["analyze"] = traceback.format_exc()
            print(record["errors"]["analyze"], file=sys.stderr)
        save()
    if "analyze-large" not in args.skip:
        try:
            analyze_large_row(size, device, args.tokenizer, args.glue_dir, args.out / "work",
                              record)
        except Exception:  # noqa: BLE001
            record["errors"]["analyze, ~7B"] = traceback.format_exc()
            print(record["errors"]["analyze, ~7B"], file=sys.stderr)
    md = save()
    print(md)
    return 1 if record["errors"] or record.get("analyze", {}).get("exit", 0) else 0


if __name__ == "__main__":
    sys.exit(main())
