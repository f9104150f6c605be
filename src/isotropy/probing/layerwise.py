r"""Layer-wise geometry of a Hugging Face encoder's representations.

For every hidden state (layer 0 = embedding output, ``1..L`` = transformer layers) two point
clouds are measured:

* ``token``: every non-padding token (padding is excluded with the attention mask). IsoScore,
  the participation ratio and the anisotropy spectra come from streamed covariance statistics
  over *all* tokens (no token matrix is kept), and the average cosine similarity from the
  streamed sum of unit vectors (exact over all pairs). TwoNN and the partition score use a
  uniform random sample of at most ``max_tokens`` tokens (the same token positions in every
  layer; seeded).
* ``cls``: the first token of every text ([CLS] for BERT-style models), all texts; every
  measure is computed with the library's functions, plus the persistent entropy of the H0
  barcode.

A measure that is undefined on a cloud is recorded as ``None`` with the reason in ``errors``.
In particular a cloud whose points are all identical (every coordinate's range
:math:`\max_i x_{ij} - \min_i x_{ij}` within float32 rounding of the largest :math:`|x_{ij}|`),
such as the layer-0 [CLS] embeddings (the same token at the same position in every text), has
zero variance: IsoScore, the participation ratio, the centred spectrum, TwoNN and the H0
persistent entropy are undefined there and recorded as ``"zero variance: all points
identical"``; the average cosine, the raw spectrum and the partition score remain defined.
TwoNN is computed on the distinct points of a cloud (duplicates have no nearest-neighbour
ratio). Measurements run in eval mode without gradients; on CPU, denormal floats are flushed
to zero (they slow MiniLM-style models several-fold on padded batches).
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from isotropy.clouds import get_hidden_states
from isotropy.data.glue import get_task, load_split, split_path
from isotropy.io import read_text_utf8, write_csv_atomic, write_json_atomic
from isotropy.measures.cloud import ZERO_VARIANCE
from isotropy.measures.cloud import TokenCloudStats as _TokenAccumulator
from isotropy.measures.cloud import constant_reason as _cloud_reason
from isotropy.measures.cloud import safe_measure as _safe
from isotropy.measures.cloud import spectrum_from_moment as _spectrum_from_moment
from isotropy.measures.cloud import twonn_of_distinct as _twonn
from isotropy.measures.cosine import avg_cosine_similarity
from isotropy.measures.isoscore import (
    isoscore,
    isoscore_from_covariance,
    participation_ratio,
    participation_ratio_from_covariance,
)
from isotropy.measures.partition import partition_score
from isotropy.measures.spectrum import anisotropy_spectrum
from isotropy.measures.topology import h0_barcode, persistent_entropy
from isotropy.models.loading import default_model_path, ensure_pad_token, load_model
from isotropy.runtime import flush_denormals

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_MAX_TEXTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TOP_K",
    "BUILTIN_SENTENCES",
    "ZERO_VARIANCE",
    "MeasureInputs",
    "MeasureResult",
    "format_measure_table",
    "load_texts",
    "measure",
    "measure_model",
    "min_max_length",
    "prepare_measure",
    "text_table",
    "write_measure",
]

DEFAULT_MAX_TEXTS = 512
DEFAULT_MAX_TOKENS = 20_000
DEFAULT_BATCH_SIZE = 32
DEFAULT_MAX_LENGTH = 128
DEFAULT_TOP_K = 3

Text = str | tuple[str, str]

BUILTIN_SENTENCES: tuple[str, ...] = (
    "The cat sat quietly on the warm windowsill.",
    "Stock markets fell sharply after the announcement.",
    "She plays the violin in a small orchestra.",
    "Heavy rain is expected across the north tomorrow.",
    "The new phone has a larger screen and a faster chip.",
    "He forgot his keys at the office again.",
    "Photosynthesis turns light into chemical energy.",
    "The museum opens at nine on weekdays.",
    "A good night's sleep improves memory.",
    "The committee postponed its decision until spring.",
    "Children were building a sandcastle on the beach.",
    "This film is a charming and often affecting journey.",
    "The soup was cold and the service was painfully slow.",
    "Quantum computers exploit superposition and entanglement.",
    "The river flooded the village after the storm.",
    "Our team won the match in the final minute.",
    "Please send me the report before Friday.",
    "The old library smelled of dust and paper.",
    "Electric cars are becoming cheaper every year.",
    "The recipe calls for two cups of flour.",
    "Migrating birds fly thousands of kilometres each autumn.",
    "The lecture on medieval history was surprisingly funny.",
    "A thick fog covered the harbour at dawn.",
    "The startup raised money from several investors.",
    "He apologised for arriving late to the interview.",
    "Volcanic ash grounded flights across the region.",
    "The novel's ending left many readers unsatisfied.",
    "Fresh bread is sold at the corner bakery.",
    "The judge dismissed the case for lack of evidence.",
    "Her garden is full of roses and lavender.",
    "The train to the airport leaves every fifteen minutes.",
    "Scientists discovered a new species of frog.",
    "The concert was cancelled because of the heat.",
    "My grandmother tells wonderful stories about her youth.",
    "The software update fixed several security bugs.",
    "A small boat drifted slowly across the lake.",
    "The price of coffee has doubled since last year.",
    "Students gathered in the hall for the exam.",
    "The mountain trail is closed during winter.",
    "This is the worst movie I have seen in years.",
)


# --------------------------------------------------------------------------- texts


def load_texts(
    *,
    texts_file: str | os.PathLike[str] | None = None,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
) -> tuple[list[Text], dict[str, Any]]:
    """Texts to measure and a description of where they came from.

    Exactly one of ``texts_file`` (UTF-8, one text per line, blank lines skipped) or ``task``
    (a local GLUE split, see :mod:`isotropy.data.glue`; sentence-pair tasks give pairs, SQuAD
    gives (question, context)) must be given. The first ``max_texts`` texts are kept
    (``None``: all).
    """
    if (texts_file is None) == (task is None):
        raise ValueError("give exactly one of texts_file or task")
    if max_texts is not None and max_texts < 1:
        raise ValueError(f"max_texts must be >= 1, got {max_texts}")
    texts: list[Text]
    if texts_file is not None:
        path = Path(texts_file)
        if not path.is_file():
            raise FileNotFoundError(f"texts file {path} does not exist")
        with io.StringIO(read_text_utf8(path)) as f:
            texts = [line.rstrip("\r\n") for line in f if line.strip()]
        if not texts:
            raise ValueError(f"texts file {path} has no non-blank line")
        source: dict[str, Any] = {"kind": "file", "path": str(path.resolve())}
    else:

        spec = get_task(str(task))
        examples = load_split(spec.name, split, data_dir)
        if not examples:
            raise ValueError(f"{spec.display_name} {split} split is empty")
        texts = [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]
        source = {
            "kind": "task",
            "task": spec.name,
            "split": split,
            "path": str(split_path(spec.name, split, data_dir)),
            "pairs": spec.is_pair,
        }
    source["available"] = len(texts)
    if max_texts is not None:
        texts = texts[:max_texts]
    source["used"] = len(texts)
    return texts, source


# --------------------------------------------------------------------------- accumulation


class _Sampler:
    """Uniform sample without replacement of at most ``cap`` tokens (smallest random keys)."""

    def __init__(self, cap: int, seed: int) -> None:
        self.cap = cap
        self.gen = torch.Generator().manual_seed(seed)
        self.keys = torch.empty(0)

    def select(self, n_new: int) -> torch.Tensor:
        """Indices into ``cat(kept_rows, new_rows)`` of the rows to keep."""
        keys = torch.cat([self.keys, torch.rand(n_new, generator=self.gen)])
        if len(keys) <= self.cap:
            idx = torch.arange(len(keys))
        else:
            idx = torch.topk(keys, self.cap, largest=False, sorted=False).indices.sort().values
        self.keys = keys[idx]
        return idx


@dataclass
class MeasureResult:
    """Rows (one per layer and cloud), the configuration, and undefined-measure notes."""

    config: dict[str, Any]
    rows: list[dict[str, Any]]
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "seconds": self.seconds,
            "errors": self.errors,
            "rows": self.rows,
        }

    def row(self, layer: int, cloud: str) -> dict[str, Any]:
        """The row of one layer (0 = embeddings) and cloud (``"token"`` or ``"cls"``)."""
        for r in self.rows:
            if r["layer"] == layer and r["cloud"] == cloud:
                return r
        raise KeyError(f"no row for layer {layer}, cloud {cloud!r}")


def _token_row(
    layer: int, acc: _TokenAccumulator, sample: torch.Tensor, k: int, errors: list[str]
) -> dict[str, Any]:
    where = f"layer {layer} token"
    st = acc.stats
    n = st.count
    why = _cloud_reason(acc.lo, acc.hi)
    row: dict[str, Any] = {"layer": layer, "cloud": "token", "n_points": n,
                           "n_sampled": int(sample.shape[0])}
    cov = None if why is not None else _safe(errors, where, lambda: st.covariance())
    if cov is None and why is None:
        why = "the covariance is undefined"
    row["isoscore"] = _safe(errors, f"{where} isoscore",
                            lambda: float(isoscore_from_covariance(cov)), why)
    row["participation_ratio"] = _safe(
        errors, f"{where} participation_ratio",
        lambda: float(participation_ratio_from_covariance(cov)), why)
    row["avg_cosine"] = _safe(errors, f"{where} avg_cosine", acc.avg_cosine)
    log_p = _safe(errors, f"{where} partition",
                  lambda: float(partition_score(sample, log=True)))
    row["partition"] = None if log_p is None else float(torch.tensor(log_p).exp())
    row["log_partition"] = log_p
    raw = _safe(errors, f"{where} spectrum_raw",
                lambda: _spectrum_from_moment(st.comoment + n * torch.outer(st.mean, st.mean), k))
    ctr = _safe(errors, f"{where} spectrum_centered",
                lambda: _spectrum_from_moment(st.comoment, k), _cloud_reason(acc.lo, acc.hi))
    for i in range(k):
        row[f"spectrum_raw_{i + 1}"] = None if raw is None or i >= len(raw) else raw[i]
    for i in range(k):
        row[f"spectrum_centered_{i + 1}"] = None if ctr is None or i >= len(ctr) else ctr[i]
    row["twonn"] = _safe(errors, f"{where} twonn", lambda: _twonn(sample),
                         _cloud_reason(acc.lo, acc.hi))
    row["ph0_entropy"] = None
    return row


def _cls_row(layer: int, x: torch.Tensor, k: int, errors: list[str]) -> dict[str, Any]:
    where = f"layer {layer} cls"
    x = x.double()
    n = x.shape[0]
    kk = min(k, n, x.shape[1])
    why = _cloud_reason(x.amin(0).float(), x.amax(0).float())
    row: dict[str, Any] = {"layer": layer, "cloud": "cls", "n_points": n, "n_sampled": n}
    row["isoscore"] = _safe(errors, f"{where} isoscore", lambda: float(isoscore(x)), why)
    row["participation_ratio"] = _safe(errors, f"{where} participation_ratio",
                                       lambda: float(participation_ratio(x)), why)
    row["avg_cosine"] = _safe(errors, f"{where} avg_cosine",
                              lambda: float(avg_cosine_similarity(x)))
    log_p = _safe(errors, f"{where} partition", lambda: float(partition_score(x, log=True)))
    row["partition"] = None if log_p is None else float(torch.tensor(log_p).exp())
    row["log_partition"] = log_p
    raw = _safe(errors, f"{where} spectrum_raw",
                lambda: anisotropy_spectrum(x, kk, center=False).tolist())
    ctr = _safe(errors, f"{where} spectrum_centered",
                lambda: anisotropy_spectrum(x, kk, center=True).tolist(), why)
    for i in range(k):
        row[f"spectrum_raw_{i + 1}"] = None if raw is None or i >= len(raw) else raw[i]
    for i in range(k):
        row[f"spectrum_centered_{i + 1}"] = None if ctr is None or i >= len(ctr) else ctr[i]
    row["twonn"] = _safe(errors, f"{where} twonn", lambda: _twonn(x), why)
    row["ph0_entropy"] = _safe(errors, f"{where} ph0_entropy",
                               lambda: float(persistent_entropy(h0_barcode(x))), why)
    return row


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{device!r} is not a torch device (use auto, cpu, cuda, cuda:N)") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    return dev


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_options(*, batch_size: int, max_length: int, max_tokens: int, k: int,
                   seed: int) -> None:
    """The numeric options of :func:`measure_model`: positive integers, and an integer seed."""
    for name, value in [("batch_size", batch_size), ("max_length", max_length),
                        ("max_tokens", max_tokens), ("k", k)]:
        _check_positive(name, value)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")


def _check_texts(texts: Sequence[Text]) -> bool:
    """At least 2 texts, all strings or all ``(a, b)`` string pairs; returns whether pairs."""
    if len(texts) < 2:
        raise ValueError(f"need at least 2 texts, got {len(texts)}")
    pairs = [isinstance(t, (tuple, list)) for t in texts]
    if any(pairs) and not all(pairs):
        raise ValueError("texts must be all strings or all (text_a, text_b) pairs, not a mix")
    for i, t in enumerate(texts):
        parts = t if isinstance(t, (tuple, list)) else (t,)
        if len(parts) not in (1, 2) or (pairs[i] and len(parts) != 2) or not all(
            isinstance(part, str) for part in parts
        ):
            raise ValueError(f"text {i} is {t!r}: expected a string or a (text_a, text_b) pair")
    return all(pairs)


def min_max_length(tokenizer: Any, *, pairs: bool = False) -> int:
    """The smallest ``max_length`` that ``tokenizer`` can truncate to: its special tokens per
    text (or per pair), e.g. 2 for BERT's ``[CLS] a [SEP]`` and 3 for ``[CLS] a [SEP] b [SEP]``.

    A smaller ``max_length`` is not honoured by Hugging Face tokenizers: they return the whole
    text (with a logged warning only).
    """
    return max(1, int(tokenizer.num_special_tokens_to_add(pair=pairs)))


def _check_max_length(tokenizer: Any, max_length: int, pairs: bool) -> None:
    least = min_max_length(tokenizer, pairs=pairs)
    if max_length < least:
        what = "sentence pair" if pairs else "text"
        raise ValueError(
            f"max_length {max_length} is too small: the tokenizer adds {least} special "
            f"token(s) to every {what}, so the smallest valid max_length is {least}"
        )


def measure_model(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[Text],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    k: int = DEFAULT_TOP_K,
    seed: int = 0,
    progress: bool = False,
    config: dict[str, Any] | None = None,
) -> MeasureResult:
    """Measure every hidden state of ``model`` on ``texts`` (strings or (a, b) pairs).

    Texts are tokenized with truncation to ``max_length`` and run in batches of
    ``batch_size``, sorted by length to limit padding. ``max_tokens`` caps the token sample
    used by TwoNN and the partition score; ``k`` is the number of anisotropy-spectrum
    components reported. ``config`` entries are added to the result's configuration.
    Every argument is checked before the first forward pass (``ValueError``), including
    ``max_length >=`` :func:`min_max_length`. Pairs are encoded as the tokenizer's pair input
    (for BERT ``[CLS] a [SEP] b [SEP]`` with ``token_type_ids`` 0 then 1), which the model
    receives.
    """
    _check_options(batch_size=batch_size, max_length=max_length, max_tokens=max_tokens, k=k,
                   seed=seed)
    is_pair = _check_texts(texts)
    _check_max_length(tokenizer, max_length, is_pair)
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    with flush_denormals(device.type == "cpu"):
        return _measure(model, tokenizer, texts, is_pair, device, t0, batch_size=batch_size,
                        max_length=max_length, max_tokens=max_tokens, k=k, seed=seed,
                        progress=progress, config=config)


def _encode(tokenizer: Any, texts: Sequence[Text], is_pair: bool, max_length: int
            ) -> tuple[Any, list[str], list[int], int]:
    """The texts tokenised (truncated at ``max_length``, capped by the tokenizer's own
    limit), the keys a model takes, the text order longest first, and the length used."""
    model_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max, int) and 0 < model_max < 1_000_000:
        max_length = min(max_length, model_max)
    ensure_pad_token(tokenizer)
    if is_pair:
        enc = tokenizer([t[0] for t in texts], [t[1] for t in texts], truncation=True,
                        max_length=max_length)
    else:
        enc = tokenizer(list(texts), truncation=True, max_length=max_length)
    keys = [key for key in ("input_ids", "attention_mask", "token_type_ids") if key in enc]
    lengths = [len(ids) for ids in enc["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    return enc, keys, order, max_length


@dataclass
class _LayerClouds:
    """Per hidden state: the token cloud's streamed statistics, its seeded sample, and the
    first-token ([CLS]) rows; with the number of tokens seen."""

    tokens: list[_TokenAccumulator] = field(default_factory=list)
    samples: list[torch.Tensor] = field(default_factory=list)
    cls: list[list[torch.Tensor]] = field(default_factory=list)
    n_tokens: int = 0


def _stream(model: torch.nn.Module, tokenizer: Any, enc: Any, keys: Sequence[str],
            batches: Sequence[Sequence[int]], device: torch.device, sampler: _Sampler,
            progress: bool) -> _LayerClouds:
    """One pass over the batches: every layer's clouds, padding left out."""
    clouds = _LayerClouds()
    iterator: Any = batches
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(batches, desc="measure", unit="batch", file=sys.stderr)
    with torch.inference_mode():
        for idx in iterator:
            feats = [{key: enc[key][i] for key in keys} for i in idx]
            batch = tokenizer.pad(feats, padding=True, return_tensors="pt")
            batch = {key: v.to(device) for key, v in batch.items()}
            out = model(**batch, output_hidden_states=True)
            hs = get_hidden_states(out)
            mask = batch["attention_mask"].bool()
            n_new = int(mask.sum())
            clouds.n_tokens += n_new
            if not clouds.tokens:
                dim = hs[0].shape[-1]
                clouds.tokens = [_TokenAccumulator(dim) for _ in hs]
                clouds.samples = [torch.empty(0, dim) for _ in hs]
                clouds.cls = [[] for _ in hs]
            keep = sampler.select(n_new)
            # first non-padding position ([CLS]); index 0 unless the tokenizer pads on the left
            first = mask.int().argmax(dim=1)
            rows_idx = torch.arange(mask.shape[0], device=mask.device)
            for layer, h in enumerate(hs):
                h = h.float()
                if not bool(torch.isfinite(h).all()):
                    raise ValueError(f"layer {layer} hidden states contain NaN or infinity")
                rows = h[mask]
                clouds.tokens[layer].update(rows)
                clouds.samples[layer] = torch.cat([clouds.samples[layer], rows.cpu()])[keep]
                clouds.cls[layer].append(h[rows_idx, first].cpu())
    return clouds


