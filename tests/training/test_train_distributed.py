"""``isotropy train`` keeps its meaning across processes and gradient accumulation.

Processes: two real ``gloo`` processes at per-device batch ``B`` train the same parameters as
one process at batch ``2 B``, with every regularizer. The task loss is a per-device mean that
DDP averages; the regularizers score the global batch (``isotropy.distributed``); Sigma_S comes
from every rank's shard of the training set (here the whole set: ``--shrinkage_tokens`` exceeds
its token count, so the estimate does not depend on the order of the pass).

Gradient accumulation: the Trainer divides each micro-batch's loss (task + regularizers) by the
number of accumulation steps. So ``B x 2`` equals ``2 B x 1`` for the task loss alone, and for
I-STAR and CosReg it equals the mean over micro-batches of each micro-batch's penalty (checked
against a plain PyTorch loop); the persistent-entropy window (``entropy_window`` = accumulation
steps) scores, at the last micro-step of a cycle, exactly the cycle's ``2 B`` points.

Evaluation measurements: two processes measure the whole evaluation set, as one process does
(:class:`~isotropy.probing.eval_measures.EvalMeasures` synced): the same record to float
tolerance, also for an odd evaluation set (Accelerate pads the last batches with duplicates)
and a token cap that falls inside rank 1's first batch; checked on the accumulator alone, with
Accelerate's own evaluation sharding, against NumPy/scikit-dimension on the concatenated set.

Comparable runs: dropout off, ``--train_sampling_strategy sequential`` (DDP shards the
sequential order batch by batch, so optimizer step ``t`` sees examples ``2Bt .. 2B(t+1)-1`` on
both sides; the default random order is checked once too), and a float64 model: float32
rounding differences between differently padded batches are amplified by AdamW (and by the
discrete feature selection of the entropy loss) well above any tolerance that would still
catch a mistake.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _distributed import RunResults, StepError, guarded, require_gloo
from _models import save_tiny_bert
from _reference import iota, mean_cosine, skdim_twonn, spd, spectrum
from _training import Crash
from transformers import TrainerCallback

from isotropy.probing.eval_measures import OTHER_RANK, EvalMeasures
from isotropy.runtime import StoppedAtCheckpoint, checkpoint_on_signal
from isotropy.training._compat import TRANSFORMERS_VERSION
from isotropy.training.callbacks import read_checkpoint_state
from isotropy.training.run import run_training
from isotropy.training.settings import parse_train_args

WORLD = 2
B = 4  # per-device batch of the two-process runs and micro-batch of the accumulation runs
N_TRAIN = 16  # two optimizer steps per epoch at (global) batch 2 B
EPOCHS = 2
STEPS = EPOCHS * N_TRAIN // (2 * B)
LR = 3e-3
TUNING = {"istar": -3.0, "cosreg": 3.0, "entropy": 3.0}
REGS = ("none", "istar", "cosreg", "entropy")
REG_FLAGS = {
    "none": [],
    "istar": ["--tuning", str(TUNING["istar"]), "--zeta", "0.2"],
    "cosreg": ["--cosreg_tuning", str(TUNING["cosreg"])],
    "entropy": ["--entropy_weight", str(TUNING["entropy"])],
}
# The value each regularizer logs that depends on the whole batch it scores.
BATCH_LOG = {"istar": "istar/isoscore_star", "cosreg": "cosreg/cosreg_term",
             "entropy": "entropy/entropy_sum"}
WORDS = [
    "good", "bad", "fine", "awful", "great", "poor", "nice", "dull", "happy", "sad", "movie",
    "film", "plot", "actor", "story", "the", "a", "is", "was", "very", "not",
]
N_ODD = 9  # an odd evaluation set: the last evaluation step holds 7 duplicates
# float64 parameters after 4 AdamW steps of lr 3e-3; measured differences: at most 2e-12
# (entropy), 1e-14 (I-STAR); the regularizers move the parameters by about 1e-2.
ATOL = 1e-9

pytestmark = pytest.mark.slow  # two training processes per fixture, and full runs


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny random float64 BERT with every dropout off, and a WordPiece tokenizer."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert_nodrop"), WORDS,
                          dtype=torch.float64, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, classifier_dropout=0.0)


def _write_glue(root: Path, n_dev: int) -> Path:
    """SST-2 train (16 rows, labels alternating, so every batch of 4 holds both) and dev
    (``n_dev`` rows) files of sentences of different lengths (the same first rows for every
    ``n_dev``)."""
    rng = random.Random(0)
    (root / "SST-2").mkdir()
    for split, n in (("train", N_TRAIN), ("dev", n_dev)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            y = i % 2
            cue = rng.choice(["good", "great", "nice"] if y else ["bad", "awful", "poor"])
            words = rng.choices(WORDS[9:], k=rng.randint(2, 9))
            rows.append(f"{' '.join([*words, cue])}\t{y}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """Train (16 rows) and dev (8 rows): see :func:`_write_glue`."""
    return _write_glue(tmp_path_factory.mktemp("glue_dist"), 8)


@pytest.fixture(scope="module")
def odd_glue_dir(tmp_path_factory):
    """The same training set with an odd dev set of ``N_ODD`` rows."""
    return _write_glue(tmp_path_factory.mktemp("glue_odd"), N_ODD)


@pytest.fixture(scope="module")
def dev_lengths(tiny_model_dir, odd_glue_dir):
    """Tokens (with [CLS] and [SEP]) of every odd-set dev sentence, from the tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = _csv_tsv(odd_glue_dir / "SST-2" / "dev.tsv")
    return [len(tok(r["sentence"], truncation=True, max_length=16)["input_ids"]) for r in rows]


