"""The ``isotropy`` command line (small inputs, tiny random BERT)."""

from __future__ import annotations

import csv
import json
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
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


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
                 "--batch-size", "3", "--max-tokens", "20", "--device", "cpu",
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
    import isotropy.experiments.stability as stability

    real = stability.run_stability

    def small(**kwargs):
        kwargs.update(dim=8, sizes=[4, 16], shrinkage_points=500, repeats=1)
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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required"),
        (["frobnicate"], "invalid choice"),
        (["stability", "--zetas", "0", "1.5"], "zeta must lie in [0, 1]"),
        (["stability", "--sizes", "1"], "sizes must be >= 2"),
        (["stability", "--dim", "3"], "--dim must be >= 4"),
        (["stability", "--repeats", "0"], "positive integer"),
        (["stability", "--repeats", "two"], "positive integer"),
        (["measure"], "one of the arguments --texts --task is required"),
        (["measure", "--task", "mnli"], "unknown task 'mnli'"),
        (["measure", "--texts", "/no/such/file.txt"], "does not exist"),
        (["measure", "--task", "sst2", "--split", "holdout"], "invalid choice"),
        (["measure", "--task", "sst2", "--batch-size", "0"], "positive integer"),
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


def test_runtime_failure_returns_1(tmp_path: Path, texts_file: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken_model"
    broken.mkdir()
    err = _usage_error(["measure", "--texts", str(texts_file), "--model", str(broken)], capsys)
    assert "no config.json" in err
    (broken / "config.json").write_text('{"model_type": "bert"}')  # no weights, no tokenizer
    code = main(["measure", "--texts", str(texts_file), "--model", str(broken),
                 "--no-progress", "--output-dir", str(tmp_path / "o")])
    assert code == 1
    assert "isotropy measure: error: could not load a model" in capsys.readouterr().err


def test_module_help_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "isotropy.cli.main", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for word in ("stability", "measure", "demo", "examples:"):
        assert word in proc.stdout
    for cmd in ("stability", "measure", "demo"):
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        assert info.value.code == 0
