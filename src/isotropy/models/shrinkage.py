r"""The shrinkage covariance :math:`\Sigma_S` of I-STAR from a partial forward pass.

Before training and again before every epoch, the I-STAR paper runs the model over the
training data until it has 250,000 points of the union :math:`\tilde X` of the chosen layers'
token states, and uses their covariance as :math:`\Sigma_S`.

**Counting.** ``n_tokens`` counts *rows of the union* :math:`\tilde X` (points, as in the
paper and the authors' code), so with :math:`L` chosen layers a token position contributes
:math:`L` rows. Rows are taken in a fixed order: batches as the dataloader yields them,
non-padding tokens in reading order (batch row, then position), and for each token its
chosen layers in the order of ``layers``. Exactly the first ``n_tokens`` rows of that sequence
are used (the last batch is cut inside a token if need be); padding never counts.

Under ``torch.distributed`` every rank reads its own shard and contributes
``n_tokens // world_size`` rows (the first ``n_tokens % world_size`` ranks one more), and the
statistics are all-reduced, so the union has exactly ``n_tokens`` rows. Statistics are
streamed (:class:`~isotropy.measures.covariance.CovarianceStats`, fp64 merges): the rows are never
stored. If the data runs out first, a warning says how many rows were used. A batch without
``attention_mask`` counts every position as a token.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState
from transformers.training_args import TrainingArguments

from isotropy.clouds import (
    POOLINGS,
    Layers,
    layer_token_clouds,
    pooled_rows,
    token_mask,
)
from isotropy.distributed import all_reduce_sum, is_distributed
from isotropy.losses.istar import IStarLoss, check_layers
from isotropy.measures.covariance import CovarianceStats
from isotropy.models.forward import hidden_state_batches, model_device, unwrap_model
from isotropy.progress import progress_bar

__all__ = [
    "collect_covariance",
    "collect_layer_shrinkage",
    "LayerShrinkage",
    "estimate_shrinkage",
    "istar_losses",
    "refresh_all",
    "refresh_shrinkage",
    "ShrinkageRefreshCallback",
    "DEFAULT_N_TOKENS",
]

DEFAULT_N_TOKENS = 250_000


def _check_n_tokens(n_tokens: int) -> int:
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int):
        raise TypeError(f"n_tokens must be an integer, got {n_tokens!r}")
    if n_tokens < 2:
        raise ValueError(f"n_tokens must be >= 2 (a covariance needs 2 rows), got {n_tokens}")
    return n_tokens


def _rank_quota(n_tokens: int, group: object | None, sync: bool) -> int:
    if not sync:
        return n_tokens
    import torch.distributed as dist

    ws, rank = dist.get_world_size(group), dist.get_rank(group)
    return n_tokens // ws + (1 if rank < n_tokens % ws else 0)


def _batch_rows(
    hidden_states: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor | None,
    layers: Layers,
    budget: int,
) -> torch.Tensor:
    """At most ``budget`` rows of the batch's union, in token-major order (see module doc).

    The real tokens are found once for all layers (:func:`~isotropy.clouds.layer_token_clouds`:
    one index, on an accelerator one host synchronisation per batch instead of one per layer).
    """
    clouds = layer_token_clouds(hidden_states, attention_mask, layers, check_finite=False)
    n_tok, n_layers = clouds[0].shape[0], len(clouds)
    if n_tok * n_layers <= budget:
        return torch.cat(clouds, dim=0)
    q, r = divmod(budget, n_layers)
    return torch.cat([c[: q + (1 if j < r else 0)] for j, c in enumerate(clouds)], dim=0)


def _every_rank_has_rows(has_rows: bool, sync: bool, group: object | None) -> bool:
    """Whether this rank (under ``sync``: every rank, a collective) read at least one row, so
    that all ranks raise together instead of some waiting in an all-reduce."""
    if not sync:
        return has_rows
    import torch.distributed as dist

    flag = torch.tensor([0.0 if has_rows else 1.0])
    if dist.get_backend(group) == "nccl":
        flag = flag.cuda()
    return float(all_reduce_sum(flag, group)) == 0.0


def _no_rows_error(sync: bool) -> Exception:
    if sync:
        return RuntimeError(
            "a rank's dataloader yielded no token: every rank needs at least one "
            "non-padding token to estimate Sigma_S"
        )
    return ValueError("the dataloader yielded no non-padding token: cannot estimate Sigma_S")


def _check_count(count: int, n_tokens: int) -> None:
    if count < n_tokens:
        warnings.warn(
            f"the data ran out after {count} of the requested {n_tokens} token rows: "
            f"Sigma_S is estimated from {count} rows",
            UserWarning,
            stacklevel=3,
        )
    if count < 2:
        raise ValueError(f"only {count} token row(s) found: Sigma_S needs at least 2")


def _rng_untouched(model: torch.nn.Module) -> AbstractContextManager[Any]:
    """A context that puts torch's global random state (CPU, and the model's CUDA device) back
    as it was: iterating a ``DataLoader`` draws its seed from that state even with
    ``shuffle=False``, so a Sigma_S pass would otherwise change the training that follows (its
    dropout) and break the exact resume of a run."""
    device = model_device(unwrap_model(model))
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    return torch.random.fork_rng(devices=cuda)


def collect_covariance(
    model: torch.nn.Module,
    dataloader: Iterable[Mapping[str, Any]],
    *,
    layers: Layers = "all",
    n_tokens: int = DEFAULT_N_TOKENS,
    sync_dist: bool = True,
    process_group: object | None = None,
    include_padding: bool = False,
    progress: bool = True,
) -> CovarianceStats:
    r"""Covariance statistics of the first ``n_tokens`` rows of :math:`\tilde X` (module doc).

    ``dataloader`` yields dicts of model inputs (``input_ids``, ``attention_mask``, ...);
    the model is called as ``model(**batch, output_hidden_states=True)`` in eval mode under
    ``torch.no_grad`` and put back into its previous mode afterwards. Returns the (global,
    under ``torch.distributed`` with ``sync_dist``) statistics; ``.count`` is the number of
    rows used. ``include_padding``: every position counts, padding included (the I-STAR
    authors' code). ``progress``: a bar of the rows read out of ``n_tokens`` where stderr is a
    terminal (:func:`isotropy.progress.progress_bar`).
    """
    n_tokens = _check_n_tokens(n_tokens)
    layers = check_layers(layers)
    sync = bool(sync_dist) and is_distributed(process_group)
    quota = _rank_quota(n_tokens, process_group, sync)
    stats: CovarianceStats | None = None
    with _rng_untouched(model), progress_bar("Sigma_S", quota, show=progress) as advance:
        for hs, attention_mask in hidden_state_batches(model, dataloader):
            count = 0 if stats is None else stats.count
            rows = _batch_rows(hs, None if include_padding else attention_mask, layers,
                               quota - count)
            if rows.shape[0]:
                if stats is None:
                    stats = CovarianceStats.empty(rows.shape[1], rows.device)
                stats.update(rows)
                advance(rows.shape[0])
            if stats is not None and stats.count >= quota:
                break
    if not _every_rank_has_rows(stats is not None, sync, process_group):
        raise _no_rows_error(sync)
    if sync:
        stats = stats.all_reduce(process_group)
    _check_count(stats.count, n_tokens)
    return stats


@dataclass
class LayerShrinkage:
    r""":math:`\Sigma_S` of every hidden state's clouds, for per-layer IsoScore*.

    ``token[i]`` and ``pooled[i]`` hold the covariance statistics of hidden state ``i``
    (0 = embedding output, ``1..L`` = transformer layers) of the training data: its token rows
    and its pooled rows (one per example, ``pooling`` as in
    :func:`~isotropy.clouds.pooled_rows`). ``union`` merges the token statistics
    of layers ``1..L``: the :math:`\tilde X` of I-STAR, the same rows :func:`collect_covariance`
    uses with ``layers="all"``. :func:`collect_layer_shrinkage` says which rows are counted.
    """

    token: list[CovarianceStats]
    pooled: list[CovarianceStats]
    pooling: str

    @property
    def num_layers(self) -> int:
        """``L``: the transformer layers (hidden states ``1..L``)."""
        return len(self.token) - 1

    @property
    def union(self) -> CovarianceStats:
        """Statistics of the union of the token clouds of layers ``1..L``."""
        out = self.token[1]
        for st in self.token[2:]:
            out = out.merge(st)
        return out

    def covariances(self) -> dict[str, Any]:
        """``{"token": [...], "pooled": [...], "union": C}``: float64 covariances (``ddof=1``);
        a cloud with fewer than 2 rows has ``None``."""

        def cov(st: CovarianceStats) -> torch.Tensor | None:
            return st.covariance(ddof=1) if st.count >= 2 else None

        return {"token": [cov(s) for s in self.token], "pooled": [cov(s) for s in self.pooled],
                "union": cov(self.union)}

    def describe(self) -> dict[str, Any]:
        """Row counts of every cloud (for a run's records)."""
        return {"sigma_s": "per layer", "pooling": self.pooling,
                "token_rows": [s.count for s in self.token],
                "pooled_rows": [s.count for s in self.pooled],
                "union_rows": sum(s.count for s in self.token[1:])}


def _layer_row_counts(n_tok: int, n_layers: int, budget: int) -> list[int]:
    """Token rows of each transformer layer ``1..L`` within a budget of union rows: all
    ``n_tok`` tokens if they fit, else the first ``q`` (+1 for the first ``r`` layers),
    ``q, r = divmod(budget, L)`` -- the rows :func:`_batch_rows` takes.

    >>> _layer_row_counts(5, 3, 100), _layer_row_counts(5, 3, 7)
    ([5, 5, 5], [3, 2, 2])
    """
    if n_tok * n_layers <= budget:
        return [n_tok] * n_layers
    q, r = divmod(budget, n_layers)
    return [q + (1 if j < r else 0) for j in range(n_layers)]


def collect_layer_shrinkage(
    model: torch.nn.Module,
    dataloader: Iterable[Mapping[str, Any]],
    *,
    n_tokens: int = DEFAULT_N_TOKENS,
    pooling: str = "cls",
    sync_dist: bool = True,
    process_group: object | None = None,
    progress: bool = True,
) -> LayerShrinkage:
    r"""Per-layer :math:`\Sigma_S` statistics (:class:`LayerShrinkage`) from one pass.

    **Budget.** ``n_tokens`` counts rows of the union :math:`\tilde X` of layers ``1..L``,
    exactly as :func:`collect_covariance` does: the pass reads batches until the union has
    ``n_tokens`` rows (under ``torch.distributed`` each rank its share, then all-reduced).
    Each transformer layer's token :math:`\Sigma_S` is estimated from *its* rows among them:
    the same token positions in every layer, about ``n_tokens / L`` rows per layer (the last
    batch is cut as in the module doc, so the first ``n_tokens mod L`` layers may have one
    more); the embedding output (layer 0, not in the union) uses the positions of layer 1.
    The pooled :math:`\Sigma_S` of every layer is estimated from one pooled row of every
    example of every batch read. The union's statistics are the merge of layers ``1..L``.
    ``progress``: a bar of the union's rows out of ``n_tokens`` where stderr is a terminal.
    """
    n_tokens = _check_n_tokens(n_tokens)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    sync = bool(sync_dist) and is_distributed(process_group)
    quota = _rank_quota(n_tokens, process_group, sync)
    token: list[CovarianceStats] = []
    pooled: list[CovarianceStats] = []
    used = 0
    with _rng_untouched(model), progress_bar("Sigma_S", quota, show=progress) as advance:
        for hs, attention_mask in hidden_state_batches(model, dataloader):
            if len(hs) < 2:
                raise ValueError("the model has no transformer layer (only the embedding output)")
            mask = token_mask(hs[0], attention_mask)
            if not token:
                token = [CovarianceStats.empty(h.shape[2], h.device) for h in hs]
                pooled = [CovarianceStats.empty(h.shape[2], h.device) for h in hs]
            elif len(hs) != len(token):
                raise ValueError(f"got {len(hs)} hidden states, earlier batches had {len(token)}")
            index = torch.nonzero(mask.reshape(-1)).squeeze(1)  # once for every layer
            counts = _layer_row_counts(index.numel(), len(hs) - 1, quota - used)
            for i, h in enumerate(hs):
                rows = h.reshape(-1, h.shape[-1]).index_select(0, index)[: counts[max(i, 1) - 1]]
                if rows.shape[0]:
                    token[i].update(rows)
                pooled[i].update(pooled_rows(h, mask, pooling))
            used += sum(counts)
            advance(sum(counts))
            if used >= quota:
                break
    if not _every_rank_has_rows(bool(token) and used > 0, sync, process_group):
        raise _no_rows_error(sync)
    if sync:
        token = [st.all_reduce(process_group) for st in token]
        pooled = [st.all_reduce(process_group) for st in pooled]
    out = LayerShrinkage(token, pooled, pooling)
    _check_count(sum(st.count for st in token[1:]), n_tokens)
    return out


def estimate_shrinkage(
    model: torch.nn.Module,
    dataloader: Iterable[Mapping[str, Any]],
    *,
    layers: Layers = "all",
    n_tokens: int = DEFAULT_N_TOKENS,
    sync_dist: bool = True,
    process_group: object | None = None,
    include_padding: bool = False,
    progress: bool = True,
) -> torch.Tensor:
    r""":math:`\Sigma_S`: the sample covariance (``ddof=1``, float64) of the first ``n_tokens``
    rows of :math:`\tilde X` (see :func:`collect_covariance` and the module doc)."""
    stats = collect_covariance(
        model,
        dataloader,
        layers=layers,
        n_tokens=n_tokens,
        sync_dist=sync_dist,
        process_group=process_group,
        include_padding=include_padding,
        progress=progress,
    )
    return stats.covariance(ddof=1)


def refresh_shrinkage(
    model: torch.nn.Module,
    dataloader: Iterable[Mapping[str, Any]],
    loss: IStarLoss,
    n_tokens: int = DEFAULT_N_TOKENS,
    *,
    progress: bool = True,
) -> torch.Tensor:
    r"""Re-estimate :math:`\Sigma_S` over ``loss.layers`` and set it on ``loss``; returns it.

    Call before every epoch (the paper's schedule). Uses ``loss.sync_dist``,
    ``loss.process_group`` and ``loss.include_padding``; ``progress``: a bar of the rows read
    where stderr is a terminal.

    >>> from types import SimpleNamespace
    >>> class Toy(torch.nn.Module):  # a stand-in encoder: one "layer" = the embeddings x 2
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.emb = torch.nn.Embedding(10, 3)
    ...     def forward(self, input_ids, attention_mask=None, output_hidden_states=False):
    ...         e = self.emb(input_ids)
    ...         return SimpleNamespace(hidden_states=(e, 2 * e))
    >>> batches = [{"input_ids": torch.tensor([[1, 2, 3, 0]]),
    ...             "attention_mask": torch.tensor([[1, 1, 1, 0]])}] * 4
    >>> loss = IStarLoss(tuning=-1.0)
    >>> cov = refresh_shrinkage(Toy(), batches, loss, n_tokens=10)
    >>> cov.shape, loss.shrinkage.shape
    (torch.Size([3, 3]), torch.Size([3, 3]))
    """
    if not isinstance(loss, IStarLoss):
        raise TypeError(f"loss must be an IStarLoss, got {type(loss).__name__}")
    cov = estimate_shrinkage(
        model,
        dataloader,
        layers=loss.layers,
        n_tokens=n_tokens,
        sync_dist=loss.sync_dist,
        process_group=loss.process_group,
        include_padding=loss.include_padding,
        progress=progress,
    )
    loss.set_shrinkage(cov)
    return cov


SAVED_SHRINKAGE = "shrinkage_refresh.pt"  # ShrinkageRefreshCallback's file in a checkpoint


class ShrinkageRefreshCallback(TrainerCallback):
    r"""Hugging Face ``Trainer`` callback: :func:`refresh_shrinkage` at the start of every epoch.

    Args:
        losses: the :class:`IStarLoss` module(s) to refresh; default: every ``IStarLoss`` found
            inside the Trainer's model (e.g. in a
            :class:`~isotropy.models.regularized.RegularizedModel`).
        dataloader: the data to read; default: the Trainer's training dataloader (the pass
            leaves torch's global random state as it was; a loader's own ``generator`` is
            advanced by it).
        n_tokens: rows of :math:`\tilde X` per refresh (paper: 250,000).

    Every checkpoint the ``Trainer`` writes under its ``output_dir`` gets the current
    :math:`\Sigma_S` and the epoch it was estimated for (:data:`SAVED_SHRINKAGE`), so that
    ``trainer.train(resume_from_checkpoint=...)`` mid-epoch reuses that epoch's
    :math:`\Sigma_S` instead of estimating it from the mid-epoch model, as an uninterrupted run
    would. A resumed run whose checkpoint lacks it re-estimates it, with a warning.
    """

    def __init__(
        self,
        losses: IStarLoss | Iterable[IStarLoss] | None = None,
        dataloader: Iterable[Mapping[str, Any]] | None = None,
        n_tokens: int = DEFAULT_N_TOKENS,
    ) -> None:
        self.losses: list[IStarLoss] | None = (
            None if losses is None else istar_losses(torch.nn.Module(), losses, ""))
        self.dataloader = dataloader
        self.n_tokens = _check_n_tokens(n_tokens)
        self.last_shrinkage: dict[int, torch.Tensor] = {}
        self.shrinkage_epoch: int | None = None  # the epoch last_shrinkage was estimated for
        self._saved: dict[str, Any] | None = None  # a resumed checkpoint's SAVED_SHRINKAGE
        self._missing: str | None = None  # where it was looked for in vain, on a resume
        self.resume_from: str | None = None  # the checkpoint the Trainer resumes, if known

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> TrainerControl:
        """On a resumed run, read the checkpoint's saved Sigma_S (class doc): the one of the
        checkpoint the ``Trainer`` resumed where it says so (``resume_from``, set by
        :class:`~isotropy.training.regularizer_logs.RegularizerLogMixin`), else the one of
        ``output_dir/checkpoint-<step>``; taken only if it was saved with the weights the model
        now holds, and, under several processes, only if every rank has it. First, a
        ``Trainer`` that would drop the regularizers' terms is refused
        (:func:`~isotropy.models.trainer_guard.check_trainer`), before the first refresh."""
        _refuse_a_trainer_dropping_terms(kwargs.get("model"))
        self._saved = None
        if state.global_step > 0:
            folder = Path(self.resume_from) if self.resume_from is not None else \
                Path(args.output_dir) / f"checkpoint-{state.global_step}"
            path = folder / SAVED_SHRINKAGE
            saved = torch.load(path, map_location="cpu", weights_only=True) \
                if path.is_file() else None
            model = kwargs.get("model")
            if saved is not None and model is not None and \
                    saved.get("fingerprint") != _fingerprint(model):
                saved = None  # another run's file, or weights other than the checkpoint's
            ok = torch.tensor([0.0 if saved is None else 1.0])
            if is_distributed():
                ok = all_reduce_sum(ok)
                ok = ok / torch.distributed.get_world_size()
            self._saved = saved if float(ok[0]) == 1.0 else None
            self._missing = str(path) if self._saved is None else None
        self.resume_from = None
        return control

    def on_epoch_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> TrainerControl:
        """Refresh Sigma_S of every target loss from ``kwargs['model']`` and the data (on a
        run resumed mid-epoch: set the checkpoint's Sigma_S of that epoch instead)."""
        model = kwargs.get("model")
        if model is None:
            raise ValueError("ShrinkageRefreshCallback needs the Trainer's model (kwargs['model'])")
        losses = istar_losses(model, self.losses, "ShrinkageRefreshCallback")
        epoch = epoch_index(state)
        saved, self._saved = self._saved, None
        missing, self._missing = self._missing, None
        if missing is not None and state is not None and state.epoch and \
                state.epoch - epoch > 1e-9:  # resumed mid-epoch without the epoch's Sigma_S
            warnings.warn(
                f"resumed at step {state.global_step} without a Sigma_S saved with these "
                f"weights ({missing}): Sigma_S of the current epoch is estimated from the "
                "resumed model, not from the model at the epoch's start as in an uninterrupted "
                "run", stacklevel=2)
        if saved is not None and saved["epoch"] == epoch:
            set_saved_shrinkage(losses, saved["shrinkage"], model_device(model))
            self.last_shrinkage = dict(enumerate(saved["shrinkage"]))
            self.shrinkage_epoch = epoch
            return control
        data = self.dataloader if self.dataloader is not None else kwargs.get("train_dataloader")
        if data is None:
            raise ValueError("ShrinkageRefreshCallback has no dataloader: pass dataloader=")
        # a bar of the rows read on the main process, as the Trainer shows its own
        progress = (state is None or state.is_world_process_zero) and \
            not getattr(args, "disable_tqdm", False)
        self.last_shrinkage = dict(enumerate(refresh_all(model, data, losses, self.n_tokens,
                                                         progress=progress)))
        self.shrinkage_epoch = epoch
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> TrainerControl:
        """Write the current Sigma_S and its epoch into the checkpoint just saved (written
        aside and renamed into place; by the main process only)."""
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        model = kwargs.get("model")
        if args.should_save and self.last_shrinkage and folder.is_dir() and model is not None:
            tmp = folder / f".{SAVED_SHRINKAGE}.tmp"
            torch.save({"epoch": self.shrinkage_epoch, "fingerprint": _fingerprint(model),
                        "shrinkage": [self.last_shrinkage[i].detach().cpu()
                                      for i in sorted(self.last_shrinkage)]}, tmp)
            os.replace(tmp, folder / SAVED_SHRINKAGE)
        return control


def epoch_index(state: TrainerState | None) -> int:
    """The index of the epoch a ``Trainer``'s state is in (its ``epoch`` is fractional within
    an epoch and a whole number at its end)."""
    return int(math.floor(state.epoch + 1e-9)) if state is not None and state.epoch else 0


def set_saved_shrinkage(losses: Sequence[IStarLoss], covs: Sequence[torch.Tensor],
                        device: torch.device) -> None:
    """Set a checkpoint's Sigma_S of each loss, in order (``ValueError`` if the counts
    differ)."""
    if len(covs) != len(losses):
        raise ValueError(f"the resumed checkpoint holds Sigma_S of {len(covs)} I-STAR loss(es); "
                         f"the model has {len(losses)}")
    for loss, cov in zip(losses, covs, strict=True):
        loss.set_shrinkage(cov.to(device))


def _fingerprint(model: torch.nn.Module) -> float:
    """The sum of the model's parameters in float64: what ties a saved Sigma_S to the weights
    of the checkpoint it was saved with."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum().cpu() for p in model.parameters()))


def istar_losses(model: torch.nn.Module, losses: Iterable[IStarLoss] | IStarLoss | None,
                 who: str) -> list[IStarLoss]:
    """``losses`` checked, or every :class:`IStarLoss` inside ``model`` (``who`` names the
    caller in the error when there is none)."""
    if losses is None:
        found = [m for m in model.modules() if isinstance(m, IStarLoss)]
        if not found:
            raise ValueError(f"{who} found no IStarLoss inside the model; pass losses=")
        return found
    items = [losses] if isinstance(losses, IStarLoss) else list(losses)
    for item in items:
        if not isinstance(item, IStarLoss):
            raise TypeError(f"losses must be IStarLoss modules, got {type(item).__name__}")
    return items


def _refuse_a_trainer_dropping_terms(model: Any) -> None:
    """:func:`~isotropy.models.trainer_guard.check_starting_trainer` where ``model`` holds a
    ``RegularizedModel``."""
    from isotropy.models.regularized import find_regularized
    from isotropy.models.trainer_guard import check_starting_trainer

    if find_regularized(model) is not None:
        check_starting_trainer()


def refresh_all(model: torch.nn.Module, data: Iterable[Mapping[str, Any]],
                losses: Sequence[IStarLoss], n_tokens: int, *,
                progress: bool = True) -> list[torch.Tensor]:
    r""":func:`refresh_shrinkage` of every loss, one pass per distinct (layers, padding,
    process group) setting; returns each loss's :math:`\Sigma_S` in order."""
    done: dict[tuple[str, bool, int, bool], torch.Tensor] = {}
    out = []
    for loss in losses:
        key = (repr(loss.layers), loss.sync_dist, id(loss.process_group), loss.include_padding)
        if key in done:
            loss.set_shrinkage(done[key])
        else:
            done[key] = refresh_shrinkage(model, data, loss, n_tokens=n_tokens,
                                          progress=progress)
        out.append(done[key])
    return out
