"""Run directories as :class:`Run` records: what a finished ``isotropy train`` run holds
(settings, method, final and best evaluations, logs, measurements) and how one is read
(tolerant of a JSONL file cut short; a run of an unknown measurement format is skipped; an
archived run's ``results.json``, ``metrics.jsonl`` and ``measurements.jsonl`` may be stored
gzip-compressed as ``name.gz``, read where ``name`` is absent; a sweep folder may be packed as
``<sweep>.tar.xz`` beside, read as the folder: :mod:`isotropy.reporting.packed`). Which
directories the arguments name: :mod:`isotropy.reporting.discovery`."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from isotropy.clouds import parse_layers
from isotropy.io import archived, read_text_utf8
from isotropy.reporting.packed import real_path
from isotropy.rundir import CONFIG, MEASUREMENTS, METRICS, RESULTS, read_jsonl_whole

__all__ = [
    "COMPARED_SETTINGS",
    "FORMAT_BOUND_OUTPUTS",
    "LAST_FRACTION",
    "MEASUREMENT_FORMATS",
    "SPECTRUM_KEYS",
    "TABLE1_METRICS",
    "eval_history",
    "load_run",
    "mean_std",
    "measurement_format",
    "Method",
    "method_of",
    "read_jsonl_whole",
    "Run",
    "tail_evaluations",
]

SPECTRUM_KEYS = tuple(f"cls_spectrum_{kind}_{k}" for kind in ("raw", "centred") for k in (1, 2, 3))
LAST_FRACTION = 0.3
# the metrics Table 1 reports per task besides the main one (I-STAR Table 1: SQuAD as F1/EM)
TABLE1_METRICS = {"squad": ("f1", "exact_match")}
# what each measurement format (config.json's "measurement_format"; absent = 1) means for the
# measures that changed between formats
MEASUREMENT_FORMATS = {
    1: "per-layer IsoScore* shrunk toward the union's Σ_S; training [CLS] spectrum per "
       "micro-batch",
    2: "per-layer IsoScore* shrunk toward each layer's own Σ_S; training [CLS] spectrum over "
       "the whole gradient-accumulation cycle",
}
# the outputs built from per-layer IsoScore* or the training spectrum: never from runs of
# different measurement formats (name -> what it is)
FORMAT_BOUND_OUTPUTS = {
    "fig6": "Fig. 6 (I-STAR, IsoScore* per layer)",
    "table3": "Table 3 (persistent entropy, [CLS] spectrum over the last 30% of training)",
    "pe_fig1": "persistent-entropy Fig. 1 ([CLS] spectrum over training)",
}
_ISO_KEYS = ("task", "model", "regularizer", "tuning", "zeta", "cosreg_tuning",
             "entropy_weight", "select_features")
# the settings that define an experiment besides task, model, method and seed: runs that differ
# in one of them are never pooled (see collect_runs). Where and how a run was written, logged,
# loaded or distributed does not count, nor do the evaluation-only measure_* settings (Figs. 3
# and 6 check the measurement ζ themselves).
COMPARED_SETTINGS = (
    # isotropy train's own
    "max_seq_length", "doc_stride", "max_train_samples", "max_eval_samples", "subset_seed",
    "split_dev_for_training", "validation_split_percentage", "split_unit",
    "shrinkage_tokens", "pooling", "entropy_window",
    "group_by_length", "n_best_size", "max_answer_length", "classifier_pooling",
    # TrainingArguments that change what is trained
    "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
    "gradient_accumulation_steps", "warmup_steps", "warmup_ratio", "lr_scheduler_type",
    "lr_scheduler_kwargs", "optim", "optim_args", "weight_decay", "adam_beta1", "adam_beta2",
    "adam_epsilon", "max_grad_norm", "label_smoothing_factor", "bf16", "fp16", "data_seed",
    "train_sampling_strategy", "neftune_noise_alpha", "load_best_model_at_end",
    "metric_for_best_model",
)


def _num(v: float) -> str:
    """Compact number text: ``-1.0`` -> ``-1``, ``0.2`` -> ``0.2``."""
    return f"{v:g}"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (``ddof=1``; ``None`` for a single value)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        raise ValueError("mean_std of no values")
    return float(a.mean()), (float(a.std(ddof=1)) if a.size > 1 else None)


def _fmt(mean: float, std: float | None, digits: int = 4) -> str:
    return f"{mean:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Method:
    """The regularizers of a run with their parameters (the part of a cell besides task, model).

    ``label`` reads e.g. ``istar λ=-1 ζ=0.2``, ``cosreg λ=1``, ``entropy β=1 (all bars)``,
    ``none``; ``key`` orders methods: none, cosreg, istar by (λ, ζ), entropy, combinations.
    """

    regularizers: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    label: str
    key: tuple[Any, ...]

    def get(self, name: str) -> Any:
        return dict(self.params).get(name)


_ORDER = {"none": 0, "cosreg": 1, "istar": 2, "entropy": 3}


def _layers_key(value: Any) -> str:
    """``--istar_layers`` as one spelling: ``all``, ``last``, ``3`` or ``1,2`` (from e.g.
    ``" ALL"``, ``[3]``, ``"[1, 2]"``); an unreadable value is kept as written.

    >>> [_layers_key(v) for v in ("all", " ALL", 3, [3], "[1, 2]", "last")]
    ['all', 'all', '3', '3', '1,2', 'last']
    """

    text = value if isinstance(value, (int, list, tuple)) else str(value).strip().strip("[]()")
    try:
        parsed = parse_layers(text)
    except (ValueError, TypeError):
        return str(value)
    if isinstance(parsed, str):
        return parsed
    return ",".join(map(str, parsed)) if isinstance(parsed, list) else str(parsed)


def method_of(iso: Mapping[str, Any]) -> Method:
    """The :class:`Method` of a run from its ``settings.isotropy`` section."""
    regs = tuple(dict.fromkeys(str(r).lower() for r in (iso.get("regularizer") or ["none"])))
    regs = tuple(r for r in regs if r != "none") or ("none",)
    params: dict[str, Any] = {}
    parts: list[str] = []
    pad = bool(iso.get("include_padding", False))
    for r in regs:
        if r == "istar":
            lam, zeta = float(iso["tuning"]), float(iso["zeta"])
            layers = _layers_key(iso.get("istar_layers", "all"))
            params.update(istar_lambda=lam, istar_zeta=zeta, istar_layers=layers)
            if pad:
                params.update(istar_padding=True)
            parts.append(f"istar λ={_num(lam)} ζ={_num(zeta)}"
                         + ("" if layers == "all" else f" layers {layers}")
                         + (" with padding" if pad else ""))
        elif r == "cosreg":
            lam = float(iso["cosreg_tuning"])
            params.update(cosreg_lambda=lam)
            if pad:
                params.update(cosreg_padding=True)
            parts.append(f"cosreg λ={_num(lam)}" + (" with padding" if pad else ""))
        elif r == "entropy":
            beta, select = float(iso["entropy_weight"]), bool(iso["select_features"])
            gamma = float(iso.get("in_cluster_weight") or 0.0)
            # runs written before --entropy_accumulation used the sliding window
            window = iso.get("entropy_accumulation", "window") == "window"
            params.update(entropy_beta=beta, select_features=select, in_cluster_weight=gamma)
            if window:
                params.update(entropy_window=True)
            parts.append(f"entropy β={_num(beta)}" + ("" if select else " (all bars)")
                         + (f" in-cluster {_num(gamma)}" if gamma else "")
                         + (" (window)" if window else ""))
        elif r == "none":
            parts.append("none")
        else:
            raise KeyError(f"unknown regularizer {r!r}")
    key = (len(regs), tuple(_ORDER.get(r, 9) for r in regs),
           tuple(sorted((k, str(v)) if not isinstance(v, float) else (k, v)
                        for k, v in params.items())))
    return Method(regs, tuple(sorted(params.items())), " + ".join(parts), key)


@dataclass
class Run:
    """One finished run directory: its cell, seed, main metric and evaluation records."""

    path: Path
    task: str
    model: str
    method: Method
    seed: int
    main_metric: str
    final: dict[str, Any]
    best: dict[str, Any]
    settings: dict[str, str] = field(default_factory=dict)  # compared settings, as JSON
    setting: str = ""  # how its settings differ from other runs of its task and model
    measurement_format: int = 1
    train_steps: int | None = None  # results.json's train.global_step
    tuned: str = ""  # its values of the --pick-best-over settings (empty without that option)
    # a run evaluated at step 0 (eval_on_start) every eval_every steps: the grid its
    # evaluations lie on when uninterrupted (None: not such a run)
    eval_every: int | None = None

    def value(self, name: str, which: str = "final") -> float | None:
        """``results.json``'s ``which`` (final/best) record's ``eval_<name>`` (or ``name``)."""
        rec = self.final if which == "final" else self.best
        v = rec.get(name if name.startswith("eval_") else f"eval_{name}")
        return float(v) if _is_number(v) else None

    @cached_property
    def read_notes(self) -> list[str]:
        """What was cut short in the run's JSONL files (filled as they are read)."""
        return []

    def _records(self, name: str) -> list[dict[str, Any]]:
        records, note = read_jsonl_whole(archived(real_path(self.path) / name))
        if note and note not in self.read_notes:
            self.read_notes.append(note)
        return records

    @cached_property
    def metrics_records(self) -> list[dict[str, Any]]:
        """The whole records of ``metrics.jsonl`` (up to the first cut or unreadable line)."""
        return self._records(METRICS)

    @cached_property
    def measurement_records(self) -> list[dict[str, Any]]:
        """The whole records of ``measurements.jsonl`` (up to the first cut line)."""
        return self._records(MEASUREMENTS)

    @cached_property
    def last_measurement(self) -> dict[str, Any] | None:
        """The last whole record of ``measurements.jsonl`` (``None`` if there is none)."""
        recs = self.measurement_records
        return recs[-1] if recs else None

    def uninterrupted(self, step: float) -> bool:
        """Whether an uninterrupted run evaluates at ``step``. A run evaluated at step 0
        (``eval_on_start``) by an older isotropy was evaluated again at the step of every
        checkpoint it resumed from (the Trainer's start evaluation); on its grid of
        ``eval_every`` steps that is a step no uninterrupted run evaluates at (its last step
        aside), and it is not counted. Every step counts for other runs."""
        if self.eval_every is None or step <= 0 or step == self.train_steps:
            return True
        return step % self.eval_every == 0

    @cached_property
    def evaluations(self) -> list[tuple[float, float]]:
        """``(step, eval_<main metric>)`` of every evaluation in ``metrics.jsonl``
        (:func:`eval_history`) that an uninterrupted run makes (:meth:`uninterrupted`)."""
        return [(t, v) for t, v in eval_history(self.metrics_records, self.main_metric)
                if self.uninterrupted(t)]

    @cached_property
    def uncounted_evaluations(self) -> list[float]:
        """The steps of logged evaluations that :attr:`evaluations` leaves out (a resume's
        start evaluation, :meth:`uninterrupted`)."""
        return [t for t, _ in eval_history(self.metrics_records, self.main_metric)
                if not self.uninterrupted(t)]

    @property
    def total_steps(self) -> float | None:
        """Training steps of the run: ``results.json``'s ``train.global_step``, else the largest
        step of ``metrics.jsonl`` (``None`` if it has none)."""
        if self.train_steps is not None:
            return float(self.train_steps)
        steps = [float(r["step"]) for r in self.metrics_records if _is_number(r.get("step"))]
        return max(steps) if steps else None

    @cached_property
    def spectrum_logs(self) -> list[dict[str, float]]:
        """The training logs of ``metrics.jsonl`` holding the six ``cls_spectrum_*`` values."""
        out = []
        for rec in self.metrics_records:
            if _is_number(rec.get("step")) and all(_is_number(rec.get(k)) for k in SPECTRUM_KEYS):
                out.append({"step": float(rec["step"]),
                            **{k: float(rec[k]) for k in SPECTRUM_KEYS}})
        return out


