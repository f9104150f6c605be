"""``isotropy train``: build the data, model, regularizers and ``Trainer``; run; write the run.

:func:`run_training` checks every input (task, data files, model, tokenised features, output
directory) before any work, then fine-tunes ``AutoModelForSequenceClassification`` (one output
unit for STS-B regression) or, for SQuAD, ``AutoModelForQuestionAnswering`` wrapped in a
:class:`~isotropy.models.regularized.RegularizedModel` with
:class:`~isotropy.training.trainer.IsotropyTrainer`, which adds the task loss, every
regularizer's logs and the batch [CLS] spectrum (averaged over the logging interval) to the
Trainer's logs, and the task metrics and the representation measurements of the evaluation
set (:mod:`isotropy.probing.eval_measures`) to every evaluation.

SQuAD trains on windows of the contexts (``--max_seq_length``, ``--doc_stride``) with
start/end labels; every evaluation maps the windows' start/end logits back to answer texts
(n-best post-processing, ``--n_best_size``, ``--max_answer_length``) and scores exact match and
F1 per question. ``eval_predictions.csv`` then holds one row per question: ``guid``, the gold
``answers`` and ``answer_starts`` (JSON lists) and the predicted text.

The persistent-entropy regularizer scores each class label's cloud separately. STS-B
(regression scores) and SQuAD (spans) have no class labels: there it scores the whole cloud of
the batch (of its window of micro-batches) as one group, and ``config.json`` and
``results.json`` say so under ``notes``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Trainer, TrainerCallback

from isotropy.data.glue import TaskSpec, get_task
from isotropy.data.sources import TaskData, load_task_data
from isotropy.data.squad import squad_metrics
from isotropy.data.task_metrics import (
    compute_task_metrics,
    prediction_summary,
    predictions_from_logits,
)
from isotropy.distributed import is_distributed, on_main_process
from isotropy.io import write_csv_atomic
from isotropy.losses import IStarLoss, PersistentEntropyLoss
from isotropy.models.loading import ensure_pad_token, load_pretrained, resolve_model
from isotropy.models.mean_pooling import set_classifier_pooling
from isotropy.models.regularized import (
    RegularizedModel,
)
from isotropy.rundir import (
    CONFIG,
    MEASUREMENT_FORMAT,
    PREDICTIONS,
    RunDirectory,
    git_commit,
    library_versions,
)
from isotropy.runtime import fault_point, flush_denormals, stop_point
from isotropy.training._compat import check_resumable_on_these_processes
from isotropy.training.callbacks import (
    IsotropyStateCallback,
    MetricsFileCallback,
    check_checkpoint,
    read_checkpoint_state,
)
from isotropy.training.config import IsotropyArguments, TrainArguments, describe
from isotropy.training.console import use_console_log
from isotropy.training.features import (
    TaskDataset,
    tokenize_examples,
    tokenize_squad,
)
from isotropy.training.model_kind import check_pooling, is_decoder_only
from isotropy.training.preconditions import (
    check_best_metric,
    check_drop_last,
    check_feature_lengths,
    check_model,
    check_parallel,
    check_precision,
    check_resume_point,
    checkpoint_step,
    prepare_span_arguments,
    resume_point,
    settings_difference,
)
from isotropy.training.predictions import (
    SpanPredictor,
    _predictions_rows,
    _span_rows,
    make_compute_metrics,
)
from isotropy.training.stopping import StopPoints
from isotropy.training.trainer import IsotropyTrainer, build_regularizers

__all__ = [
    "TrainResult",
    "run_training",
]


@dataclass
class TrainResult:
    """Where the run is and what it gave: ``status`` is ``'trained'`` or ``'finished'``
    (an earlier finished run found and kept)."""

    run_dir: Path
    status: str
    results: dict[str, Any]


def _best(records: list[dict[str, Any]], key: str, greater: bool = True) -> dict[str, Any] | None:
    evals = [r for r in records if r.get(key) is not None]
    if not evals:
        return None
    pick = max if greater else min
    return pick(evals, key=lambda r: r[key])


def run_training(
    iso_args: IsotropyArguments,
    train_args: TrainArguments,
    *,
    callbacks: Sequence[TrainerCallback] = (),
    echo: Callable[[str], None] = print,
) -> TrainResult:
    """Fine-tune as configured; returns the run directory and its results (see module doc).

    On CPU, denormal floats are flushed to zero for the run and the mode restored after it.
    """
    with flush_denormals(not torch.cuda.is_available()):
        return _run_training(iso_args, train_args, callbacks=callbacks, echo=echo)


def _regularizer_notes(spec: TaskSpec, iso_args: IsotropyArguments) -> list[str]:
    """What a regularizer does differently on this task (recorded in config.json)."""
    if "entropy" in iso_args.regularizers and spec.kind != "classification":
        why = "regression scores" if spec.kind == "regression" else "no class labels"
        return [f"entropy: {spec.display_name} has {why}: the persistent entropy is taken of "
                f"the whole batch's {iso_args.pooling}-pooled cloud as one group, not per class "
                "label"]
    return []


@dataclass
class _Inputs:
    """What a run is built from, every part checked before any training: the task, its
    examples, the model's files and the tokenised features."""

    spec: TaskSpec
    data: TaskData
    model_path: str
    measure_pooling: str
    tokenizer: Any
    train_ds: TaskDataset
    eval_ds: TaskDataset
    features: dict[str, int]
    notes: list[str]

    @property
    def span(self) -> bool:
        return self.spec.kind == "span"


