r"""A geometry monitor for any training, regularized or not: every ``every_n_steps`` optimizer
steps, the representations of a fixed probe set, measured and logged through the training
framework's own loggers.

What is logged (under ``<prefix>/``, default ``geometry/``), from one pass of the probe set in
eval mode without gradients (so dropout draws nothing and training is unchanged):

- ``isoscore_star_token_layer{i}`` and ``isoscore_star_cls_layer{i}``: IsoScore\* of each
  layer's token cloud and pooled ([CLS]) cloud,
  :math:`\iota((1-\zeta)\Sigma_X + \zeta\Sigma_S)`, :math:`\Sigma_S` of that layer estimated
  on ``shrinkage_batches`` at the same step; without them, or with ``zeta = 0``, nothing is
  shrunk and the same values are plain IsoScore, logged under ``isoscore_token_layer{i}``,
  ``isoscore_cls_layer{i}`` and ``isoscore_cls_last`` (an ``isoscore_star_*`` key always
  means a :math:`\Sigma_S` was used); ``isoscore_last``, ``isoscore_union``: plain IsoScore
  of the last layer's and the union's token clouds;
- ``twonn_cls_layer{i}``: the TwoNN intrinsic dimension of each layer's pooled cloud;
- ``effective_rank_{token,cls}_layer{i}`` and ``rankme_{token,cls}_layer{i}``: the effective
  rank and RankMe (:mod:`isotropy.measures.rank`) of each layer's clouds;
- ``outliers_variance_*``, ``outliers_activation_*``, ``massive_activations_*`` and
  ``rogue_share_1_*`` (``{token,cls}_layer{i}``): each layer's outlier-dimension counts under
  each published definition, and the share of its average cosine held by its top rogue
  dimension (:mod:`isotropy.measures.outliers`);
- ``cls_spectrum_{raw,centred}_{k}``: the top-``top_k`` anisotropy spectrum
  :math:`\sigma_k^2 / \sum_i \sigma_i^2` of the last layer's pooled cloud;
- ``cosine_last``: the average cosine similarity of the last layer's tokens.

The numbers are those of :class:`~isotropy.probing.eval_measures.EvalMeasures` (the
measurements of ``isotropy train``'s evaluations) on the probe set. :class:`GeometryMonitor`
is a ``transformers`` ``TrainerCallback``; :class:`LightningGeometryMonitor` its Lightning
twin (``lightning`` needed only for it).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from isotropy._validation import check_binary_mask, check_zeta
from isotropy.clouds import check_rows_have_tokens
from isotropy.models.forward import hidden_state_batches, unwrap_model
from isotropy.models.loading import longest_input
from isotropy.models.regularized import RegularizedModel
from isotropy.models.shrinkage import DEFAULT_N_TOKENS, _check_n_tokens, collect_layer_shrinkage
from isotropy.probing.eval_measures import DEFAULT_TOP_K, EvalMeasures
from isotropy.probing.eval_scalars import scalar_metrics

_OUTLIER_SCALARS = ("outliers_variance", "outliers_activation", "massive_activations",
                    "rogue_share_1")

__all__ = ["GeometryMonitor", "LightningGeometryMonitor", "check_batch", "measure_geometry",
           "model_inside"]


def model_inside(module: torch.nn.Module) -> torch.nn.Module:
    """What turns a batch of model inputs into ``hidden_states`` inside a Lightning module:
    its first :class:`~isotropy.models.regularized.RegularizedModel`, else its first Hugging
    Face ``PreTrainedModel``, else the module itself."""
    from transformers import PreTrainedModel

    for kind in (RegularizedModel, PreTrainedModel):
        found = next((m for m in module.modules() if isinstance(m, kind)), None)
        if found is not None:
            return found
    return module


def _inner_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model that turns a batch into hidden states (no DDP or regularizer wrapper)."""
    inner = unwrap_model(model)
    return inner.model if isinstance(inner, RegularizedModel) else inner


