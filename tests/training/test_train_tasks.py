"""Every task of both papers through ``isotropy train``: tiny task files in the real layout,
a tiny random BERT, a few steps, a complete run directory whose metrics are recomputed from
``eval_predictions.csv`` by scikit-learn, scipy or torchmetrics."""

from __future__ import annotations

import csv
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _models import save_tiny_bert
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from isotropy.cli.train import main as train_main
from isotropy.training.run import run_training
from isotropy.training.settings import parse_train_args

POSITIVE = ["good", "great", "nice", "happy"]
NEGATIVE = ["bad", "awful", "poor", "sad"]
FILLER = ["movie", "film", "plot", "actor", "story", "the", "a", "is", "was", "very", "not"]
# SQuAD contexts: one word piece each, so token positions are word positions
ITEMS = [
    "red", "blue", "green", "black", "white", "brown", "pink", "gray", "gold", "silver",
    "apple", "orange", "lemon", "grape", "wine", "peach", "cherry", "plum", "bread", "milk",
    "water", "juice", "coffee", "tea", "sugar", "salt", "rice", "corn", "wheat", "bean",
    "fish", "meat", "egg", "cake", "soup",
]
QUESTION_WORDS = ["what", "comes", "after", "?"]
SST5_CUES = [["awful", "poor"], ["bad", "sad"], ["plot", "actor"], ["good", "nice"],
             ["great", "happy"]]

MAX_LEN = 32  # tiny_bert has 32 positions
STRIDE = 8


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A saved tiny random BERT encoder with a WordPiece vocabulary of the words above."""
    words = dict.fromkeys([*POSITIVE, *NEGATIVE, *FILLER, *ITEMS, *QUESTION_WORDS])
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert_tasks"), words)


# ------------------------------------------------------------------- task files (real layout)


def _sentence(rng: random.Random, cues: list[str]) -> str:
    return " ".join([*rng.choices(FILLER, k=rng.randint(2, 6)), rng.choice(cues)])


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _glue_rows(task: str, rng: random.Random, n: int) -> list[str]:
    """Rows of a GLUE TSV in the layout of the classic glue_data files."""
    rows: list[str] = []
    for i in range(n):
        y = i % 2
        a, b = _sentence(rng, POSITIVE if y else NEGATIVE), _sentence(rng, POSITIVE)
        nli = "entailment" if y == 0 else "not_entailment"
        if task == "sst2":
            rows.append(f"{a} \t{y}")  # SST-2 keeps a space before the tab
        elif task == "cola":
            rows.append(f"gj04\t{y}\t{'' if y else '*'}\t{a}")  # no header
        elif task == "mrpc":
            rows.append(f"{y}\t{1000 + i}\t{2000 + i}\t{a}\t{b}")
        elif task == "qqp":
            rows.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{y}")
        elif task in ("qnli", "rte"):
            rows.append(f"{i}\t{a}\t{b}\t{nli}")
        elif task == "stsb":
            rows.append(f"{i}\tmain-captions\tMSRvid\t2012test\t{i}\t{a}\t{b}\t"
                        f"{rng.uniform(0, 5):.3f}")
    return rows


GLUE_HEADERS = {
    "sst2": "sentence\tlabel",
    "cola": None,
    "mrpc": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
    "qqp": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
    "qnli": "index\tquestion\tsentence\tlabel",
    "rte": "index\tsentence1\tsentence2\tlabel",
    "stsb": "index\tgenre\tfilename\tyear\told_index\tsentence1\tsentence2\tscore",
}
GLUE_DIRS = {"sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "qqp": "QQP", "qnli": "QNLI",
             "rte": "RTE", "stsb": "STS-B"}


def _squad_doc(examples: list[tuple[str, str, str, str]]) -> dict:
    """A SQuAD v1.1 JSON document of (id, question, context, answer) tuples."""
    paragraphs = [
        {"context": c, "qas": [{"id": qid, "question": q,
                                "answers": [{"text": a, "answer_start": c.index(a)}]}]}
        for qid, q, c, a in examples
    ]
    return {"version": "1.1", "data": [{"title": "tiny", "paragraphs": paragraphs}]}


def _random_squad(rng: random.Random, n: int) -> list[tuple[str, str, str, str]]:
    out = []
    for i in range(n):
        words = rng.sample(ITEMS, rng.randint(8, 34))  # some contexts need several windows
        k = rng.randint(1, len(words) - 3)
        answer = " ".join(words[k: k + rng.randint(1, 3)])
        out.append((f"q{i}", f"what comes after {words[k - 1]} ?", " ".join(words), answer))
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """Every task's files, a few dozen rows each, in the layout of shared/glue_data; QNLI and
    SQuAD only as dev files (as in our copy: they train on a part of dev)."""
    root = tmp_path_factory.mktemp("tasks")
    rng = random.Random(0)
    for task, folder in GLUE_DIRS.items():
        splits = ("dev",) if task == "qnli" else ("train", "dev")
        for split in splits:
            header = GLUE_HEADERS[task]
            rows = _glue_rows(task, rng, 24 if split == "train" or task == "qnli" else 12)
            _write(root / folder / f"{split}.tsv", ([header] if header else []) + rows)
    for split, n in (("train", 24), ("dev", 12)):
        lines = []
        for i in range(n):
            y = i % 5
            lines.append(f"__label__{y + 1}\t{_sentence(rng, SST5_CUES[y])}")
        _write(root / "SST-5" / f"sst_{split}.txt", lines)
    doc = _squad_doc(_random_squad(rng, 24))
    _write(root / "SQuAD" / "dev-v1.1.json", [json.dumps(doc)])
    return root


# ------------------------------------------------------------------- running


def _argv(model, data, out, task, *extra):
    return [
        "--task", task, "--model", str(model), "--data_dir", str(data),
        "--output_dir", str(out), "--max_seq_length", str(MAX_LEN),
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
        "--num_train_epochs", "1", "--learning_rate", "1e-3", "--logging_steps", "1",
        "--seed", "3", "--disable_tqdm", "true", "--report_to", "none", "--use_cpu", "true",
        "--save_strategy", "no", "--shrinkage_tokens", "200", *extra,
    ]


def _run(argv):
    iso_args, train_args = parse_train_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_training(iso_args, train_args, echo=lambda s: None)


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "eval_predictions.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _squad_from_csv(rows: list[dict[str, str]]) -> dict[str, float]:
    """EM and F1 of the CSV rows by torchmetrics' official SQuAD v1.1 scoring."""
    from torchmetrics.functional.text import squad

    preds = [{"id": r["guid"], "prediction_text": r["prediction"]} for r in rows]
    target = [{"id": r["guid"], "answers": {"text": json.loads(r["answers"]),
                                            "answer_start": json.loads(r["answer_starts"])}}
              for r in rows]
    m = squad(preds, target)
    return {"exact_match": float(m["exact_match"]), "f1": float(m["f1"])}