def _load_inputs(iso_args: IsotropyArguments, train_args: TrainArguments) -> _Inputs:
    """Task, data, model files and features, checked (one-line errors) before anything runs."""
    from transformers import AutoTokenizer

    spec = get_task(iso_args.task)
    span = spec.kind == "span"
    if train_args.prediction_loss_only:
        raise ValueError("--prediction_loss_only leaves no predictions for the task metrics "
                         "and eval_predictions.csv")
    prepare_span_arguments(spec, train_args)
    subset_seed = train_args.seed if iso_args.subset_seed is None else iso_args.subset_seed
    data = load_task_data(iso_args, subset_seed)
    model_path = resolve_model(iso_args.model)
    model_config = check_model(model_path, iso_args)
    check_best_metric(train_args, spec, model_config)
    check_pooling(model_path, iso_args.pooling, iso_args.regularizers)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    fault_point("tokenizer_loaded")  # start-up: where a dropped Ctrl-C was seen
    notes = _regularizer_notes(spec, iso_args)
    if tokenizer.pad_token is None:  # decoders: pad with end-of-sequence, as analyze does
        ensure_pad_token(tokenizer)
        notes.append(f"the tokenizer has no padding token: batches are padded with "
                     f"{tokenizer.pad_token!r} (masked out)")
    if span:
        train_ds = tokenize_squad(data.train, tokenizer, iso_args.max_seq_length,
                                  iso_args.doc_stride)
        eval_ds = tokenize_squad(data.eval, tokenizer, iso_args.max_seq_length, iso_args.doc_stride)
    else:
        train_ds = tokenize_examples(data.train, tokenizer, spec, iso_args.max_seq_length)
        eval_ds = tokenize_examples(data.eval, tokenizer, spec, iso_args.max_seq_length)
    check_drop_last(train_args, len(eval_ds), "windows" if span else "examples")
    check_feature_lengths([len(f["input_ids"]) for ds in (train_ds, eval_ds)
                           for f in ds.features], model_config,
                          iso_args.max_seq_length, iso_args.model)
    return _Inputs(
        spec=spec, data=data, model_path=model_path,
        # the evaluation's and the training spectrum's one row per example: [CLS] of an
        # encoder, the last token of a decoder-only model (as isotropy analyze pools it)
        measure_pooling="last" if is_decoder_only(model_config) else "cls",
        tokenizer=tokenizer, train_ds=train_ds, eval_ds=eval_ds,
        features={"n_train_features": len(train_ds), "n_eval_features": len(eval_ds)},
        notes=notes)


