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

import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from isotropy._validation import check_zeta
from isotropy.data.glue import TaskSpec, get_task
from isotropy.data.sources import load_splits
from isotropy.data.squad import check_question_room
from isotropy.io import write_csv_atomic
from isotropy.models.forward import hidden_state_batches
from isotropy.models.loading import weight_dtype
from isotropy.models.shrinkage import LayerShrinkage, collect_layer_shrinkage
from isotropy.probing.batches import capped_max_length, ordered_batches
from isotropy.probing.checkpoint import is_decoder, load_checkpoint_model, locate_checkpoint
from isotropy.probing.eval_measures import POOLINGS, EvalMeasures
from isotropy.probing.inputs import check_max_length, check_positive, check_texts
from isotropy.probing.outlier_columns import OUTLIER_KEYS, layernorm_summary
from isotropy.probing.outlier_figure import model_label, plot_outliers
from isotropy.probing.results import (
    find_row,
    mark_twonn_reliability,
    text_table,
    twonn_footnote,
    write_json_and_csv,
)
from isotropy.progress import stage
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
FILES = ("analyze.json", "analyze.csv", "analyze_dims.csv", "outliers.png")

Text = str | tuple[str, str]


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
    dtype: torch.dtype | str | None = None,
) -> AnalyzeInputs:
    """Everything before the first measured forward pass, cheap checks first: locate the
    checkpoint (:func:`locate_checkpoint`), the task (a run's own unless ``task``), the split
    and, when ``zeta > 0``, the training split (for :math:`\\Sigma_S`); read the texts; load
    the model and tokenizer; check ``pooling`` (default ``cls`` for encoders, ``last`` for
    decoders) and ``max_length`` (default: the run's ``max_seq_length``, else 128, 384 for
    SQuAD) and, for SQuAD only, ``doc_stride`` (default: the run's, else 128) against the
    longest question. ``dtype``: the weights' dtype (``float32``, ``bfloat16``, ``float16``
    or ``auto``, the checkpoint's own; ``None``: the checkpoint's own with half precision
    loaded as float32); measures accumulate in float32 or wider whatever it is. Raises
    ``ValueError`` / ``FileNotFoundError`` with a one-line message."""

    where = locate_checkpoint(model_or_run)
    check_zeta(zeta)
    weights = None if dtype is None else weight_dtype(dtype)
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if max_texts is not None:
        check_positive("max_texts", max_texts)
    spec, max_length, doc_stride = _windows_and_task(where, task, max_length, doc_stride)
    span = spec.kind == "span"
    texts, train_texts, data = _read_texts(where, spec, split, data_dir, data_source, zeta,
                                           max_texts)
    is_pair = check_texts(texts)
    net, tok = load_checkpoint_model(where, device, weights)
    decoder = is_decoder(net)
    pooling = pooling or ("last" if decoder else "cls")
    # never longer than the model takes (its position table): the config records what ran
    max_length = capped_max_length(tok, max_length, net.config)
    if span and doc_stride is not None and doc_stride >= max_length:
        raise ValueError(f"doc_stride ({doc_stride}) must be smaller than max_length, "
                         f"{max_length} for this model (the most tokens it takes)")
    check_max_length(tok, max_length, is_pair)
    if span:
        assert doc_stride is not None
        _check_windows(tok, [*texts, *(train_texts or [])], max_length, doc_stride)
    config = {
        "checkpoint": {k: v for k, v in where.items() if k in ("kind", "model", "run_dir")},
        "architecture": "decoder" if decoder else "encoder",
        "weights_dtype": str(next(net.parameters()).dtype).removeprefix("torch."),
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
    check_positive("max_length", max_length)
    if span:
        if doc_stride is None:
            doc_stride = int(where.get("doc_stride", DEFAULT_DOC_STRIDE) if same_task
                             else DEFAULT_DOC_STRIDE)
        check_positive("doc_stride", doc_stride)
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


def _check_windows(tokenizer: Any, texts: Sequence[Text], max_length: int,
                   doc_stride: int) -> None:
    """SQuAD windows need a fast tokenizer and, next to the longest question, more than
    ``doc_stride`` tokens of context room."""

    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("SQuAD windows need a fast (Rust) tokenizer; "
                         f"{type(tokenizer).__name__} is not one")
    check_question_room(tokenizer, [t[0] for t in texts], max_length, doc_stride, "max_length")


# --------------------------------------------------------------------------- measuring


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
        return find_row(self.rows, layer, cloud)


def _rows(record: dict[str, Any], pooling: str) -> list[dict[str, Any]]:
    rows = []
    for entry in record["layers"]:
        for cloud, name in (("token", "token"), ("cls", pooling)):
            rec = entry[cloud]
            rows.append({"layer": entry["layer"], "cloud": name, "n_points": rec["n_points"],
                         "isoscore": rec["isoscore"], "isoscore_star": rec["isoscore_star"],
                         "avg_cosine": rec["avg_cosine"], "twonn": rec.get("twonn"),
                         "effective_rank": rec.get("effective_rank"),
                         "rankme": rec.get("rankme"),
                         **{key: rec.get(key) for key in OUTLIER_KEYS}})
    u = record["union"]
    rows.append({"layer": "union", "cloud": "token", "n_points": u["n_points"],
                 "isoscore": u["isoscore"], "isoscore_star": u["isoscore_star"],
                 "avg_cosine": u["avg_cosine"], "twonn": None,
                 "effective_rank": u.get("effective_rank"), "rankme": u.get("rankme"),
                 **{key: u.get(key) for key in OUTLIER_KEYS}})
    mark_twonn_reliability(rows)
    return rows


def analyze_model(
    inputs: AnalyzeInputs,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    zeta: float = DEFAULT_ZETA,
    shrinkage_tokens: int = DEFAULT_SHRINKAGE_TOKENS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_k: int = DEFAULT_TOP_K,
    bar: bool = False,
    echo: Callable[[str], None] | None = None,
) -> AnalyzeResult:
    """Measure ``inputs`` (module doc): :math:`\\Sigma_S` from the training texts when
    ``zeta > 0``, then one hidden-state pass over the texts into :class:`EvalMeasures`.
    Runs in eval mode without gradients; on CPU denormals are flushed to zero. ``bar``: a
    progress bar per pass on stderr; ``echo``: one line per pass when it ends
    (:func:`isotropy.progress.stage`)."""

    for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens),
                        ("top_k", top_k)):
        check_positive(name, value)
    zeta = check_zeta(zeta)
    if zeta > 0:
        check_positive("shrinkage_tokens", shrinkage_tokens)
        if not inputs.train_texts:
            raise ValueError("zeta > 0 needs the training texts for Sigma_S")
    model = inputs.model
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    with flush_denormals(device.type == "cpu"):
        if zeta == 0:
            sigma, shrinkage_info = None, {"source": "none (zeta = 0)"}
        else:
            # a bar of the rows read out of shrinkage_tokens
            with stage("Sigma_S pass (training texts)", bar=False, echo=echo) as counted:
                sigma, shrinkage_info = _training_sigma(inputs, batch_size, shrinkage_tokens,
                                                        counted, progress=bar)
        measures = EvalMeasures(max_tokens=max_tokens, top_k=top_k, zeta=zeta, shrinkage=sigma,
                                sync=False, pooling=inputs.pooling)
        with stage("measurement pass", bar=bar, echo=echo) as counted:
            # one batch per batch_size texts, unless long texts are cut into windows
            total = None if inputs.doc_stride is not None else \
                -(-len(inputs.texts) // batch_size)
            for hidden_states, attention_mask in hidden_state_batches(
                    model, counted(_batches(inputs, inputs.texts, batch_size), total)):
                measures.update(hidden_states, attention_mask)
        record = measures.compute(progress=bar)
    config = {
        **inputs.config,
        "model_type": getattr(model.config, "model_type", None),
        "num_layers": record["num_layers"], "hidden_size": record["hidden_size"],
        "n_texts": record["n_examples"],  # SQuAD: windows (n_questions: questions)
        "n_tokens": record["n_tokens"],
        "n_tokens_measured": record["n_tokens_measured"],
        "pooling": inputs.pooling, "padding_side": getattr(inputs.tokenizer, "padding_side", None),
        "zeta": zeta, "shrinkage": shrinkage_info, "max_tokens": max_tokens,
        "top_k": top_k, "batch_size": batch_size, "max_length": inputs.max_length,
        "device": str(device), "clouds": record["clouds"],
        "layernorm_outliers": layernorm_summary(model),
    }
    return AnalyzeResult(config, record, _rows(record, inputs.pooling), record["errors"],
                         time.perf_counter() - t0)


def _batches(inputs: AnalyzeInputs, texts: Sequence[Text], batch_size: int
             ) -> Iterator[dict[str, torch.Tensor]]:
    """The texts' model inputs, in order (:func:`~isotropy.probing.batches.ordered_batches`)."""
    return ordered_batches(inputs.tokenizer, texts, batch_size=batch_size,
                           max_length=inputs.max_length, decoder=inputs.decoder,
                           doc_stride=inputs.doc_stride)


def _training_sigma(inputs: AnalyzeInputs, batch_size: int, shrinkage_tokens: int,
                    counted: Callable[[Any], Any] = iter, *, progress: bool = False
                    ) -> tuple[LayerShrinkage, dict[str, Any]]:
    """The per-layer :math:`\\Sigma_S` of the training texts and how it was estimated (row
    counts, seconds, the warnings raised)."""
    t1 = time.perf_counter()
    assert inputs.train_texts is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sigma = collect_layer_shrinkage(
            inputs.model, counted(_batches(inputs, inputs.train_texts, batch_size)),
            n_tokens=shrinkage_tokens, pooling=inputs.pooling, sync_dist=False,
            progress=progress)
    rows = sigma.describe()
    return sigma, {"source": "training split", **rows, "n_rows": rows["union_rows"],
                   "requested_rows": shrinkage_tokens, "seconds": time.perf_counter() - t1,
                   "notes": [str(w.message) for w in caught]}


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
    dtype: torch.dtype | str | None = None,
) -> AnalyzeResult:
    """:func:`prepare_analyze` then :func:`analyze_model` (see both)."""
    inputs = prepare_analyze(model_or_run, task=task, split=split, data_dir=data_dir,
                             data_source=data_source, max_texts=max_texts,
                             max_length=max_length, zeta=zeta, pooling=pooling, device=device,
                             doc_stride=doc_stride, dtype=dtype)
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
    ("effective_rank", "eff. rank", 9, ".1f"),
    ("outliers_variance", "var outl", 8, "d"),
    ("rogue_share_1", "rogue1", 6, ".2f"),
]


def format_analyze_table(result: AnalyzeResult) -> str:
    """A plain-text table, one line per layer and cloud plus the union (``-``: undefined or
    not computed), then the last layer's pooled spectrum."""

    lines = [*text_table(result.rows, _TABLE), *twonn_footnote(result.rows)]
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
    mean/std), ``analyze.csv`` (rows), ``analyze_dims.csv`` (dimension, mean, std of the
    last layer's token cloud) and the outlier figure ``outliers.png`` atomically."""
    last = result.record["last"]
    mean, std = last["token_mean"] or [], last["token_std"] or []
    dims = [{"dim": i, "mean": m, "std": std[i] if i < len(std) else None}
            for i, m in enumerate(mean)]
    written = write_json_and_csv(output_dir, "analyze", result.to_dict(), result.rows)
    written["dims"] = write_csv_atomic(Path(output_dir) / FILES[2], dims,
                                       fieldnames=["dim", "mean", "std"])
    written["figure"] = plot_outliers(result.rows, Path(output_dir) / FILES[3],
                                      f"{model_label(result.config.get('model'))}: token clouds")
    return written
