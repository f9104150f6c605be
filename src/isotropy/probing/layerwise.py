r"""Layer-wise geometry of a Hugging Face encoder's representations.

For every hidden state (layer 0 = embedding output, ``1..L`` = transformer layers) two point
clouds are measured:

* ``token``: every non-padding token (padding is excluded with the attention mask). IsoScore,
  the participation ratio and the anisotropy spectra come from streamed covariance statistics
  over *all* tokens (no token matrix is kept), and the average cosine similarity from the
  streamed sum of unit vectors (exact over all pairs), the effective rank and RankMe from the
  streamed Gram matrix (singular values of the uncentred cloud, all tokens). TwoNN, the
  partition score and the uniformity (Wang & Isola, :math:`t = 2`) use a uniform random
  sample of at most ``max_tokens`` tokens (the same token positions in every layer; seeded).
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

import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from isotropy.clouds import POOLINGS, check_rows_have_tokens, pooled_rows, token_mask
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
from isotropy.measures.rank import (
    effective_rank,
    effective_rank_and_rankme_from_stats,
    rankme,
    rankme_from_stats,
)
from isotropy.measures.spectrum import anisotropy_spectrum
from isotropy.measures.topology import h0_barcode, persistent_entropy
from isotropy.measures.uniformity import uniformity
from isotropy.models.forward import hidden_state_batches
from isotropy.models.loading import default_model_path, load_model
from isotropy.probing.batches import capped_max_length, longest_first_batches
from isotropy.probing.checkpoint import is_decoder
from isotropy.probing.inputs import (
    BUILTIN_SENTENCES,
    DEFAULT_MAX_TEXTS,
    Text,
    check_max_length,
    check_positive,
    check_texts,
    load_texts,
    min_max_length,
    resolve_device,
)
from isotropy.probing.outlier_columns import (
    layernorm_summary,
    outlier_columns,
    outlier_columns_of_rows,
)
from isotropy.probing.outlier_figure import model_label, plot_outliers
from isotropy.probing.results import (
    find_row,
    mark_twonn_reliability,
    text_table,
    twonn_footnote,
    write_json_and_csv,
)
from isotropy.progress import progress_bar
from isotropy.runtime import flush_denormals

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_MAX_TEXTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TOP_K",
    "BUILTIN_SENTENCES",
    "ZERO_VARIANCE",
    "LayerClouds",
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

DEFAULT_MAX_TOKENS = 20_000
DEFAULT_BATCH_SIZE = 32
DEFAULT_MAX_LENGTH = 128
DEFAULT_TOP_K = 10  # as analyze, train's measurements and the geometry monitor

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


class LayerClouds:
    """Every hidden state's clouds, streamed batch by batch (``update``) from a hidden-state
    pass: the token cloud's statistics over all non-padding tokens
    (:class:`~isotropy.measures.cloud.TokenCloudStats`), its uniform sample of at most
    ``max_tokens`` rows (seeded; the same token positions in every layer), and the
    pooled rows of every text (``pooling``: ``cls``, the first non-padding token, ``last`` or
    ``mean``; the ``cls`` cloud of the rows, whatever the pooling); ``rows`` measures them
    (module doc).

    >>> g = torch.Generator().manual_seed(0)
    >>> clouds = LayerClouds(max_tokens=5, seed=0)
    >>> hs = [torch.randn(2, 4, 8, generator=g) for _ in range(3)]  # embeddings + 2 layers
    >>> clouds.update(hs, torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]))
    >>> clouds.n_tokens, clouds.samples[2].shape[0], [r["n_points"] for r in clouds.rows(3, [])][:2]
    (5, 5, [5, 2])
    """

    def __init__(self, max_tokens: int, seed: int, pooling: str = "cls") -> None:
        self.sampler = _Sampler(max_tokens, seed)
        self.pooling = pooling
        self.tokens: list[_TokenAccumulator] = []
        self.samples: list[torch.Tensor] = []
        self.cls: list[list[torch.Tensor]] = []
        self.n_tokens = 0

    @property
    def dim(self) -> int:
        """The hidden size (after the first ``update``)."""
        return self.tokens[0].stats.dim

    def update(self, hidden_states: Sequence[torch.Tensor],
               attention_mask: torch.Tensor | None) -> None:
        """Add one batch (``hidden_states[0]`` = embedding output); ``ValueError`` on NaN or
        infinity."""
        mask = token_mask(hidden_states[0], attention_mask)
        check_rows_have_tokens(mask, self.pooling, always=True)  # (counted below anyway)
        n_new = int(mask.sum())
        self.n_tokens += n_new
        if not self.tokens:
            dim = hidden_states[0].shape[-1]
            self.tokens = [_TokenAccumulator(dim) for _ in hidden_states]
            self.samples = [torch.empty(0, dim) for _ in hidden_states]
            self.cls = [[] for _ in hidden_states]
        keep = self.sampler.select(n_new)
        for layer, h in enumerate(hidden_states):
            h = h.float()
            if not bool(torch.isfinite(h).all()):
                raise ValueError(f"layer {layer} hidden states contain NaN or infinity")
            rows = h[mask]
            self.tokens[layer].update(rows)
            self.samples[layer] = torch.cat([self.samples[layer], rows.cpu()])[keep]
            # one row per text (clouds.pooled_rows): the first non-padding token ([CLS]),
            # the last one (decoders) or their mean
            self.cls[layer].append(pooled_rows(h, attention_mask, self.pooling).cpu())

    def rows(self, k: int, errors: list[str], *, progress: bool = False
             ) -> list[dict[str, Any]]:
        """The ``token`` and ``cls`` rows of every layer; undefined measures noted in
        ``errors``. ``progress``: a bar of the layers measured where stderr is a terminal."""
        out: list[dict[str, Any]] = []
        with progress_bar("measures", len(self.tokens), unit="layer", show=progress) as advance:
            for layer, acc in enumerate(self.tokens):
                out.append(_token_row(layer, acc, self.samples[layer], k, errors))
                out.append(_cls_row(layer, torch.cat(self.cls[layer]), k, errors))
                advance(1)
        return out


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
        return find_row(self.rows, layer, cloud)


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
    ctr = _safe(errors, f"{where} spectrum_centred",
                lambda: _spectrum_from_moment(st.comoment, k), _cloud_reason(acc.lo, acc.hi))
    for i in range(k):
        row[f"spectrum_raw_{i + 1}"] = None if raw is None or i >= len(raw) else raw[i]
    for i in range(k):
        row[f"spectrum_centred_{i + 1}"] = None if ctr is None or i >= len(ctr) else ctr[i]
    row["twonn"] = _safe(errors, f"{where} twonn", lambda: _twonn(sample),
                         _cloud_reason(acc.lo, acc.hi))
    # both from one decomposition; where it fails, RankMe's own call records its own error
    ranks = _safe(errors, f"{where} effective_rank",
                  lambda: effective_rank_and_rankme_from_stats(st))
    row["effective_rank"] = None if ranks is None else float(ranks[0])
    row["rankme"] = _safe(errors, f"{where} rankme",
                          lambda: float(rankme_from_stats(st) if ranks is None else ranks[1]))
    row["uniformity"] = _safe(errors, f"{where} uniformity",
                              lambda: float(uniformity(sample)))
    row["ph0_entropy"] = None
    row.update(outlier_columns(where, st, acc.outliers, why, errors))
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
                lambda: anisotropy_spectrum(x, k=kk, center=False).tolist())
    ctr = _safe(errors, f"{where} spectrum_centred",
                lambda: anisotropy_spectrum(x, k=kk, center=True).tolist(), why)
    for i in range(k):
        row[f"spectrum_raw_{i + 1}"] = None if raw is None or i >= len(raw) else raw[i]
    for i in range(k):
        row[f"spectrum_centred_{i + 1}"] = None if ctr is None or i >= len(ctr) else ctr[i]
    row["twonn"] = _safe(errors, f"{where} twonn", lambda: _twonn(x), why)
    row["effective_rank"] = _safe(errors, f"{where} effective_rank",
                                  lambda: float(effective_rank(x)))
    row["rankme"] = _safe(errors, f"{where} rankme", lambda: float(rankme(x)))
    row["uniformity"] = _safe(errors, f"{where} uniformity", lambda: float(uniformity(x)))
    row["ph0_entropy"] = _safe(errors, f"{where} ph0_entropy",
                               lambda: float(persistent_entropy(h0_barcode(x))), why)
    row.update(outlier_columns_of_rows(where, x, why, errors))
    return row


def _check_options(*, batch_size: int, max_length: int, max_tokens: int, k: int,
                   seed: int) -> None:
    """The numeric options of :func:`measure_model`: positive integers, and an integer seed."""
    for name, value in [("batch_size", batch_size), ("max_length", max_length),
                        ("max_tokens", max_tokens), ("k", k)]:
        check_positive(name, value)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")


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
    pooling: str | None = None,
) -> MeasureResult:
    """Measure every hidden state of ``model`` on ``texts`` (strings or (a, b) pairs).

    ``pooling`` picks each text's row of the pooled cloud: ``cls`` the first non-padding
    token, ``last`` the last one, ``mean`` their mean; by default ``cls`` for encoders and
    ``last`` for decoder-only models (whose first token has seen nothing else), as in
    ``isotropy analyze``.

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
    _check_pooling(pooling)
    pooling = pooling or ("last" if is_decoder(model) else "cls")
    is_pair = check_texts(texts)
    check_max_length(tokenizer, max_length, is_pair)
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    with flush_denormals(device.type == "cpu"):
        return _measure(model, tokenizer, texts, is_pair, device, t0, batch_size=batch_size,
                        max_length=max_length, max_tokens=max_tokens, k=k, seed=seed,
                        progress=progress, config=config, pooling=pooling)