def _recompute(metric: str, rows: list[dict[str, str]]) -> float:
    """A metric from the CSV by scikit-learn / scipy (never the package's own code)."""
    y = [float(r["label"]) for r in rows]
    p = [float(r["prediction"]) for r in rows]
    if metric == "accuracy":
        return float(accuracy_score(y, p))
    if metric == "f1":
        return float(f1_score(y, p, pos_label=1, zero_division=0.0))
    if metric == "matthews_correlation":
        return float(matthews_corrcoef(y, p))
    if metric == "pearson":
        return float(pearsonr(p, y)[0])
    if metric == "spearman":
        return float(spearmanr(p, y)[0])
    raise AssertionError(metric)


# task, metric keys (main first), output units, extra flags
TASK_CASES = [
    ("sst2", ["accuracy"], 2, []),
    ("qnli", ["accuracy"], 2, ["--split_dev_for_training", "0.5"]),
    ("rte", ["accuracy"], 2, []),
    ("mrpc", ["accuracy", "f1"], 2, []),
    ("qqp", ["accuracy", "f1"], 2, []),
    ("cola", ["matthews_correlation"], 2, []),
    ("stsb", ["pearson", "spearman"], 1, []),
    ("sst5", ["accuracy"], 5, []),
    ("squad", ["f1", "exact_match"], 2, ["--split_dev_for_training", "0.5",
                                         "--doc_stride", str(STRIDE)]),
]


@pytest.mark.parametrize(("task", "metrics", "units", "extra"), TASK_CASES,
                         ids=[c[0] for c in TASK_CASES])
