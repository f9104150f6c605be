"""Where a checkpoint is and what its run recorded: ``isotropy analyze``'s first step.

A checkpoint is an ``isotropy train`` run directory (its ``model/`` subfolder; its
``config.json`` gives the task, data directory, ``max_seq_length`` and ``doc_stride``), a
local model directory, a hub id, or an offline alias: ``minilm`` (MiniLM-L6-H384), ``mpnet``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from isotropy._validation import one_line
from isotropy.io import read_json
from isotropy.models.loading import (
    alias_path,
    check_model_path,
    ensure_pad_token,
    load_model,
    looks_like_path,
)
from isotropy.probing.inputs import resolve_device
from isotropy.rundir import CONFIG, MODEL

__all__ = ["is_decoder", "load_checkpoint_model", "locate_checkpoint"]


def locate_checkpoint(model_or_run: str | os.PathLike[str]) -> dict[str, Any]:
    """Where the model is and what a run directory recorded about it.

    ``minilm`` and ``mpnet`` are the offline models (:func:`alias_path`). Returns ``kind``
    (``run``, ``path`` or ``hub``), ``model`` (what ``from_pretrained`` loads) and, for a
    run, ``task``, ``data_dir``, ``data_source``, ``max_length`` and ``doc_stride`` from its
    ``config.json``.
    A directory is a run directory when it has a ``model/`` subfolder or a ``config.json``
    with ``settings`` (written by ``isotropy train``). ``FileNotFoundError`` for a missing path,
    a run directory without ``model/`` and a directory that is neither.
    """
    text = os.fspath(model_or_run)
    local = alias_path(text)
    if local is not None:
        return {"kind": "path", "model": local}
    if not looks_like_path(text):
        return {"kind": "hub", "model": text}
    path = Path(text).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (expected a run directory of "
                                "isotropy train, a model directory or a hub id)")
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    config_file = path / CONFIG
    settings = None
    if config_file.is_file():
        try:
            settings = read_json(config_file).get("settings")
        except ValueError as err:
            if (path / MODEL).is_dir():  # a run whose record is damaged: its task is unknown
                raise ValueError(f"{one_line(err, 300)}: the run's settings (task, data, "
                                 f"length) cannot be read; measure {path / MODEL} with the "
                                 "options of the run instead") from None
            settings = None  # a model folder's own config.json: its loader says what is wrong
    if settings is None and not (path / MODEL).is_dir():
        check_model_path(str(path))
        return {"kind": "path", "model": str(path)}
    model_dir = path / MODEL
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"run directory {path} has no model/ with a config.json (the run has not finished "
            "or was trained with saving off): pass a finished run or a checkpoint-N/ folder"
        )
    out: dict[str, Any] = {"kind": "run", "model": str(model_dir), "run_dir": str(path)}
    recorded = (settings or {}).get("isotropy", {}) if isinstance(settings, dict) else {}
    for key, name in (("task", "task"), ("data_dir", "data_dir"),
                      ("data_source", "data_source"), ("max_seq_length", "max_length"),
                      ("doc_stride", "doc_stride")):
        if recorded.get(key) is not None:
            out[name] = recorded[key]
    return out


def is_decoder(model: torch.nn.Module) -> bool:
    """Whether a Hugging Face ``AutoModel`` is a decoder-only language model: its model type
    has a causal-LM head class and no masked-LM one (GPT-2, Llama, ...; BERT has both)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False):
        return False
    causal, masked = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
    return kind in causal and kind not in masked


def load_checkpoint_model(where: dict[str, Any], device: str | torch.device | None,
                          dtype: torch.dtype | str | None = None) -> tuple[Any, Any]:
    """The model (weights in ``dtype``) and tokenizer, with a pad token (padded positions are
    masked out): the tokenizer's own, else its end-of-sequence or unknown token."""
    dev = resolve_device(device)
    try:
        net, tok = load_model(where["model"], device=dev, dtype=dtype)
    except ValueError as err:
        if looks_like_path(where["model"]):
            raise
        raise ValueError(
            f"{err}; the hub cannot be reached or has no such model: download it where the hub "
            f"is reachable (huggingface-cli download {where['model']} --local-dir DIR) and "
            "pass DIR"
        ) from err
    return net, ensure_pad_token(tok)
