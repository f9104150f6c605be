"""The regularizers of ``isotropy train`` (:func:`build_regularizers`) and
:class:`IsotropyTrainer`, a ``transformers.Trainer`` that adds the task loss, every
regularizer's logs and the [CLS] spectrum of each optimizer step's cloud to the logs, runs
the exact persistent-entropy cycle under gradient accumulation, and saves crash-safe
checkpoints."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer
from transformers.trainer_utils import IntervalStrategy, has_length

from isotropy.clouds import parse_layers
from isotropy.distributed import gather_rows
from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.models.regularized import (
    RegularizedModel,
)
from isotropy.models.shrinkage import (
    DEFAULT_N_TOKENS,
    LayerShrinkage,
    collect_layer_shrinkage,
)
from isotropy.probing.eval_measures import DEFAULT_TOP_K, EvalMeasures, pooled_rows
from isotropy.probing.eval_scalars import cls_spectrum_logs, scalar_metrics
from isotropy.progress import stage
from isotropy.rundir import (
    RunDirectory,
    checkpoint_files,
)
from isotropy.runtime import fault_point
from isotropy.training._compat import rotate_checkpoints
from isotropy.training.callbacks import (
    IsotropyStateCallback,
    _point_tensorboard,
    _sync_folder,
    _write_checkpoint_state,
)
from isotropy.training.config import IsotropyArguments
from isotropy.training.exact_cycle import ExactCycleMixin
from isotropy.training.resumed_loss import ResumedLossMixin

__all__ = [
    "IsotropyTrainer",
    "build_regularizers",
]


def build_regularizers(
    iso_args: IsotropyArguments, gradient_accumulation_steps: int
) -> dict[str, torch.nn.Module]:
    """name -> regularizer module for every active ``--regularizer``."""
    regs: dict[str, torch.nn.Module] = {}
    for name in iso_args.regularizers:
        if name == "istar":
            regs[name] = IStarLoss(tuning=iso_args.tuning, zeta=iso_args.zeta,
                                   layers=parse_layers(iso_args.istar_layers),
                                   include_padding=iso_args.include_padding)
        elif name == "cosreg":
            regs[name] = CosRegLoss(tuning=iso_args.cosreg_tuning,
                                    include_padding=iso_args.include_padding)
        elif name == "entropy":
            exact = iso_args.entropy_accumulation == "exact"
            regs[name] = PersistentEntropyLoss(
                weight=iso_args.entropy_weight, in_cluster_weight=iso_args.in_cluster_weight,
                select_features=iso_args.select_features, pooling=iso_args.pooling,  # type: ignore[arg-type]
                accumulation_steps=(gradient_accumulation_steps if exact
                                    else iso_args.entropy_window or gradient_accumulation_steps),
                accumulation=iso_args.entropy_accumulation,  # type: ignore[arg-type]
            )
    return regs


class IsotropyTrainer(ResumedLossMixin, ExactCycleMixin, Trainer):
    r"""``Trainer`` that logs the task loss, the regularizers' logs and the top-3 anisotropy
    spectrum of every optimizer step's last-layer [CLS] cloud (all averaged over the logging
    interval), and measures the evaluation set's representations at every evaluation.

    **The optimizer step's cloud.** The Trainer fetches the micro-batches of an accumulation
    cycle before running them (``get_batch_samples``); this class keeps them. The [CLS] rows
    of every micro-batch's forward are gathered, and at the cycle's last micro-batch the
    anisotropy spectrum of the whole cycle's cloud (under several processes: every rank's) is
    logged with its number of points (``cls_spectrum_points``), as the persistent-entropy
    paper's Fig. 1 and Table 3 take it on the 64-point matrix of a step. A persistent-entropy
    regularizer in ``"exact"`` mode gets the cycle's cloud before its first micro-batch:
    :func:`~isotropy.models.regularized.prepare_exact_cycle` (a forward pass without
    gradients, under the training autocast), and each micro-batch's forward then replays the
    random state of its no-grad forward, so that dropout draws the same masks.

    The evaluation measurements (:class:`~isotropy.probing.eval_measures.EvalMeasures`: per
    layer IsoScore, IsoScore*, TwoNN of [CLS], cosine; spectra; per-dimension mean and std)
    come from a forward hook on the inner model; their scalars join the evaluation metrics
    (``eval_isoscore_last``, ``eval_isoscore_star_union``, ``eval_twonn_cls_layer3``, ...) and
    the whole record is kept in ``last_measurements`` and appended to ``measurements.jsonl``
    of ``run_dir``. Under several processes the measurements are those of the whole
    evaluation set, as one process would measure it (every rank computes the same record; the
    duplicates that even out the last batches are dropped). IsoScore* uses
    :math:`\zeta` = ``measure_zeta`` and :math:`\Sigma_S` estimated the same way for every
    run, whatever its regularizer (so that runs compare; I-STAR's own :math:`\zeta` and
    :math:`\Sigma_S`, which may be of one layer, are not used): per layer and cloud kind
    (:func:`~isotropy.models.shrinkage.collect_layer_shrinkage`, a budget of
    ``shrinkage_tokens`` rows of the training union, layers 1..L) read from
    ``shrinkage_loader(epoch)`` by the current model, estimated at the first evaluation of
    each epoch and cached (the global random state is left as it was).
    """

    def __init__(self, *args: Any, measure_max_tokens: int = 20_000,
                 measure_top_k: int = DEFAULT_TOP_K, measure_zeta: float = 0.2,
                 shrinkage_loader: Callable[[int], Any] | None = None,
                 shrinkage_tokens: int = DEFAULT_N_TOKENS, run_dir: RunDirectory | None = None,
                 measure_pooling: str = "cls", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _point_tensorboard(self)
        self.measure_max_tokens = measure_max_tokens
        self.measure_top_k = measure_top_k
        self.measure_zeta = measure_zeta
        self.shrinkage_loader = shrinkage_loader
        self.shrinkage_tokens = shrinkage_tokens
        self.run_dir = run_dir
        self.measure_pooling = measure_pooling
        self._log_sums: dict[str, float] = {}
        self._log_counts: dict[str, int] = {}
        self._cycle_cls: list[torch.Tensor] = []
        self._deferred_save_step: int | None = None
        self.resumed_eval_step: int | None = None  # the last evaluation before the checkpoint
        self.record_evaluations = True
        self._acc: EvalMeasures | None = None
        self._acc_error: str | None = None
        self._shrinkage_cache: dict[str, Any] | None = None
        self.last_eval: Any = None
        self.last_eval_step: int | None = None
        self.last_measurements: dict[str, Any] | None = None
        self._ended_before_epoch = False

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint_payload(self, unlogged: list[float] | None = None) -> dict[str, Any]:
        """The regularizers' state (:class:`IsotropyStateCallback`) and the measurements'
        Sigma_S of the current epoch, so that a resumed run measures as an uninterrupted one;
        the loss sums and the logging interval in progress, with ``unlogged`` (every rank's
        loss since the last log, :meth:`_unlogged_losses`; :meth:`_loss_payload`)."""
        payload: dict[str, Any] = {}
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, IsotropyStateCallback):
                payload.update(cb.payload())
        payload["measure_shrinkage"] = self._shrinkage_cache
        payload["last_eval_step"] = self.last_eval_step
        payload.update(self._loss_payload(unlogged))
        if self.run_dir is not None:
            payload["records"] = self.run_dir.record_counts()
        return payload

    def restore_checkpoint_state(self, state: Mapping[str, Any]) -> None:
        """Take the measurements' Sigma_S, the last evaluation step and the loss sums of a
        resumed checkpoint's ``isotropy_state.pt`` (:func:`read_checkpoint_state`)."""
        self._shrinkage_cache = state.get("measure_shrinkage")
        self.resumed_eval_step = state.get("last_eval_step")
        self._restore_loss_state(state)

    def _evaluate(self, trial: Any, ignore_keys_for_eval: Any, skip_scheduler: bool = False,
                  *args: Any, **kwargs: Any) -> Any:
        """The Trainer's evaluation, except its start evaluation (``eval_on_start``, the one
        call with ``skip_scheduler``) of a run resumed from a checkpoint: the Trainer makes it
        at the checkpoint's step, where an uninterrupted run never evaluates."""
        if skip_scheduler and self.state.global_step > 0:
            return {}
        return super()._evaluate(trial, ignore_keys_for_eval, skip_scheduler, *args, **kwargs)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        """The Trainer's epoch, not started when ``max_steps`` is already reached (a run
        resumed from its final checkpoint mid-epoch would otherwise train one more step)."""
        if 0 < self.state.max_steps <= self.state.global_step:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _save_rng_state(self, output_dir):
        fault_point("checkpoint_partial")  # the model and optimizer are written, not the rest
        return super()._save_rng_state(output_dir)

    def _save_checkpoint(self, model, trial, *args, **kwargs):
        """The Trainer's checkpoint, then ``isotropy_state.pt`` written aside and renamed into
        place as its last file (a checkpoint without it is incomplete and never resumed), and
        only then the old checkpoints rotated out: a crash at any point leaves a complete
        checkpoint to resume from."""
        from transformers.utils import logging as hf_logging

        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # transformers 5's "Writing model shards" bar
        try:
            super()._save_checkpoint(model, trial, *args, **kwargs)
        finally:
            self.args.save_total_limit = limit
            if bar:
                hf_logging.enable_progress_bar()
        self.accelerator.wait_for_everyone()  # every rank's files (its RNG state) are written
        unlogged = self._unlogged_losses()  # on every rank
        run_dir = Path(self._get_output_dir(trial=trial))
        if self.args.should_save:
            folder = run_dir / f"checkpoint-{self.state.global_step}"
            if (folder / "training_args.bin").is_file():  # with the real save_total_limit
                torch.save(self.args, folder / "training_args.bin")
            _sync_folder(folder)
            # the files written, by size: a resume refuses a checkpoint missing one of them
            payload = {**self._checkpoint_payload(unlogged), "files": checkpoint_files(folder)}
            _write_checkpoint_state(folder, payload)
            fault_point("checkpoint_written")
            rotate_checkpoints(self, str(run_dir))

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, epoch,
                                 ignore_keys_for_eval, *args, **kwargs):
        """The Trainer's log / evaluate / save, with a checkpoint due at the last step of an
        epoch saved after that epoch's evaluation (which the Trainer runs in a second call at
        the same step): a checkpoint then never precedes an evaluation it should hold, so a
        run stopped between the two resumes to the uninterrupted result."""
        if self._ended_before_epoch:  # the resumed epoch trained nothing (get_batch_samples)
            self._ended_before_epoch = False
            _EMPTY_EPOCH_WARNING.detach()
            self.control.should_log = self.control.should_evaluate = False
            self.control.should_save = False
            return
        step, epoch_now = self.state.global_step, self.state.epoch or 0.0
        # the step loop's last call of an epoch (or of training, which then ends the epoch),
        # when that epoch's evaluation will follow in the epoch-end call at the same step
        last_of_epoch = abs(epoch_now - round(epoch_now)) < 1e-9 or \
            self.control.should_training_stop
        evaluation_follows = self.args.eval_strategy == IntervalStrategy.EPOCH and \
            self.args.eval_delay <= epoch_now
        if (self.control.should_save and not self.control.should_evaluate and last_of_epoch
                and evaluation_follows and self._deferred_save_step != step):
            self.control.should_save = False
            self._deferred_save_step = step
        elif self._deferred_save_step == step:  # the epoch-end call: evaluate, then save
            self.control.should_save = True
            self._deferred_save_step = None
        # the mixins: the running loss continued after a resume (ResumedLossMixin), the
        # regularizer values checked before anything is logged, saved or evaluated
        super()._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch,
                                         ignore_keys_for_eval, *args, **kwargs)

    def get_batch_samples(self, epoch_iterator, num_batches, *args):
        """The Trainer's micro-batches of one accumulation cycle (ExactCycleMixin keeps them), with
        the cycle's [CLS] rows started afresh; none, and training stopped, once ``max_steps``
        is reached (transformers 4 asks for them when a run resumes from its final
        checkpoint in mid-epoch, and would train one more step; 5 never starts that epoch,
        :meth:`_run_epoch`)."""
        if 0 < self.state.max_steps <= self.state.global_step:
            self.control.should_training_stop = True
            self._ended_before_epoch = True  # the epoch's end: no log, evaluation or save
            _EMPTY_EPOCH_WARNING.attach()  # the Trainer would warn of an empty data set
            return [], None
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, *args)
        self._cycle_cls = []
        return batches, num_items

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The Trainer's loss; in training also the regularizer logs and the [CLS] rows of the
        optimizer step's cloud (hidden states the forward pass computes anyway)."""
        if not model.training:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        loss, outputs = super().compute_loss(
            model, {**inputs, "output_hidden_states": True}, return_outputs=True,
            num_items_in_batch=num_items_in_batch)
        hs = _hidden_states(outputs)  # (RegularizerLogMixin added the regularizers' logs)
        if hs:
            self._cycle_cls.append(pooled_rows(hs[-1], inputs.get("attention_mask"),
                                               self.measure_pooling))
            if self._cycle_pos >= len(self._cycle):  # the cycle's last micro-batch
                cloud = torch.cat(self._cycle_cls)
                if self.accelerator.num_processes > 1:
                    cloud = gather_rows(cloud)
                self._cycle_cls = []
                self._add_logs({**cls_spectrum_logs(cloud, k=3),
                                "cls_spectrum_points": float(cloud.shape[0])})
        return (loss, outputs) if return_outputs else loss

    def _inner(self) -> torch.nn.Module:
        return self.model.model if isinstance(self.model, RegularizedModel) else self.model

    def evaluation_loop(self, dataloader, description, prediction_loss_only=None,
                        ignore_keys=None, metric_key_prefix="eval"):
        shrinkage, zeta, source = self._measure_shrinkage()
        dataset = getattr(dataloader, "dataset", None)
        self._acc = EvalMeasures(
            max_tokens=self.measure_max_tokens, top_k=self.measure_top_k, zeta=zeta,
            shrinkage=shrinkage, dataset_size=len(dataset) if has_length(dataset) else None,
            sync=self.accelerator.num_processes > 1, pooling=self.measure_pooling)
        self._acc_error = None
        handle = self._inner().register_forward_hook(self._collect, with_kwargs=True)
        try:
            out = super().evaluation_loop(dataloader, description, prediction_loss_only,
                                          ignore_keys, metric_key_prefix)
        finally:
            handle.remove()
        record = self._measures(source, metric_key_prefix)
        out.metrics.update({f"{metric_key_prefix}_{k}": v
                            for k, v in scalar_metrics(record).items()})
        self.last_eval, self.last_eval_step = out, self.state.global_step
        return out

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """The Trainer's step, with hidden states computed for the measurements (and kept
        out of the gathered predictions)."""
        inputs = {**inputs, "output_hidden_states": True}
        ignore_keys = [*(ignore_keys or []), "hidden_states"]
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    @torch.no_grad()
    def _collect(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any],
                 output: Any) -> None:
        """Forward hook: add the batch's hidden states (padding excluded) to the measures
        (under several processes a collective: every rank's hook runs once per step)."""
        hs = _hidden_states(output)
        if hs and self._acc is not None:
            try:
                self._acc.update(hs, kwargs.get("attention_mask"))
            except ValueError as err:  # e.g. layers of different shapes: measure nothing
                # (under several processes every rank raises at the same batch)
                self._acc, self._acc_error = None, f"measurements stopped: {err}"

    def _measure_shrinkage(self) -> tuple[LayerShrinkage | None, float, dict[str, Any]]:
        r"""(per-layer :math:`\Sigma_S`, :math:`\zeta`, where it came from) for IsoScore*
        (class doc)."""
        zeta = float(self.measure_zeta)
        if zeta == 0.0:
            return None, zeta, {"source": "none (zeta = 0)"}
        if self.shrinkage_loader is None:
            return None, zeta, {"source": "none (no training data loader)"}
        epoch = max(0, math.ceil((self.state.epoch or 0.0) - 1e-9) - 1)
        cache = self._shrinkage_cache
        if cache is None or cache["epoch"] != epoch:
            t0 = time.perf_counter()
            # the pass leaves the global random state as it was (collect_layer_shrinkage)
            progress = self._progress()  # a bar of the rows read out of shrinkage_tokens
            with stage(f"Sigma_S pass of the measurements (epoch {epoch + 1})", bar=False,
                       echo=progress["echo"]) as counted:
                shrinkage = collect_layer_shrinkage(
                    self.model, counted(self.shrinkage_loader(epoch)),
                    n_tokens=self.shrinkage_tokens, pooling=self.measure_pooling,
                    progress=progress["bar"])
            cache = {"epoch": epoch, "shrinkage": shrinkage, "rows": shrinkage.describe(),
                     "seconds": time.perf_counter() - t0}
            self._shrinkage_cache = cache
        return cache["shrinkage"], zeta, {
            "source": "training data", "epoch": epoch, **cache["rows"],
            "n_rows": cache["rows"]["union_rows"], "seconds": cache["seconds"]}

    def _progress(self) -> dict[str, Any]:
        """How a pass of ours shows progress (:func:`isotropy.progress.stage`): a bar where
        the Trainer shows its own, one line when it ends, on the main process only."""
        main = self.is_world_process_zero()
        return {"bar": main and not self.args.disable_tqdm and sys.stderr.isatty(),
                "echo": print if main else None}

    def _measures(self, source: dict[str, Any], prefix: str) -> dict[str, Any]:
        """The evaluation's record (with its step, epoch and Sigma_S source), kept in
        ``last_measurements`` and appended to ``measurements.jsonl``."""
        acc, self._acc = self._acc, None
        if acc is None or not acc.n_batches:
            why = self._acc_error or "no evaluation batch reached the model"
            record: dict[str, Any] = {"errors": [why], "layers": [], "num_layers": None}
        else:
            t0 = time.perf_counter()
            record = acc.compute(progress=self._progress()["bar"])
            record["seconds"] = time.perf_counter() - t0
        record = {"step": self.state.global_step, "epoch": self.state.epoch, "prefix": prefix,
                  "shrinkage": source, **record}
        self.last_measurements = record
        if self.run_dir is not None and self.is_world_process_zero() and \
                self.record_evaluations:
            self.run_dir.append_measurements(record)
        return record


