"""``isotropy train``: build the data, model, regularizers and ``Trainer``; run; write the run.

:func:`run_training` checks every input (task, data files, model, tokenised features, output
directory) before any work, then fine-tunes ``AutoModelForSequenceClassification`` (one output
unit for STS-B regression) or, for SQuAD, ``AutoModelForQuestionAnswering`` wrapped in a
:class:`~isotropy.models.regularized.RegularizedModel` with
:class:`IsotropyTrainer`, which adds the task
loss, every regularizer's logs and the batch [CLS] spectrum (averaged over the logging
interval) to the Trainer's logs, and the task metrics and the representation measurements of
the evaluation set (:mod:`isotropy.probing.eval_measures`) to every evaluation.

SQuAD trains on windows of the contexts (``--max_seq_length``, ``--doc_stride``) with
start/end labels; every evaluation maps the windows' start/end logits back to answer texts
(n-best post-processing, ``--n_best_size``, ``--max_answer_length``) and scores exact match and
F1 per question. ``eval_predictions.csv`` then holds one row per question: ``guid``, the gold
``answers`` and ``answer_starts`` (JSON lists) and the predicted text.

The persistent-entropy regularizer scores each class label's cloud separately. STS-B
(regression scores) and SQuAD (spans) have no class labels: there it scores the whole cloud of
the batch (of its window of micro-batches) as one group, and ``config.json`` and
``results.json`` say so under ``notes``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import IntervalStrategy, has_length, rotate_checkpoints
from transformers.training_args import ParallelMode

from isotropy.data.glue import Example, TaskSpec, get_task
from isotropy.data.sources import TaskData, load_task_data
from isotropy.data.squad import postprocess_predictions, squad_metrics
from isotropy.data.task_metrics import (
    compute_task_metrics,
    prediction_summary,
    predictions_from_logits,
)
from isotropy.distributed import gather_rows, is_distributed, on_main_process, world_size
from isotropy.io import write_csv_atomic
from isotropy.losses import CosRegLoss, IStarLoss, PersistentEntropyLoss
from isotropy.models.loading import resolve_model
from isotropy.models.regularized import (
    RegularizedModel,
    exact_cycle_losses,
    prepare_exact_cycle,
)
from isotropy.models.shrinkage import (
    DEFAULT_N_TOKENS,
    LayerShrinkage,
    ShrinkageRefreshCallback,
    collect_layer_shrinkage,
)
from isotropy.probing.eval_measures import (
    DEFAULT_TOP_K,
    EvalMeasures,
    cls_spectrum_logs,
    pooled_rows,
    scalar_metrics,
)
from isotropy.rundir import (
    CHECKPOINT_STATE,
    MEASUREMENT_FORMAT,
    PREDICTIONS,
    RunDirectory,
    git_commit,
    library_versions,
)
from isotropy.runtime import RngState, fault_point, flush_denormals, set_rng_state
from isotropy.training.config import IsotropyArguments, TrainArguments, describe, parse_layers
from isotropy.training.console import use_console_log
from isotropy.training.features import (
    TaskDataset,
    tokenize_examples,
    tokenize_squad,
)
from isotropy.training.model_kind import check_pooling, is_decoder_only

__all__ = [
    "IsotropyTrainer",
    "SpanPredictor",
    "TrainResult",
    "build_regularizers",
    "load_task_data",
    "run_training",
]



# ----------------------------------------------------------------------------- inputs


def _check_model(path: str, ours: IsotropyArguments | None = None) -> Any:
    """Load the model's config and tokenizer (cheap) so a bad model, or I-STAR layers it does
    not have, fail before any work."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path)
        AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(
            f"could not load model {path!r} ({str(err).splitlines()[0]}); if the hub cannot be "
            "reached, pass a local model directory as --model (or --model minilm) and the data "
            "with --data_dir"
        ) from err
    n_layers = getattr(config, "num_hidden_layers", None)
    if ours is not None and "istar" in ours.regularizers and isinstance(n_layers, int):
        layers = parse_layers(ours.istar_layers)
        for i in [layers] if isinstance(layers, int) else (
                layers if isinstance(layers, list) else []):
            if not -(n_layers + 1) <= i <= n_layers:
                raise ValueError(
                    f"--istar_layers {ours.istar_layers}: layer {i} is out of range, the model "
                    f"has {n_layers} transformer layers (valid: 0 = embeddings, 1..{n_layers}, "
                    f"or -1..-{n_layers + 1})")
    return config


def _check_resume_point(run_dir: RunDirectory, requested: str) -> Path:
    """The ``--resume_from_checkpoint`` folder, if it is a complete checkpoint of the run
    directory; ``ValueError`` otherwise (checked before anything is changed)."""
    chosen = Path(requested).resolve()
    if chosen.parent != run_dir.path.resolve() or not chosen.name.startswith("checkpoint-") \
            or not chosen.name.rsplit("-", 1)[-1].isdigit() or not RunDirectory.is_complete(chosen):
        raise ValueError(
            f"--resume_from_checkpoint {requested}: not a complete checkpoint of "
            f"{run_dir.path} (choose one of: "
            f"{', '.join(p.name for p in run_dir.complete_checkpoints()) or 'none'})")
    return chosen