def test_every_task_trains_to_a_complete_run(model_dir, data_dir, tmp_path, task, metrics,
                                             units, extra):
    from transformers import AutoConfig, AutoModel

    out = tmp_path / task
    res = _run(_argv(model_dir, data_dir, out, task, *extra))
    for name in ("config.json", "metrics.jsonl", "results.json", "eval_predictions.csv"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    results = json.loads((out / "results.json").read_text())
    assert res.status == "trained" and results["task"] == task
    assert results["main_metric"] == metrics[0]
    n_train, n_eval = config["data"]["n_train"], config["data"]["n_eval"]
    assert (n_train, n_eval) == ((12, 12) if "--split_dev_for_training" in extra else (24, 12))
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r and np.isfinite(r["loss"]) for r in logs)
    evals = [r for r in logs if f"eval_{metrics[0]}" in r]
    assert len(evals) == 1 and np.isfinite(evals[0]["eval_loss"])
    assert 0 <= evals[0]["eval_isoscore_last"] <= 1
    rows = _rows(out)
    assert len(rows) == n_eval and len({r["guid"] for r in rows}) == n_eval
    final = results["final"]
    if task == "squad":
        assert config["features"]["n_eval_features"] > n_eval  # some contexts are windowed
        expected = _squad_from_csv(rows)
        assert results["prediction_summary"]["collapsed"] is None
    else:
        expected = {m: _recompute(m, rows) for m in metrics}
    for m in metrics:
        assert final[f"eval_{m}"] == pytest.approx(expected[m], rel=1e-6, abs=1e-9), m
    cfg = AutoConfig.from_pretrained(out / "model")
    assert cfg.architectures == (["BertForQuestionAnswering"] if task == "squad"
                                 else ["BertForSequenceClassification"])
    assert cfg.num_labels == units
    AutoModel.from_pretrained(out / "model")  # loads as a plain encoder as well


# ------------------------------------------------------------------- SQuAD end to end


def _boundary_squad() -> list[tuple[str, str, str, str]]:
    """Examples of increasing length, the first one's answer cut by its first window.

    With 32 tokens, 3 special and 5 question tokens, a window holds 24 context words and the
    next one starts 24 - 8 = 16 words later: the answer of "cross" (words 20..24) is cut by
    window 1 (words 0..23) and whole in window 2 (words 16..34).
    """
    context = " ".join(ITEMS)
    out = [("cross", f"what comes after {ITEMS[19]} ?", context, " ".join(ITEMS[20:25]))]
    for i, (length, k, n) in enumerate([(6, 2, 1), (10, 7, 2), (18, 3, 3), (30, 26, 2)]):
        words = ITEMS[i + 1: i + 1 + length]
        out.append((f"s{i}", f"what comes after {words[k - 1]} ?", " ".join(words),
                    " ".join(words[k: k + n])))
    return out


@pytest.mark.slow
def test_squad_answer_across_a_window_boundary_is_learnt_end_to_end(model_dir, tmp_path):
    """Train and evaluate on the same few questions until memorised: every answer, the one
    cut by a window boundary included, comes back exactly, with length-grouped evaluation
    batches that visit the windows out of order."""
    data = tmp_path / "data"
    doc = _squad_doc(_boundary_squad())
    for split in ("train", "dev"):
        _write(data / "SQuAD" / f"{split}-v1.1.json", [json.dumps(doc)])
    from transformers import AutoTokenizer

    from isotropy.data.glue import load_split
    from isotropy.data.squad import squad_features

    tok = AutoTokenizer.from_pretrained(model_dir)
    windows = squad_features(tok, load_split("squad", "dev", data), max_seq_length=MAX_LEN,
                             doc_stride=STRIDE)
    cross = [f for f, e in enumerate(windows.example_index) if e == 0]
    assert len(cross) == 2
    first_ctx = [t for t, s in enumerate(windows.offsets[cross[0]]) if s is not None]
    assert len(first_ctx) == 24  # the answer (words 20..24) does not fit in window 1
    # the length-grouped evaluation sampler (seed 3, batches of 2) visits windows out of order
    from transformers.trainer_pt_utils import LengthGroupedSampler

    lengths = [len(ids) for ids in windows.inputs["input_ids"]]
    visit = list(LengthGroupedSampler(2, lengths=lengths,
                                      generator=torch.Generator().manual_seed(3)))
    assert sorted(visit) == list(range(len(lengths))) and visit != sorted(visit)
    out = tmp_path / "run"
    res = _run(_argv(model_dir, data, out, "squad", "--doc_stride", str(STRIDE),
                     "--num_train_epochs", "200", "--learning_rate", "5e-3",
                     "--lr_scheduler_type", "constant",
                     "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "2",
                     "--group_by_length", "--logging_steps", "50", "--eval_strategy", "no",
                     "--weight_decay", "0"))
    rows = {r["guid"]: r for r in _rows(out)}
    for qid, _, _, answer in _boundary_squad():
        assert rows[qid]["prediction"] == answer, qid
    assert res.results["final"]["eval_exact_match"] == 100.0
    assert _squad_from_csv(list(rows.values())) == {"exact_match": 100.0, "f1": 100.0}


