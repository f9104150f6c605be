"""Arguments of ``isotropy train``: ours plus every ``transformers.TrainingArguments`` option.

Both dataclasses are parsed together by ``transformers.HfArgumentParser``, so every
``TrainingArguments`` flag keeps Hugging Face's spelling (``--learning_rate``, ``--bf16``, ...).
Values are taken, lowest priority first, from: the dataclass defaults, a ``--preset``, a
``--config`` file (JSON or YAML, keys spelled as the flags without dashes), the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import torch
from transformers import HfArgumentParser, TrainingArguments

from isotropy._validation import accept_negative_numbers
from isotropy.clouds import parse_layers
from isotropy.data.glue import get_task
from isotropy.data.sources import check_data_source
from isotropy.training.presets import TRAIN_PRESETS, preset_values
from isotropy.training.setting_types import coerce_settings

__all__ = [
    "PRESETS",
    "TRAIN_PRESETS",
    "REGULARIZERS",
    "IsotropyArguments",
    "TrainArguments",
    "default_run_name",
    "parse_layers",
    "parse_train_args",
    "preset_values",
]

REGULARIZERS = ("none", "istar", "cosreg", "entropy")


@dataclass
class IsotropyArguments:
    """What to fine-tune, on which data, with which regularizers (``isotropy train``)."""

    task: str = field(default="rte", metadata={"help": "task: sst2, qnli, rte, mrpc, qqp, cola, "
                                                        "stsb, sst5, squad"})
    model: str = field(default="minilm", metadata={
        "help": "hub id, local model directory, or 'minilm' (offline MiniLM-L6-H384)"})
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
        self.data_source = check_data_source(self.data_source)
        regs = [r.strip().lower() for r in self.regularizer]
        unknown = [r for r in regs if r not in REGULARIZERS]
        if unknown:
            raise ValueError(
                f"unknown regularizer {unknown[0]!r}; choose from {', '.join(REGULARIZERS)}"
            )
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
    and accumulation below 1, Adam betas outside [0, 1), a negative Adam epsilon, a seed
    NumPy cannot take."""
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


PRESETS = TRAIN_PRESETS  # the old name (isotropy sweep's registry is SWEEP_PRESETS)



