"""TensorBoard events of ``isotropy train``: on by default, under ``<run_dir>/tensorboard``,
holding the same numbers as ``metrics.jsonl``; off with a warning without ``tensorboard``."""

from __future__ import annotations

import json
import random
import sys
import warnings

import numpy as np
import pytest
from _models import save_tiny_bert

from isotropy.training.run import run_training
from isotropy.training.settings import parse_train_args

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "movie", "film", "the", "a", "is"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """A saved tiny random BERT and SST-2 train/dev files of a few dozen rows."""
    root = tmp_path_factory.mktemp("tb")
    model = save_tiny_bert(root, WORDS)
    rng = random.Random(0)
    (root / "glue" / "SST-2").mkdir(parents=True)
    for split, n in (("train", 32), ("dev", 16)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randint(0, 1)
            cue = rng.choice(["good", "great"] if y else ["bad", "awful"])
            rows.append(" ".join([*rng.choices(WORDS[6:], k=3), cue]) + f"\t{y}")
        (root / "glue" / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return model, root / "glue"


def _argv(model, glue, out, *extra):
    return [
        "--task", "sst2", "--model", str(model), "--data_dir", str(glue),
        "--output_dir", str(out), "--regularizer", "istar", "--max_seq_length", "16",
        "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16",
        "--num_train_epochs", "2", "--learning_rate", "1e-3", "--logging_steps", "2",
        "--seed", "3", "--disable_tqdm", "true", "--use_cpu", "true", "--save_strategy", "no",
        "--shrinkage_tokens", "200", *extra,
    ]


def _scalars(logdir) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of every event file under ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_events_hold_the_metrics_jsonl_numbers(tiny_setup, tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    model, glue = tiny_setup
    out = tmp_path / "run"
    iso_args, train_args = parse_train_args(_argv(model, glue, out))
    assert train_args.report_to == ["tensorboard"]
    assert train_args.logging_dir == str(out / "tensorboard")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_training(iso_args, train_args, echo=lambda s: None)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert not (out / "runs").exists()  # transformers' own default is not used
    scalars = _scalars(out / "tensorboard")
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    checks = {"train/loss": "loss", "train/task_loss": "task_loss",
              "train/istar/isoscore_star": "istar/isoscore_star",
              "train/istar/loss": "istar/loss", "eval/accuracy": "eval_accuracy",
              "eval/isoscore_last": "eval_isoscore_last"}
    for tag, key in checks.items():
        expected = {r["step"]: r[key] for r in records if key in r}
        assert expected, key
        assert set(scalars[tag]) == set(expected), tag
        got = [scalars[tag][s] for s in sorted(expected)]
        want = np.float32([expected[s] for s in sorted(expected)])  # events store float32
        np.testing.assert_array_equal(np.float32(got), want, err_msg=tag)
    assert len(scalars["eval/accuracy"]) == 2  # one evaluation per epoch


def test_user_settings_win(tiny_setup, tmp_path):
    model, glue = tiny_setup
    _, train_args = parse_train_args(_argv(model, glue, tmp_path / "a", "--logging_dir",
                                      str(tmp_path / "tb")))
    assert train_args.logging_dir == str(tmp_path / "tb")
    _, train_args = parse_train_args(_argv(model, glue, tmp_path / "a", "--report_to", "none"))
    assert train_args.report_to == []


def test_missing_tensorboard_degrades_with_a_warning(tiny_setup, tmp_path, monkeypatch):
    for name in ("tensorboard", "tensorboardX"):  # import fails, find_spec gives None
        monkeypatch.setitem(sys.modules, name, None)
    model, glue = tiny_setup
    with pytest.warns(UserWarning, match="TensorBoard logging is off: the tensorboard package "
                                         "is not installed"):
        _, train_args = parse_train_args(_argv(model, glue, tmp_path / "run"))
    assert "tensorboard" not in train_args.report_to