def _prepare_run_dir(run_dir: RunDirectory, iso_args: IsotropyArguments, train_args: TrainArguments,
                     inputs: _Inputs, settings: dict[str, Any]) -> tuple[str, list[str]]:
    """The run directory's state (new, restart, resume or finished; :meth:`RunDirectory.prepare`)
    and what to say about it; writes ``config.json`` for a new run and cuts the JSONL files
    back to the checkpoint a resumed run continues from. On the main process only."""
    said: list[str] = []
    status = run_dir.prepare(resume=iso_args.resume or bool(train_args.resume_from_checkpoint),
                             overwrite=iso_args.overwrite,
                             same_settings=lambda old: settings_difference(
                                 old, settings, inputs.data.source))
    if status == "finished":
        return status, said
    if status == "restart":
        said.append(f"{run_dir.path} held an unfinished run without a complete checkpoint: "
                    "starting it again")
    if status == "new" and iso_args.resume:  # a mistyped --output_dir trains from scratch
        said.append(f"--resume: {run_dir.path} holds no run to continue: starting a new one")
    if status == "resume":  # every check before resume_point changes anything
        check_resumable_on_these_processes(train_args, run_dir.path)
        said.extend(_check_resume(run_dir, train_args.resume_from_checkpoint))
        said.extend(resume_point(run_dir, train_args.resume_from_checkpoint))
    if status in ("new", "restart") or not run_dir.file(CONFIG).is_file():
        spec = inputs.spec
        run_dir.write_config({
            "settings": settings, "model_path": inputs.model_path, "data": inputs.data.source,
            "features": inputs.features,
            "task": {"name": spec.name, "kind": spec.kind, "num_labels": spec.num_labels,
                     "metrics": list(spec.metrics)},
            "notes": inputs.notes, "measurement_format": MEASUREMENT_FORMAT,
            "versions": library_versions(), "git_commit": git_commit(),
        })
    checkpoint = run_dir.last_checkpoint() if status == "resume" else None
    state = read_checkpoint_state(checkpoint) if checkpoint is not None else None
    if state is not None and "records" in state:  # exactly the records before it
        run_dir.keep_records(state["records"])
    else:
        step = checkpoint_step(checkpoint)
        run_dir.truncate_metrics(step)
        run_dir.truncate_measurements(step)
    return status, said


def _check_resume(run_dir: RunDirectory, requested: str | None) -> list[str]:
    """The checkpoint a resume continues from (``requested``, else the last complete one) is
    whole, and the JSONL files can be cut back to it (:meth:`RunDirectory.check_records`);
    ``ValueError`` (one line) otherwise. Returns what to tell the user."""
    resumed = check_resume_point(run_dir, requested) if requested else run_dir.last_checkpoint()
    if resumed is None:
        return []
    state = check_checkpoint(resumed)
    return run_dir.check_records((state or {}).get("records"), resumed.name)


def _load_model(inputs: _Inputs, classifier_pooling: str = "cls") -> Any:
    """``AutoModelForQuestionAnswering`` (SQuAD) or ``AutoModelForSequenceClassification``
    (read through :class:`~isotropy.models.mean_pooling.MeanPooledClassifier` under
    ``--classifier_pooling mean``), without transformers' notes on the freshly initialised
    head."""
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # transformers 5's "Loading weights" bar, in every log
    try:  # a half-precision checkpoint trains with float32 master weights
        if inputs.span:
            model = load_pretrained(AutoModelForQuestionAnswering, inputs.model_path)
        else:
            model = load_pretrained(AutoModelForSequenceClassification, inputs.model_path,
                                    num_labels=inputs.spec.num_labels)
        if getattr(model.config, "pad_token_id", None) is None:
            # a decoder's classification head reads the last token before the padding
            model.config.pad_token_id = inputs.tokenizer.pad_token_id
        return set_classifier_pooling(model, classifier_pooling)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


def _shrinkage_loader(train_args: TrainArguments, train_ds: TaskDataset,
                      collator: Any) -> Callable[[int], torch.utils.data.DataLoader]:
    """The Sigma_S pass's loader per epoch: a seeded order of its own; under torch.distributed
    a shard per rank (the statistics are all-reduced by ``collect_covariance``)."""

    def make_loader(epoch: int) -> torch.utils.data.DataLoader:
        seed = train_args.seed * 1000 + epoch
        if is_distributed():
            sampler: torch.utils.data.Sampler = torch.utils.data.DistributedSampler(
                train_ds, shuffle=True, seed=seed)
        else:
            sampler = torch.utils.data.RandomSampler(
                train_ds, generator=torch.Generator().manual_seed(seed))
        # a generator of its own: a DataLoader without one draws its base seed from the global
        # generator, which would shift dropout's random stream after every refresh
        return torch.utils.data.DataLoader(
            train_ds, batch_size=train_args.per_device_train_batch_size, sampler=sampler,
            collate_fn=collator, generator=torch.Generator().manual_seed(seed))

    return make_loader