def _resume_point(run_dir: RunDirectory, requested: str | None) -> list[str]:
    """Make the checkpoint to resume from the last complete one: incomplete checkpoints (the
    run stopped while writing them) are deleted, and with ``--resume_from_checkpoint`` (a
    complete checkpoint of this run) the later ones too. Returns what to tell the user."""
    said = []
    chosen = _check_resume_point(run_dir, requested) if requested else None
    last_complete = run_dir.last_checkpoint()
    for p in run_dir.drop_checkpoints(incomplete=True):
        said.append(f"{p.name} is incomplete (the run stopped while writing it): deleted; "
                    f"resuming from {last_complete.name if last_complete else 'the start'}")
    if chosen is not None:
        later = run_dir.drop_checkpoints(incomplete=False, after=_checkpoint_step(chosen))
        if later:
            said.append(f"resuming from {chosen.name}: the later "
                        f"{', '.join(p.name for p in later)} deleted")
    return said


def build_regularizers(
    ours: IsotropyArguments, gradient_accumulation_steps: int
) -> dict[str, torch.nn.Module]:
    """name -> regularizer module for every active ``--regularizer``."""
    regs: dict[str, torch.nn.Module] = {}
    for name in ours.regularizers:
        if name == "istar":
            regs[name] = IStarLoss(tuning=ours.tuning, zeta=ours.zeta,
                                   layers=parse_layers(ours.istar_layers),
                                   include_padding=ours.include_padding)
        elif name == "cosreg":
            regs[name] = CosRegLoss(tuning=ours.cosreg_tuning,
                                    include_padding=ours.include_padding)
        elif name == "entropy":
            exact = ours.entropy_accumulation == "exact"
            regs[name] = PersistentEntropyLoss(
                weight=ours.entropy_weight, in_cluster_weight=ours.in_cluster_weight,
                select_features=ours.select_features, pooling=ours.pooling,  # type: ignore[arg-type]
                accumulation_steps=(gradient_accumulation_steps if exact
                                    else ours.entropy_window or gradient_accumulation_steps),
                accumulation=ours.entropy_accumulation,  # type: ignore[arg-type]
            )
    return regs


# ----------------------------------------------------------------------------- callbacks


class MetricsFileCallback(TrainerCallback):
    """Append every Trainer log, with its step and epoch, to ``metrics.jsonl``."""

    def __init__(self, run_dir: RunDirectory, trainer: Any = None) -> None:
        self.run_dir = run_dir
        self.trainer = trainer  # an IsotropyTrainer whose record_evaluations may switch it off

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        if self.trainer is not None and not self.trainer.record_evaluations:
            return control
        if state.is_world_process_zero and logs:
            self.run_dir.append_metrics({"step": state.global_step, "epoch": state.epoch, **logs})
            evaluation = any(k.startswith("eval_") for k in logs)
            fault_point("evaluation_logged" if evaluation else "training_logged")
        return control


class IsotropyStateCallback(ShrinkageRefreshCallback):
    r"""Sigma_S before every epoch from a seeded pass over the training set, and the state a
    resumed run needs saved with every checkpoint.

    The Sigma_S pass reads the training set in an order drawn from its own generator
    (seed + epoch), so it leaves the global random state, and hence training, untouched.
    ``isotropy_state.pt`` in each checkpoint (:meth:`payload`, written by
    :meth:`IsotropyTrainer._save_checkpoint`) holds Sigma_S (and the epoch it was estimated
    for) and the persistent-entropy windows: resuming mid-epoch reuses that epoch's Sigma_S
    instead of estimating it from the mid-epoch model.
    """

    def __init__(self, istar: Sequence[IStarLoss], entropy: Sequence[PersistentEntropyLoss],
                 make_loader: Callable[[int], Any], n_tokens: int,
                 resume_state: Mapping[str, Any] | None = None) -> None:
        super().__init__(losses=list(istar) or None, n_tokens=n_tokens)
        self.istar = list(istar)
        self.entropy = list(entropy)
        self.make_loader = make_loader
        self.shrinkage_epoch: int | None = None
        self._restored = resume_state  # the resumed checkpoint's isotropy_state.pt

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        if self._restored is not None:
            for loss, window in zip(self.entropy, self._restored["entropy_windows"],
                                    strict=True):
                loss.load_window_state(window)
        return control

    def on_epoch_begin(self, args, state, control, **kwargs):  # noqa: D102
        epoch = int(math.floor(state.epoch + 1e-9)) if state.epoch else 0
        restored = self._restored
        self._restored = None
        if restored is not None and restored["shrinkage_epoch"] == epoch and self.istar:
            for loss, cov in zip(self.istar, restored["shrinkage"], strict=True):
                loss.set_shrinkage(cov)
            self.shrinkage_epoch = epoch
            return control
        if self.istar:
            self.dataloader = self.make_loader(epoch)
            super().on_epoch_begin(args, state, control, **kwargs)
            self.shrinkage_epoch = epoch
        return control

    def payload(self) -> dict[str, Any]:
        """What a checkpoint keeps of the regularizers' state."""
        return {
            "shrinkage_epoch": self.shrinkage_epoch,
            "shrinkage": [loss.shrinkage for loss in self.istar],
            "entropy_windows": [loss.window_state() for loss in self.entropy],
        }