def _model_limits(inner: torch.nn.Module) -> tuple[int | None, int | None, str, int | None]:
    """(rows of the input embedding table, the most positions and why, token types) of
    ``inner``; ``None`` where the model does not say."""
    config = getattr(inner, "config", None)
    rows = None
    get = getattr(inner, "get_input_embeddings", None)
    try:
        table = get() if callable(get) else None
    except (NotImplementedError, AttributeError):
        table = None
    if isinstance(table, torch.nn.Embedding):
        rows = table.num_embeddings
    elif isinstance(getattr(config, "vocab_size", None), int):
        rows = config.vocab_size
    positions, why = longest_input(config) if config is not None else (None, "")
    types = getattr(config, "type_vocab_size", None)
    return rows, positions, why, types if isinstance(types, int) else None


def _ids_tensor(batch: Mapping[str, Any], key: str, where: str) -> torch.Tensor | None:
    """``batch[key]`` as a checked 2-D integer tensor (``None`` when absent)."""
    value = batch.get(key)
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{where}: {key} is a {type(value).__name__}, not a tensor: collate "
                         "the batch (e.g. tokenizer(texts, padding=True, return_tensors='pt'))")
    if value.ndim != 2:
        raise ValueError(f"{where}: {key} must be a 2-D (batch, seq) tensor, got shape "
                         f"{tuple(value.shape)} (un-collated examples?)")
    if key != "attention_mask" and (value.is_floating_point() or value.dtype == torch.bool):
        raise ValueError(f"{where}: {key} must hold integer ids, got dtype {value.dtype}")
    return value


def check_batch(inner: torch.nn.Module, batch: Any, where: str, pooling: str) -> None:
    """``ValueError`` (one line naming ``where``) unless ``batch`` is a dict of model inputs
    that ``inner`` takes: integer ``input_ids`` (and ``token_type_ids``) within its embedding
    tables, no more positions than its position table, a 0/1 ``attention_mask`` of the same
    shape with a real token in every row (the pooled row needs one)."""
    if not isinstance(batch, Mapping):
        raise ValueError(f"{where} is a {type(batch).__name__}, not a dict of model inputs "
                         "(input_ids, attention_mask, ...)")
    ids = _ids_tensor(batch, "input_ids", where)
    mask = _ids_tensor(batch, "attention_mask", where)
    types = _ids_tensor(batch, "token_type_ids", where)
    rows, positions, why, n_types = _model_limits(inner)
    if ids is not None and ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or (rows is not None and hi >= rows):
            bad = lo if lo < 0 else hi
            raise ValueError(f"{where}: input_ids hold the id {bad}, but the model's embedding "
                             f"table has {rows} rows (ids 0..{(rows or 1) - 1}): tokenised with "
                             "another model's tokenizer?")
        if positions is not None and ids.shape[1] > positions:
            raise ValueError(f"{where} has {ids.shape[1]} positions, but the model takes at most "
                             f"{positions} ({why}): truncate the probe texts")
    if types is not None and types.numel() and n_types is not None \
            and not 0 <= int(types.min()) <= int(types.max()) < n_types:
        raise ValueError(f"{where}: token_type_ids must lie in 0..{n_types - 1} (the model's "
                         "type_vocab_size)")
    if mask is not None:
        if ids is not None and tuple(mask.shape) != tuple(ids.shape):
            raise ValueError(f"{where}: attention_mask has shape {tuple(mask.shape)}, "
                             f"input_ids {tuple(ids.shape)}")
        try:
            check_binary_mask(mask.cpu(), name="attention_mask")
            check_rows_have_tokens(mask.cpu(), pooling)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None


def _checked(inner: torch.nn.Module, batches: Iterable[Any], what: str,
             pooling: str) -> Iterator[Any]:
    """The batches of ``batches``, each checked (:func:`check_batch`) before it is used."""
    if batches is None or isinstance(batches, (Mapping, str, bytes)) \
            or not isinstance(batches, Iterable):
        raise ValueError(f"the {what} set must be a sequence of batches (dicts of model "
                         f"inputs), got {type(batches).__name__}")
    return _each_checked(inner, batches, what, pooling)