def _build_trainer(iso_args: IsotropyArguments, train_args: TrainArguments, inputs: _Inputs,
                   run_dir: RunDirectory, model: Any, callbacks: Sequence[TrainerCallback],
                   resume_state: dict[str, Any] | None
                   ) -> tuple[IsotropyTrainer, SpanPredictor | None]:
    """The regularized model in an :class:`IsotropyTrainer` with the harness's callbacks."""
    from transformers import DataCollatorWithPadding

    collator = DataCollatorWithPadding(inputs.tokenizer)
    regs = build_regularizers(iso_args, train_args.gradient_accumulation_steps)
    make_loader = _shrinkage_loader(train_args, inputs.train_ds, collator)
    state_cb = IsotropyStateCallback(
        [r for r in regs.values() if isinstance(r, IStarLoss)],
        [r for r in regs.values() if isinstance(r, PersistentEntropyLoss)],
        make_loader, iso_args.shrinkage_tokens,
        resume_state=resume_state)
    metrics_cb = MetricsFileCallback(run_dir)
    predictor = (SpanPredictor(inputs.eval_ds, n_best=iso_args.n_best_size,
                               max_answer_length=iso_args.max_answer_length)
                 if inputs.span else None)
    trainer = IsotropyTrainer(
        model=RegularizedModel(model, regs), args=train_args, train_dataset=inputs.train_ds,
        eval_dataset=inputs.eval_ds, data_collator=collator, processing_class=inputs.tokenizer,
        compute_metrics=make_compute_metrics(inputs.spec, predictor),
        callbacks=[state_cb, metrics_cb, *callbacks],
        measure_max_tokens=iso_args.measure_max_tokens, measure_zeta=iso_args.measure_zeta,
        shrinkage_loader=make_loader, shrinkage_tokens=iso_args.shrinkage_tokens, run_dir=run_dir,
        measure_pooling=inputs.measure_pooling,
    )
    use_console_log(trainer, inputs.spec.main_metric)
    metrics_cb.trainer = trainer
    if predictor is not None:
        predictor.order = lambda: _eval_order(trainer, inputs.eval_ds)
    if resume_state is not None:
        trainer.restore_checkpoint_state(resume_state)
    return trainer, predictor


def _train(trainer: IsotropyTrainer, train_args: TrainArguments,
           resume_from: Path | None) -> tuple[Any, float]:
    """Train (from ``resume_from``), then evaluate the final model unless the last evaluation
    already did; returns the Trainer's output and the seconds spent training."""
    t0 = time.perf_counter()
    train_out = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    train_seconds = time.perf_counter() - t0
    if trainer.last_eval_step != trainer.state.global_step or train_args.load_best_model_at_end:
        if trainer.last_eval_step is None and not train_args.load_best_model_at_end and \
                trainer.resumed_eval_step == trainer.state.global_step:
            # resumed at the end: the last evaluation is logged already, its predictions are
            # needed for the files; evaluate again without logging it twice
            trainer.record_evaluations = False
        trainer.evaluate()
    return train_out, train_seconds


def _run_training(
    iso_args: IsotropyArguments,
    train_args: TrainArguments,
    *,
    callbacks: Sequence[TrainerCallback],
    echo: Callable[[str], None],
) -> TrainResult:
    """The steps of :func:`run_training`: inputs, run directory, model, Trainer, train, write."""
    run_dir = RunDirectory(train_args.output_dir)
    # a folder that is not a run of ours: refused before any work
    run_dir.check_not_foreign(overwrite=iso_args.overwrite)
    inputs = _load_inputs(iso_args, train_args)
    stop_point()  # a Ctrl-C that Python dropped while the tokenizer and data were loaded
    settings = describe(iso_args, train_args)  # before the devices are set up (check_parallel)
    check_parallel(train_args)
    check_precision(train_args)
    if train_args.resume_from_checkpoint:
        check_resume_point(run_dir, train_args.resume_from_checkpoint)
    with contextlib.ExitStack() as held:
        # one writer per run directory, from reading its state to writing its last file
        on_main_process(lambda: held.enter_context(run_dir.writer()))
        return _run_locked(iso_args, train_args, inputs, run_dir, settings,
                           callbacks=callbacks, echo=echo)


