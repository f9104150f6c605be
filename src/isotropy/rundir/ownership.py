"""Which files inside a run's own folders (``model/``, ``checkpoint-N/``, ``tensorboard/``) a
run wrote: the others are a user's, and no deletion of those folders may take them along."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from isotropy.rundir.layout import CHECKPOINT_STATE, MODEL, checkpoint_name_step

__all__ = ["folder_files", "unowned_file"]

# what save_pretrained (model, tokenizer, PEFT adapter) and the Trainer's checkpoints write, for
# a folder written before its list of files was kept
_SAVED = re.compile(
    r"(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens"
    r"|adapter_config|trainer_state|chat_template)\.json"
    r"|(model|pytorch_model|adapter_model)(-\d{5}-of-\d{5})?\.(safetensors|bin)"
    r"|(model|pytorch_model)\.(safetensors|bin)\.index\.json"
    r"|vocab\.(txt|json)|merges\.txt|[\w.-]*\.model|chat_template\.jinja|README\.md"
    r"|training_args\.bin|optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth"
    r"|\.?isotropy_state\.pt.*")
_TENSORBOARD = re.compile(r"events\.out\.tfevents\..+")


def folder_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (path relative to it) with its size in bytes.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text("{}")
    >>> folder_files(d)
    {'config.json': 2}
    """
    return {p.relative_to(folder).as_posix(): p.lstat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def _listed(key: str, listing: Mapping[str, Any] | None) -> set[str] | None:
    files = (listing or {}).get(key)
    return set(files) if isinstance(files, Mapping) else None


def _checkpoint_listing(folder: Path) -> set[str] | None:
    """The files a complete checkpoint was written with (kept in its ``isotropy_state.pt``)."""
    state = folder / CHECKPOINT_STATE
    if not state.is_file():
        return None
    try:
        import torch

        payload = torch.load(state, map_location="cpu", weights_only=False)
    except Exception:  # a damaged state: the names decide
        return None
    return _listed("files", payload if isinstance(payload, Mapping) else None)


def unowned_file(run: Path, results: Mapping[str, Any] | None = None) -> str | None:
    """The first file (path relative to ``run``) inside a folder a run writes that no run
    wrote, or ``None``: in ``model/``, one not in ``results["model_files"]`` (or, for a run
    that did not keep that list, not named as ``save_pretrained`` names its files); in a
    ``checkpoint-N/``, one not in its ``isotropy_state.pt``'s list (or, without one, not named
    as the Trainer names its files); in ``tensorboard/``, one that is not an event file.
    Deleting such a folder (``--overwrite``, a restart, a resume's dropped checkpoints, the
    Trainer's rotation) would delete a user's file with it.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "model").mkdir(); _ = (d / "model" / "config.json").write_text("{}")
    >>> unowned_file(d) is None
    True
    >>> _ = (d / "model" / "my_notes.txt").write_text("mine")
    >>> unowned_file(d)
    'model/my_notes.txt'
    """
    folders = [(run / MODEL, _listed("model_files", results))]
    folders += [(p, _checkpoint_listing(p)) for p in sorted(run.glob("checkpoint-*"))
                if checkpoint_name_step(p.name) is not None and p.is_dir()
                and not p.is_symlink()]
    for folder, listed in folders:
        if not folder.is_dir() or folder.is_symlink():
            continue
        for name in folder_files(folder):
            base = name.rsplit("/", 1)[-1]
            if listed is not None:  # the list, and the state that keeps it
                ours = name in listed or base.startswith((CHECKPOINT_STATE,
                                                          f".{CHECKPOINT_STATE}"))
            else:
                ours = _SAVED.fullmatch(base) is not None
            if not ours:
                return f"{folder.name}/{name}"
    board = run / "tensorboard"
    if board.is_dir() and not board.is_symlink():
        for name in folder_files(board):
            if _TENSORBOARD.fullmatch(name.rsplit("/", 1)[-1]) is None:
                return f"tensorboard/{name}"
    return None