class _DropEmptyEpochWarning(logging.Filter):
    """Drops the ``Trainer``'s warning of an epoch without a single batch (transformers 4),
    while attached: :meth:`IsotropyTrainer.get_batch_samples` ends such an epoch on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        return "not to be a single sample" not in record.getMessage()

    def attach(self) -> None:
        """Drop the warning from the ``Trainer``'s logger."""
        logging.getLogger("transformers.trainer").addFilter(self)

    def detach(self) -> None:
        """Let the warning through again."""
        logging.getLogger("transformers.trainer").removeFilter(self)


_EMPTY_EPOCH_WARNING = _DropEmptyEpochWarning()


def _hidden_states(output: Any) -> tuple[torch.Tensor, ...] | None:
    hs = getattr(output, "hidden_states", None)
    if hs is None and isinstance(output, Mapping):
        hs = output.get("hidden_states")
    return tuple(hs) if hs is not None else None


_MOVED = {"run_training": "run", "TrainResult": "run", "MetricsFileCallback": "callbacks",
          "IsotropyStateCallback": "callbacks", "read_checkpoint_state": "callbacks",
          "SpanPredictor": "predictions", "make_compute_metrics": "predictions",
          "SPAN_LABELS": "predictions"}


def __getattr__(name: str) -> Any:
    """Names this module held before the run, its callbacks and its predictions got modules of
    their own: still importable from here, with a DeprecationWarning."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    new = f"isotropy.training.{_MOVED[name]}"
    warnings.warn(f"isotropy.training.trainer.{name} is deprecated: import it from {new}",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(new), name)