def _measure(model: torch.nn.Module, tokenizer: Any, texts: Sequence[Text], is_pair: bool,
             device: torch.device, t0: float, *, batch_size: int, max_length: int,
             max_tokens: int, k: int, seed: int, progress: bool,
             config: dict[str, Any] | None, pooling: str) -> MeasureResult:
    """One hidden-state pass over the texts (longest first) into :class:`LayerClouds`, then
    every cloud measured."""
    max_length = capped_max_length(tokenizer, max_length, getattr(model, "config", None))
    batches: Iterable[dict[str, torch.Tensor]] = longest_first_batches(
        tokenizer, texts, pairs=is_pair, batch_size=batch_size, max_length=max_length)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, total=-(-len(texts) // batch_size), desc="measure",
                       unit="batch", file=sys.stderr)
    clouds = LayerClouds(max_tokens, seed, pooling)
    for hidden_states, attention_mask in hidden_state_batches(model, batches):
        clouds.update(hidden_states, attention_mask)
    errors: list[str] = []
    kk = min(k, clouds.dim)
    rows = clouds.rows(kk, errors, progress=progress)
    mark_twonn_reliability(rows)
    cfg: dict[str, Any] = {
        "model": getattr(getattr(model, "config", None), "_name_or_path", None),
        "model_type": getattr(getattr(model, "config", None), "model_type", None),
        "num_layers": len(clouds.tokens) - 1,
        "hidden_size": clouds.dim,
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
        "pooling": pooling,
        "cls_cloud": _POOLED[pooling],
        "layernorm_outliers": layernorm_summary(model),
    }
    if config:
        cfg.update(config)
    return MeasureResult(config=cfg, rows=rows, errors=errors,
                         seconds=time.perf_counter() - t0)