def _read_config_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {p} does not exist")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = (f"line {mark.line + 1}, column {mark.column + 1}: "
                     if mark is not None else "")
            what = getattr(err, "problem", None) or str(err)
            context = getattr(err, "context", None)
            what = f"{what} ({context})" if context else what
            raise ValueError(f"config file {p} is not valid YAML: {where}"
                             f"{' '.join(str(what).split())}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"config file {p} is not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of setting -> value")
    return data


HELP_DESCRIPTION = """\
Fine-tune an encoder on a GLUE-style task (or SQuAD) with isotropy regularizers.

Every transformers.TrainingArguments option is accepted as a flag in Hugging Face's spelling
(--learning_rate, --per_device_train_batch_size, --bf16, ...). Our own options come first,
under "isotropy options"; the Hugging Face ones follow under "Hugging Face TrainingArguments".
"""

HELP_EXAMPLES = """\
examples:
  isotropy train --task rte --model minilm --regularizer istar --tuning -1 --zeta 0.2 \\
      --output_dir runs/rte-istar
  isotropy train --task mrpc --preset entropy --output_dir runs/mrpc-entropy
  isotropy train --config settings.yaml --output_dir runs/x --resume
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter,
                     argparse.ArgumentDefaultsHelpFormatter):
    """Keep the description's paragraphs; show defaults where argparse knows them."""


class TrainParser(HfArgumentParser):
    """``HfArgumentParser`` whose errors are one line, ``isotropy train: error: ... (see
    isotropy train --help)``, exit status 2, without the usage message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # --learning_rat is an error, as in a sweep spec, never --learning_rate by prefix
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        accept_negative_numbers(self)  # --learning_rate -1e-5 is a value (then refused)

    def error(self, message: str) -> NoReturn:  # noqa: D102
        text = " ".join(str(message).split())
        if text.startswith("unrecognized arguments: "):
            import difflib

            flags = [f for f in self._option_string_actions if f.startswith("--")]
            for token in text.split(": ", 1)[1].split():
                close = difflib.get_close_matches(token.split("=")[0], flags, n=1)
                if token.startswith("--") and close:
                    text += f" (did you mean {close[0]}?)"
                    break
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def _say_default(action: argparse.Action) -> None:
    """Append the action's default to its help text (where it has both and the help does not
    show it already), before the default is suppressed."""
    default = action.default
    if any(o.startswith("--no_") or o.startswith("--no-") for o in action.option_strings):
        return  # the negated twin of a flag: its "default" is the flag's, not its own
    if (not action.help or action.help == argparse.SUPPRESS or default is None
            or default is argparse.SUPPRESS or "%(default)" in action.help
            or "default" in action.help.lower()):
        return
    if isinstance(default, (list, tuple)):
        default = " ".join(str(d) for d in default) or "none"
    text = str(default).replace("%", "%%")
    action.help = f"{action.help} (default: {text})"


def build_parser(suppress_defaults: bool = True) -> HfArgumentParser:
    """The ``HfArgumentParser`` of :class:`IsotropyArguments` and :class:`TrainArguments`.

    With ``suppress_defaults`` a parsed namespace holds only the flags given, so a preset and
    a config file can fill in the rest (:func:`args_from_dict`). The help lists our options
    first (group "isotropy options"), then every ``TrainingArguments`` option.
    """
    parser = TrainParser(
        (IsotropyArguments, TrainArguments), prog="isotropy train",
        usage="%(prog)s [--task TASK] [--model MODEL] [--regularizer R ...] [OPTIONS]",
        description=HELP_DESCRIPTION, epilog=HELP_EXAMPLES, formatter_class=_HelpFormatter,
    )
    isotropy_names = {f.name for f in fields(IsotropyArguments)}
    isotropy_group = parser.add_argument_group(
        "isotropy options", "what to fine-tune, on which data, with which regularizers")
    hf = parser.add_argument_group(
        "Hugging Face TrainingArguments",
        "every option of transformers.TrainingArguments; the harness's own defaults are\n"
        "those of --output_dir, --eval_strategy, --save_strategy, --logging_steps,\n"
        "--save_total_limit, --report_to and --logging_dir")
    for action in list(parser._optionals._group_actions):
        if action.dest == "help":
            continue
        parser._optionals._group_actions.remove(action)
        (isotropy_group if action.dest in isotropy_names else hf)._group_actions.append(action)
    if suppress_defaults:
        for action in parser._actions:
            if action.dest != "help":
                _say_default(action)  # --help still shows it
                action.default = argparse.SUPPRESS
    return parser


def field_names() -> set[str]:
    """Every setting's name (the flag without dashes)."""
    return {f.name for cls in (IsotropyArguments, TrainArguments) for f in fields(cls)
            if f.init}


@cache
def field_types() -> dict[str, Any]:
    """Every setting's type hint, by name (what :func:`typed_settings` converts to)."""
    return {**typing.get_type_hints(TrainArguments), **typing.get_type_hints(IsotropyArguments)}