def _measure(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[Text],
    is_pair: bool,
    device: torch.device,
    t0: float,
    *,
    batch_size: int,
    max_length: int,
    max_tokens: int,
    k: int,
    seed: int,
    progress: bool,
    config: dict[str, Any] | None,
) -> MeasureResult:
    """Encode, stream every layer's clouds (:func:`_stream`), then measure each cloud."""
    model.eval()
    enc, keys, order, max_length = _encode(tokenizer, texts, is_pair, max_length)
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    clouds = _stream(model, tokenizer, enc, keys, batches, device, _Sampler(max_tokens, seed),
                     progress)
    token_acc = clouds.tokens
    errors: list[str] = []
    rows_out: list[dict[str, Any]] = []
    kk = min(k, token_acc[0].stats.dim)
    for layer in range(len(token_acc)):
        rows_out.append(_token_row(layer, token_acc[layer], clouds.samples[layer], kk, errors))
        rows_out.append(_cls_row(layer, torch.cat(clouds.cls[layer]), kk, errors))
    cfg: dict[str, Any] = {
        "model": getattr(getattr(model, "config", None), "_name_or_path", None),
        "model_type": getattr(getattr(model, "config", None), "model_type", None),
        "num_layers": len(token_acc) - 1,
        "hidden_size": token_acc[0].stats.dim,
        "n_texts": len(texts),
        "pairs": is_pair,
        "n_tokens": clouds.n_tokens,
        "n_tokens_sampled": int(clouds.samples[0].shape[0]),
        "batch_size": batch_size,
        "max_length": max_length,
        "max_tokens": max_tokens,
        "top_k": kk,
        "seed": seed,
        "device": str(device),
        "layer_0": "embedding output",
        "cls_cloud": "first non-padding token of each text",
    }
    if config:
        cfg.update(config)
    return MeasureResult(config=cfg, rows=rows_out, errors=errors,
                         seconds=time.perf_counter() - t0)