def _check_pooling(pooling: str | None) -> None:
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")


_POOLED = {"cls": "first non-padding token of each text",
           "last": "last non-padding token of each text",
           "mean": "mean of the non-padding tokens of each text"}


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
    check_positive("max_length", max_length)
    if max_texts is not None:
        check_positive("max_texts", max_texts)
    if texts is not None:
        text_list = list(texts)[:max_texts] if max_texts else list(texts)
        source: dict[str, Any] = {"kind": "list", "available": len(texts), "used": len(text_list)}
    else:
        text_list, source = load_texts(texts_file=texts_file, task=task, split=split,
                                       data_dir=data_dir, max_texts=max_texts)
    is_pair = check_texts(text_list)
    dev = resolve_device(device)
    model_src = default_model_path() if model is None else os.fspath(model)
    net, tok = load_model(model_src, device=dev)
    check_max_length(tok, max_length, is_pair)
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
    pooling: str | None = None,
) -> MeasureResult:
    """Load ``model`` (default: the offline MiniLM) and measure it on ``texts``, a texts file
    or a local GLUE split: :func:`prepare_measure` then :func:`measure_model` (see both for
    the arguments). Every argument is checked before the model is run."""
    _check_options(batch_size=batch_size, max_length=max_length, max_tokens=max_tokens, k=k,
                   seed=seed)
    _check_pooling(pooling)
    inputs = prepare_measure(model, texts=texts, texts_file=texts_file, task=task, split=split,
                             data_dir=data_dir, max_texts=max_texts, device=device,
                             max_length=max_length)
    return measure_model(inputs.model, inputs.tokenizer, inputs.texts, batch_size=batch_size,
                         max_length=max_length, max_tokens=max_tokens, k=k, seed=seed,
                         progress=progress, config=inputs.config, pooling=pooling)


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
    ("spectrum_centred_1", "spec1 ctr", 9, ".3f"),
    ("twonn", "TwoNN", 6, ".1f"),
    ("effective_rank", "eff. rank", 9, ".1f"),
    ("uniformity", "uniform", 7, ".3f"),
    ("outliers_variance", "var outl", 8, "d"),
    ("rogue_share_1", "rogue1", 6, ".2f"),
    ("ph0_entropy", "PH0 H", 6, ".3f"),
]


def format_measure_table(result: MeasureResult) -> str:
    """A plain-text table of the main measures, one line per layer and cloud (``-``: undefined
    or not computed; ``spec1``: top anisotropy-spectrum share, raw and centred; ``var outl``:
    variance outlier dimensions; ``rogue1``: the top rogue dimension's share of the average
    cosine)."""
    return "\n".join([*text_table(result.rows, _TABLE), *twonn_footnote(result.rows)])


def write_measure(result: MeasureResult, output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``measure.json`` (config, errors, rows), ``measure.csv`` (rows) and the outlier
    figure ``outliers.png`` (:func:`~isotropy.probing.outlier_figure.plot_outliers`)
    atomically."""
    written = write_json_and_csv(output_dir, "measure", result.to_dict(), result.rows)
    written["figure"] = plot_outliers(result.rows, Path(output_dir) / "outliers.png",
                                      f"{model_label(result.config.get('model'))}: token clouds")
    return written