def typed_settings(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``settings`` with each value converted to its field's type
    (:func:`~isotropy.training.setting_types.coerce`: ``"false"`` from a file is false,
    ``"1e-4"`` a number); ``ValueError`` naming the setting and ``where`` when a value
    cannot mean its type.

    >>> typed_settings({"include_padding": "false", "learning_rate": "1e-4"}, "c.yaml")
    {'include_padding': False, 'learning_rate': 0.0001}
    """
    return coerce_settings(settings, where, field_types())


# The papers' names of the regularizer weights: accepted for the recorded setting names
# wherever settings are named (flags, config files, sweep specs); runs record the setting name.
SETTING_ALIASES = {"istar_lambda": "tuning", "cosreg_lambda": "cosreg_tuning",
                   "entropy_beta": "entropy_weight", "entropy_gamma": "in_cluster_weight"}


def canonical_settings(settings: Mapping[str, Any], where: str = "settings") -> dict[str, Any]:
    """``settings`` with every alias (:data:`SETTING_ALIASES`) under its setting's name;
    ``ValueError`` when both spellings are given.

    >>> canonical_settings({"istar_lambda": -1, "zeta": 0.2})
    {'tuning': -1, 'zeta': 0.2}
    """
    out: dict[str, Any] = {}
    spelled: dict[str, Any] = {}
    for key, value in settings.items():
        name = SETTING_ALIASES.get(key, key) if isinstance(key, str) else key
        if name in out:
            raise ValueError(f"{where}: {spelled[name]} and {key} are the same setting; "
                             "give one")
        out[name], spelled[name] = value, key
    return out


def args_from_dict(given: Mapping[str, Any]) -> tuple[IsotropyArguments, TrainArguments]:
    """The two dataclasses from explicitly given settings, a ``config`` file and a ``preset``
    (priority: given > file > preset > defaults); the aliases of :data:`SETTING_ALIASES` are
    accepted. Values are converted to their fields' types once, here
    (:func:`typed_settings`: ``"false"`` in a file is false, ``1e-4`` a number). Bad values
    raise ``ValueError``."""
    names = field_names()
    given = {k: v for k, v in canonical_settings(given).items() if k in names}
    # text from a caller's dict (the command line's values are typed by the parser already)
    given.update(typed_settings({k: v for k, v in given.items() if isinstance(v, str)},
                                "settings"))
    from_file = (canonical_settings(_read_config_file(given["config"]), "config file")
                 if given.get("config") else {})
    unknown = sorted(set(from_file) - names)
    if unknown:
        raise ValueError(f"unknown setting(s) in the config file {given['config']}: "
                         f"{', '.join(unknown)}")
    from_file = typed_settings(from_file, f"config file {given.get('config')}")
    preset = given.get("preset") or from_file.get("preset")
    task = given.get("task") or from_file.get("task") or IsotropyArguments.task
    settings: dict[str, Any] = preset_values(str(preset), str(task)) if preset else {}
    settings.update(from_file)
    settings.update(given)
    if isinstance(settings.get("regularizer"), str):
        settings["regularizer"] = [settings["regularizer"]]
    if settings.get("output_dir") is None:
        settings["output_dir"] = str(Path("runs") / default_run_name(settings))
    try:
        iso_args, train_args = build_parser(suppress_defaults=False).parse_dict(settings)
    except ValueError as err:  # a value checked by the dataclasses: say where it came from
        import re

        named = re.match(r"--(\w+)", str(err))
        if named and named.group(1) in from_file and named.group(1) not in given:
            raise ValueError(f"{err} (from config file {given['config']})") from None
        raise
    if iso_args.group_by_length:
        train_args.train_sampling_strategy = "group_by_length"
    return iso_args, train_args


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


def parse_train_args(argv: Sequence[str] | None = None) -> tuple[IsotropyArguments, TrainArguments]:
    """Parse command-line flags (plus ``--config`` and ``--preset``) into the two dataclasses.

    Malformed flags exit with status 2 and a one-line error; bad values raise ``ValueError``.
    """
    argv = list(argv if argv is not None else [])
    parser = build_parser()
    check_one_spelling(parser, argv)
    return args_from_dict(vars(parser.parse_args(argv)))


def check_one_spelling(parser: HfArgumentParser, argv: Sequence[str]) -> None:
    """A usage error (exit status 2) when a setting is given under two of its names, e.g.
    ``--tuning`` and ``--istar_lambda`` (argparse would keep the last one silently)."""
    seen: dict[str, str] = {}
    for token in argv:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        action = parser._option_string_actions.get(flag)
        if action is None:
            continue
        name = flag[2:].replace("-", "_")
        first = seen.setdefault(action.dest, name)
        if first != name:
            parser.error(f"--{first} and --{name} are the same setting; give one")


def describe(iso_args: IsotropyArguments, train_args: TrainingArguments) -> dict[str, Any]:
    """Every setting as plain JSON-able values (``isotropy`` and ``training`` sections)."""
    from dataclasses import asdict

    training = {k: v for k, v in train_args.to_dict().items() if not k.startswith("_")}
    training = json.loads(json.dumps(training, default=str))
    return {"isotropy": asdict(iso_args), "training": training, "cwd": os.getcwd()}
