"""The ``isotropy`` command line (small inputs, tiny random BERT)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from isotropy.cli.main import main

SENTENCES = ["the cat sat on the mat .", "a dog runs fast", "good film", "bad slow movie",
             "the red bird", "it is not good", "a big blue dog and a cat", "very bad"]


def _tiny_bert(path: Path) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    words = sorted({w for s in SENTENCES for w in s.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer.from_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    BertModel(config).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("cli_bert"))


@pytest.fixture()
def texts_file(tmp_path: Path) -> Path:
    f = tmp_path / "texts.txt"
    f.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return f


@pytest.fixture()
def glue_dir(tmp_path: Path) -> Path:
    d = tmp_path / "glue"
    (d / "SST-2").mkdir(parents=True)
    rows = "".join(f"{s} \t{i % 2}\n" for i, s in enumerate(SENTENCES))
    (d / "SST-2" / "dev.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    return d


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of a command that must fail its checks: status 2, one line, no traceback."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    # the command's own checks name it; argparse's leftover arguments come from the top parser
    assert re.match(r"isotropy(?: (?:measure|stability|demo))?: error: ", err), err
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    return err


@pytest.fixture()
def no_compute(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the two computations fail the test if they start; returns the calls seen."""
    import isotropy.paper.stability as stability
    import isotropy.probing.layerwise as measure_module

    calls: list[str] = []

    def forbidden(name: str):
        def run(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} ran although a check should have failed first")
        return run

    monkeypatch.setattr(stability, "run_stability", forbidden("run_stability"))
    monkeypatch.setattr(measure_module, "measure_model", forbidden("measure_model"))
    return calls