def read_checkpoint_state(checkpoint: str | Path) -> dict[str, Any] | None:
    """The ``isotropy_state.pt`` of a checkpoint folder (``None`` if absent)."""
    path = Path(checkpoint) / CHECKPOINT_STATE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def _sync_folder(folder: Path) -> None:
    """Flush every file of a checkpoint folder to the disk (the Trainer does not), so that its
    last file marks a checkpoint that survives a lost machine too."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())


def _write_checkpoint_state(folder: Path, payload: Mapping[str, Any]) -> None:
    """``isotropy_state.pt`` written aside, synced, then renamed into place: the last file of
    a checkpoint, whose presence marks it complete."""
    tmp = folder / f".{CHECKPOINT_STATE}.tmp"
    with tmp.open("wb") as f:
        torch.save(dict(payload), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / CHECKPOINT_STATE)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- trainer


def _point_tensorboard(trainer: Trainer) -> None:
    """Write TensorBoard events to ``args.logging_dir``: transformers 5 dropped that argument
    (its callback reads ``TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs/<date>``), so
    the callback is pointed at it unless that environment variable is set."""
    from transformers.integrations import TensorBoardCallback

    logging_dir = getattr(trainer.args, "logging_dir", None)
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, TensorBoardCallback) and logging_dir and \
                getattr(cb, "logging_dir", None) is None:
            cb.logging_dir = logging_dir


class IsotropyTrainer(Trainer):
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
        self._cycle: list[Any] = []
        self._cycle_pos = 0
        self._cycle_rng: list[RngState] = []
        self._cycle_cls: list[torch.Tensor] = []
        self._deferred_save_step: int | None = None
        self._cycle_items: Any = None
        self._exact: list[PersistentEntropyLoss] | None = None
        self.resumed_eval_step: int | None = None  # the last evaluation before the checkpoint
        self.record_evaluations = True
        self._acc: EvalMeasures | None = None
        self._acc_error: str | None = None
        self._shrinkage_cache: dict[str, Any] | None = None
        self.last_eval: Any = None
        self.last_eval_step: int | None = None
        self.last_measurements: dict[str, Any] | None = None

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint_payload(self) -> dict[str, Any]:
        """The regularizers' state (:class:`IsotropyStateCallback`) and the measurements'
        Sigma_S of the current epoch, so that a resumed run measures as an uninterrupted one."""
        payload: dict[str, Any] = {}
        for cb in self.callback_handler.callbacks:
            if isinstance(cb, IsotropyStateCallback):
                payload.update(cb.payload())
        payload["measure_shrinkage"] = self._shrinkage_cache
        payload["last_eval_step"] = self.last_eval_step
        if self.run_dir is not None:
            payload["records"] = self.run_dir.record_counts()
        return payload

    def restore_checkpoint_state(self, state: Mapping[str, Any]) -> None:
        """Take the measurements' Sigma_S and last evaluation step of a resumed checkpoint's
        ``isotropy_state.pt`` (:func:`read_checkpoint_state`)."""
        self._shrinkage_cache = state.get("measure_shrinkage")
        self.resumed_eval_step = state.get("last_eval_step")

    def _exact_losses(self) -> list[PersistentEntropyLoss]:
        """The exact persistent-entropy losses of the model (found once)."""
        if self._exact is None:
            self._exact = (exact_cycle_losses(self.model)
                           if isinstance(self.model, RegularizedModel) else [])
        return self._exact

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

    def _save_checkpoint(self, model, trial):
        """The Trainer's checkpoint, then ``isotropy_state.pt`` written aside and renamed into
        place as its last file (a checkpoint without it is incomplete and never resumed), and
        only then the old checkpoints rotated out: a crash at any point leaves a complete
        checkpoint to resume from."""
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        self.accelerator.wait_for_everyone()  # every rank's files (its RNG state) are written
        run_dir = Path(self._get_output_dir(trial=trial))
        if self.args.should_save:
            folder = run_dir / f"checkpoint-{self.state.global_step}"
            if (folder / "training_args.bin").is_file():  # with the real save_total_limit
                torch.save(self.args, folder / "training_args.bin")
            _sync_folder(folder)
            _write_checkpoint_state(folder, self._checkpoint_payload())
            fault_point("checkpoint_written")
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=limit,
                               best_model_checkpoint=self.state.best_model_checkpoint,
                               use_mtime=False)

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, epoch,
                                 ignore_keys_for_eval, start_time, learning_rate=None):
        """The Trainer's log / evaluate / save, with a checkpoint due at the last step of an
        epoch saved after that epoch's evaluation (which the Trainer runs in a second call at
        the same step): a checkpoint then never precedes an evaluation it should hold, so a
        run stopped between the two resumes to the uninterrupted result."""
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
        super()._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch,
                                         ignore_keys_for_eval, start_time,
                                         learning_rate=learning_rate)

    def _add_logs(self, logs: Mapping[str, float]) -> None:
        for key, value in logs.items():
            if key != "loss" and math.isfinite(value):
                self._log_sums[key] = self._log_sums.get(key, 0.0) + value
                self._log_counts[key] = self._log_counts.get(key, 0) + 1

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The Trainer's micro-batches of one accumulation cycle, kept for the cycle's cloud
        (class doc)."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._cycle, self._cycle_pos, self._cycle_rng, self._cycle_cls = list(batches), 0, [], []
        self._cycle_items = num_items
        for loss in self._exact_losses():
            loss.reset()  # nothing of an earlier cycle is ever consumed
        return batches, num_items

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step; before a cycle's first micro-batch the exact persistent-entropy
        pass, and before each micro-batch its replayed random state (class doc)."""
        pos = self._cycle_pos
        accumulating = len(self._cycle) > 1 or self.args.gradient_accumulation_steps > 1
        if pos == 0 and self._cycle and accumulating and self._exact_losses():
            self.model.train()

            def autocast() -> Any:
                return _both(self.compute_loss_context_manager(), self.accelerator.autocast())

            self._cycle_rng = prepare_exact_cycle(
                self.model, [self._prepare_inputs(b) for b in self._cycle],
                loss_divisor=self._loss_divisor(), context=autocast)
        if pos < len(self._cycle_rng):
            set_rng_state(self._cycle_rng[pos])
        self._cycle_pos = pos + 1
        return super().training_step(model, inputs, num_items_in_batch)

    def _loss_divisor(self) -> float:
        """What the Trainer's ``training_step`` divides each micro-batch's loss by: the
        cycle's micro-batches, unless the loss is already scaled for accumulation (a
        ``compute_loss_func``, or a model taking ``num_items_in_batch``)."""
        scaled = self.loss_is_scaled_for_ga
        if scaled is None:
            scaled = (self.model_accepts_loss_kwargs and self._cycle_items is not None) \
                or self.compute_loss_func is not None
        return 1.0 if scaled else float(self.current_gradient_accumulation_steps)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The Trainer's loss; in training also the regularizer logs and the [CLS] rows of the
        optimizer step's cloud (hidden states the forward pass computes anyway)."""
        if not model.training:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        loss, outputs = super().compute_loss(
            model, {**inputs, "output_hidden_states": True}, return_outputs=True,
            num_items_in_batch=num_items_in_batch)
        if isinstance(self.model, RegularizedModel):
            self._add_logs(self.model.last_logs)
        hs = _hidden_states(outputs)
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

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add the interval means of the regularizer and spectrum logs to a training log."""
        if "loss" in logs and self._log_sums:
            for key, total in self._log_sums.items():
                logs[key] = total / self._log_counts[key]
            self._log_sums, self._log_counts = {}, {}
        super().log(logs, start_time)

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
            devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
            with torch.random.fork_rng(devices=devices):
                shrinkage = collect_layer_shrinkage(self.model, self.shrinkage_loader(epoch),
                                                    n_tokens=self.shrinkage_tokens,
                                                    pooling=self.measure_pooling)
            cache = {"epoch": epoch, "shrinkage": shrinkage, "rows": shrinkage.describe(),
                     "seconds": time.perf_counter() - t0}
            self._shrinkage_cache = cache
        return cache["shrinkage"], zeta, {
            "source": "training data", "epoch": epoch, **cache["rows"],
            "n_rows": cache["rows"]["union_rows"], "seconds": cache["seconds"]}

    def _measures(self, source: dict[str, Any], prefix: str) -> dict[str, Any]:
        """The evaluation's record (with its step, epoch and Sigma_S source), kept in
        ``last_measurements`` and appended to ``measurements.jsonl``."""
        acc, self._acc = self._acc, None
        if acc is None or not acc.n_batches:
            why = self._acc_error or "no evaluation batch reached the model"
            record: dict[str, Any] = {"errors": [why], "layers": [], "num_layers": None}
        else:
            t0 = time.perf_counter()
            record = acc.compute()
            record["seconds"] = time.perf_counter() - t0
        record = {"step": self.state.global_step, "epoch": self.state.epoch, "prefix": prefix,
                  "shrinkage": source, **record}
        self.last_measurements = record
        if self.run_dir is not None and self.is_world_process_zero() and \
                self.record_evaluations:
            self.run_dir.append_measurements(record)
        return record


@contextlib.contextmanager
def _both(first: Any, second: Any) -> Iterator[None]:
    """Enter two context managers (the Trainer's loss context and its autocast)."""
    with first, second:
        yield


def _hidden_states(output: Any) -> tuple[torch.Tensor, ...] | None:
    hs = getattr(output, "hidden_states", None)
    if hs is None and isinstance(output, Mapping):
        hs = output.get("hidden_states")
    return tuple(hs) if hs is not None else None


SPAN_LABELS = ["start_positions", "end_positions"]


@dataclass
class SpanPredictor:
    """SQuAD answer texts from the Trainer's evaluation predictions.

    The Trainer returns ``(start_logits, end_logits)``, one row per window in the order of its
    evaluation dataloader (padded with -100 beyond a window's length); ``order()`` gives the
    window index of each row (:func:`_eval_order`: sequential, or length-grouped under
    ``--group_by_length``). Rows are put back in window order, then
    :func:`~isotropy.data.squad.postprocess_predictions` picks every question's best span.
    """

    dataset: TaskDataset
    n_best: int = 20
    max_answer_length: int = 30
    order: Callable[[], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.dataset.windows is None:
            raise ValueError("a SpanPredictor needs a SQuAD dataset (tokenize_squad)")

    def answers(self, predictions: Any) -> dict[str, str]:
        """``guid -> predicted answer text`` of every evaluation question."""
        if not isinstance(predictions, (tuple, list)) or len(predictions) < 2:
            raise ValueError("SQuAD predictions must be the pair (start_logits, end_logits)")
        start, end = (np.asarray(p) for p in predictions[:2])
        n = len(self.dataset)
        order = self.order() if self.order is not None else np.arange(n)
        if start.shape[0] != n or end.shape[0] != n or len(order) != n:
            raise ValueError(
                f"{n} evaluation windows but {start.shape[0]} start and {end.shape[0]} end "
                "logit rows"
            )
        s, e = np.empty_like(start), np.empty_like(end)
        s[order], e[order] = start, end
        return postprocess_predictions(self.dataset.examples, self.dataset.windows, s, e,
                                       n_best=self.n_best,
                                       max_answer_length=self.max_answer_length)


def make_compute_metrics(
    spec: TaskSpec, span: SpanPredictor | None = None
) -> Callable[[Any], dict[str, float]]:
    """Task metrics (scikit-learn/scipy) and the collapsed-classifier flag from logits; for
    SQuAD exact match and F1 (percent, torchmetrics) of the answers ``span`` decodes."""
    if spec.kind == "span":
        if span is None:
            raise ValueError("SQuAD metrics need the evaluation windows (a SpanPredictor)")

        def compute_span(eval_pred: Any) -> dict[str, float]:
            return squad_metrics(span.answers(eval_pred.predictions), span.dataset.examples)

        return compute_span

    def compute(eval_pred: Any) -> dict[str, float]:
        logits = eval_pred.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        pred = predictions_from_logits(spec, logits)
        metrics = compute_task_metrics(spec, pred, eval_pred.label_ids)
        metrics.pop("undefined", None)
        summary = prediction_summary(spec, pred)
        metrics["collapsed"] = float(summary["collapsed"])
        if "majority_fraction" in summary:
            metrics["majority_fraction"] = summary["majority_fraction"]
        return metrics

    return compute


# ----------------------------------------------------------------------------- the run


@dataclass
class TrainResult:
    """Where the run is and what it gave: ``status`` is ``'trained'`` or ``'finished'``
    (an earlier finished run found and kept)."""

    run_dir: Path
    status: str
    results: dict[str, Any]


_IGNORED_FOR_RESUME = {
    ("isotropy", "resume"), ("isotropy", "overwrite"), ("training", "resume_from_checkpoint"),
    ("training", "overwrite_output_dir"), ("training", "logging_dir"),
}


def _settings_difference(old: Mapping[str, Any], new: Mapping[str, Any],
                         data: Mapping[str, Any] | None = None) -> str | None:
    """Why a run with ``old`` config cannot be resumed with settings ``new`` (and data source
    ``data``), else ``None``; a dev split made by example (runs written before SQuAD was split
    by paragraph) does not resume as a split by paragraph."""
    for section in ("isotropy", "training"):
        a, b = old.get("settings", {}).get(section, {}), new.get(section, {})
        for key in sorted(set(a) | set(b)):
            if (section, key) in _IGNORED_FOR_RESUME:
                continue
            if a.get(key) != b.get(key):
                return f"setting {key} was {a.get(key)!r}, now {b.get(key)!r}"
    old_data = old.get("data") or {}
    if data and "split_dev_for_training" in data and "split_dev_for_training" in old_data:
        was, now = old_data.get("split_unit", "example"), data.get("split_unit", "example")
        if was != now:
            return f"the dev split was made by {was}, now by {now}"
    return None


def _span_rows(examples: Sequence[Example], answers: Mapping[str, str]):
    """One row per question: ``guid``, gold ``answers`` and ``answer_starts`` (JSON lists,
    the torchmetrics/official SQuAD target) and the predicted text."""
    for e in examples:
        yield {"guid": e.guid,
               "answers": json.dumps([a.text for a in e.answers], ensure_ascii=False),
               "answer_starts": json.dumps([a.start for a in e.answers]),
               "prediction": answers[e.guid]}


def _predictions_rows(spec: TaskSpec, examples: Sequence[Example], logits: np.ndarray):
    pred = predictions_from_logits(spec, logits)
    for e, p, out in zip(examples, pred, logits, strict=True):
        row: dict[str, Any] = {"guid": e.guid, "label": e.label, "prediction": p.item()}
        for j, v in enumerate(np.atleast_1d(out)):
            row[f"output_{j}"] = float(v)
        yield row


def _best(records: list[dict[str, Any]], key: str, greater: bool = True) -> dict[str, Any] | None:
    evals = [r for r in records if r.get(key) is not None]
    if not evals:
        return None
    pick = max if greater else min
    return pick(evals, key=lambda r: r[key])


def run_training(
    ours: IsotropyArguments,
    targs: TrainArguments,
    *,
    callbacks: Sequence[TrainerCallback] = (),
    echo: Callable[[str], None] = print,
) -> TrainResult:
    """Fine-tune as configured; returns the run directory and its results (see module doc).

    On CPU, denormal floats are flushed to zero for the run and the mode restored after it.
    """
    with flush_denormals(not torch.cuda.is_available()):
        return _run_training(ours, targs, callbacks=callbacks, echo=echo)


def _regularizer_notes(spec: TaskSpec, ours: IsotropyArguments) -> list[str]:
    """What a regularizer does differently on this task (recorded in config.json)."""
    if "entropy" in ours.regularizers and spec.kind != "classification":
        why = "regression scores" if spec.kind == "regression" else "no class labels"
        return [f"entropy: {spec.display_name} has {why}: the persistent entropy is taken of "
                f"the whole batch's {ours.pooling}-pooled cloud as one group, not per class "
                "label"]
    return []


def _check_drop_last(targs: TrainArguments, n_eval: int, what: str) -> None:
    """``--dataloader_drop_last`` also drops the Trainer's last evaluation batch: refuse it
    unless the evaluation batches divide the evaluation set."""
    batch = targs.eval_batch_size * max(1, targs.world_size)
    if targs.dataloader_drop_last and n_eval % batch:
        raise ValueError(
            f"--dataloader_drop_last would leave {n_eval % batch} of the {n_eval} evaluation "
            f"{what} unscored (evaluation batches of {batch}): choose an evaluation batch size "
            f"that divides {n_eval}, or drop the flag"
        )


def _prepare_span_arguments(spec: TaskSpec, targs: TrainArguments) -> None:
    """SQuAD's label names for the Trainer (eval loss from start/end positions); settings
    that would leave the span post-processing without its predictions fail here."""
    if spec.kind != "span":
        return
    if targs.label_names is not None and list(targs.label_names) != SPAN_LABELS:
        raise ValueError(f"--label_names must be {' '.join(SPAN_LABELS)} for "
                         f"{spec.display_name}, got {' '.join(targs.label_names)}")
    if targs.batch_eval_metrics:
        raise ValueError(f"--batch_eval_metrics is not supported for {spec.display_name}: "
                         "answers are decoded from all windows of a question at once")
    targs.label_names = list(SPAN_LABELS)


def _check_parallel(targs: Any) -> None:
    """Refuse the parallel set-ups in which the regularizers would not see the global batch.

    Setting up the devices (``targs.parallel_mode``) joins or starts a launcher's process
    group; then the ranks share the run directory, which rank 0 alone writes. One process that
    sees several GPUs would fall back to ``DataParallel``, where each GPU scores only its slice.

    >>> from types import SimpleNamespace
    >>> _check_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_PARALLEL, n_gpu=1))
    >>> _check_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_DISTRIBUTED, n_gpu=2))
    Traceback (most recent call last):
    ...
    ValueError: one process sees 2 GPUs: the Trainer would use DataParallel, ...
    """
    if targs.parallel_mode != ParallelMode.DISTRIBUTED and is_distributed():
        raise ValueError(
            f"{world_size()} processes were launched but the Trainer does not train them in "
            "parallel (on a machine without a GPU, pass --use_cpu true)"
        )
    if targs.parallel_mode == ParallelMode.NOT_DISTRIBUTED and targs.n_gpu > 1:
        raise ValueError(
            f"one process sees {targs.n_gpu} GPUs: the Trainer would use DataParallel, in "
            "which each GPU's regularizers see only its slice of the batch; make one GPU "
            "visible (CUDA_VISIBLE_DEVICES=0) or start one process per GPU (accelerate "
            "launch, torchrun)"
        )


def _run_training(
    ours: IsotropyArguments,
    targs: TrainArguments,
    *,
    callbacks: Sequence[TrainerCallback],
    echo: Callable[[str], None],
) -> TrainResult:
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        set_seed,
    )
    from transformers.utils import logging as hf_logging

    spec = get_task(ours.task)
    span = spec.kind == "span"
    if targs.prediction_loss_only:
        raise ValueError("--prediction_loss_only leaves no predictions for the task metrics "
                         "and eval_predictions.csv")
    _prepare_span_arguments(spec, targs)
    data = load_task_data(ours, targs.seed if ours.subset_seed is None else ours.subset_seed)
    model_path = resolve_model(ours.model)
    model_config = _check_model(model_path, ours)
    check_pooling(model_path, ours.pooling, ours.regularizers)
    # the evaluation's and the training spectrum's one row per example: [CLS] of an encoder,
    # the last token of a decoder-only model (as isotropy analyze pools it)
    measure_pooling = "last" if is_decoder_only(model_config) else "cls"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if span:
        train_ds = tokenize_squad(data.train, tokenizer, ours.max_seq_length, ours.doc_stride)
        eval_ds = tokenize_squad(data.eval, tokenizer, ours.max_seq_length, ours.doc_stride)
    else:
        train_ds = tokenize_examples(data.train, tokenizer, spec, ours.max_seq_length)
        eval_ds = tokenize_examples(data.eval, tokenizer, spec, ours.max_seq_length)
    _check_drop_last(targs, len(eval_ds), "windows" if span else "examples")
    notes = _regularizer_notes(spec, ours)
    features = {"n_train_features": len(train_ds), "n_eval_features": len(eval_ds)}
    run_dir = RunDirectory(targs.output_dir)
    settings = describe(ours, targs)
    _check_parallel(targs)

    def prepare() -> tuple[str, list[str]]:
        said: list[str] = []
        status = run_dir.prepare(resume=ours.resume or bool(targs.resume_from_checkpoint),
                                 overwrite=ours.overwrite,
                                 same_settings=lambda old: _settings_difference(
                                     old, settings, data.source))
        if status == "finished":
            return status, said
        if status == "restart":
            said.append(f"{run_dir.path} held an unfinished run without a complete checkpoint: "
                        "starting it again")
        if status == "resume":
            said.extend(_resume_point(run_dir, targs.resume_from_checkpoint))
        if status in ("new", "restart") or not run_dir.file("config.json").is_file():
            run_dir.write_config({
                "settings": settings, "model_path": model_path, "data": data.source,
                "features": features,
                "task": {"name": spec.name, "kind": spec.kind, "num_labels": spec.num_labels,
                         "metrics": list(spec.metrics)},
                "notes": notes, "measurement_format": MEASUREMENT_FORMAT,
                "versions": library_versions(), "git_commit": git_commit(),
            })
        checkpoint = run_dir.last_checkpoint() if status == "resume" else None
        state = read_checkpoint_state(checkpoint) if checkpoint is not None else None
        if state is not None and "records" in state:  # exactly the records before it
            run_dir.keep_records(state["records"])
        else:
            step = _checkpoint_step(checkpoint)
            run_dir.truncate_metrics(step)
            run_dir.truncate_measurements(step)
        return status, said

    if targs.resume_from_checkpoint:
        _check_resume_point(run_dir, targs.resume_from_checkpoint)
    status, said = on_main_process(prepare)
    if status == "finished":
        echo(f"{run_dir.path} holds a finished run (pass --overwrite to run it again)")
        return TrainResult(run_dir.path, "finished", run_dir.read_results())
    for line in said:
        echo(line)
    for note in notes:
        echo(f"note: {note}")
    resume_from = run_dir.last_checkpoint() if status == "resume" else None
    resume_state = read_checkpoint_state(resume_from) if resume_from is not None else None

    set_seed(targs.seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        if span:
            model = AutoModelForQuestionAnswering.from_pretrained(model_path)
        else:
            model = AutoModelForSequenceClassification.from_pretrained(
                model_path, num_labels=spec.num_labels)
    finally:
        hf_logging.set_verbosity(verbosity)
    collator = DataCollatorWithPadding(tokenizer)
    regs = build_regularizers(ours, targs.gradient_accumulation_steps)
    wrapped = RegularizedModel(model, regs)

    def make_loader(epoch: int) -> torch.utils.data.DataLoader:
        """The Sigma_S pass: seeded order of its own; under torch.distributed a shard per rank
        (the statistics are all-reduced by ``collect_covariance``)."""
        seed = targs.seed * 1000 + epoch
        if is_distributed():
            sampler: torch.utils.data.Sampler = torch.utils.data.DistributedSampler(
                train_ds, shuffle=True, seed=seed)
        else:
            sampler = torch.utils.data.RandomSampler(
                train_ds, generator=torch.Generator().manual_seed(seed))
        # a generator of its own: a DataLoader without one draws its base seed from the global
        # generator, which would shift dropout's random stream after every refresh
        return torch.utils.data.DataLoader(
            train_ds, batch_size=targs.per_device_train_batch_size, sampler=sampler,
            collate_fn=collator, generator=torch.Generator().manual_seed(seed))

    state_cb = IsotropyStateCallback(
        [r for r in regs.values() if isinstance(r, IStarLoss)],
        [r for r in regs.values() if isinstance(r, PersistentEntropyLoss)],
        make_loader, ours.shrinkage_tokens,
        resume_state=resume_state)
    metrics_cb = MetricsFileCallback(run_dir)
    predictor = (SpanPredictor(eval_ds, n_best=ours.n_best_size,
                               max_answer_length=ours.max_answer_length) if span else None)
    trainer = IsotropyTrainer(
        model=wrapped, args=targs, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=collator, processing_class=tokenizer,
        compute_metrics=make_compute_metrics(spec, predictor),
        callbacks=[state_cb, metrics_cb, *callbacks],
        measure_max_tokens=ours.measure_max_tokens, measure_zeta=ours.measure_zeta,
        shrinkage_loader=make_loader, shrinkage_tokens=ours.shrinkage_tokens, run_dir=run_dir,
        measure_pooling=measure_pooling,
    )
    use_console_log(trainer, spec.main_metric)
    metrics_cb.trainer = trainer
    if predictor is not None:
        predictor.order = lambda: _eval_order(trainer, eval_ds)
    if resume_state is not None:
        trainer.restore_checkpoint_state(resume_state)
    t0 = time.perf_counter()
    train_out = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    train_seconds = time.perf_counter() - t0
    if trainer.last_eval_step != trainer.state.global_step or targs.load_best_model_at_end:
        if trainer.last_eval_step is None and not targs.load_best_model_at_end and \
                trainer.resumed_eval_step == trainer.state.global_step:
            # resumed at the end: the last evaluation is logged already, its predictions are
            # needed for the files; evaluate again without logging it twice
            trainer.record_evaluations = False
        trainer.evaluate()
    return TrainResult(run_dir.path, "trained", on_main_process(lambda: _write_run(
        run_dir, trainer, spec, data, eval_ds, model, tokenizer, ours, train_out, train_seconds,
        resume_from, predictor, features, notes)))


def _write_run(run_dir: RunDirectory, trainer: IsotropyTrainer, spec: TaskSpec, data: TaskData,
               eval_ds: TaskDataset, model: Any, tokenizer: Any, ours: IsotropyArguments,
               train_out: Any, train_seconds: float, resume_from: Path | None,
               predictor: SpanPredictor | None, features: dict[str, int],
               notes: list[str]) -> dict[str, Any]:
    """Predictions, model and ``results.json`` into the run directory; returns the results."""

    final = dict(trainer.last_eval.metrics)
    if predictor is not None:
        answers = predictor.answers(trainer.last_eval.predictions)
        write_csv_atomic(run_dir.file(PREDICTIONS), _span_rows(data.eval, answers))
        detail: dict[str, Any] = squad_metrics(answers, data.eval)
        summary: dict[str, Any] = {
            "collapsed": None,
            "note": "not applicable: span extraction has no classes to collapse to",
            "empty_answers": sum(not a.strip() for a in answers.values()),
            "n_questions": len(answers),
        }
    else:
        logits = trainer.last_eval.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        order = _eval_order(trainer, eval_ds)
        logits_in_order = np.empty_like(logits)
        logits_in_order[order] = logits
        write_csv_atomic(run_dir.file(PREDICTIONS),
                         _predictions_rows(spec, data.eval, logits_in_order))
        pred = predictions_from_logits(spec, logits)
        summary = prediction_summary(spec, pred)
        detail = compute_task_metrics(spec, pred, trainer.last_eval.label_ids)
    run_dir.save_model(model, tokenizer)
    records = run_dir.read_metrics()
    main_key = f"eval_{spec.main_metric}"
    results = {
        "task": spec.name, "main_metric": spec.main_metric,
        "regularizers": ours.regularizers or ["none"],
        "final": final,
        "best": _best(records, main_key),
        "prediction_summary": summary,
        "metrics_detail": detail,
        "train": {**train_out.metrics, "global_step": train_out.global_step,
                  "wall_seconds_this_process": train_seconds, "resumed_from":
                  str(resume_from) if resume_from else None},
        "data": data.source, "features": features, "notes": notes,
        "model_dir": str(run_dir.file("model")),
        "measurements": trainer.last_measurements,
    }
    fault_point("results_writing")  # the model and predictions are written, results.json not
    run_dir.write_results(results)
    return results


def _eval_order(trainer: Trainer, eval_ds: TaskDataset) -> np.ndarray:
    """The dataset index (example, or SQuAD window) of each evaluation prediction: the
    Trainer's evaluation sampler is length-grouped (seeded) under ``group_by_length``,
    sequential otherwise."""
    sampler = trainer._get_eval_sampler(eval_ds)
    order = np.asarray(list(sampler) if sampler is not None else range(len(eval_ds)))
    if sorted(order.tolist()) != list(range(len(eval_ds))):
        raise RuntimeError("the evaluation sampler does not visit every example once")
    return order


def _checkpoint_step(checkpoint: Path | None) -> int:
    return int(checkpoint.name.rsplit("-", 1)[-1]) if checkpoint is not None else 0