def _each_checked(inner: torch.nn.Module, batches: Iterable[Any], what: str,
                  pooling: str) -> Iterator[Any]:
    for i, batch in enumerate(batches):
        check_batch(inner, batch, f"{what} batch {i}", pooling)
        yield batch


def measure_geometry(
    model: torch.nn.Module, probe: Iterable[Mapping[str, Any]], *,
    shrinkage_batches: Iterable[Mapping[str, Any]] | None = None, zeta: float = 0.2,
    n_tokens: int | None = None, max_tokens: int = 20_000, top_k: int = DEFAULT_TOP_K,
    pooling: str = "cls",
) -> dict[str, float]:
    r"""The monitor's scalars (module docstring) of ``model`` on the batches of ``probe``.

    ``model`` may be a :class:`~isotropy.models.regularized.RegularizedModel` (its wrapped
    model is run: no regularizer), a DDP wrapper, or any model returning ``hidden_states``.
    :math:`\Sigma_S` is estimated from ``n_tokens`` rows of the union of layers of
    ``shrinkage_batches`` (``None``: all of them). Each batch is checked against the model
    before it is run (:func:`check_batch`; one-line ``ValueError``).
    """
    zeta = check_zeta(zeta)
    inner = _inner_model(model)
    probe = _checked(inner, probe, "probe", pooling)
    shrinkage = None
    use_star = zeta > 0 and shrinkage_batches is not None
    if use_star:
        with warnings.catch_warnings():
            if n_tokens is None:  # every row of the batches: their running out is expected
                warnings.filterwarnings("ignore", message="the data ran out")
            shrinkage = collect_layer_shrinkage(  # every rank reads the same batches
                inner, _checked(inner, shrinkage_batches, "shrinkage", pooling),
                pooling=pooling, sync_dist=False, progress=False,  # inside training: quiet
                n_tokens=DEFAULT_N_TOKENS * 1000 if n_tokens is None else n_tokens)
    acc = EvalMeasures(max_tokens=max_tokens, top_k=top_k, zeta=zeta if use_star else 0.0,
                       shrinkage=shrinkage, pooling=pooling, sync=False)
    for hidden, mask in hidden_state_batches(inner, probe):
        acc.update(hidden, mask)
    record = acc.compute()
    out = scalar_metrics(record)
    for row in record.get("layers") or []:
        for cloud in ("token", "cls"):
            for name in ("effective_rank", "rankme", *_OUTLIER_SCALARS):
                value = row[cloud].get(name)
                if value is not None:
                    out[f"{name}_{cloud}_layer{row['layer']}"] = float(value)
    if not use_star:  # nothing shrunk: IsoScore* at zeta = 0 is IsoScore, named so
        out = {key.replace("isoscore_star_", "isoscore_"): value for key, value in out.items()
               if key not in ("isoscore_star_last", "isoscore_star_union")}
    last = record.get("last") or {}
    for name in ("raw", "centred"):
        for k, value in enumerate(last.get(f"cls_spectrum_{name}") or [], start=1):
            out[f"cls_spectrum_{name}_{k}"] = float(value)
    return out