def test_stability_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stab"
    code = main(["stability", "--dim", "16", "--sizes", "8,32", "200", "--zetas", "0", "0.5",
                 "--shrinkage-points", "3000", "--repeats", "2", "--output-dir", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "zeta=0.5" in text and "population IsoScore" in text and "stability.csv" in text
    with open(out / "stability.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["n_points"]), float(r["zeta"])) for r in rows] == [
        (8, 0.0), (8, 0.5), (32, 0.0), (32, 0.5), (200, 0.0), (200, 0.5)]
    assert (out / "stability.png").stat().st_size > 0
    assert json.loads((out / "stability.json").read_text())["config"]["repeats"] == 2


def test_measure_command_texts(tiny_dir: Path, texts_file: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    code = main(["measure", "--model", str(tiny_dir), "--texts", str(texts_file),
                 "--batch-size", "3", "--twonn-tokens", "20", "--device", "cpu",
                 "--no-progress", "--output-dir", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "IsoScore" in text and "measure.json" in text
    doc = json.loads((out / "measure.json").read_text())
    assert doc["config"]["texts"]["kind"] == "file"
    assert doc["config"]["n_texts"] == len(SENTENCES) and doc["config"]["max_tokens"] == 20
    assert len(doc["rows"]) == 4  # layers 0, 1 x (token, cls)
    with open(out / "measure.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 4


def test_measure_command_task(tiny_dir: Path, glue_dir: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    code = main(["measure", "--model", str(tiny_dir), "--task", "sst-2", "--data-dir",
                 str(glue_dir), "--max-texts", "5", "--no-progress", "--output-dir", str(out)])
    assert code == 0
    cfg = json.loads((out / "measure.json").read_text())["config"]
    assert cfg["texts"]["task"] == "sst2" and cfg["texts"]["used"] == 5
    assert cfg["texts"]["available"] == len(SENTENCES)
    assert "sst2 dev" in capsys.readouterr().out


def test_demo_command(tiny_dir: Path, glue_dir: Path, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    import isotropy.paper.stability as stability

    real = stability.run_stability

    def small(**kwargs):
        kwargs.update(dim=8, sizes=[4, 16], shrinkage_points=500, repeats=2)
        return real(**kwargs)

    monkeypatch.setattr(stability, "run_stability", small)
    out = tmp_path / "demo"
    assert main(["demo", "--model", str(tiny_dir), "--data-dir", str(glue_dir),
                 "--no-progress", "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SST-2 dev" in text and "outputs in" in text
    for name in ("stability/stability.csv", "stability/stability.png", "measure/measure.json"):
        assert (out / name).is_file()
    # without SST-2 the demo falls back to its built-in sentences
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["demo", "--model", str(tiny_dir), "--data-dir", str(empty), "--no-progress",
                 "--output-dir", str(tmp_path / "demo2")]) == 0
    assert "built-in sentences" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_fine_tuning_comparison(tiny_dir: Path, glue_dir: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With SST-2 train and dev present, the demo fine-tunes once per method; its table
    agrees with every run's results.json, and the collapsed flag with the run's predictions."""
    import csv
    import json

    import isotropy.paper.stability as stability

    real = stability.run_stability

    def small(**kwargs):
        kwargs.update(dim=8, sizes=[4, 16], shrinkage_points=500, repeats=2)
        return real(**kwargs)

    monkeypatch.setattr(stability, "run_stability", small)

    rows = "".join(f"{s} \t{(i // 2) % 2}\n" for i, s in enumerate(SENTENCES * 3))
    (glue_dir / "SST-2" / "train.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    out = tmp_path / "demo"
    argv = ["demo", "--model", str(tiny_dir), "--data-dir", str(glue_dir), "--no-progress",
            "--output-dir", str(out), "--finetune-epochs", "1", "--max-texts", "8"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "fine-tuning comparison on sst2" in text and "| method | accuracy |" in text
    table = json.loads((out / "finetune" / "comparison.json").read_text())["rows"]
    assert [r["method"].split()[0] for r in table] == ["none", "istar", "cosreg", "entropy"]
    for row in table:
        run = Path(row["run_dir"])
        results = json.loads((run / "results.json").read_text())
        assert row["value"] == results["final"]["eval_accuracy"]
        with (run / "eval_predictions.csv").open() as f:
            predictions = [r["prediction"] for r in csv.DictReader(f)]
        assert len(predictions) == len(SENTENCES)
        assert row["collapsed"] == (len(set(predictions)) == 1)
        assert (row["isoscore_star_last"] is not None) == (row["method"].startswith("istar")
                                                           or "eval_isoscore_star_last"
                                                           in results["final"])
    report = (out / "finetune" / "report" / "report.md").read_text()
    assert all(m in report for m in ("none", "istar", "cosreg", "entropy"))
    assert list((out / "finetune" / "report" / "figures").glob("*.png"))
    # the claims file is written and listed among the demo's outputs
    claims = out / "finetune" / "report" / "claims.md"
    assert claims.is_file() and f"  {claims}\n" in text
    md = (out / "finetune" / "comparison.md").read_text()
    assert md.count("\n| ") == 5  # header and four methods
    # a second demo reuses the finished runs instead of training again
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.count("reused a finished run") == 4
    assert text.count("holds this run, finished: nothing was trained, its results are kept") == 4
    # the demo's --overwrite trains them again
    stamps = [Path(r["run_dir"], "results.json").stat().st_mtime_ns for r in table]
    assert main([*argv, "--overwrite"]) == 0
    assert "reused a finished run" not in capsys.readouterr().out
    assert all(Path(r["run_dir"], "results.json").stat().st_mtime_ns != stamp
               for r, stamp in zip(table, stamps, strict=True))


@pytest.mark.parametrize(("no_progress", "terminal", "disabled"), [
    (False, True, False), (False, False, True), (True, True, True)])
def test_demo_trainer_progress_bars_only_on_a_terminal(
        no_progress: bool, terminal: bool, disabled: bool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from isotropy.cli.demo import _finetune_settings
    from isotropy.cli.main import build_parser

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    args = build_parser().parse_args(["demo", *(["--no-progress"] if no_progress else [])])
    assert _finetune_settings(args, tmp_path)["disable_tqdm"] is disabled


def test_comparison_table_flags_a_collapsed_classifier() -> None:
    from isotropy.paper.demo import ComparisonResult, format_comparison_table

    def row(method, collapsed, majority):
        return {"method": method, "metric": "accuracy", "value": 0.5, "collapsed": collapsed,
                "majority_fraction": majority, "isoscore_star_last": None,
                "isoscore_star_union": 0.25, "twonn_cls_last": 7.0}

    lines = format_comparison_table(ComparisonResult(
        [row("none", False, 0.6), row("istar", True, 1.0), row("cosreg", False, 0.97)]
    )).splitlines()
    assert lines[0].startswith("| method | accuracy | IsoScore* last layer")
    assert lines[2] == "| none | 0.500 | n/a | 0.250 | 7.0 | no |"
    assert "YES: every prediction is one class" in lines[3]
    assert "nearly (97.0% one class)" in lines[4]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required"),
        (["frobnicate"], "invalid choice"),
        (["stability", "--zetas", "0", "1.5"], "zeta must lie in [0, 1]"),
        (["stability", "--sizes", "1"], "sizes must be >= 2"),
        (["stability", "--dim", "3"], "--dim must be >= 4"),
        (["stability", "--repeats", "0"], "positive integer"),
        (["stability", "--repeats", "1"], "--repeats must be >= 2"),
        (["stability", "--repeats", "two"], "positive integer"),
        (["measure"], "one of the arguments --texts --task is required"),
        (["measure", "--task", "mnli"], "unknown task 'mnli'"),
        (["measure", "--texts", "/no/such/file.txt"], "does not exist"),
        (["measure", "--task", "sst2", "--split", "holdout"], "invalid choice"),
        (["measure", "--task", "sst2", "--batch-size", "0"], "positive integer"),
        # seeds outside NumPy's and isotropy train's range: refused before any work (the
        # demo's would have failed at its fine-tuning, after its measurements)
        (["stability", "--seed", "-1"], "--seed: expected a seed in 0..4294967295, got '-1'"),
        (["measure", "--task", "sst2", "--seed", str(2**64)], "expected a seed in 0.."),
        (["demo", "--seed", "-3"], "--seed: expected a seed in 0..4294967295, got '-3'"),
        # a setting of the comparison --no-finetune skips, and a NaN of its epochs (once
        # named --num_train_epochs, a flag the demo does not have)
        (["demo", "--no-finetune", "--finetune-epochs", "3"],
         "--finetune-epochs is a setting of the fine-tuning comparison, which --no-finetune "
         "skips: leave out one of the two"),
        (["demo", "--finetune-task", "rte", "--no-finetune"],
         "--finetune-task is a setting of the fine-tuning comparison"),
        (["demo", "--no-finetune", "--overwrite"], "--overwrite is a setting of the fine-tuning"),
        (["demo", "--finetune-epochs", "nan"],
         "--finetune-epochs: expected a finite number > 0, got 'nan'"),
        (["demo", "--finetune-epochs", "0"], "--finetune-epochs: expected a finite number > 0"),
        # a dimension whose covariances this machine cannot hold: one line, no allocation
        (["stability", "--dim", "100000000"],
         "dim 100000000 with sub-samples of up to 2,000 rows needs about"),
    ],
)
def test_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(argv, capsys)


def test_bad_paths_and_devices(tiny_dir: Path, texts_file: Path, glue_dir: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["measure", "--task", "qnli", "--split", "train", "--data-dir",
                        str(glue_dir)], capsys)
    assert "QNLI train split not found" in err and str(glue_dir / "QNLI" / "train.tsv") in err
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", "./no/such/model"],
                       capsys)
    assert "does not exist" in err
    err = _usage_error(["measure", "--texts", str(texts_file), "--data-dir", "/no/such/dir"],
                       capsys)
    assert "--data-dir" in err
    err = _usage_error(["measure", "--texts", str(texts_file), "--device", "warp-drive"],
                       capsys)
    assert "not a torch device" in err
    # a path of the wrong kind is named as such, not as missing
    err = _usage_error(["measure", "--texts", str(glue_dir)], capsys)
    assert f"--texts: file {glue_dir} is a directory, not a file" in err
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", str(texts_file)],
                       capsys)
    assert f"--model: model directory {texts_file} is a file, not a directory" in err
    err = _usage_error(["measure", "--texts", str(texts_file), "--data-dir", str(texts_file)],
                       capsys)
    assert f"--data-dir: directory {texts_file} is a file, not a directory" in err


def test_unloadable_model_is_a_usage_error(tmp_path: Path, texts_file: Path, tiny_dir: Path,
                                            no_compute: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    broken = tmp_path / "broken_model"
    broken.mkdir()
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", str(broken)], capsys)
    assert err.startswith("isotropy measure: error: ") and "no config.json" in err
    (broken / "config.json").write_text('{"model_type": "bert"}')  # no weights, no tokenizer
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", str(broken),
                        "--output-dir", str(tmp_path / "o")], capsys)
    assert "gets a fallback vocabulary in which every word is unknown" in err
    # the model's own configuration and tokenizer, without its weights
    for f in tiny_dir.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin")):
            shutil.copy(f, broken / f.name)
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", str(broken),
                        "--output-dir", str(tmp_path / "o")], capsys)
    assert "could not load a model" in err
    assert no_compute == [] and not (tmp_path / "o").exists()


def test_failure_while_computing_returns_1(tiny_dir: Path, texts_file: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import isotropy.probing.layerwise as measure_module

    def fails(*args, **kwargs):
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    monkeypatch.setattr(measure_module, "measure_model", fails)
    code = main(["measure", "--model", str(tiny_dir), "--texts", str(texts_file),
                 "--no-progress", "--output-dir", str(tmp_path / "o")])
    assert code == 1
    assert capsys.readouterr().err == (
        "isotropy measure: error: CUDA out of memory. Tried to allocate 2 GiB\n")


# --------------------------------------------------------------------------- checks first

_STAB_SMALL = ["--dim", "8", "--sizes", "4", "--shrinkage-points", "100", "--repeats", "2"]


def _command(cmd: str, tiny_dir: Path, texts_file: Path, glue_dir: Path) -> list[str]:
    if cmd == "stability":
        return ["stability", *_STAB_SMALL]
    common = ["--model", str(tiny_dir), "--no-progress", "--device", "cpu"]
    if cmd == "measure":
        return ["measure", "--texts", str(texts_file), *common]
    return ["demo", "--data-dir", str(glue_dir), *common]


@pytest.mark.parametrize("cmd", ["stability", "measure", "demo"])
def test_output_dir_that_is_a_file_fails_first(cmd: str, tiny_dir: Path, texts_file: Path,
                                               glue_dir: Path, tmp_path: Path,
                                               no_compute: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = _command(cmd, tiny_dir, texts_file, glue_dir)
    a_file = tmp_path / "results.txt"
    a_file.write_text("keep me\n")
    err = _usage_error([*argv, "--output-dir", str(a_file)], capsys)
    expected = (f"is a file, so {a_file / 'stability'} cannot be created" if cmd == "demo"
                else "exists and is not a directory")
    assert "--output-dir" in err and expected in err
    err = _usage_error([*argv, "--output-dir", str(a_file / "sub" / "dir")], capsys)
    assert f"{a_file} is a file, so" in err and "cannot be created under it" in err
    assert a_file.read_text() == "keep me\n"
    out = tmp_path / "out"
    names = {"stability": "stability.csv", "measure": "measure.json", "demo": "measure/measure.csv"}
    (out / names[cmd]).mkdir(parents=True)  # an output file's name taken by a directory
    err = _usage_error([*argv, "--output-dir", str(out)], capsys)
    assert f"{out / names[cmd]} is a directory" in err
    assert no_compute == []


@pytest.mark.parametrize("cmd", ["stability", "measure", "demo"])
def test_files_an_earlier_run_did_not_write_are_never_replaced(
        cmd: str, tiny_dir: Path, texts_file: Path, glue_dir: Path, tmp_path: Path,
        no_compute: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An output folder holding a file of an output's name (someone's measure.csv) without the
    command's own JSON record beside it: one line before any work, the file kept (it was
    replaced)."""
    argv = _command(cmd, tiny_dir, texts_file, glue_dir)
    out = tmp_path / "out"
    name = {"stability": "stability.csv", "measure": "measure.csv",
            "demo": "measure/measure.json"}[cmd]
    (out / name).parent.mkdir(parents=True)
    (out / name).write_text("my data\n")
    err = _usage_error([*argv, "--output-dir", str(out)], capsys)
    assert "no " in err and "of an earlier run of the command" in err
    assert (out / name).read_text() == "my data\n"
    assert no_compute == []


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in, or skip."""
    import os
    import tempfile

    d = tmp_path / "read_only"
    d.mkdir()
    d.chmod(0o555)
    candidates = [d, Path("/proc")]  # root ignores the mode bits; /proc takes no new files
    for c in candidates:
        try:
            with tempfile.NamedTemporaryFile(dir=c):
                pass
        except OSError:
            return c
    os.chmod(d, 0o755)
    pytest.skip("no unwritable directory available to this process")


@pytest.mark.parametrize("cmd", ["stability", "measure", "demo"])
def test_unwritable_output_dir_fails_first(cmd: str, tiny_dir: Path, texts_file: Path,
                                           glue_dir: Path, tmp_path: Path,
                                           no_compute: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    locked = _unwritable_dir(tmp_path)
    argv = _command(cmd, tiny_dir, texts_file, glue_dir)
    err = _usage_error([*argv, "--output-dir", str(locked / "new" / "out")], capsys)
    assert f"{locked} is not writable" in err
    assert no_compute == []


def test_demo_unreachable_model_fails_before_stability(glue_dir: Path, tmp_path: Path,
                                                       no_compute: list[str],
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network try
    out = tmp_path / "demo"
    err = _usage_error(["demo", "--model", str(tmp_path / "no" / "such" / "model"),
                        "--data-dir", str(glue_dir), "--output-dir", str(out)], capsys)
    assert "does not exist" in err
    # a hub id that cannot be fetched (offline, or no such repository)
    err = _usage_error(["demo", "--model", "no-such-org-4f1c/no-such-model",
                        "--data-dir", str(glue_dir), "--output-dir", str(out)], capsys)
    assert "could not load a model and tokenizer from 'no-such-org-4f1c/no-such-model'" in err
    assert no_compute == [] and not out.exists()


def test_demo_refuses_a_finetune_task_it_cannot_run_before_any_work(
        tiny_dir: Path, glue_dir: Path, tmp_path: Path, no_compute: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--finetune-task squad`` without SQuAD's files: before, stability and measure ran and
    the comparison was then skipped with status 0; the default task is still skipped."""
    out = tmp_path / "demo"
    err = _usage_error(["demo", "--model", str(tiny_dir), "--data-dir", str(glue_dir),
                        "--finetune-task", "squad", "--output-dir", str(out)], capsys)
    assert "--finetune-task squad: " in err and "not found" in err
    assert no_compute == [] and not out.exists()


@pytest.mark.parametrize("where", ["finetune/none", "finetune/report"])
def test_demo_refuses_a_foreign_comparison_folder_before_stability(
        where: str, tiny_dir: Path, glue_dir: Path, tmp_path: Path, no_compute: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of someone else's where a comparison run or its report goes: refused before
    stability and measure run (before: after them and, for the report, after all four
    trainings), and left as it was."""
    rows = "".join(f"{s} \t{i % 2}\n" for i, s in enumerate(SENTENCES))
    (glue_dir / "SST-2" / "train.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")
    out = tmp_path / "demo"
    (out / where).mkdir(parents=True)
    (out / where / "thesis.txt").write_text("mine")
    err = _usage_error(["demo", "--model", str(tiny_dir), "--data-dir", str(glue_dir),
                        "--no-progress", "--output-dir", str(out)], capsys)
    assert str(out / where) in err and ("thesis.txt" in err or "holds no run" in err)
    assert no_compute == []
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        *sorted([where.split("/")[0], where]), f"{where}/thesis.txt"]


@pytest.mark.parametrize(("cmd", "least"), [("measure", 2), ("demo", 2), ("pairs", 3)])
def test_max_length_below_special_tokens_is_rejected(cmd: str, least: int, tiny_dir: Path,
                                                     texts_file: Path, glue_dir: Path,
                                                     tmp_path: Path, no_compute: list[str],
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    if cmd == "pairs":
        (glue_dir / "RTE").mkdir()
        rows = "".join(f"{i}\t{a}\t{b}\tentailment\n"
                       for i, (a, b) in enumerate(zip(SENTENCES[:-1], SENTENCES[1:], strict=True)))
        (glue_dir / "RTE" / "dev.tsv").write_text(
            "index\tsentence1\tsentence2\tlabel\n" + rows, encoding="utf-8")
        argv = ["measure", "--task", "rte", "--data-dir", str(glue_dir), "--model",
                str(tiny_dir)]
    else:
        argv = _command(cmd, tiny_dir, texts_file, glue_dir)
    for too_small in range(1, least):
        err = _usage_error([*argv, "--max-length", str(too_small), "--output-dir",
                            str(tmp_path / "o")], capsys)
        assert f"smallest valid max_length is {least}" in err
    assert no_compute == []


def test_bad_data_file_fails_before_stability(tiny_dir: Path, glue_dir: Path, tmp_path: Path,
                                              no_compute: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sst = glue_dir / "SST-2" / "dev.tsv"
    sst.write_bytes(sst.read_bytes() + "caf\xe9\t1\n".encode("latin-1"))
    err = _usage_error(["demo", "--model", str(tiny_dir), "--data-dir", str(glue_dir),
                        "--output-dir", str(tmp_path / "d")], capsys)
    assert f"{sst}:{len(SENTENCES) + 2}: not valid UTF-8" in err
    assert no_compute == []


# --------------------------------------------------------------------------- options reach


def test_measure_options_reach_the_computation(tiny_dir: Path, texts_file: Path,
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    import isotropy.probing.layerwise as measure_module

    real = measure_module.measure_model
    seen: dict = {}

    def spy(model, tokenizer, texts, **kwargs):
        seen.update(kwargs)
        batches: list[int] = []
        hook = model.register_forward_pre_hook(
            lambda _m, _a, kw: batches.append(kw["input_ids"].shape[0]), with_kwargs=True)
        try:
            return real(model, tokenizer, texts, **kwargs)
        finally:
            hook.remove()
            seen["batches"] = batches

    monkeypatch.setattr(measure_module, "measure_model", spy)
    assert main(["measure", "--model", str(tiny_dir), "--texts", str(texts_file),
                 "--batch-size", "3", "--seed", "7", "--max-length", "5", "--max-tokens", "9",
                 "--top-k", "2", "--no-progress", "--output-dir", str(tmp_path / "o")]) == 0
    assert seen["batches"] == [3, 3, 2]  # 8 texts in forward passes of at most 3
    assert {k: seen[k] for k in ("batch_size", "seed", "max_length", "max_tokens", "k")} == {
        "batch_size": 3, "seed": 7, "max_length": 5, "max_tokens": 9, "k": 2}
    doc = json.loads((tmp_path / "o" / "measure.json").read_text())
    assert doc["config"]["n_tokens"] <= 5 * len(SENTENCES)  # truncation honoured


def _sampled(tiny_dir: Path, texts_file: Path, out: Path, seed: str) -> list:
    assert main(["measure", "--model", str(tiny_dir), "--texts", str(texts_file),
                 "--max-tokens", "12", "--seed", seed, "--no-progress",
                 "--output-dir", str(out)]) == 0
    rows = json.loads((out / "measure.json").read_text())["rows"]
    return [(r["log_partition"], r["twonn"], r["isoscore"]) for r in rows
            if r["cloud"] == "token"]


def test_seed_changes_the_token_sample(tiny_dir: Path, texts_file: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    a = _sampled(tiny_dir, texts_file, tmp_path / "a", "0")
    b = _sampled(tiny_dir, texts_file, tmp_path / "b", "0")
    c = _sampled(tiny_dir, texts_file, tmp_path / "c", "1")
    assert a == b
    # the 12-token sample feeds the partition score; the streamed IsoScore uses all tokens
    assert [r[0] for r in a] != [r[0] for r in c]
    assert [r[2] for r in a] == pytest.approx([r[2] for r in c], rel=1e-12)


def test_stability_seed_reaches_the_computation(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import isotropy.paper.stability as stability

    real = stability.run_stability
    seen: list[dict] = []

    def spy(**kwargs):
        seen.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(stability, "run_stability", spy)
    values = []
    for seed in ("3", "3", "4"):
        out = tmp_path / f"s{len(values)}"
        assert main(["stability", *_STAB_SMALL, "--seed", seed, "--output-dir", str(out)]) == 0
        values.append(json.loads((out / "stability.json").read_text())["values"])
    assert [kw["seed"] for kw in seen] == [3, 3, 4]
    assert seen[0]["dim"] == 8 and seen[0]["repeats"] == 2 and seen[0]["sizes"] == [4]
    assert values[0] == values[1] and values[0] != values[2]


@pytest.mark.slow
def test_module_help_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "isotropy.cli.main", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for word in ("stability", "measure", "demo", "examples:"):
        assert word in proc.stdout
    # every command, one line each, and demo's fine-tuning named
    listed = proc.stdout.split("commands")[1].split("\n\n")[0].splitlines()[1:]
    assert [line.split()[0] for line in listed] == [
        "stability", "measure", "train", "sweep", "report", "analyze", "demo"]
    assert "fine-tuning" in listed[-1]
    assert proc.stdout.startswith("usage: isotropy [-h] [--version] COMMAND ...\n")
    for cmd in ("stability", "measure", "demo"):
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        assert info.value.code == 0


def test_train_subcommand_is_listed_and_dispatched(capsys):
    from isotropy.cli.main import build_parser, main

    assert "train" in build_parser().format_help()
    assert main(["train", "--task", "no-such-task", "--output_dir", "unused"]) == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err


def test_flags_are_never_taken_by_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """One rule for the command line and sweep specs: a misspelt flag is an error (with a
    suggestion in train), never the flag it starts."""
    from isotropy.cli.train import main as train_main

    with pytest.raises(SystemExit) as exit_:
        train_main(["--learning_rat", "1e-5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --learning_rat" in err
    assert "did you mean --learning_rate?" in err
    for argv in (["measure", "--texts", "x.txt", "--max-len", "3"],
                 ["sweep", "s.yaml", "--work", "2"], ["report", "runs", "--out", "x"],
                 ["analyze", "m", "--tas", "sst2"]):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        assert code == 2, argv
        assert "unrecognized arguments" in capsys.readouterr().err


def test_train_help_shows_our_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from isotropy.cli.train import main as train_main

    with pytest.raises(SystemExit):
        train_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("(also --istar_lambda) (default: -1.0)", "zeta in [0, 1] (default: 0.2)",
                  "(estimated before every epoch) (default: 250000)",
                  "(several allowed) (default: none)"):
        assert shown in text, shown


def test_ctrl_c_before_a_command_takes_over_is_one_line(monkeypatch, capsys) -> None:
    """Ctrl-C while a command is still importing its modules: one line, status 130."""
    import isotropy.cli.main as cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_dispatch", interrupted)
    assert cli.main(["train", "--help"]) == 130
    assert capsys.readouterr().err == "isotropy: interrupted\n"


def test_the_twonn_sample_option_keeps_its_former_name_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from isotropy.cli.main import build_parser

    args = build_parser().parse_args(["measure", "--texts", "t.txt", "--twonn-tokens", "9"])
    assert args.max_tokens == 9 and args.top_k == 10  # top-k as analyze's
    assert capsys.readouterr().err == ""
    args = build_parser().parse_args(["measure", "--texts", "t.txt", "--max-tokens", "9"])
    assert args.max_tokens == 9
    assert capsys.readouterr().err == (
        "isotropy measure: --max-tokens is now --twonn-tokens (the former name still works)\n")


def test_help_shows_single_backticks(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["measure", "--help"], ["analyze", "--help"], ["sweep", "--help"],
                 ["report", "--help"]):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's --help
            code = stop.code
        assert code in (0, None), argv
        out = capsys.readouterr().out
        assert "usage:" in out and "``" not in out, argv