@dataclass
class MeasureInputs:
    """What :func:`measure_model` needs, loaded and checked by :func:`prepare_measure`."""

    model: torch.nn.Module
    tokenizer: Any
    texts: list[Text]
    config: dict[str, Any]


def prepare_measure(
    model: str | os.PathLike[str] | None = None,
    *,
    texts: Sequence[Text] | None = None,
    texts_file: str | os.PathLike[str] | None = None,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
    device: str | torch.device | None = "auto",
    max_length: int = DEFAULT_MAX_LENGTH,
) -> MeasureInputs:
    """Everything :func:`measure` does before its first forward pass: read and check the texts
    (``texts``, a texts file or a local GLUE split; the first ``max_texts``), resolve the
    device, load ``model`` (default: the offline MiniLM) and its tokenizer, and check
    ``max_length`` against the tokenizer. Raises ``ValueError``/``FileNotFoundError``."""
    given = sum(x is not None for x in (texts, texts_file, task))
    if given != 1:
        raise ValueError("give exactly one of texts, texts_file or task")
    _check_positive("max_length", max_length)
    if max_texts is not None:
        _check_positive("max_texts", max_texts)
    if texts is not None:
        text_list = list(texts)[:max_texts] if max_texts else list(texts)
        source: dict[str, Any] = {"kind": "list", "available": len(texts), "used": len(text_list)}
    else:
        text_list, source = load_texts(texts_file=texts_file, task=task, split=split,
                                       data_dir=data_dir, max_texts=max_texts)
    is_pair = _check_texts(text_list)
    dev = _resolve_device(device)
    model_src = default_model_path() if model is None else os.fspath(model)
    net, tok = load_model(model_src, device=dev)
    _check_max_length(tok, max_length, is_pair)
    return MeasureInputs(net, tok, text_list,
                         {"model": model_src, "texts": source, "max_texts": max_texts})


