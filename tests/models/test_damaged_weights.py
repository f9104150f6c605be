"""A model directory with damaged weights (a cut ``model.safetensors``, a shard missing) is
one line naming the file from ``train``, ``measure`` and ``analyze``, before anything is
written: never a ``SafetensorError`` traceback after ``config.json``."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from _models import save_tiny_bert
from _training import write_sst2

from isotropy.cli.main import main as cli_main
from isotropy.models.loading import check_weight_files

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "the", "film", "was", "very"]


def _sentence(rng: random.Random, label: int) -> str:
    return " ".join(rng.choices(WORDS[6:], k=3) + [WORDS[2 * rng.randint(0, 2) + 1 - label]])


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    whole = save_tiny_bert(root, WORDS, name="whole")
    cut = root / "cut"
    shutil.copytree(whole, cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    glue = write_sst2(root / "glue", [("train", 16), ("dev", 8)], 1, _sentence)
    texts = root / "texts.txt"
    texts.write_text("good film\nbad film\nthe film was fine\n")
    return whole, cut, glue, texts


def test_whole_weights_pass_and_a_cut_file_is_named(dirs):
    whole, cut, _, _ = dirs
    check_weight_files(str(whole))
    with pytest.raises(ValueError, match=r"model weights .*cut/model.safetensors are damaged: "
                                         r"its header places \d+ bytes, the file holds \d+: "
                                         r"it is cut short"):
        check_weight_files(str(cut))


def test_extra_bytes_and_a_missing_shard(tmp_path, dirs):
    whole = dirs[0]
    longer = tmp_path / "longer"
    shutil.copytree(whole, longer)
    with (longer / "model.safetensors").open("ab") as f:
        f.write(b"\0" * 5)
    with pytest.raises(ValueError, match="holds 5 bytes more than its header places"):
        check_weight_files(str(longer))
    sharded = tmp_path / "sharded"
    shutil.copytree(whole, sharded)
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ValueError, match="model-00001-of-00002.safetensors it names are "
                                         "missing"):
        check_weight_files(str(sharded))


def _one_line_error(argv, capsys) -> str:
    code = cli_main(argv)
    err = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in err and "Traceback" not in err, err
    return err


def test_train_measure_and_analyze_refuse_a_cut_model_before_writing(dirs, tmp_path, capsys):
    _, cut, glue, texts = dirs
    out = tmp_path / "out"
    err = _one_line_error(["train", "--task", "sst2", "--model", str(cut), "--data_dir",
                           str(glue), "--output_dir", str(out / "train"), "--use_cpu", "true",
                           "--report_to", "none"], capsys)
    assert "model.safetensors are damaged" in err
    err = _one_line_error(["measure", "--texts", str(texts), "--model", str(cut),
                           "--no-progress", "--device", "cpu", "--output-dir",
                           str(out / "measure")], capsys)
    assert "model.safetensors are damaged" in err
    err = _one_line_error(["analyze", str(cut), "--task", "sst2", "--data-dir", str(glue),
                           "--device", "cpu", "--output-dir", str(out / "analyze")], capsys)
    assert "model.safetensors are damaged" in err
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