def eval_history(records: Iterable[Mapping[str, Any]], metric: str
                 ) -> list[tuple[float, float]]:
    """``(step, value)`` of the evaluations among Trainer log ``records`` holding a finite
    ``eval_<metric>``, in step order, one per step: the first logged (a run that loads its best
    model at the end evaluates it again at the last step; that re-evaluation is not counted).

    >>> eval_history([{"step": 5, "eval_f1": 0.5}, {"step": 9, "loss": 1.0},
    ...               {"step": 9, "eval_f1": 0.7}, {"step": 9, "eval_f1": 0.6}], "f1")
    [(5.0, 0.5), (9.0, 0.7)]
    """
    out: dict[float, float] = {}
    for rec in records:
        step, v = rec.get("step"), rec.get(f"eval_{metric}")
        if _is_number(step) and _is_number(v):
            out.setdefault(float(step), float(v))
    return sorted(out.items())


def tail_evaluations(history: Sequence[tuple[float, float]], total_steps: float,
                     fraction: float = LAST_FRACTION) -> list[float]:
    r"""The values of the evaluations in the last ``fraction`` of training: steps
    :math:`t \ge (1-f)\,T` for ``total_steps`` :math:`T`.

    >>> tail_evaluations([(30, 0.1), (69, 0.2), (70, 0.3), (100, 0.4)], 100)
    [0.3, 0.4]
    """
    return [v for t, v in history if t >= (1.0 - fraction) * total_steps]