def measure(
    model: str | os.PathLike[str] | None = None,
    *,
    texts: Sequence[Text] | None = None,
    texts_file: str | os.PathLike[str] | None = None,
    task: str | None = None,
    split: str = "dev",
    data_dir: str | os.PathLike[str] | None = None,
    max_texts: int | None = DEFAULT_MAX_TEXTS,
    device: str | torch.device | None = "auto",
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int = DEFAULT_MAX_LENGTH,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    k: int = DEFAULT_TOP_K,
    seed: int = 0,
    progress: bool = False,
) -> MeasureResult:
    """Load ``model`` (default: the offline MiniLM) and measure it on ``texts``, a texts file
    or a local GLUE split: :func:`prepare_measure` then :func:`measure_model` (see both for
    the arguments). Every argument is checked before the model is run."""
    _check_options(batch_size=batch_size, max_length=max_length, max_tokens=max_tokens, k=k,
                   seed=seed)
    inputs = prepare_measure(model, texts=texts, texts_file=texts_file, task=task, split=split,
                             data_dir=data_dir, max_texts=max_texts, device=device,
                             max_length=max_length)
    return measure_model(inputs.model, inputs.tokenizer, inputs.texts, batch_size=batch_size,
                         max_length=max_length, max_tokens=max_tokens, k=k, seed=seed,
                         progress=progress, config=inputs.config)