def _cap(lengths: list[int]) -> int:
    """A token cap inside example 5 (rank 1's first evaluation batch under two processes)."""
    return sum(lengths[:5]) + 2


def _argv(model_dir, glue, out, reg, batch, *extra):
    return [
        "--task", "sst2", "--model", str(model_dir), "--data_dir", str(glue),
        "--output_dir", str(out), "--max_seq_length", "16",
        "--per_device_train_batch_size", str(batch), "--per_device_eval_batch_size", str(batch),
        "--num_train_epochs", str(EPOCHS), "--learning_rate", str(LR), "--seed", "3",
        "--train_sampling_strategy", "sequential", "--eval_strategy", "no",
        "--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "true",
        "--report_to", "none", "--use_cpu", "true", "--shrinkage_tokens", "100000",
        "--regularizer", reg, *REG_FLAGS[reg], *extra,
    ]


class Capture(TrainerCallback):
    """The trained parameters (at the end of training) and the wrapper's logs of the last
    micro-step of every optimizer step."""

    def __init__(self) -> None:
        self.params: dict[str, torch.Tensor] = {}
        self.step_logs: list[dict[str, float]] = []
        self.eval_metrics: dict[str, float] = {}

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):  # noqa: D102
        self.eval_metrics = dict(metrics or {})
        return control

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: D102
        inner = getattr(model, "module", model)
        self.step_logs.append(dict(inner.last_logs))
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):  # noqa: D102
        inner = getattr(model, "module", model)
        self.params = {k: v.detach().clone() for k, v in inner.model.state_dict().items()}
        return control


def _train(argv: list[str], callbacks: tuple[TrainerCallback, ...] = ()) -> dict:
    """One ``isotropy train`` run: final parameters, step logs, results, run directory."""
    cap = Capture()
    iso_args, train_args = parse_train_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_training(iso_args, train_args, callbacks=[cap, *callbacks],
                           echo=lambda s: None)
    return {"params": cap.params, "step_logs": cap.step_logs, "results": res.results,
            "status": res.status, "run_dir": str(res.run_dir), "eval_metrics": cap.eval_metrics}


