"""Which files inside a run's own folders a run wrote (``isotropy.rundir.ownership``)."""

from __future__ import annotations

from pathlib import Path

import torch

from isotropy.rundir.ownership import unowned_file


def _write(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


def test_the_lists_a_run_keeps_decide(tmp_path: Path) -> None:
    """``model/`` against ``results["model_files"]``, a checkpoint against the list in its
    ``isotropy_state.pt``: a file of a Trainer's name that is not on the list is a user's."""
    _write(tmp_path, "model/config.json", "model/model.safetensors",
           "checkpoint-2/optimizer.pt", "checkpoint-2/scheduler.pt")
    torch.save({"files": {"optimizer.pt": 1, "scheduler.pt": 1}},
               tmp_path / "checkpoint-2" / "isotropy_state.pt")
    results = {"model_files": {"config.json": 1, "model.safetensors": 1}}
    assert unowned_file(tmp_path, results) is None
    _write(tmp_path, "checkpoint-2/rng_state.pth")  # a Trainer's name, not on the list
    assert unowned_file(tmp_path, results) == "checkpoint-2/rng_state.pth"
    (tmp_path / "checkpoint-2" / "rng_state.pth").unlink()
    _write(tmp_path, "model/vocab.txt")
    assert unowned_file(tmp_path, results) == "model/vocab.txt"
    assert unowned_file(tmp_path) is None  # without the list, vocab.txt is a tokenizer's name


def test_without_a_list_the_names_decide(tmp_path: Path) -> None:
    """A run that kept no list (written before it was kept, or cut before its results): the
    names ``save_pretrained`` and the Trainer write pass, any other is a user's."""
    _write(tmp_path, "model/config.json", "model/model-00001-of-00002.safetensors",
           "model/model.safetensors.index.json", "model/tokenizer_config.json",
           "model/spiece.model", "checkpoint-3/trainer_state.json", "checkpoint-3/rng_state_1.pth",
           "checkpoint-3/training_args.bin", "checkpoint-3/adapter_model.safetensors",
           "tensorboard/events.out.tfevents.1.host.2", "tensorboard/1700000000/events.out"
           ".tfevents.3.host.4", "checkpoint-notes/anything.txt", "notes.txt")
    assert unowned_file(tmp_path) is None  # checkpoint-notes/ and notes.txt are not run folders
    for mine in ("model/analysis.csv", "checkpoint-3/best.txt", "tensorboard/notes.md"):
        _write(tmp_path, mine)
        assert unowned_file(tmp_path) == mine
        (tmp_path / mine).unlink()
