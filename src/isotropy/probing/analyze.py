r"""Post-hoc representation measurements of any checkpoint on a task split.

The checkpoint is an ``isotropy train`` run directory (its ``model/`` subfolder is loaded
with ``AutoModel``, which keeps the encoder of a sequence-classification or QA model; its
``config.json`` gives the task, data directory and ``max_seq_length``), a local model
directory, or a hub id. Encoders (BERT-style) and decoder-only language models (GPT-2,
Llama, ...) are both measured.

For every hidden state (layer 0 = embedding output, ``1..L``), with
:class:`~isotropy.probing.eval_measures.EvalMeasures` (the measurements of ``isotropy
train``'s evaluations):

* the ``token`` cloud (non-padding tokens, the first ``max_tokens`` of each layer): IsoScore,
  IsoScore* :math:`\iota((1-\zeta)\Sigma_X + \zeta\Sigma_S)`, average cosine similarity; the
  ``union`` of layers ``1..L`` likewise;
* the pooled cloud, one row per text (``pooling``): ``cls`` the first non-padding token,
  ``last`` the last non-padding token, ``mean`` the mean of the non-padding tokens: the same
  measures plus TwoNN;
* for the last layer, the top-``top_k`` anisotropy spectrum (raw and centred) of the pooled
  cloud and the mean and standard deviation (``ddof=1``) of every dimension of the token cloud.

Each cloud is shrunk toward its own layer's :math:`\Sigma_S` (token and pooled clouds
separately; the union toward the union's), estimated from the task's *training* split read
in order by :func:`~isotropy.models.shrinkage.collect_layer_shrinkage`: a budget of
``shrinkage_tokens`` rows of the union (layers ``1..L``), each layer using the same token
positions, about ``shrinkage_tokens / L`` rows per layer, and the pooled rows of every text
read (``zeta = 0`` needs none).

SQuAD: every (question, context) pair is cut into the windows ``isotropy train`` feeds the
model (:func:`~isotropy.data.squad.squad_features`: ``max_length`` tokens, consecutive windows
sharing ``doc_stride`` context tokens, default 384 and 128 or the run's settings); each window
is a text of the clouds, as in the evaluations of training.

Decoders: a tokenizer without a padding token pads with its end-of-sequence token (padded
positions are masked out), and every batch gets ``position_ids`` counted over the
non-padding tokens (``cumsum(mask) - 1``), so a text's states do not depend on the padding
side or on the batch it is in.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from isotropy._validation import check_zeta
from isotropy.clouds import get_hidden_states
from isotropy.data.glue import TaskSpec, get_task
from isotropy.data.sources import load_splits
from isotropy.data.squad import check_question_room
from isotropy.io import write_csv_atomic, write_json_atomic
from isotropy.models.loading import (
    MINILM_ALIAS,
    check_model_path,
    default_model_path,
    ensure_pad_token,
    load_model,
    looks_like_path,
)
from isotropy.models.shrinkage import collect_layer_shrinkage
from isotropy.probing.eval_measures import POOLINGS, EvalMeasures
from isotropy.probing.layerwise import (
    _check_max_length,
    _check_positive,
    _check_texts,
    _resolve_device,
    text_table,
)
from isotropy.runtime import flush_denormals

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_SHRINKAGE_TOKENS",
    "DEFAULT_ZETA",
    "AnalyzeInputs",
    "AnalyzeResult",
    "analyze",
    "analyze_model",
    "format_analyze_table",
    "is_decoder",
    "locate_checkpoint",
    "prepare_analyze",
    "write_analyze",
]

DEFAULT_ZETA = 0.2
DEFAULT_SHRINKAGE_TOKENS = 250_000
DEFAULT_MAX_TOKENS = 20_000
DEFAULT_TOP_K = 10
DEFAULT_MAX_TEXTS = 512
DEFAULT_BATCH_SIZE = 32
DEFAULT_MAX_LENGTH = 128
DEFAULT_SPAN_MAX_LENGTH = 384
DEFAULT_DOC_STRIDE = 128
FILES = ("analyze.json", "analyze.csv", "analyze_dims.csv")

Text = str | tuple[str, str]


# --------------------------------------------------------------------------- checkpoint


def locate_checkpoint(model_or_run: str | os.PathLike[str]) -> dict[str, Any]:
    """Where the model is and what a run directory recorded about it.

    ``minilm`` is the offline MiniLM-L6-H384. Returns ``kind`` (``run``, ``path`` or
    ``hub``), ``model`` (what ``from_pretrained`` loads) and, for a run, ``task``,
    ``data_dir``, ``data_source``, ``max_length`` and ``doc_stride`` from its ``config.json``.
    A directory is a run directory when it has a ``model/`` subfolder or a ``config.json``
    with ``settings`` (written by ``isotropy train``). ``FileNotFoundError`` for a missing path,
    a run directory without ``model/`` and a directory that is neither.
    """

    text = os.fspath(model_or_run)
    if text.lower() == MINILM_ALIAS:

        return {"kind": "path", "model": default_model_path()}
    if not looks_like_path(text):
        return {"kind": "hub", "model": text}
    path = Path(text).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (expected a run directory of "
                                "isotropy train, a model directory or a hub id)")
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    config_file = path / "config.json"
    settings = None
    if config_file.is_file():
        try:
            settings = json.loads(config_file.read_text(encoding="utf-8")).get("settings")
        except (ValueError, AttributeError):
            settings = None
    if settings is None and not (path / "model").is_dir():
        check_model_path(str(path))
        return {"kind": "path", "model": str(path)}
    model_dir = path / "model"
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"run directory {path} has no model/ with a config.json (the run has not finished "
            "or was trained with saving off): pass a finished run or a checkpoint-N/ folder"
        )
    out: dict[str, Any] = {"kind": "run", "model": str(model_dir), "run_dir": str(path)}
    ours = (settings or {}).get("isotropy", {}) if isinstance(settings, dict) else {}
    for key, name in (("task", "task"), ("data_dir", "data_dir"),
                      ("data_source", "data_source"), ("max_seq_length", "max_length"),
                      ("doc_stride", "doc_stride")):
        if ours.get(key) is not None:
            out[name] = ours[key]
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


# --------------------------------------------------------------------------- inputs


@dataclass
class AnalyzeInputs:
    """What :func:`analyze_model` needs, loaded and checked by :func:`prepare_analyze`."""

    model: torch.nn.Module
    tokenizer: Any
    texts: list[Text]
    train_texts: list[Text] | None
    pooling: str
    decoder: bool
    max_length: int
    config: dict[str, Any] = field(default_factory=dict)
    doc_stride: int | None = None  # SQuAD: texts are cut into windows sharing this many tokens


def _texts(examples: Sequence[Any]) -> list[Text]:
    return [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]


def prepare_analyze(
    model_or_run: str | os.PathLike[str],
    *,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    data_source: str | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
    max_length: int | None = None,
    zeta: float = DEFAULT_ZETA,
    pooling: str | None = None,
    device: str | torch.device | None = "auto",
    doc_stride: int | None = None,
) -> AnalyzeInputs:
    """Everything before the first measured forward pass, cheap checks first: locate the
    checkpoint (:func:`locate_checkpoint`), the task (a run's own unless ``task``), the split
    and, when ``zeta > 0``, the training split (for :math:`\\Sigma_S`); read the texts; load
    the model and tokenizer; check ``pooling`` (default ``cls`` for encoders, ``last`` for
    decoders) and ``max_length`` (default: the run's ``max_seq_length``, else 128, 384 for
    SQuAD) and, for SQuAD only, ``doc_stride`` (default: the run's, else 128) against the
    longest question. Raises ``ValueError`` / ``FileNotFoundError`` with a one-line
    message."""

    where = locate_checkpoint(model_or_run)
    check_zeta(zeta)
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if max_texts is not None:
        _check_positive("max_texts", max_texts)
    spec, max_length, doc_stride = _windows_and_task(where, task, max_length, doc_stride)
    span = spec.kind == "span"
    texts, train_texts, data = _read_texts(where, spec, split, data_dir, data_source, zeta,
                                           max_texts)
    is_pair = _check_texts(texts)
    net, tok = _load_checked_model(where, device)
    decoder = is_decoder(net)
    pooling = pooling or ("last" if decoder else "cls")
    _check_max_length(tok, max_length, is_pair)
    if span:
        assert doc_stride is not None
        _check_windows(tok, [*texts, *(train_texts or [])], max_length, doc_stride)
    config = {
        "checkpoint": {k: v for k, v in where.items() if k in ("kind", "model", "run_dir")},
        "architecture": "decoder" if decoder else "encoder",
        "task": spec.name, "split": split, **data,
        "max_texts": max_texts, "pairs": is_pair,
        **({"windows": {"doc_stride": doc_stride, "max_length": max_length},
            "n_questions": len(texts)} if span else {}),
    }
    return AnalyzeInputs(net, tok, texts, train_texts, pooling, decoder, max_length, config,
                         doc_stride if span else None)


def _windows_and_task(where: dict[str, Any], task: str | None, max_length: int | None,
                      doc_stride: int | None) -> tuple[TaskSpec, int, int | None]:
    """The task (the run's own unless given), ``max_length`` (the run's ``max_seq_length`` on
    its own task, else 128, 384 for SQuAD) and for SQuAD ``doc_stride`` (the run's, else 128)."""
    task = task or where.get("task")
    if task is None:
        raise ValueError(f"{where['model']} is not a run directory of isotropy train: name the "
                         "task (--task SST-2, RTE, ...)")
    spec = get_task(task)
    span = spec.kind == "span"
    if doc_stride is not None and not span:
        raise ValueError(f"doc_stride applies to SQuAD windows only, not {spec.display_name}")
    run_task = where.get("task")
    same_task = run_task is not None and get_task(run_task).name == spec.name
    if max_length is None:
        max_length = int(where["max_length"] if same_task and "max_length" in where
                         else DEFAULT_SPAN_MAX_LENGTH if span else DEFAULT_MAX_LENGTH)
    _check_positive("max_length", max_length)
    if span:
        if doc_stride is None:
            doc_stride = int(where.get("doc_stride", DEFAULT_DOC_STRIDE) if same_task
                             else DEFAULT_DOC_STRIDE)
        _check_positive("doc_stride", doc_stride)
        if doc_stride >= max_length:
            raise ValueError(f"doc_stride ({doc_stride}) must be smaller than max_length "
                             f"({max_length}); SQuAD's usual setting is 128 and 384")
    return spec, max_length, doc_stride


def _read_texts(where: dict[str, Any], spec: TaskSpec, split: str,
                data_dir: str | os.PathLike[str] | None, data_source: str | None, zeta: float,
                max_texts: int | None) -> tuple[list[Text], list[Text] | None, dict[str, Any]]:
    """The split's texts (the first ``max_texts``), the training split's when ``zeta > 0``
    (for :math:`\\Sigma_S`), and where they came from (``data``, ``data_files``,
    ``n_texts_available``)."""
    if data_dir is None and where.get("data_dir") is not None:
        data_dir = where["data_dir"]
    source = data_source or where.get("data_source") or "local"
    dirname = None if data_dir is None else os.fspath(data_dir)
    examples, data_info, data_where = load_splits(spec.name, [split], source=source,
                                                  data_dir=dirname)
    if zeta > 0 and split != "train":
        try:
            train, _, train_where = load_splits(spec.name, ["train"], source=source,
                                                data_dir=dirname)
        except (FileNotFoundError, ValueError) as err:
            raise type(err)(f"{err}; Sigma_S of IsoScore* needs the training split (or pass "
                            "zeta 0: plain IsoScore only)") from err
        examples.update(train)
        data_where.update(train_where)
    texts = _texts(examples[split])
    if not texts:
        raise ValueError(f"{spec.display_name} {split} split is empty")
    available = len(texts)
    if max_texts is not None:
        texts = texts[:max_texts]
    train_texts = _texts(examples["train"]) if zeta > 0 else None
    return texts, train_texts, {"data": data_info, "data_files": data_where,
                                "n_texts_available": available}


def _load_checked_model(where: dict[str, Any], device: str | torch.device | None
                        ) -> tuple[Any, Any]:
    """The model and tokenizer, with a pad token (padded positions are masked out): the
    tokenizer's own, else its end-of-sequence or unknown token."""
    dev = _resolve_device(device)
    try:
        net, tok = load_model(where["model"], device=dev)
    except ValueError as err:
        if looks_like_path(where["model"]):
            raise
        raise ValueError(
            f"{err}; the hub cannot be reached or has no such model: download it where the hub "
            f"is reachable (huggingface-cli download {where['model']} --local-dir DIR) and "
            "pass DIR"
        ) from err
    return net, ensure_pad_token(tok)


def _check_windows(tokenizer: Any, texts: Sequence[Text], max_length: int,
                   doc_stride: int) -> None:
    """SQuAD windows need a fast tokenizer and, next to the longest question, more than
    ``doc_stride`` tokens of context room."""

    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("SQuAD windows need a fast (Rust) tokenizer; "
                         f"{type(tokenizer).__name__} is not one")
    check_question_room(tokenizer, [t[0] for t in texts], max_length, doc_stride, "max_length")


# --------------------------------------------------------------------------- measuring


def _batches(tokenizer: Any, texts: Sequence[Text], *, batch_size: int, max_length: int,
             decoder: bool, device: torch.device, doc_stride: int | None = None
             ) -> Iterator[dict[str, torch.Tensor]]:
    """Model inputs of ``texts`` in order, tokenized batch by batch and padded on the
    tokenizer's side; decoders also get ``position_ids = cumsum(mask) - 1`` (0 on padding).
    With ``doc_stride``, each (question, context) of a batch gives all its windows (so a batch
    may hold more than ``batch_size`` rows)."""
    for s in range(0, len(texts), batch_size):
        chunk = texts[s:s + batch_size]
        if doc_stride is not None:
            enc = tokenizer([t[0].lstrip() for t in chunk], [t[1] for t in chunk],
                            truncation="only_second", max_length=max_length, stride=doc_stride,
                            return_overflowing_tokens=True, padding=True, return_tensors="pt")
        elif isinstance(chunk[0], (tuple, list)):
            enc = tokenizer([t[0] for t in chunk], [t[1] for t in chunk], truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt")
        else:
            enc = tokenizer(list(chunk), truncation=True, max_length=max_length, padding=True,
                            return_tensors="pt")
        batch = {k: enc[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")
                 if k in enc}
        if decoder:
            mask = batch["attention_mask"].long()
            batch["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0)
        yield batch


@dataclass
class AnalyzeResult:
    """The :class:`~isotropy.probing.eval_measures.EvalMeasures` record, its rows (one per
    layer and cloud, plus the union), the configuration and undefined-measure notes."""

    config: dict[str, Any]
    record: dict[str, Any]
    rows: list[dict[str, Any]]
    errors: list[str]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "seconds": self.seconds, "errors": self.errors,
                "rows": self.rows, "last": self.record["last"]}

    def row(self, layer: int | str, cloud: str) -> dict[str, Any]:
        """The row of one layer (0 = embeddings; ``"union"``) and cloud (``token`` or the
        pooling name)."""
        for r in self.rows:
            if r["layer"] == layer and r["cloud"] == cloud:
                return r
        raise KeyError(f"no row for layer {layer!r}, cloud {cloud!r}")


def _rows(record: dict[str, Any], pooling: str) -> list[dict[str, Any]]:
    rows = []
    for entry in record["layers"]:
        for cloud, name in (("token", "token"), ("cls", pooling)):
            rec = entry[cloud]
            rows.append({"layer": entry["layer"], "cloud": name, "n_points": rec["n_points"],
                         "isoscore": rec["isoscore"], "isoscore_star": rec["isoscore_star"],
                         "avg_cosine": rec["avg_cosine"], "twonn": rec.get("twonn")})
    u = record["union"]
    rows.append({"layer": "union", "cloud": "token", "n_points": u["n_points"],
                 "isoscore": u["isoscore"], "isoscore_star": u["isoscore_star"],
                 "avg_cosine": u["avg_cosine"], "twonn": None})
    return rows


def analyze_model(
    inputs: AnalyzeInputs,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    zeta: float = DEFAULT_ZETA,
    shrinkage_tokens: int = DEFAULT_SHRINKAGE_TOKENS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_k: int = DEFAULT_TOP_K,
) -> AnalyzeResult:
    """Measure ``inputs`` (module doc): :math:`\\Sigma_S` from the training texts when
    ``zeta > 0``, then the texts through :class:`EvalMeasures`. Runs in eval mode without
    gradients; on CPU denormals are flushed to zero."""

    for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens),
                        ("top_k", top_k)):
        _check_positive(name, value)
    zeta = check_zeta(zeta)
    if zeta > 0:
        _check_positive("shrinkage_tokens", shrinkage_tokens)
        if not inputs.train_texts:
            raise ValueError("zeta > 0 needs the training texts for Sigma_S")
    model, tok = inputs.model, inputs.tokenizer
    device = next(model.parameters()).device
    model.eval()
    t0 = time.perf_counter()
    kw = {"batch_size": batch_size, "max_length": inputs.max_length, "decoder": inputs.decoder,
          "device": device, "doc_stride": inputs.doc_stride}
    shrinkage_info: dict[str, Any] = {"source": "none (zeta = 0)"}
    with flush_denormals(device.type == "cpu"):
        sigma = None
        if zeta > 0:
            t1 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sigma = collect_layer_shrinkage(
                    model, _batches(tok, inputs.train_texts, **kw), n_tokens=shrinkage_tokens,
                    pooling=inputs.pooling, sync_dist=False)
            rows = sigma.describe()
            shrinkage_info = {"source": "training split", **rows, "n_rows": rows["union_rows"],
                              "requested_rows": shrinkage_tokens,
                              "seconds": time.perf_counter() - t1,
                              "notes": [str(w.message) for w in caught]}
        acc = EvalMeasures(max_tokens=max_tokens, top_k=top_k, zeta=zeta, shrinkage=sigma,
                           sync=False, pooling=inputs.pooling)
        with torch.inference_mode():
            for batch in _batches(tok, inputs.texts, **kw):
                out = model(**batch, output_hidden_states=True)
                acc.update(get_hidden_states(out), batch["attention_mask"])
        record = acc.compute()
    config = {
        **inputs.config,
        "model_type": getattr(model.config, "model_type", None),
        "num_layers": record["num_layers"], "hidden_size": record["hidden_size"],
        "n_texts": record["n_examples"],  # SQuAD: windows (n_questions: questions)
        "n_tokens": record["n_tokens"],
        "n_tokens_measured": record["n_tokens_measured"],
        "pooling": inputs.pooling, "padding_side": getattr(tok, "padding_side", None),
        "zeta": zeta, "shrinkage": shrinkage_info, "max_tokens": max_tokens,
        "top_k": top_k, "batch_size": batch_size, "max_length": inputs.max_length,
        "device": str(device), "clouds": record["clouds"],
    }
    return AnalyzeResult(config, record, _rows(record, inputs.pooling), record["errors"],
                         time.perf_counter() - t0)


def analyze(
    model_or_run: str | os.PathLike[str],
    *,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    data_source: str | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
    max_length: int | None = None,
    doc_stride: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    zeta: float = DEFAULT_ZETA,
    shrinkage_tokens: int = DEFAULT_SHRINKAGE_TOKENS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_k: int = DEFAULT_TOP_K,
    pooling: str | None = None,
    device: str | torch.device | None = "auto",
) -> AnalyzeResult:
    """:func:`prepare_analyze` then :func:`analyze_model` (see both)."""
    inputs = prepare_analyze(model_or_run, task=task, split=split, data_dir=data_dir,
                             data_source=data_source, max_texts=max_texts,
                             max_length=max_length, zeta=zeta, pooling=pooling, device=device,
                             doc_stride=doc_stride)
    return analyze_model(inputs, batch_size=batch_size, zeta=zeta,
                         shrinkage_tokens=shrinkage_tokens, max_tokens=max_tokens, top_k=top_k)


# --------------------------------------------------------------------------- output

_TABLE = [  # (key, header, width, format)
    ("layer", "layer", 5, ""),
    ("cloud", "cloud", 5, "s"),
    ("n_points", "points", 7, "d"),
    ("isoscore", "IsoScore", 8, ".4f"),
    ("isoscore_star", "IsoScore*", 9, ".4f"),
    ("avg_cosine", "avg cos", 7, ".3f"),
    ("twonn", "TwoNN", 6, ".1f"),
]


def format_analyze_table(result: AnalyzeResult) -> str:
    """A plain-text table, one line per layer and cloud plus the union (``-``: undefined or
    not computed), then the last layer's pooled spectrum."""

    lines = text_table(result.rows, _TABLE)
    last = result.record["last"]
    for name in ("raw", "centred"):
        spec = last[f"cls_spectrum_{name}"]
        if spec is not None:
            shown = ", ".join(f"{v:.3f}" for v in spec[:5])
            lines.append(f"layer {last['layer']} {result.config['pooling']} spectrum ({name}): "
                         f"{shown}{', ...' if len(spec) > 5 else ''}")
    return "\n".join(lines)


def write_analyze(result: AnalyzeResult, output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``analyze.json`` (config, errors, rows, last-layer spectra and per-dimension
    mean/std), ``analyze.csv`` (rows) and ``analyze_dims.csv`` (dimension, mean, std of the
    last layer's token cloud) atomically."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    last = result.record["last"]
    mean, std = last["token_mean"] or [], last["token_std"] or []
    dims = [{"dim": i, "mean": m, "std": std[i] if i < len(std) else None}
            for i, m in enumerate(mean)]
    return {
        "json": write_json_atomic(out / FILES[0], result.to_dict()),
        "csv": write_csv_atomic(out / FILES[1], result.rows),
        "dims": write_csv_atomic(out / FILES[2], dims, fieldnames=["dim", "mean", "std"]),
    }