def _train_on_rank(rank: int, argvs: dict[str, list[str]]) -> dict:
    """Inside a rank of an initialised gloo group: every run of ``argvs``, as a launcher
    would start it (the Trainer finds the group through RANK/WORLD_SIZE/LOCAL_RANK with
    ``--use_cpu``, as under ``torchrun``)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    return {name: guarded(name, _train, argv) for name, argv in argvs.items()}


def _odd_argv(model_dir, glue, out, batch, name, lengths):
    """The odd evaluation set, after one optimizer step: ``odd`` (no regularizer, IsoScore*
    with zeta = 0.2 and Sigma_S from the training set) and ``odd_capped`` (I-STAR, the token
    cap inside the set)."""
    if name == "odd":
        return _argv(model_dir, glue, out, "none", batch, "--measure_zeta", "0.2",
                     "--max_steps", "1")
    return _argv(model_dir, glue, out, "istar", batch, "--max_steps", "1",
                 "--measure_max_tokens", str(_cap(lengths)))


ODD_RUNS = ("odd", "odd_capped")


@pytest.fixture(scope="module")
def two_process(tiny_model_dir, glue_dir, odd_glue_dir, dev_lengths, tmp_path_factory):
    """Every regularizer trained by two processes at per-device batch B; each run's directory
    is shared by both ranks, as a launcher gives them."""
    require_gloo()
    root = tmp_path_factory.mktemp("ddp_runs")
    argvs = {reg: _argv(tiny_model_dir, glue_dir, root / reg, reg, B) for reg in REGS}
    for name in ODD_RUNS:
        argvs[name] = _odd_argv(tiny_model_dir, odd_glue_dir, root / name, B, name, dev_lengths)
    argvs["istar_random"] = _argv(tiny_model_dir, glue_dir, root / "istar_random", "istar", B,
                                  "--train_sampling_strategy", "random")
    argvs["entropy_accumulated"] = _argv(tiny_model_dir, glue_dir, root / "entropy_accumulated",
                                         "entropy", B, "--gradient_accumulation_steps", "2")
    if not torch.cuda.is_available():  # the Trainer would not find the launcher's group
        argvs["no_use_cpu"] = _argv(tiny_model_dir, glue_dir, root / "no_use_cpu", "istar", B,
                                    "--use_cpu", "false")
    return RunResults.run(_train_on_rank, argvs, world_size=WORLD, out_dir=root / "ranks",
                          timeout=300)


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, glue_dir, tmp_path_factory):
    """name -> one-process run (cached): ``(reg, batch, accumulation steps)``."""
    root = tmp_path_factory.mktemp("single_runs")
    runs: dict[tuple[str, int, int], dict] = {}

    def get(reg: str, batch: int, accumulation: int = 1) -> dict:
        key = (reg, batch, accumulation)
        if key not in runs:
            out = root / f"{reg}-{batch}x{accumulation}"
            extra = ["--gradient_accumulation_steps", str(accumulation)]
            if reg == "entropy_window":
                reg, extra = "entropy", [*extra, "--entropy_accumulation", "window"]
            runs[key] = _train(_argv(tiny_model_dir, glue_dir, out, reg, batch, *extra))
        return runs[key]

    return get


@pytest.fixture(scope="module")
def one_process_odd(tiny_model_dir, odd_glue_dir, dev_lengths, tmp_path_factory):
    """name -> the one-process run (batch 2 B) of an ``ODD_RUNS`` configuration (cached)."""
    root = tmp_path_factory.mktemp("single_odd")
    runs: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in runs:
            runs[name] = _train(_odd_argv(tiny_model_dir, odd_glue_dir, root / name, WORLD * B,
                                          name, dev_lengths))
        return runs[name]

    return get


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def _jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- processes


@pytest.mark.parametrize("reg", REGS)
def test_two_processes_train_like_one_process_on_the_global_batch(two_process, one_process,
                                                                   reg):
    ddp = [two_process.value(r, reg) for r in range(WORLD)]
    single = one_process(reg, WORLD * B)
    assert ddp[0]["results"]["train"]["global_step"] == STEPS
    assert single["results"]["train"]["global_step"] == STEPS
    # both ranks hold the same parameters, and they are those of one process on batch 2 B
    assert _max_diff(ddp[0]["params"], ddp[1]["params"]) == 0.0
    assert _max_diff(ddp[0]["params"], single["params"]) < ATOL
    if reg != "none":
        # the regularizer moved the parameters far beyond the tolerance ...
        assert _max_diff(single["params"], one_process("none", WORLD * B)["params"]) > 1e-3
        # ... and scored the global batch: every step's value equals the one-process value
        for a, b in zip(ddp[0]["step_logs"], single["step_logs"], strict=True):
            assert a[BATCH_LOG[reg]] == pytest.approx(b[BATCH_LOG[reg]], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("reg", ["none", "istar"])
def test_two_processes_write_one_run_directory(two_process, one_process, reg):
    """Rank 0 alone writes the shared run directory: one record per log, the final model,
    the evaluation predictions of every example; every rank returns the same results."""
    from transformers import AutoModelForSequenceClassification

    ddp = [two_process.value(r, reg) for r in range(WORLD)]
    single = one_process(reg, WORLD * B)
    run_dir = ddp[0]["run_dir"]
    assert ddp[1]["run_dir"] == run_dir and ddp[0]["status"] == ddp[1]["status"] == "trained"
    assert ddp[0]["results"] == ddp[1]["results"]
    records = _jsonl(f"{run_dir}/metrics.jsonl")
    train_logs = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_logs] == list(range(1, STEPS + 1))
    assert sum("eval_loss" in r for r in records) == 1
    # the logged loss is the global mean (the Trainer averages it over ranks, in float32)
    single_logs = _jsonl(f"{single['run_dir']}/metrics.jsonl")
    for a, b in zip(train_logs, [r for r in single_logs if "loss" in r], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    saved = AutoModelForSequenceClassification.from_pretrained(f"{run_dir}/model").state_dict()
    assert _max_diff(saved, ddp[0]["params"]) == 0.0
    rows, ref = _csv(f"{run_dir}/eval_predictions.csv"), _csv(
        f"{single['run_dir']}/eval_predictions.csv")
    assert [r["guid"] for r in rows] == [r["guid"] for r in ref] and len(rows) == 8
    for a, b in zip(rows, ref, strict=True):
        assert a["prediction"] == b["prediction"]
        assert float(a["output_0"]) == pytest.approx(float(b["output_0"]), abs=1e-9)
    final, ref_final = ddp[0]["results"]["final"], single["results"]["final"]
    assert final["eval_loss"] == pytest.approx(ref_final["eval_loss"], rel=1e-9)


def test_the_default_random_order_is_shared_too(two_process, tiny_model_dir, glue_dir,
                                                tmp_path):
    """With the default random order every rank draws the same seeded permutation and takes
    every other batch of it: the same examples per step as one process on batch 2 B."""
    ddp = two_process.value(0, "istar_random", "params")
    single = _train(_argv(tiny_model_dir, glue_dir, tmp_path / "run", "istar", WORLD * B,
                          "--train_sampling_strategy", "random"))["params"]
    assert _max_diff(ddp, single) < ATOL
    # and the random order is not the sequential one
    assert _max_diff(ddp, two_process.value(0, "istar", "params")) > 1e-3


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU only")
def test_processes_the_trainer_would_not_synchronise_are_refused(two_process):
    """Launched processes (RANK, WORLD_SIZE, ...) without ``--use_cpu`` on a machine without
    a GPU: the Trainer would train each alone while the regularizers gather across them."""
    for rank in range(WORLD):
        error = two_process.ranks[rank]["no_use_cpu"]
        assert isinstance(error, StepError)
        assert ("ValueError: 2 processes were launched but the Trainer does not train them in "
                "parallel (on a machine without a GPU, pass --use_cpu true)") in error.traceback
    out = Path(two_process.value(0, "istar", "run_dir")).parent / "no_use_cpu"
    assert not out.exists()  # refused before the run directory was made


def _assert_same(a, b, where: str = "record", rel: float = 1e-9, abs_: float = 1e-12) -> None:
    """``a`` equals ``b`` recursively: numbers to ``rel``/``abs_``, everything else exactly
    (timings left out)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            if k != "seconds":
                _assert_same(a[k], b[k], f"{where}.{k}", rel, abs_)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]", rel, abs_)
    elif isinstance(a, float) and not isinstance(b, bool):
        # the rank measures take square roots of the Gram matrix's eigenvalues: the smallest
        # carry the rounding of the merge order (2e-8 relative on layer 0 of the tiny model)
        tol = max(rel, 1e-6) if where.endswith((".effective_rank", ".rankme")) else rel
        assert b == pytest.approx(a, rel=tol, abs=abs_), where
    else:
        assert a == b, where