# --------------------------------------------------------------------------- output

_TABLE = [  # (key, header, width, format)
    ("layer", "layer", 5, "d"),
    ("cloud", "cloud", 5, "s"),
    ("n_points", "points", 7, "d"),
    ("isoscore", "IsoScore", 8, ".4f"),
    ("participation_ratio", "PR", 7, ".2f"),
    ("avg_cosine", "avg cos", 7, ".3f"),
    ("log_partition", "log partition", 13, ".4g"),
    ("spectrum_raw_1", "spec1 raw", 9, ".3f"),
    ("spectrum_centered_1", "spec1 ctr", 9, ".3f"),
    ("twonn", "TwoNN", 6, ".1f"),
    ("ph0_entropy", "PH0 H", 6, ".3f"),
]


def text_table(rows: Sequence[Mapping[str, Any]],
               columns: Sequence[tuple[str, str, int, str]]) -> list[str]:
    """Lines of a plain-text table: a header, a rule, then one line per row; ``columns`` are
    ``(key, header, width, format)``, a missing or ``None`` value shows as ``-``.

    >>> text_table([{"a": 0.5}, {"a": None}], [("a", "A", 5, ".2f")])
    ['    A', '-----', ' 0.50', '    -']
    """
    head = " ".join(h.rjust(w) for _, h, w, _ in columns)
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(" ".join(("-" if (v := r.get(key)) is None else format(v, fmt)).rjust(w)
                              for key, _, w, fmt in columns))
    return lines


def format_measure_table(result: MeasureResult) -> str:
    """A plain-text table of the main measures, one line per layer and cloud (``-``: undefined
    or not computed; ``spec1``: top anisotropy-spectrum share, raw and centred)."""
    return "\n".join(text_table(result.rows, _TABLE))


def write_measure(result: MeasureResult, output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``measure.json`` (config, errors, rows) and ``measure.csv`` (rows) atomically."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json_atomic(out / "measure.json", result.to_dict()),
        "csv": write_csv_atomic(out / "measure.csv", result.rows),
    }