class _Settings:
    """What both monitors share: the probe set, the interval and the measure's options."""

    def __init__(self, probe: Sequence[Mapping[str, Any]], every_n_steps: int, *,
                 shrinkage_batches: Sequence[Mapping[str, Any]] | None, zeta: float,
                 n_tokens: int | None, max_tokens: int, top_k: int, pooling: str,
                 prefix: str) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) \
                or every_n_steps < 1:
            raise ValueError(f"every_n_steps must be a positive integer, got {every_n_steps!r}")
        if isinstance(probe, Mapping):
            raise ValueError("the probe set must be a sequence of batches (dicts of model "
                             "inputs), got one dict: pass [batch]")
        for name, batches in (("probe", probe), ("shrinkage", shrinkage_batches)):
            if (batches is not None or name == "probe") and (
                    isinstance(batches, (Mapping, str, bytes))
                    or not isinstance(batches, Iterable)):
                raise ValueError(f"the {name} set must be a sequence of batches (dicts of "
                                 f"model inputs), got {type(batches).__name__}")
        probe = list(probe)
        if not probe:
            raise ValueError("the probe set has no batch")
        for i, batch in enumerate(probe):
            if not isinstance(batch, Mapping):
                raise ValueError(f"probe batch {i} is a {type(batch).__name__}, not a dict of "
                                 "model inputs (input_ids, attention_mask, ...)")
            for key in ("input_ids", "attention_mask", "token_type_ids"):
                _ids_tensor(batch, key, f"probe batch {i}")
        # the measure's options, checked now by the measure itself, not at the first step
        EvalMeasures(max_tokens=max_tokens, top_k=top_k, zeta=zeta, pooling=pooling, sync=False)
        self.probe = probe
        self.every_n_steps = every_n_steps
        self.shrinkage_batches = None if shrinkage_batches is None else list(shrinkage_batches)
        self.options = {"zeta": zeta,
                        "n_tokens": None if n_tokens is None else _check_n_tokens(n_tokens),
                        "max_tokens": max_tokens, "top_k": top_k, "pooling": pooling}
        self.prefix = prefix
        self.history: list[tuple[int, dict[str, float]]] = []

    def check(self, model: torch.nn.Module) -> None:
        """``ValueError`` unless every probe and shrinkage batch suits ``model``
        (:func:`check_batch`), so that a bad batch fails now, not at the first measurement."""
        inner = _inner_model(model)
        pooling = self.options["pooling"]
        for what, batches in (("probe", self.probe), ("shrinkage", self.shrinkage_batches)):
            for _ in _checked(inner, batches or [], what, pooling):
                pass

    def due(self, step: int) -> bool:
        return step > 0 and step % self.every_n_steps == 0

    def measure(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        values = measure_geometry(model, self.probe, shrinkage_batches=self.shrinkage_batches,
                                  **self.options)
        logs = {f"{self.prefix}/{k}": v for k, v in values.items()}
        self.history.append((step, logs))
        return logs


class GeometryMonitor(TrainerCallback):
    """``transformers`` callback: the probe set's geometry every ``every_n_steps`` optimizer
    steps (module docstring), logged by ``trainer.log`` (``log_history`` and every
    ``report_to`` logger); the console shows one line per measurement, not the values.
    Attach it with :meth:`attach` (it needs the trainer to log)::

        GeometryMonitor(probe_batches, every_n_steps=500).attach(trainer)

    Args:
        probe: batches (dicts of model inputs) of a fixed probe set, read at every measurement.
        every_n_steps: optimizer steps between measurements.
        shrinkage_batches: batches whose token rows estimate each layer's :math:`\\Sigma_S`
            at every measurement (e.g. a slice of the training data); ``None``: plain IsoScore.
        zeta, n_tokens, max_tokens, top_k, pooling: as in
            :func:`measure_geometry`.
        prefix: the logged names' prefix.

    ``history`` keeps ``(step, logs)`` of every measurement.
    """

    def __init__(self, probe: Sequence[Mapping[str, Any]], every_n_steps: int = 500, *,
                 shrinkage_batches: Sequence[Mapping[str, Any]] | None = None,
                 zeta: float = 0.2, n_tokens: int | None = None,
                 max_tokens: int = 20_000, top_k: int = DEFAULT_TOP_K, pooling: str = "cls",
                 prefix: str = "geometry") -> None:
        self.settings = _Settings(probe, every_n_steps, shrinkage_batches=shrinkage_batches,
                                  zeta=zeta, n_tokens=n_tokens, max_tokens=max_tokens,
                                  top_k=top_k, pooling=pooling, prefix=prefix)
        self.trainer: Any = None

    @property
    def history(self) -> list[tuple[int, dict[str, float]]]:
        return self.settings.history

    def attach(self, trainer: Any) -> GeometryMonitor:
        """Add this callback to ``trainer`` and log through it; returns ``self``. The probe
        (and shrinkage) batches are checked against ``trainer.model`` first (one-line
        ``ValueError``: ids outside its vocabulary, more positions than it takes, ...)."""
        model = getattr(trainer, "model", None)
        if model is not None:
            self.settings.check(model)
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        self._check_attached()
        return control

    def _check_attached(self) -> None:
        if self.trainer is None:
            raise ValueError("GeometryMonitor logs through its trainer: add it with "
                             "GeometryMonitor(...).attach(trainer)")

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: D102
        if not self.settings.due(state.global_step):
            return control
        self._check_attached()
        if model is None:
            raise ValueError("GeometryMonitor needs the Trainer's model (kwargs['model'])")
        logs = self.settings.measure(model, state.global_step)
        # Trainer.log hands the logs to the callbacks, which clears should_log: the training
        # log due at this step must still be written
        should_log = control.should_log
        if state.is_world_process_zero:
            _log_quietly(self.trainer, dict(logs), state.global_step, self.settings.prefix)
        control.should_log = should_log
        self.trainer.control.should_log = should_log
        return control


def _log_quietly(trainer: Any, logs: dict[str, float], step: int, prefix: str) -> None:
    """``trainer.log(logs)`` (``log_history`` and every ``report_to`` logger) without the
    console's copy of the whole dict (over a hundred values): the console callbacks are left
    out of that call, and they print one line instead."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    handler = trainer.callback_handler
    callbacks = list(handler.callbacks)
    console = [c for c in callbacks if isinstance(c, (PrinterCallback, ProgressCallback))]
    handler.callbacks = [c for c in callbacks if c not in console]
    try:
        trainer.log(logs)
    finally:
        handler.callbacks = callbacks
    if not console:
        return
    last = logs.get(f"{prefix}/isoscore_last")
    line = (f"{prefix}: {len(logs)} values logged at step {step}"
            + ("" if last is None else f" ({prefix}/isoscore_last {last:.4f})"))
    bar = getattr(console[0], "training_bar", None)
    if bar is not None:
        bar.write(line)  # above the progress bar, as the Trainer writes its logs
    else:
        print(line)


def _lightning_callback_base() -> type:
    try:
        import lightning
    except ImportError:  # the Lightning twin is defined only where lightning is installed
        return object
    return lightning.pytorch.Callback


class LightningGeometryMonitor(_lightning_callback_base()):  # type: ignore[misc]
    """Lightning callback: the probe set's geometry every ``every_n_steps`` optimizer steps,
    logged by every logger of the trainer (``logger.log_metrics``). Arguments as
    :class:`GeometryMonitor`; ``model``: what turns a batch into ``hidden_states`` (default:
    :func:`model_inside` the module)."""

    def __init__(self, probe: Sequence[Mapping[str, Any]], every_n_steps: int = 500, *,
                 model: torch.nn.Module | None = None,
                 shrinkage_batches: Sequence[Mapping[str, Any]] | None = None,
                 zeta: float = 0.2, n_tokens: int | None = None,
                 max_tokens: int = 20_000, top_k: int = DEFAULT_TOP_K, pooling: str = "cls",
                 prefix: str = "geometry") -> None:
        if _lightning_callback_base() is object:
            raise ImportError("LightningGeometryMonitor needs lightning: pip install lightning")
        super().__init__()
        self.settings = _Settings(probe, every_n_steps, shrinkage_batches=shrinkage_batches,
                                  zeta=zeta, n_tokens=n_tokens, max_tokens=max_tokens,
                                  top_k=top_k, pooling=pooling, prefix=prefix)
        self.model = model
        self._last_step = -1

    @property
    def history(self) -> list[tuple[int, dict[str, float]]]:
        return self.settings.history

    def on_fit_start(self, trainer, pl_module):  # noqa: D102
        # the probe batches against the model, before the first step
        self.settings.check(self.model if self.model is not None else model_inside(pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # noqa: D102
        step = trainer.global_step
        if step == self._last_step or not self.settings.due(step):
            return  # (under gradient accumulation several batches end at one step)
        self._last_step = step
        model = self.model if self.model is not None else model_inside(pl_module)
        logs = self.settings.measure(model, step)
        for logger in trainer.loggers:
            logger.log_metrics(logs, step=step)