def _eval_scalars(metrics: dict[str, float]) -> dict[str, float]:
    """The evaluation values of a metrics dict (timings left out)."""
    return {k: v for k, v in metrics.items()
            if k.startswith("eval_") and not any(t in k for t in ("runtime", "second", "time"))}


@pytest.mark.parametrize("name", ["istar", *ODD_RUNS])
def test_two_processes_measure_the_whole_evaluation_set(two_process, one_process,
                                                        one_process_odd, dev_lengths, name):
    """The measurement record (per-layer token and [CLS] IsoScore, IsoScore*, cosine, TwoNN;
    union; spectra; per-dimension mean and std; counts) of two processes equals that of one
    process on batch 2 B, on every rank: the evaluation set of 8 rows, the odd set of 9 rows
    (7 duplicates in the last step are dropped) and a token cap inside rank 1's first batch."""
    single = (one_process(name, WORLD * B) if name == "istar" else one_process_odd(name))
    rec = two_process.value(0, name, "results", "measurements")
    ref = single["results"]["measurements"]
    _assert_same(rec, ref)
    # every rank logged the same evaluation values
    ranks = [_eval_scalars(two_process.value(r, name, "eval_metrics")) for r in range(WORLD)]
    assert ranks[0] == ranks[1]
    assert {k for k in ranks[0] if "isoscore" in k} >= {"eval_isoscore_last",
                                                       "eval_isoscore_union",
                                                       "eval_isoscore_star_union"}
    # and those of one process; not eval_loss: the Trainer averages the batch means, each
    # repeated batch-size times, so with an uneven last batch it depends on the batching
    ref_metrics = _eval_scalars(single["eval_metrics"])
    _assert_same({k: v for k, v in ranks[0].items() if k != "eval_loss"},
                 {k: v for k, v in ref_metrics.items() if k != "eval_loss"}, "eval metrics")
    # the counts from the tokenizer (the 8-row set is the first 8 rows of the odd one)
    n_dev = 8 if name == "istar" else N_ODD
    n_tokens = sum(dev_lengths[:n_dev])
    cap = _cap(dev_lengths) if name == "odd_capped" else n_tokens
    assert (rec["n_examples"], rec["n_tokens"], rec["n_tokens_measured"]) == (
        n_dev, n_tokens, cap)
    for layer in rec["layers"]:
        assert layer["cls"]["n_points"] == n_dev and layer["token"]["n_points"] == cap
    assert rec["layers"][-1]["cls"]["twonn"] is not None
    assert len(rec["last"]["cls_spectrum_centred"]) == min(10, n_dev)


# --------------------------------------------------------------- the accumulator alone

N_STATES, DIM = 3, 6
# name: (evaluation set size, token cap, (example, layer) holding a NaN or None)
MEASURE_CASES = {
    "odd, capped in rank 1": (11, 30, None),
    "odd, no cap": (11, 10_000, None),
    "even": (16, 10_000, None),
    "smaller than one step": (3, 10_000, None),
    "NaN on rank 1": (11, 10_000, (5, 2)),
}