def measurement_format(config: Mapping[str, Any]) -> int:
    """The measurement format of a run from its ``config.json``: ``measurement_format`` at the
    top level, 1 when absent (every run written before the mark); ``ValueError`` for a value
    that is not one of :data:`MEASUREMENT_FORMATS`.

    >>> measurement_format({}), measurement_format({"measurement_format": 2})
    (1, 2)
    """
    fmt = config.get("measurement_format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt not in MEASUREMENT_FORMATS:
        known = ", ".join(map(str, MEASUREMENT_FORMATS))
        raise ValueError(f"{CONFIG} has measurement_format {fmt!r}, which this version of "
                         f"isotropy report does not know (it knows {known})")
    return fmt




_TASK_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text_utf8(path))
    except json.JSONDecodeError as err:
        raise ValueError(f"unreadable {path.name}: {err}") from None
    except (OSError, ValueError) as err:
        raise ValueError(f"unreadable {path.name}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a JSON object (another format)")
    return data


def load_run(path: str | os.PathLike[str], which: str = "final") -> Run:
    """Read one run directory (inside a packed sweep too; the run keeps ``path`` as its
    path); ``ValueError`` with the reason if it cannot be used."""
    p = Path(path)
    real = real_path(p)
    if not real.is_dir():
        raise ValueError("not a directory")
    if not (real / CONFIG).is_file():
        raise ValueError(f"no {CONFIG} (not an isotropy train run directory)")
    if not archived(real / RESULTS).is_file():
        raise ValueError(f"incomplete: no {RESULTS} (the run is unfinished or failed)")
    config = _read_json(real / CONFIG)
    results = _read_json(archived(real / RESULTS))
    settings = config.get("settings")
    if not isinstance(settings, dict) or not isinstance(settings.get("isotropy"), dict) \
            or not isinstance(settings.get("training"), dict):
        raise ValueError(f"another format: {CONFIG} lacks settings.isotropy / settings.training")
    iso, training = settings["isotropy"], settings["training"]
    missing = [k for k in _ISO_KEYS if k not in iso]
    if missing:
        raise ValueError(f"another format: {CONFIG} settings.isotropy lacks {', '.join(missing)}")
    seed = training.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"another format: {CONFIG} settings.training lacks an integer seed")
    metric = results.get("main_metric")
    if not isinstance(metric, str):
        raise ValueError(f"another format: {RESULTS} lacks main_metric")
    for part in ("final", "best"):
        if not isinstance(results.get(part), dict):
            raise ValueError(f"another format: {RESULTS} lacks {part}")
    rec = results[which]
    if not _is_number(rec.get(f"eval_{metric}")):
        raise ValueError(f"{RESULTS} has no finite {which}.eval_{metric}")
    try:
        method = method_of(iso)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"another format: bad regularizer settings ({err})") from None
    task = str(results.get("task") or iso["task"])
    if not _TASK_NAME.fullmatch(task):  # it names the report's figure files
        raise ValueError(f"another format: task {task[:60]!r} is not a task's name (letters, "
                         "digits, '.', '_', '+' and '-', not starting with '.')")
    model = Path(str(iso["model"]).rstrip("/")).name or "model"
    # runs before an option had its default: [CLS] read, no split of the train split
    merged = {"classifier_pooling": "cls", "validation_split_percentage": None, **iso,
              **training}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    if iso.get("split_dev_for_training") is not None:  # runs before SQuAD split by paragraph
        merged["split_unit"] = data.get("split_unit", "example")
    compared = {k: json.dumps(_normal(merged[k]), sort_keys=True)
                for k in COMPARED_SETTINGS if k in merged}
    fmt = measurement_format(config)
    train = results.get("train") if isinstance(results.get("train"), dict) else {}
    steps = train.get("global_step")
    return Run(p, task, model, method, seed, metric, results["final"], results["best"],
               compared, measurement_format=fmt,
               train_steps=int(steps) if _is_number(steps) and steps > 0 else None,
               eval_every=_start_evaluated_grid(training))


def _start_evaluated_grid(training: Mapping[str, Any]) -> int | None:
    """``eval_steps`` of a run evaluated at step 0 and then every ``eval_steps`` (an integer)
    steps, else ``None`` (:attr:`Run.eval_every`).

    >>> _start_evaluated_grid({"eval_on_start": True, "eval_strategy": "steps",
    ...                        "eval_steps": 20})
    20
    >>> _start_evaluated_grid({"eval_strategy": "steps", "eval_steps": 20}) is None
    True
    """
    every = training.get("eval_steps")
    if training.get("eval_on_start") is not True or training.get("eval_strategy") != "steps" \
            or not _is_number(every) or every < 1 or every != int(every):
        return None
    return int(every)


def _normal(value: Any) -> Any:
    """One spelling per value: numbers (and strings that read as numbers, as YAML's ``1e-4``)
    as floats, so that ``3``, ``3.0`` and ``"3"`` compare equal; booleans and others as they
    are; lists item by item."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return value