# ------------------------------------------------------------------- entropy without classes


@pytest.mark.parametrize(("task", "groups"), [("stsb", 1), ("squad", 1), ("sst2", 2)])
def test_entropy_takes_the_whole_batch_without_class_labels(model_dir, data_dir, tmp_path,
                                                            task, groups):
    """STS-B (scores) and SQuAD (spans) have no class labels: one cloud per batch of 8, and
    the run says so; SST-2 has one cloud per class in every batch."""
    out = tmp_path / task
    extra = ["--split_dev_for_training", "0.5", "--doc_stride", str(STRIDE)] if task == "squad" \
        else []
    _run(_argv(model_dir, data_dir, out, task, "--regularizer", "entropy",
               "--dataloader_drop_last", "true", "--per_device_eval_batch_size", "1", *extra))
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "entropy/loss" in r]
    assert steps and all(r["entropy/n_points"] == 8 for r in steps)
    clouds = [r["entropy/n_groups"] + r["entropy/skipped_groups"] for r in steps]
    assert clouds == [groups] * len(steps)  # scored clouds plus those of < 3 points
    if groups == 1:
        assert all(r["entropy/n_groups"] == 1 for r in steps)
    notes = json.loads((out / "config.json").read_text())["notes"]
    if groups == 1:
        assert len(notes) == 1 and "whole batch" in notes[0] and "entropy" in notes[0]
    else:
        assert notes == []


# ------------------------------------------------------------------- bad SQuAD settings


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--doc_stride", "32"], "--doc_stride (32) must be smaller than --max_seq_length (32)"),
        (["--n_best_size", "0"], "--n_best_size must be >= 1"),
        (["--max_answer_length", "0"], "--max_answer_length must be >= 1"),
        (["--doc_stride", "26"], "leaves 24 context tokens"),  # next to 5 question tokens
        (["--label_names", "labels"], "--label_names must be start_positions end_positions"),
        (["--batch_eval_metrics", "true"], "--batch_eval_metrics is not supported"),
        (["--dataloader_drop_last", "true"], "--dataloader_drop_last would leave"),
    ],
)
def test_bad_squad_settings_fail_in_one_line_before_any_work(model_dir, data_dir, tmp_path,
                                                             capsys, extra, message):
    out = tmp_path / "run"
    argv = _argv(model_dir, data_dir, out, "squad", "--split_dev_for_training", "0.5",
                 "--doc_stride", str(STRIDE), *extra)
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_squad_window_defaults():
    iso_args, _ = parse_train_args(["--task", "squad", "--output_dir", "x"])
    assert (iso_args.max_seq_length, iso_args.doc_stride, iso_args.n_best_size,
            iso_args.max_answer_length) \
        == (384, 128, 20, 30)
    assert parse_train_args(["--task", "rte", "--output_dir", "x"])[0].max_seq_length == 128


@pytest.mark.slow
def test_a_squad_run_split_by_question_does_not_resume_split_by_paragraph(model_dir, data_dir,
                                                                         tmp_path):
    out = tmp_path / "squad"
    argv = _argv(model_dir, data_dir, out, "squad", "--split_dev_for_training", "0.5",
                 "--doc_stride", str(STRIDE))
    _run(argv)
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["split_unit"] == "context paragraph"
    del config["data"]["split_unit"]  # as written before SQuAD was split by paragraph
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="finished run with other settings .the dev split was "
                                         "made by example, now by context paragraph"):
        _run(argv)
    (out / "results.json").unlink()
    with pytest.raises(ValueError, match="cannot resume .*made by example, now by context"):
        _run([*argv, "--resume"])
    config["data"]["split_unit"] = "context paragraph"
    (out / "config.json").write_text(json.dumps(config))
    assert _run([*argv, "--resume"]).status == "trained"  # the same split resumes