def _examples(n: int, seed: int = 0) -> list[torch.Tensor]:
    """``n`` examples, each ``(N_STATES, length, DIM)`` float64 hidden states (length 2..7;
    float64, as the tiny model's, so that batches of different sizes accumulate the token
    statistics to ~1e-15: float32 ones differ by float32 rounding, ~1e-7)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(DIM, DIM, generator=g, dtype=torch.float64) * torch.linspace(0.2, 2, DIM)
    out = []
    for _ in range(n):
        length = int(torch.randint(2, 8, (1,), generator=g))
        out.append(torch.stack([
            torch.randn(length, DIM, generator=g, dtype=torch.float64) @ mix + layer
            for layer in range(N_STATES)]))
    return out


def _case_examples(name: str) -> list[torch.Tensor]:
    n, _, nan_at = MEASURE_CASES[name]
    examples = _examples(n)
    if nan_at is not None:
        examples[nan_at[0]][nan_at[1], 0, 0] = float("nan")
    return examples


def _batch(examples: list[torch.Tensor], idx: list[int]):
    """Hidden states of the examples ``idx`` padded on the right (padding holds NaN, never
    read) and their attention mask."""
    seq = max(examples[i].shape[1] for i in idx)
    hs = torch.full((N_STATES, len(idx), seq, DIM), float("nan"), dtype=torch.float64)
    mask = torch.zeros(len(idx), seq, dtype=torch.long)
    for b, i in enumerate(idx):
        hs[:, b, : examples[i].shape[1]] = examples[i]
        mask[b, : examples[i].shape[1]] = 1
    return list(hs), mask


def _measure(examples, batches, cap: int, n: int, **kwargs) -> dict:
    acc = EvalMeasures(max_tokens=cap, top_k=4, zeta=0.3, shrinkage=spd(DIM, seed=5),
                       dataset_size=n, **kwargs)
    for idx in batches:
        acc.update(*_batch(examples, idx))
    return acc.compute()


def _measure_on_rank(rank: int) -> dict:
    """Every case measured on this rank's shard of the evaluation order, sharded by
    Accelerate as the Trainer's evaluation loader is (batches of B, even batches); then a
    batch that is invalid on rank 1 alone, and a case measured after it."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    torch.set_num_threads(1)
    out: dict = {}
    for name, (n, cap, _) in MEASURE_CASES.items():
        shard = list(BatchSamplerShard(BatchSampler(SequentialSampler(range(n)), B, False),
                                       num_processes=WORLD, process_index=rank,
                                       split_batches=False, even_batches=True))
        out[name] = {"shard": shard,
                     "record": guarded(name, _measure, _case_examples(name), shard, cap, n)}
    examples = _examples(8)
    acc = EvalMeasures(max_tokens=100, dataset_size=8)
    acc.update(*_batch(examples, [rank * B + i for i in range(B)]))
    hs, mask = _batch(examples, [i for i in range(B)])
    try:
        acc.update(hs, mask[:, :-1] if rank == 1 else mask)
        out["invalid"] = "no error"
    except ValueError as err:
        out["invalid"] = str(err)
    out["after"] = guarded("after", _measure, examples, [[rank * B + i for i in range(B)]],
                           100, 8)
    return out


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    require_gloo()
    return RunResults.run(_measure_on_rank, world_size=WORLD,
                          out_dir=tmp_path_factory.mktemp("measure_ranks"), timeout=120)


