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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from isotropy._validation import check_zeta
from isotropy.models.forward import hidden_state_batches, unwrap_model
from isotropy.models.regularized import RegularizedModel
from isotropy.models.shrinkage import DEFAULT_N_TOKENS, _check_n_tokens, collect_layer_shrinkage
from isotropy.probing.eval_measures import DEFAULT_TOP_K, EvalMeasures
from isotropy.probing.eval_scalars import scalar_metrics

_OUTLIER_SCALARS = ("outliers_variance", "outliers_activation", "massive_activations",
                    "rogue_share_1")

__all__ = ["GeometryMonitor", "LightningGeometryMonitor", "measure_geometry", "model_inside"]


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
    ``shrinkage_batches`` (``None``: all of them).
    """
    zeta = check_zeta(zeta)
    inner = unwrap_model(model)
    if isinstance(inner, RegularizedModel):
        inner = inner.model
    shrinkage = None
    use_star = zeta > 0 and shrinkage_batches is not None
    if use_star:
        with warnings.catch_warnings():
            if n_tokens is None:  # every row of the batches: their running out is expected
                warnings.filterwarnings("ignore", message="the data ran out")
            shrinkage = collect_layer_shrinkage(  # every rank reads the same batches
                inner, shrinkage_batches, pooling=pooling, sync_dist=False,
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
        probe = list(probe)
        if not probe:
            raise ValueError("the probe set has no batch")
        for i, batch in enumerate(probe):
            if not isinstance(batch, Mapping):
                raise ValueError(f"probe batch {i} is a {type(batch).__name__}, not a dict of "
                                 "model inputs (input_ids, attention_mask, ...)")
            ids = batch.get("input_ids")
            if ids is not None and getattr(ids, "ndim", None) != 2:
                raise ValueError(f"probe batch {i}: input_ids must be a 2-D (batch, seq) "
                                 f"tensor, got {type(ids).__name__} of shape "
                                 f"{tuple(getattr(ids, 'shape', ()))} (un-collated examples?)")
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
    ``report_to`` logger). Attach it with :meth:`attach` (it needs the trainer to log)::

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
        """Add this callback to ``trainer`` and log through it; returns ``self``."""
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
            self.trainer.log(dict(logs))
        control.should_log = should_log
        self.trainer.control.should_log = should_log
        return control


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

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # noqa: D102
        step = trainer.global_step
        if step == self._last_step or not self.settings.due(step):
            return  # (under gradient accumulation several batches end at one step)
        self._last_step = step
        model = self.model if self.model is not None else model_inside(pl_module)
        logs = self.settings.measure(model, step)
        for logger in trainer.loggers:
            logger.log_metrics(logs, step=step)