def _run_locked(iso_args: IsotropyArguments, train_args: TrainArguments, inputs: _Inputs,
                run_dir: RunDirectory, settings: dict[str, Any], *,
                callbacks: Sequence[TrainerCallback], echo: Callable[[str], None]
                ) -> TrainResult:
    """:func:`_run_training` once the run directory's lock is held."""
    from transformers import set_seed

    stop_point()
    status, said = on_main_process(
        lambda: _prepare_run_dir(run_dir, iso_args, train_args, inputs, settings))
    if status == "finished":
        echo(f"{run_dir.path} holds this run, finished: nothing was trained, its results are "
             "kept")
        return TrainResult(run_dir.path, "finished", run_dir.read_results())
    for line in said:
        echo(line)
    for note in inputs.notes:
        echo(f"note: {note}")
    resume_from = run_dir.last_checkpoint() if status == "resume" else None
    resume_state = read_checkpoint_state(resume_from) if resume_from is not None else None

    set_seed(train_args.seed)
    model = _load_model(inputs, iso_args.classifier_pooling)
    trainer, predictor = _build_trainer(iso_args, train_args, inputs, run_dir, model,
                                        [*callbacks, StopPoints()], resume_state)
    stop_point()
    train_out, train_seconds = _train(trainer, train_args, resume_from)
    done = _Trained(run_dir=run_dir, trainer=trainer, inputs=inputs, model=model, iso_args=iso_args,
                    train_out=train_out, train_seconds=train_seconds,
                    resume_from=resume_from, predictor=predictor)
    return TrainResult(run_dir.path, "trained", on_main_process(lambda: _write_run(done)))


@dataclass
class _Trained:
    """A finished training run, for :func:`_write_run`."""

    run_dir: RunDirectory
    trainer: IsotropyTrainer
    inputs: _Inputs
    model: Any
    iso_args: IsotropyArguments
    train_out: Any
    train_seconds: float
    resume_from: Path | None
    predictor: SpanPredictor | None


def _write_run(done: _Trained) -> dict[str, Any]:
    """Predictions, model and ``results.json`` into the run directory; returns the results."""
    run_dir, trainer, inputs = done.run_dir, done.trainer, done.inputs
    spec, data = inputs.spec, inputs.data
    final = dict(trainer.last_eval.metrics)
    if done.predictor is not None:
        answers = done.predictor.answers(trainer.last_eval.predictions)
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
        order = _eval_order(trainer, inputs.eval_ds)
        logits_in_order = np.empty_like(logits)
        logits_in_order[order] = logits
        write_csv_atomic(run_dir.file(PREDICTIONS),
                         _predictions_rows(spec, data.eval, logits_in_order))
        pred = predictions_from_logits(spec, logits)
        summary = prediction_summary(spec, pred)
        detail = compute_task_metrics(spec, pred, trainer.last_eval.label_ids)
    run_dir.save_model(done.model, inputs.tokenizer)
    records = run_dir.read_metrics()
    main_key = f"eval_{spec.main_metric}"
    results = {
        "task": spec.name, "main_metric": spec.main_metric,
        "regularizers": done.iso_args.regularizers or ["none"],
        "final": final,
        "best": _best(records, main_key),
        "prediction_summary": summary,
        "metrics_detail": detail,
        "train": {**done.train_out.metrics, "global_step": done.train_out.global_step,
                  "wall_seconds_this_process": done.train_seconds, "resumed_from":
                  str(done.resume_from) if done.resume_from else None},
        "data": data.source, "features": inputs.features, "notes": inputs.notes,
        "model_dir": str(run_dir.file("model")),
        "model_files": run_dir.model_files(),  # what --overwrite may delete of model/
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