@pytest.mark.parametrize("name", list(MEASURE_CASES))
def test_synced_accumulator_measures_the_whole_set(measured, name):
    """The two ranks' record equals one process's (sequential batches of 2 B) and the
    independent routes on the first ``cap`` token rows and every [CLS] row of the set."""
    n, cap, nan_at = MEASURE_CASES[name]
    shards = [measured.value(r, name, "shard") for r in range(WORLD)]
    seen = sorted(i for shard in shards for batch in shard for i in batch)
    assert set(seen) == set(range(n))
    if n % (WORLD * B):
        assert len(seen) > n  # Accelerate evened out the last step with duplicates
    rec = measured.value(0, name, "record")
    assert measured.value(1, name, "record") == rec  # every rank holds the same record
    examples = _case_examples(name)
    single = _measure(examples, [list(range(s, min(s + WORLD * B, n)))
                                 for s in range(0, n, WORLD * B)], cap, n, sync=False)
    _assert_same(rec, single, rel=1e-9, abs_=1e-9)
    # the independent route: NumPy on the concatenated set
    tokens = [np.concatenate([e[i].double().numpy() for e in examples])[:cap]
              for i in range(N_STATES)]
    cls = [np.stack([e[i, 0].double().numpy() for e in examples]) for i in range(N_STATES)]
    s = spd(DIM, seed=5)
    n_tokens = sum(e.shape[1] for e in examples)
    assert (rec["n_examples"], rec["n_tokens"]) == (n, n_tokens)
    assert rec["n_tokens_measured"] == min(cap, n_tokens)
    for i in range(N_STATES):
        tok, c = rec["layers"][i]["token"], rec["layers"][i]["cls"]
        assert c["n_points"] == n
        if nan_at is not None and i == nan_at[1]:
            assert tok["isoscore"] is None and c["twonn"] is None
            continue
        assert tok["n_points"] == min(cap, n_tokens)
        assert tok["isoscore"] == pytest.approx(iota(np.cov(tokens[i], rowvar=False)), abs=1e-6)
        assert tok["isoscore_star"] == pytest.approx(
            iota(0.7 * np.cov(tokens[i], rowvar=False) + 0.3 * s), abs=1e-6)
        assert tok["avg_cosine"] == pytest.approx(mean_cosine(tokens[i]), abs=1e-9)
        assert c["avg_cosine"] == pytest.approx(mean_cosine(cls[i]), abs=1e-6)
        if n >= 3:
            assert c["isoscore"] == pytest.approx(iota(np.cov(cls[i], rowvar=False)), abs=1e-6)
            assert c["twonn"] == pytest.approx(skdim_twonn(cls[i]), rel=1e-5)
    last = rec["last"]
    if nan_at is None:
        k = min(4, n)
        np.testing.assert_allclose(last["cls_spectrum_raw"], spectrum(cls[-1], k, False),
                                   atol=1e-6)
        np.testing.assert_allclose(last["cls_spectrum_centred"], spectrum(cls[-1], k, True),
                                   atol=1e-6)
        np.testing.assert_allclose(last["token_mean"], tokens[-1].mean(0), rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_allclose(last["token_std"], tokens[-1].std(0, ddof=1), rtol=1e-6)
    else:
        assert last["token_mean"] is None and last["cls_spectrum_raw"] is None
        assert rec["union"]["isoscore"] is None


def test_a_batch_invalid_on_one_rank_stops_every_rank(measured):
    """Rank 1's mask does not fit its batch: both ranks raise at that batch (rank 0 names
    the other process), and the next collectives still pair up."""
    assert "attention_mask shape" in measured.value(1, "invalid")
    assert measured.value(0, "invalid") == OTHER_RANK
    after = [measured.value(r, "after") for r in range(WORLD)]
    assert after[0] == after[1] and after[0]["n_examples"] == 2 * B


# ----------------------------------------------------------------------------- accumulation


def _reference_loop(model_dir, glue_dir, reg: str) -> dict[str, torch.Tensor]:
    r"""The parameters after plain-PyTorch training with micro-batches of B and 2 accumulation
    steps: every optimizer step minimises :math:`\frac12\sum_{m}(\text{CE}_m + R_m)` with
    :math:`R_m` the regularizer of micro-batch :math:`m` (I-STAR, CosReg), or of the window
    [previous micro-batch (detached), micro-batch m] (persistent entropy, window), or
    :math:`\frac12\sum_m \text{CE}_m + R(\text{both micro-batches})` with both graphs kept
    alive (persistent entropy, exact: the authors' retained-graph way); AdamW (fused, as
    the Trainer's default), linear decay to 0, gradient norm clipped at 1; for I-STAR,
    :math:`\Sigma_S` is the covariance of every training token of layers 1..L before each
    epoch."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

    from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss

    rows = _csv_tsv(glue_dir / "SST-2" / "train.tsv")
    set_seed(3)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    texts = [r["sentence"] for r in rows]
    labels = torch.tensor([int(r["label"]) for r in rows])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 - t / STEPS)
    loss_fn = {"istar": lambda: IStarLoss(TUNING["istar"], zeta=0.2),
               "cosreg": lambda: CosRegLoss(TUNING["cosreg"]),
               "entropy": lambda: PersistentEntropyLoss(weight=TUNING["entropy"]),
               "entropy_window": lambda: PersistentEntropyLoss(weight=TUNING["entropy"])
               }[reg]()
    previous: tuple[torch.Tensor, torch.Tensor] | None = None
    for _ in range(EPOCHS):
        if reg == "istar":
            model.eval()
            with torch.no_grad():
                enc = tok(texts, padding=True, truncation=True, max_length=16,
                          return_tensors="pt")
                hs = model(**enc, output_hidden_states=True).hidden_states
                mask = enc["attention_mask"].bool()
                union = torch.cat([h[mask] for h in hs[1:]])
            loss_fn.set_shrinkage(torch.from_numpy(np.cov(union.numpy(), rowvar=False)))
        model.train()
        for start in range(0, N_TRAIN, 2 * B):
            opt.zero_grad()
            if reg == "entropy":
                task, cls, ys = 0.0, [], []
                for m in (start, start + B):
                    enc = tok(texts[m:m + B], padding=True, truncation=True, max_length=16,
                              return_tensors="pt")
                    out = model(**enc, labels=labels[m:m + B], output_hidden_states=True)
                    task = task + out.loss / 2
                    cls.append(out.hidden_states[-1][:, 0])
                    ys.append(labels[m:m + B])
                cycle = loss_fn.forward_embeddings(torch.cat(cls), torch.cat(ys)).loss
                (task + cycle).backward()
            for m in (start, start + B) if reg != "entropy" else ():
                enc = tok(texts[m:m + B], padding=True, truncation=True, max_length=16,
                          return_tensors="pt")
                y = labels[m:m + B]
                out = model(**enc, labels=y, output_hidden_states=True)
                if reg == "entropy_window":
                    cls = out.hidden_states[-1][:, 0]
                    cloud, groups = cls, y
                    if previous is not None:
                        cloud = torch.cat([previous[0], cls])
                        groups = torch.cat([previous[1], y])
                    penalty = loss_fn.forward_embeddings(cloud, groups).loss
                    previous = (cls.detach(), y)
                else:
                    penalty = loss_fn(out.hidden_states, enc["attention_mask"]).loss
                ((out.loss + penalty) / 2).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _csv_tsv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_accumulation_equals_the_large_batch_for_the_task_loss(one_process):
    accumulated = one_process("none", B, 2)
    large = one_process("none", 2 * B)
    assert accumulated["results"]["train"]["global_step"] == STEPS
    assert _max_diff(accumulated["params"], large["params"]) < ATOL


@pytest.mark.parametrize("reg", ["istar", "cosreg", "entropy", "entropy_window"])
def test_accumulation_averages_the_micro_batch_regularizers(one_process, tiny_model_dir,
                                                            glue_dir, reg):
    """With accumulation I-STAR and CosReg score micro-batches, each scaled like the task
    loss; the persistent entropy (exact) scores the whole cycle once with its weight, or
    (window) the window ending at each micro-batch, scaled like the task loss: the
    Trainer's run equals the plain loop, and differs from the run on batch 2 B by far more
    than the tolerance (the mean task loss of two micro-batches is not that of the batch)."""
    accumulated = one_process(reg, B, 2)
    reference = _reference_loop(tiny_model_dir, glue_dir, reg)
    assert _max_diff(accumulated["params"], reference) < ATOL
    large = _max_diff(accumulated["params"], one_process(reg, 2 * B)["params"])
    if reg == "entropy":  # exact: the objective of the batch 2 B (equal micro-batches, the
        assert large < ATOL  # mean task loss is the batch's; no dropout in this model)
    else:
        assert large > 1e-4


def test_entropy_window_scores_the_accumulated_batch(one_process):
    """Window = accumulation steps: the last micro-step of every cycle scores the cycle's
    2 B points; at the first step (same parameters) its value is that of batch 2 B."""
    accumulated = one_process("entropy", B, 2)["step_logs"]
    large = one_process("entropy", 2 * B)["step_logs"]
    assert [s["entropy/n_points"] for s in accumulated] == [2 * B] * STEPS
    assert accumulated[0]["entropy/n_groups"] == 2
    first, ref = accumulated[0]["entropy/entropy_sum"], large[0]["entropy/entropy_sum"]
    assert math.isfinite(ref) and ref > 0 and first == pytest.approx(ref, rel=1e-12)


def test_two_processes_accumulate_the_exact_entropy_of_the_global_cycle(two_process,
                                                                        one_process):
    """Two processes x micro-batches of B x 2 accumulation steps: the entropy of the global
    cycle (4 B points, every rank's gradient from the gathered cloud) trains the parameters
    one process trains with micro-batches of 2 B; the [CLS] spectrum is logged on the
    global cycle too."""
    ddp = [two_process.value(r, "entropy_accumulated") for r in range(WORLD)]
    single = one_process("entropy", WORLD * B, 2)
    assert _max_diff(ddp[0]["params"], ddp[1]["params"]) == 0.0
    assert _max_diff(ddp[0]["params"], single["params"]) < ATOL
    logs = [r for r in _jsonl(Path(ddp[0]["run_dir"]) / "metrics.jsonl") if "loss" in r]
    assert logs and all(r["cls_spectrum_points"] == 2 * WORLD * B for r in logs)
    assert all(r["entropy/n_points"] == 2 * WORLD * B for r in logs)


# ----------------------------------------------------------------------------- resume


RESUME_FLAGS = ["--save_strategy", "steps", "--save_steps", "3", "--logging_steps", "2"]


def _resume_argv(model_dir: str, glue: str, out: Path) -> list[str]:
    """:func:`_argv` without regularizer, checkpointed and logged as ``RESUME_FLAGS`` say,
    in the default (seeded random) order, which transformers 4 has alone."""
    argv = _argv(model_dir, glue, out, "none", B, *RESUME_FLAGS)
    at = argv.index("--train_sampling_strategy")
    return argv[:at] + argv[at + 2:]


def _resume_on_rank(rank: int, model_dir: str, glue: str, root: str) -> dict:
    """Inside a rank: an uninterrupted run, and the same run crashed at step 4 (after
    checkpoint-3, before the log at step 4), that checkpoint's state, and its resume."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    full, broken = (_resume_argv(model_dir, glue, Path(root) / name) for name in ("full", "broken"))
    done = {"full": guarded("full", _train, full),
            "crashed": guarded("crashed", _train, broken, (Crash(4),)),
            "state": guarded("state", read_checkpoint_state,
                             Path(root) / "broken" / "checkpoint-3"),
            "files_before": _files(Path(root) / "broken")}
    done["resumed"] = guarded("resumed", _train, [*broken, "--resume"])
    done["files_after"] = _files(Path(root) / "broken")
    asked = _resume_argv(model_dir, glue, Path(root) / "asked")
    done["asked"] = guarded("asked", _asked_on_rank_1, asked, rank)
    done["asked_files"] = _files(Path(root) / "asked")
    done["asked_resumed"] = guarded("asked_resumed", _train, [*asked, "--resume"])
    return done


class _AskForCheckpoint(TrainerCallback):
    """SIGUSR1 to this process as optimizer step ``step`` (counted from 1) begins."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)
        return control


def _asked_on_rank_1(argv: list[str], rank: int) -> dict:
    """The run with SIGUSR1 sent to rank 1 alone during step 1: where each rank stopped."""
    with checkpoint_on_signal():
        try:
            _train(argv, (_AskForCheckpoint(1),) if rank == 1 else ())
        except StoppedAtCheckpoint as stop:
            return {"stopped_at": stop.step, "signum": stop.signum}
    return {"stopped_at": None}


def _files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative path) and its size."""
    return {str(f.relative_to(folder)): f.stat().st_size for f in folder.rglob("*") if f.is_file()}


@pytest.fixture(scope="module")
def two_process_resume(tiny_model_dir, glue_dir, tmp_path_factory):
    """Two processes, 4 optimizer steps logged at steps 2 and 4: uninterrupted, and resumed
    from checkpoint-3 (between two logs) after a crash at step 4."""
    require_gloo()
    root = tmp_path_factory.mktemp("ddp_resume")
    return RunResults.run(_resume_on_rank, str(tiny_model_dir), str(glue_dir), str(root),
                          world_size=WORLD, out_dir=root / "ranks", timeout=300)


@pytest.mark.floor  # transformers 4 refuses with a clear error (where 5 resumes)
def test_two_processes_resume_to_the_uninterrupted_records(two_process_resume):
    """A resume between two logs writes the records of the uninterrupted run: the log at
    step 4 averages steps 3 and 4 of every rank (the checkpoint holds each rank's loss since
    the last log, which the Trainer averages over ranks when it logs), and ``train_loss`` is
    the mean over all 4 steps."""
    for rank in range(WORLD):
        crashed = two_process_resume.ranks[rank]["crashed"]
        assert isinstance(crashed, StepError) and "simulated crash" in crashed.traceback
    if TRANSFORMERS_VERSION < (5, 0):  # the optimizer state would go to cpu:<rank>
        for rank in range(WORLD):
            refused = two_process_resume.ranks[rank]["resumed"]
            assert isinstance(refused, StepError)
            assert "ValueError: transformers 4." in refused.traceback
            assert "on 2 CPU processes" in refused.traceback
        # refused before the run directory was changed: its checkpoint and records kept
        before, after = (two_process_resume.value(0, k) for k in ("files_before", "files_after"))
        assert after == before and "checkpoint-3/isotropy_state.pt" in after
        return
    interval = two_process_resume.value(0, "state")["log_interval"]
    losses = interval["unlogged_losses"]
    # step 3's loss on each rank: the ranks train on different examples
    assert len(losses) == WORLD and all(math.isfinite(x) for x in losses)
    assert losses[0] != losses[1] and interval["last_logged_step"] == 2
    full_logs = _assert_resumed_to_the_full_run(two_process_resume, "resumed", "checkpoint-3")
    # rank 0's step-3 loss on both ranks would move step 4's log (the mean over 2 ranks and
    # 2 steps) by a quarter of the ranks' difference: 10 times the tolerance at least
    assert abs(losses[0] - losses[1]) / 4 > 10 * 1e-6 * abs(full_logs[4]["loss"])


def _assert_resumed_to_the_full_run(results: RunResults, name: str, checkpoint: str
                                    ) -> dict[int, dict]:
    """The resumed run ``name`` (from ``checkpoint``) ends with the uninterrupted run's
    parameters on every rank, its logs at steps 2 and 4 and its ``train_loss``; returns the
    uninterrupted run's logs by step."""
    full, resumed = (results.value(0, k) for k in ("full", name))
    assert resumed["results"]["train"]["resumed_from"].endswith(checkpoint)
    for rank in range(WORLD):
        params = results.value(rank, name, "params")
        assert _max_diff(params, full["params"]) < ATOL
    logs = [{r["step"]: r for r in _jsonl(Path(run["run_dir"]) / "metrics.jsonl") if "loss" in r}
            for run in (full, resumed)]
    assert sorted(logs[0]) == sorted(logs[1]) == [2, 4]
    for step in (2, 4):
        assert set(logs[1][step]) == set(logs[0][step])
        for key, value in logs[0][step].items():
            if key not in ("epoch", "step"):
                assert logs[1][step][key] == pytest.approx(value, rel=1e-6), (step, key)
    assert resumed["results"]["train"]["train_loss"] == pytest.approx(
        full["results"]["train"]["train_loss"], rel=1e-6)
    return logs[0]


@pytest.mark.floor  # the request all-reduced over the ranks on transformers 4 too
def test_sigusr1_on_one_process_checkpoints_every_rank_at_the_same_step(two_process_resume):
    """SIGUSR1 reaching rank 1 alone during step 1 (off the checkpoint and log schedules):
    both ranks save checkpoint-1 and stop; resumed (transformers 5: 4 refuses a resume on
    several CPU processes, with a clear error), the run writes the uninterrupted records."""
    for rank in range(WORLD):
        assert two_process_resume.value(rank, "asked") == {"stopped_at": 1,
                                                           "signum": signal.SIGUSR1}
    files = two_process_resume.value(0, "asked_files")
    assert "checkpoint-1/isotropy_state.pt" in files and "results.json" not in files
    if TRANSFORMERS_VERSION < (5, 0):
        refused = two_process_resume.ranks[0]["asked_resumed"]
        assert isinstance(refused, StepError) and "on 2 CPU processes" in refused.traceback
        return
    _assert_resumed_to_the_full_run(two_process_resume, "asked_resumed", "checkpoint-1")
