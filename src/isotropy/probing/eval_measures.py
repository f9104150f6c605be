r"""Representation measurements of an evaluation set, streamed batch by batch.

:class:`EvalMeasures` (``update(hidden_states, attention_mask)`` / ``compute()`` /
``reset()``) receives every evaluation batch's hidden states (index 0 = embedding output,
``1..L`` = transformer layers) and measures two clouds per layer:

* ``token``: the non-padding token states, at most ``max_tokens`` rows per layer (the first
  ones in evaluation order, the same positions in every layer), streamed into covariance
  statistics and a sum of unit rows (:class:`~isotropy.measures.cloud.TokenCloudStats`); the
  ``union`` cloud is the union of the transformer layers ``1..L`` (as in I-STAR).
* ``cls``: one pooled row per example, all examples, kept in float32: by default (``pooling=
  "cls"``) its first non-padding token ([CLS]); ``"last"`` its last non-padding token and
  ``"mean"`` the mean of its non-padding tokens (decoder-only models, :func:`pooled_rows`).

Per layer and cloud: IsoScore :math:`\iota(\Sigma_X)`, IsoScore*
:math:`\iota((1-\zeta)\Sigma_X + \zeta\Sigma_S)` (``zeta = 0`` needs no :math:`\Sigma_S`),
where :math:`\Sigma_S` is, given a :class:`~isotropy.models.shrinkage.LayerShrinkage`, *that*
layer's own (token clouds: the layer's training token covariance; pooled clouds: its pooled
one; the union: the union's), as the I-STAR authors' per-layer analysis does -- shrinking a
layer toward the union's :math:`\Sigma_S` would mostly measure the union -- or, given one
matrix, that matrix for every cloud; the average cosine over all pairs; the effective rank
and RankMe (:mod:`isotropy.measures.rank`: singular values of the uncentred cloud, from its
statistics); TwoNN of the [CLS] cloud; for the last layer the top-``top_k`` raw and centred
anisotropy spectrum :math:`\sigma_i^2/\sum_j\sigma_j^2` of the [CLS] cloud, and the mean
and standard deviation (``ddof=1``) of every dimension of the *token* cloud (the I-STAR
paper's Fig. 4 plots the mean activation per dimension of the last layer's token
representations, where CosReg acts).

A measure that is undefined (zero variance up to float32 rounding, too few points, a row of
norm zero, NaN/inf hidden states: the whole layer is then left out, its ``n_points`` still
the rows it would have held) is ``None`` with ``"<where>: <reason>"`` in ``errors``;
nothing is NaN and nothing raises. In particular the layer-0 [CLS] cloud (the same token at
the same position in every example) has zero variance, so its IsoScore, IsoScore*, TwoNN and
centred spectrum are ``None``. :func:`~isotropy.probing.eval_scalars.scalar_metrics` flattens
a record into the scalar ``eval_*`` names the trainer logs (undefined ones left out).

Several processes (``torch.distributed``, ``sync=True``): every rank sees its own batches; the
evaluation order is the ranks' batches of each step in rank order (how Accelerate shards an
evaluation loader and how ``gather_for_metrics`` reassembles it). Each ``update`` all-gathers
the batch's example and token counts, so every row knows its place in that order: the rows past
``dataset_size`` (the duplicates that even out the last batches) are dropped, and the token
cap takes the first ``max_tokens`` rows of the whole set, as one process would. ``compute``
all-reduces the token statistics (sums of counts, means and co-moments; unit-row sums; minima
and maxima) and all-gathers the [CLS] rows, put back in evaluation order, so that every rank
gets the record of the whole evaluation set. Every rank must call ``update`` and ``compute``
the same number of times (they are collectives).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from isotropy._validation import ArrayLike, as_covariance, check_zeta
from isotropy.clouds import (
    POOLINGS,
    check_rows_have_tokens,
    first_token_rows,
    pooled_rows,
    token_mask,
)
from isotropy.distributed import all_reduce_max, all_reduce_sum, gather_rows, is_distributed
from isotropy.measures.cloud import (
    TokenCloudStats,
    constant_reason,
    safe_measure,
    twonn_of_distinct,
)
from isotropy.measures.cosine import avg_cosine_similarity
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.isoscore import isoscore_from_covariance
from isotropy.measures.isoscore_metric import isoscore_star_compute
from isotropy.measures.rank import (
    effective_rank,
    effective_rank_and_rankme_from_stats,
    rankme,
    rankme_from_stats,
)
from isotropy.measures.spectrum import anisotropy_spectrum
from isotropy.models.shrinkage import LayerShrinkage
from isotropy.probing.eval_scalars import cls_spectrum_logs, scalar_metrics
from isotropy.probing.outlier_columns import (
    OUTLIER_KEYS,
    outlier_columns,
    outlier_columns_of_rows,
)
from isotropy.progress import progress_bar

__all__ = [
    "DEFAULT_TOP_K",
    "EvalMeasures",
    "cls_spectrum_logs",
    "first_token_rows",
    "POOLINGS",
    "pooled_rows",
    "scalar_metrics",
]

DEFAULT_TOP_K = 10
NONFINITE = "the hidden states contain NaN or infinity"
NO_SHRINKAGE = "no Sigma_S given (zeta > 0 needs one)"
NO_LAYER_SHRINKAGE = "no Sigma_S for this cloud (fewer than 2 training rows)"
OVERFLOW = "the hidden states are too large for float64 statistics"
OTHER_RANK = "the measurements stopped on another process"
# why a layer is left out, by code (all-reduced with MAX across ranks)
_BAD = (None, NONFINITE, OVERFLOW)


def _comm_device() -> torch.device:
    """Where the default group's collectives want their tensors (CUDA for NCCL, else CPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class EvalMeasures:
    r"""Streamed representation measurements of an evaluation set (module doc).

    Args:
        max_tokens: token rows measured per layer (the first ones in evaluation order, over
            all ranks).
        top_k: components of the last layer's [CLS] anisotropy spectrum.
        zeta: IsoScore* shrinkage weight :math:`\zeta \in [0, 1]`.
        shrinkage: a :class:`~isotropy.models.shrinkage.LayerShrinkage` (every cloud shrunk
            toward its own layer's :math:`\Sigma_S`; its ``pooling`` must be ``pooling``), or
            one :math:`\Sigma_S` for every cloud (``(dim, dim)``, symmetric positive
            semi-definite; checked here); needed when ``zeta > 0``, otherwise IsoScore* is
            ``None``.
        dataset_size: examples in the evaluation set; rows past it in evaluation order are
            duplicates that even out the last batches and are dropped (``None``: keep all).
        sync: combine the ranks of ``torch.distributed`` (module doc); ``None``: whenever it
            is initialised with several ranks.
        pooling: the row of each example in the ``cls`` cloud: ``cls`` (first non-padding
            token), ``last`` or ``mean`` (:func:`pooled_rows`).

    >>> g = torch.Generator().manual_seed(0)
    >>> m = EvalMeasures(max_tokens=100)
    >>> hs = [torch.randn(4, 6, 8, generator=g) for _ in range(3)]  # embeddings + 2 layers
    >>> m.update(hs, torch.ones(4, 6, dtype=torch.long))
    >>> rec = m.compute()
    >>> rec["num_layers"], rec["layers"][2]["token"]["n_points"], rec["union"]["n_points"]
    (2, 24, 48)
    """

    def __init__(self, *, max_tokens: int = 20_000, top_k: int = DEFAULT_TOP_K,
                 zeta: float = 0.0, shrinkage: ArrayLike | LayerShrinkage | None = None,
                 dataset_size: int | None = None, sync: bool | None = None,
                 pooling: str = "cls") -> None:
        for name, value in (("max_tokens", max_tokens), ("top_k", top_k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if dataset_size is not None and (isinstance(dataset_size, bool)
                                         or not isinstance(dataset_size, int)
                                         or dataset_size < 0):
            raise ValueError(f"dataset_size must be a non-negative integer, got {dataset_size!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.pooling = pooling
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.zeta = check_zeta(zeta)
        self.layer_shrinkage: dict[str, Any] | None = None
        self.shrinkage: torch.Tensor | None = None
        if isinstance(shrinkage, LayerShrinkage):
            if shrinkage.pooling != pooling:
                raise ValueError(f"the per-layer Sigma_S was estimated on {shrinkage.pooling!r}-"
                                 f"pooled rows but pooling is {pooling!r}")
            self.layer_shrinkage = shrinkage.covariances()
        elif shrinkage is not None:
            self.shrinkage = as_covariance(
                torch.as_tensor(shrinkage).detach().to(torch.float64).clone())
        self.dataset_size = dataset_size
        self.sync = is_distributed() if sync is None else bool(sync) and is_distributed()
        self.reset()

    def reset(self) -> None:
        """Forget every batch."""
        self._tokens: list[TokenCloudStats] = []
        self._cls: list[list[torch.Tensor]] = []
        self._pos: list[torch.Tensor] = []  # evaluation-order index of each kept example (sync)
        self._bad: list[int] = []  # index into _BAD
        self.n_batches = 0
        self.n_examples = 0
        self.n_tokens = 0
        self.n_measured = 0
        self._seen_examples = 0  # examples (tokens) before the next batch, over all ranks
        self._seen_tokens = 0

    def _check(self, hs: tuple[torch.Tensor, ...],
               attention_mask: torch.Tensor | None) -> torch.Tensor:
        if not hs:
            raise ValueError("hidden_states is empty")
        mask = token_mask(hs[0], attention_mask)
        check_rows_have_tokens(mask, self.pooling, always=True)  # (counted below anyway)
        shape = tuple(hs[0].shape)
        if any(tuple(h.shape) != shape for h in hs):
            raise ValueError("every hidden state must have the same shape (batch, seq, dim)")
        if self._tokens and (len(hs) != len(self._tokens)
                             or shape[2] != self._tokens[0].stats.dim):
            raise ValueError(
                f"got {len(hs)} hidden states of dimension {shape[2]}, earlier batches had "
                f"{len(self._tokens)} of dimension {self._tokens[0].stats.dim}"
            )
        return mask

    def _offsets(self, ok: bool, n_ex: int, n_tok: int) -> tuple[int, int, bool]:
        """(examples, tokens) before this rank's batch in evaluation order, and whether every
        rank's batch was valid; advances the counts past the step (a collective when
        synced)."""
        ex_off, tok_off = self._seen_examples, self._seen_tokens
        if not self.sync:
            self._seen_examples += n_ex
            self._seen_tokens += n_tok
            return ex_off, tok_off, ok
        counts = torch.tensor([int(ok), n_ex, n_tok], dtype=torch.long, device=_comm_device())
        parts = [torch.empty_like(counts) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, counts)
        table = torch.stack(parts).cpu()
        rank = dist.get_rank()
        self._seen_examples += int(table[:, 1].sum())
        self._seen_tokens += int(table[:, 2].sum())
        return (ex_off + int(table[:rank, 1].sum()), tok_off + int(table[:rank, 2].sum()),
                bool(table[:, 0].all()))

    @torch.no_grad()
    def update(self, hidden_states: Sequence[torch.Tensor],
               attention_mask: torch.Tensor | None = None) -> None:
        """Add one batch: ``hidden_states`` (each ``(batch, seq, dim)``, index 0 = embedding
        output) and its ``(batch, seq)`` attention mask (padding excluded; ``None``: none).

        When synced, a batch that is invalid on any rank raises ``ValueError`` on every rank.
        """
        hs = tuple(hidden_states)
        error: ValueError | None = None
        try:
            mask = self._check(hs, attention_mask)
        except ValueError as err:
            error, mask = err, torch.zeros(0, 0, dtype=torch.bool)
        n_ex, n_tok = mask.shape[0], int(mask.sum())
        ex_off, tok_off, all_ok = self._offsets(error is None, n_ex, n_tok)
        if error is not None:
            raise error
        if not all_ok:
            raise ValueError(OTHER_RANK)
        keep = n_ex
        if self.dataset_size is not None:
            keep = min(max(self.dataset_size - ex_off, 0), n_ex)
        if keep < n_ex:
            hs, mask = tuple(h[:keep] for h in hs), mask[:keep]
            n_tok = int(mask.sum())
        n_rows = min(max(self.max_tokens - tok_off, 0), n_tok)
        if not self._tokens:
            dim = hs[0].shape[2]
            self._tokens = [TokenCloudStats(dim) for _ in hs]
            self._cls = [[] for _ in hs]
            self._bad = [0 for _ in hs]
        # whether each layer's real rows and pooled row are finite: one host read for all
        # layers (not two per layer), and one index of the real rows for all of them
        pooled: dict[int, torch.Tensor] = {}
        flags: dict[int, torch.Tensor] = {}
        for i, h in enumerate(hs):
            if self._bad[i] or keep == 0:
                continue
            pooled[i] = pooled_rows(h, mask, self.pooling).float()
            real = mask.to(h.device)
            flags[i] = (torch.isfinite(pooled[i]).all()
                        & (torch.isfinite(h.detach()).all(-1) | ~real).all())
        read = torch.stack([f.to(hs[0].device) for f in flags.values()]).tolist() if flags \
            else []
        finite = dict(zip(flags, read, strict=True))
        index = None
        for i, h in enumerate(hs):
            if i not in flags:
                continue
            cls = pooled[i]
            if not finite[i]:
                self._bad[i] = 1
                continue
            if index is None:  # row-major, as h[mask]
                index = torch.nonzero(mask.reshape(-1)).squeeze(1)[:n_rows]
            rows = h.detach().reshape(-1, h.shape[-1]).index_select(0, index.to(h.device))
            try:
                self._tokens[i].update(rows)
            except ValueError:  # the co-moment overflows float64
                self._bad[i] = 2
                continue
            self._cls[i].append(cls.cpu())
        if self.sync and keep:
            self._pos.append(torch.arange(ex_off, ex_off + keep))
        self.n_batches += 1
        self.n_examples += keep
        self.n_tokens += n_tok
        self.n_measured += n_rows

    # ------------------------------------------------------------------ synchronisation

    def _state(self) -> tuple[list[TokenCloudStats], list[torch.Tensor], list[str | None],
                              tuple[int, int, int]]:
        """Token statistics, [CLS] clouds (evaluation order), why each layer is left out, and
        the counts (examples, tokens, measured tokens): of this process, or of every rank
        when synced (collectives, in the same order on every rank)."""
        dim = self._tokens[0].stats.dim
        cls = [torch.cat(p) if p else torch.empty(0, dim) for p in self._cls]
        counts = (self.n_examples, self.n_tokens, self.n_measured)
        if not self.sync:
            return self._tokens, cls, [_BAD[b] for b in self._bad], counts
        dev = _comm_device()
        n_states = len(self._tokens)
        sums = all_reduce_sum(torch.tensor([float(c) for c in counts], dtype=torch.float64,
                                           device=dev)).cpu()
        highs = torch.cat([
            -torch.stack([t.lo for t in self._tokens]).double().flatten(),
            torch.stack([t.hi for t in self._tokens]).double().flatten(),
            torch.tensor([float(b) for b in self._bad], dtype=torch.float64),
        ]).to(dev)
        highs = all_reduce_max(highs).cpu()
        tokens = []
        for i, acc in enumerate(self._tokens):
            out = TokenCloudStats(dim)
            local = CovarianceStats(acc.stats.count, acc.stats.mean.to(dev),
                                    acc.stats.comoment.to(dev))
            out.stats = local.all_reduce()
            out.outliers = acc.outliers.to(dev).all_reduce().to("cpu")
            out.lo = -highs[i * dim:(i + 1) * dim].float()
            out.hi = highs[(n_states + i) * dim:(n_states + i + 1) * dim].float()
            tokens.append(out)
        bad = [_BAD[int(c)] for c in highs[2 * n_states * dim:]]
        counts = (int(sums[0]), int(sums[1]), int(sums[2]))
        good = [i for i, why in enumerate(bad) if why is None]
        synced = [torch.empty(0, dim) for _ in range(n_states)]
        if good:
            local_rows = (torch.stack([cls[i] for i in good], dim=1) if self._pos
                          else torch.empty(0, len(good), dim))
            local_pos = torch.cat(self._pos) if self._pos else torch.empty(0, dtype=torch.long)
            rows = gather_rows(local_rows.to(dev)).cpu()
            order = torch.argsort(gather_rows(local_pos.to(dev)).cpu(), stable=True)
            rows = rows[order]
            for j, i in enumerate(good):
                synced[i] = rows[:, j]
        return tokens, synced, bad, counts

    # ------------------------------------------------------------------ compute

    @property
    def sigma_s(self) -> str | None:
        """How clouds are shrunk: ``"per layer"``, ``"one for every cloud"`` or ``None``."""
        if self.layer_shrinkage is not None:
            return "per layer"
        return None if self.shrinkage is None else "one for every cloud"

    def _sigma(self, cloud: str, layer: int | None = None) -> torch.Tensor | None:
        r"""The :math:`\Sigma_S` of a cloud (``token``, ``pooled`` of ``layer``; ``union``)."""
        if self.layer_shrinkage is None:
            return self.shrinkage
        if cloud == "union":
            return self.layer_shrinkage["union"]
        return self.layer_shrinkage[cloud][layer]

    def _star_reason(self, sigma: torch.Tensor | None) -> str | None:
        if self.zeta == 0 or sigma is not None:
            return None
        return NO_SHRINKAGE if self.layer_shrinkage is None else NO_LAYER_SHRINKAGE

    def _star(self, stats: CovarianceStats, sigma: torch.Tensor | None) -> float:
        return float(isoscore_star_compute(stats, self.zeta, sigma if self.zeta > 0 else None))

    def _isoscores(self, where: str, st: CovarianceStats | None, why: str | None,
                   errors: list[str], sigma: torch.Tensor | None) -> dict[str, float | None]:
        """IsoScore and IsoScore* of a cloud's statistics (``None`` with the reason recorded
        in ``errors`` when ``why`` says it is undefined)."""
        return {
            "isoscore": safe_measure(errors, f"{where} isoscore",
                                     lambda: float(isoscore_from_covariance(st.covariance())),
                                     why),
            "isoscore_star": safe_measure(errors, f"{where} isoscore_star",
                                          lambda: self._star(st, sigma),
                                          why or self._star_reason(sigma)),
        }

    @staticmethod
    def _ranks(where: str, cloud: CovarianceStats | torch.Tensor, why: str | None,
               errors: list[str]) -> dict[str, float | None]:
        """Effective rank and RankMe (singular values of the uncentred cloud): of the rows
        themselves when given, else from their statistics."""
        if isinstance(cloud, torch.Tensor):
            return {
                "effective_rank": safe_measure(errors, f"{where} effective_rank",
                                               lambda: float(effective_rank(cloud)), why),
                "rankme": safe_measure(errors, f"{where} rankme",
                                       lambda: float(rankme(cloud)), why),
            }
        # both from one decomposition; where it fails, RankMe's own call records its own error
        both = safe_measure(errors, f"{where} effective_rank",
                            lambda: effective_rank_and_rankme_from_stats(cloud), why)
        return {
            "effective_rank": None if both is None else float(both[0]),
            "rankme": safe_measure(
                errors, f"{where} rankme",
                lambda: float(rankme_from_stats(cloud) if both is None else both[1]), why),
        }

    @staticmethod
    def _outliers(where: str, bad: str | None, errors: list[str],
                  columns: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The outlier-dimension columns (:mod:`isotropy.probing.outlier_columns`), or all
        ``None`` for a layer left out (``bad``)."""
        if bad:
            errors.append(f"{where} outliers: {bad}")
            return dict.fromkeys(OUTLIER_KEYS)
        return columns()

    def _token_record(self, where: str, acc: TokenCloudStats, n_points: int, bad: str | None,
                      errors: list[str], sigma: torch.Tensor | None) -> dict[str, Any]:
        return {
            "n_points": n_points,
            **self._isoscores(where, acc.stats, bad or acc.reason(), errors, sigma),
            "avg_cosine": safe_measure(errors, f"{where} avg_cosine", acc.avg_cosine, bad),
            **self._ranks(where, acc.stats, bad or (None if acc.count else "no token"), errors),
            **self._outliers(where, bad, errors, lambda: outlier_columns(
                where, acc.stats, acc.outliers, acc.reason(), errors)),
        }

    def _cls_record(self, where: str, x: torch.Tensor, n: int, bad: str | None,
                    errors: list[str], sigma: torch.Tensor | None) -> dict[str, Any]:
        if bad:
            why: str | None = bad
        elif n < 2:
            why = f"{n} point(s): at least 2 are needed"
        else:
            why = constant_reason(x.amin(0), x.amax(0))
        st = CovarianceStats.from_batch(x) if why is None else None
        return {
            "n_points": n,
            **self._isoscores(where, st, why, errors, sigma),
            "avg_cosine": safe_measure(errors, f"{where} avg_cosine",
                                       lambda: float(avg_cosine_similarity(x)), bad),
            "twonn": safe_measure(errors, f"{where} twonn", lambda: twonn_of_distinct(x), why),
            **self._ranks(where, x, bad or (None if n else "no example"), errors),
            **self._outliers(where, bad, errors,
                             lambda: outlier_columns_of_rows(where, x, why, errors)),
        }

    def _union_record(self, tokens: list[TokenCloudStats], bad: list[str | None],
                      n_measured: int, errors: list[str]) -> dict[str, Any]:
        """The union of the transformer layers' token clouds (merged statistics)."""
        n_layers = len(tokens) - 1
        if n_layers < 1:
            errors.append("union token: no transformer layer (only the embedding output)")
            return {"n_points": 0, "isoscore": None, "isoscore_star": None, "avg_cosine": None,
                    "effective_rank": None, "rankme": None, **dict.fromkeys(OUTLIER_KEYS)}
        union = tokens[1]
        for acc in tokens[2:]:
            union = union.merge(acc)
        union_bad = next((why for why in bad[1:] if why), None)
        return self._token_record("union token", union, n_measured * n_layers, union_bad,
                                  errors, self._sigma("union"))

    def _last_record(self, last: TokenCloudStats, x: torch.Tensor, last_bad: str | None,
                     errors: list[str]) -> dict[str, Any]:
        """The last layer's pooled spectrum (raw, centred) and token mean and std."""
        n_layers = len(self._tokens) - 1
        kk = min(self.top_k, x.shape[0], last.stats.dim)
        spectrum: dict[str, Any] = {}
        for name, center in (("raw", False), ("centred", True)):
            why = last_bad
            if why is None and x.shape[0] == 0:
                why = "no example"
            if center and why is None:
                why = constant_reason(x.amin(0), x.amax(0))
            spectrum[name] = safe_measure(
                errors, f"layer {n_layers} cls spectrum_{name}",
                lambda c=center: anisotropy_spectrum(x, k=max(kk, 1), center=c).tolist(), why)
        why_mean = last_bad or (None if last.count >= 1 else "no token")
        mean = safe_measure(errors, f"layer {n_layers} token mean",
                            lambda: last.stats.mean.tolist(), why_mean)
        std = safe_measure(errors, f"layer {n_layers} token std",
                           lambda: last.stats.covariance(ddof=1).diagonal().sqrt().tolist(),
                           last_bad)
        return {"layer": n_layers, "cls_spectrum_raw": spectrum["raw"],
                "cls_spectrum_centred": spectrum["centred"], "token_mean": mean,
                "token_std": std}

    def _clouds(self, n_layers: int) -> dict[str, Any]:
        """What each cloud of the record holds, in words."""
        return {
            "layer_0": "embedding output",
            "token": "non-padding tokens, the first max_tokens of each layer",
            "union": f"token clouds of the transformer layers 1..{n_layers}",
            "cls": {"cls": "first non-padding token of every example",
                    "last": "last non-padding token of every example",
                    "mean": "mean of the non-padding tokens of every example",
                    }[self.pooling],
            "token_mean_std": f"token cloud of layer {n_layers} (ddof=1)",
        }

    def compute(self, *, progress: bool = False) -> dict[str, Any]:
        """The record of every batch so far (see the module doc for its contents); when
        synced, of every rank's batches (a collective). ``progress``: a bar of the layers
        measured where stderr is a terminal."""
        if not self._tokens:
            raise ValueError("EvalMeasures.compute() needs at least one update() first")
        tokens, cls, bad, (n_examples, n_tokens, n_measured) = self._state()
        errors: list[str] = []
        n_layers = len(tokens) - 1
        if self.layer_shrinkage is not None and \
                len(self.layer_shrinkage["token"]) != n_layers + 1:
            raise ValueError(f"the per-layer Sigma_S has {len(self.layer_shrinkage['token'])} "
                             f"hidden states, the measured model {n_layers + 1}")
        layers = []
        # every layer, then the union of layers 1..L and the last layer's view
        with progress_bar("measures", n_layers + 3, unit="cloud", show=progress) as advance:
            for i in range(n_layers + 1):
                layers.append(
                    {"layer": i,
                     "token": self._token_record(f"layer {i} token", tokens[i], n_measured,
                                                 bad[i], errors, self._sigma("token", i)),
                     "cls": self._cls_record(f"layer {i} cls", cls[i], n_examples, bad[i],
                                             errors, self._sigma("pooled", i))})
                advance(1)
            union = self._union_record(tokens, bad, n_measured, errors)
            advance(1)
            last = self._last_record(tokens[-1], cls[-1], bad[-1], errors)
            advance(1)
        return {
            "num_layers": n_layers,
            "hidden_size": tokens[0].stats.dim,
            "n_examples": n_examples,
            "n_tokens": n_tokens,
            "n_tokens_measured": n_measured,
            "max_tokens": self.max_tokens,
            "top_k": self.top_k,
            "zeta": self.zeta,
            "sigma_s": self.sigma_s,
            "pooling": self.pooling,
            "clouds": self._clouds(n_layers),
            "layers": layers,
            "union": union,
            "last": last,
            "errors": errors,
        }
