r"""Tables and figures of the papers from finished ``isotropy train`` run directories.

:func:`collect_runs` reads run directories (a directory holding ``config.json`` is a run; any
other directory is a sweep root whose sub-directories are runs) and keeps the finished, readable
ones; every other one is listed with the reason it was skipped. Runs are grouped into *cells*
(task x model x method, the method being the regularizers with their parameters), seeds
aggregated: a cell's value is the mean :math:`\bar x = \frac1n\sum_i x_i` and the sample
standard deviation :math:`s = \sqrt{\frac{1}{n-1}\sum_i (x_i-\bar x)^2}` over its seeds
(undefined, left empty, for one seed).

:func:`write_report` writes ``report.md`` and the CSV tables (Table 1: main metric per cell,
SQuAD's F1 and EM; Table 2: the best global I-STAR :math:`\lambda, \zeta` per task and model;
Table 3: the top-3 anisotropy spectrum of [CLS] over the last 30% of training; the
persistent-entropy paper's Table 2: the main metric averaged over the evaluations in the last
30% of training) and the figures (:mod:`isotropy.experiments.figures`).

Every run has a *measurement format* (:func:`measurement_format`, :data:`MEASUREMENT_FORMATS`):
outputs built from per-layer IsoScore* or from the training spectrum
(:data:`FORMAT_BOUND_OUTPUTS`) are not made when the runs' formats differ.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from isotropy.io import read_text_utf8, write_csv_atomic, write_text_atomic

__all__ = [
    "COMPARED_SETTINGS",
    "FORMAT_BOUND_OUTPUTS",
    "MEASUREMENT_FORMATS",
    "Cell",
    "Run",
    "collect_runs",
    "eval_history",
    "expand_inputs",
    "format_refusals",
    "group_cells",
    "load_run",
    "mean_std",
    "measurement_format",
    "pe_table2_rows",
    "pick_best",
    "setting_tags",
    "table1_rows",
    "table2_rows",
    "table3_rows",
    "tail_evaluations",
    "write_report",
]

CONFIG = "config.json"
RESULTS = "results.json"
METRICS = "metrics.jsonl"
MEASUREMENTS = "measurements.jsonl"
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
_GLOB_CHARS = set("*?[")
_ISO_KEYS = ("task", "model", "regularizer", "tuning", "zeta", "cosreg_tuning",
             "entropy_weight", "select_features")
# the settings that define an experiment besides task, model, method and seed: runs that differ
# in one of them are never pooled (see collect_runs). Where and how a run was written, logged,
# loaded or distributed does not count, nor do the evaluation-only measure_* settings (Figs. 3
# and 6 check the measurement ζ themselves).
COMPARED_SETTINGS = (
    # isotropy train's own
    "max_seq_length", "doc_stride", "max_train_samples", "max_eval_samples", "subset_seed",
    "split_dev_for_training", "split_unit", "shrinkage_tokens", "pooling", "entropy_window",
    "group_by_length", "n_best_size", "max_answer_length",
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
    from isotropy.training.config import parse_layers

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
        records, note = read_jsonl_whole(self.path / name)
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

    @cached_property
    def evaluations(self) -> list[tuple[float, float]]:
        """``(step, eval_<main metric>)`` of every evaluation in ``metrics.jsonl``
        (:func:`eval_history`)."""
        return eval_history(self.metrics_records, self.main_metric)

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


def read_jsonl_whole(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    r"""The records of a JSONL file up to its first line that is not a whole JSON object (a
    line cut short by a crash, or damage), and a note saying what was left out (``None`` when
    the file is whole or absent): records after a cut are never used.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.jsonl"
    >>> _ = p.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    >>> records, note = read_jsonl_whole(p)
    >>> records
    [{'step': 1}, {'step': 2}]
    >>> note.split("; ")
    ['m.jsonl: line 3 of 3 is cut short or unreadable', 'the 2 whole records before it are used']
    """
    try:
        text = read_text_utf8(path)
    except (OSError, ValueError) as err:
        if not path.exists():
            return [], None
        return [], f"{path.name}: unreadable ({err}); none of it is used"
    lines = text.splitlines(keepends=True)
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = None
        if not isinstance(rec, dict):
            return out, (f"{path.name}: line {i + 1} of {len(lines)} is cut short or "
                         f"unreadable; the {len(out)} whole records before it are used")
        out.append(rec)
    return out, None


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
    """Read one run directory; ``ValueError`` with the reason if it cannot be used."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError("not a directory")
    if not (p / CONFIG).is_file():
        raise ValueError(f"no {CONFIG} (not an isotropy train run directory)")
    if not (p / RESULTS).is_file():
        raise ValueError(f"incomplete: no {RESULTS} (the run is unfinished or failed)")
    config = _read_json(p / CONFIG)
    results = _read_json(p / RESULTS)
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
    model = Path(str(iso["model"]).rstrip("/")).name or "model"
    merged = {**iso, **training}
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
               train_steps=int(steps) if _is_number(steps) and steps > 0 else None)


def _sweep_logs(path: Path) -> bool:
    """Whether ``path`` is the ``logs/`` folder of an ``isotropy sweep`` output root."""
    return path.name == "logs" and (path.parent / "sweep.json").is_file()


def expand_inputs(patterns: Iterable[str]) -> list[Path]:
    """Run directories of the arguments (directories or globs).

    A directory with ``config.json`` or ``results.json`` is a run; any other directory is a
    sweep root whose sub-directories are taken (in name order); files a glob matches, hidden
    directories and the ``logs/`` folder of an ``isotropy sweep`` output root (beside its
    ``sweep.json``) are ignored. ``FileNotFoundError`` for a glob that matches no directory or
    a path that does not exist.
    """
    out: list[Path] = []
    for pattern in patterns:
        if _GLOB_CHARS & set(pattern):
            matches = sorted(m for m in glob.glob(pattern) if os.path.isdir(m))
            if not matches:
                raise FileNotFoundError(f"{pattern} matches no directory")
        elif not os.path.exists(pattern):
            raise FileNotFoundError(f"{pattern} does not exist")
        else:
            matches = [pattern]
        for m in matches:
            p = Path(m)
            if _sweep_logs(p):
                continue
            if p.is_dir() and not (p / CONFIG).exists() and not (p / RESULTS).exists():
                subs = sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith(".")
                              and not _sweep_logs(c))
                out.extend(subs if subs else [p])
            else:
                out.append(p)
    seen: dict[str, Path] = {}
    for p in out:
        seen.setdefault(os.path.realpath(p), p)
    return list(seen.values())


@dataclass
class Cell:
    """The runs of one task x model x setting x method, one per seed (in seed order);
    ``setting`` is ``""`` unless runs of the task and model differ in other settings."""

    task: str
    model: str
    method: Method
    runs: list[Run] = field(default_factory=list)
    setting: str = ""

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def main_metric(self) -> str:
        return self.runs[0].main_metric

    def values(self, name: str, which: str = "final") -> list[float]:
        """Per-seed values of ``eval_<name>`` (runs without it left out)."""
        return [v for r in self.runs if (v := r.value(name, which)) is not None]

    def stat(self, name: str, which: str = "final") -> tuple[float, float | None, int] | None:
        """(mean, sample std, n) over seeds of ``eval_<name>``, ``None`` if no run has it."""
        vals = self.values(name, which)
        if not vals:
            return None
        m, s = mean_std(vals)
        return m, s, len(vals)


def _check_pick_over(pick_over: Sequence[str]) -> None:
    unknown = [k for k in pick_over if k not in COMPARED_SETTINGS]
    if unknown:
        raise ValueError(f"--pick-best-over: {', '.join(unknown)} is not a setting that tells "
                         f"runs apart (one of {', '.join(COMPARED_SETTINGS)})")


def collect_runs(paths: Iterable[str | os.PathLike[str]], which: str = "final",
                 pick_over: Sequence[str] = ()) -> tuple[list[Run], list[tuple[str, str]]]:
    """The usable runs and the skipped ones as ``(path, reason)``.

    Runs of one task and model whose other settings differ (learning rate, epochs, data
    subset, ...; not the seed, the method's own parameters or where the run was written) are
    never pooled: each run's :attr:`Run.setting` names its values of the settings that vary
    (``learning_rate=3e-05``), and cells, tables and figures keep them apart. The settings of
    ``pick_over`` (a tuning grid, see :func:`pick_best`) are left out of :attr:`Run.setting`
    and named in :attr:`Run.tuned` instead. A second run of the same cell, setting and seed is
    skipped as a duplicate."""
    _check_pick_over(pick_over)
    loaded: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for p in paths:
        try:
            loaded.append(load_run(p, which))
        except ValueError as err:
            skipped.append((str(p), str(err)))
    _name_settings(loaded, pick_over)
    runs: list[Run] = []
    seen: dict[tuple[Any, ...], Run] = {}
    for run in loaded:
        key = (run.task, run.model, run.setting, run.tuned, run.method.key, run.seed)
        if key in seen:
            skipped.append((str(run.path), f"duplicate of {seen[key].path} (same cell and "
                                           "seed)"))
            continue
        seen[key] = run
        runs.append(run)
    return runs, skipped


def _name_settings(runs: Sequence[Run], pick_over: Sequence[str] = ()) -> None:
    """Set each run's :attr:`Run.setting` from the compared settings that vary among the runs
    of its task and model (an absent setting reads ``absent``), those of ``pick_over`` aside:
    they go to :attr:`Run.tuned`, all of them, in the order given."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.task, r.model), []).append(r)
    for group in groups.values():
        keys = sorted({k for r in group for k in r.settings} - set(pick_over))
        varying = [k for k in keys if len({r.settings.get(k) for r in group}) > 1]
        for r in group:
            r.setting = ", ".join(
                f"{k}={_setting_text(r.settings.get(k))}" for k in varying)
            r.tuned = ", ".join(f"{k}={_setting_text(r.settings.get(k))}" for k in pick_over)


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is better: a loss; every other task metric is greater
    for better."""
    return metric.endswith("loss")


def pick_best(runs: Sequence[Run], which: str = "final"
              ) -> tuple[list[Run], list[dict[str, Any]]]:
    """Within every task x model x setting x method, keep the runs of the :attr:`Run.tuned`
    setting whose mean main metric over seeds is best (greatest; least for a loss; the first
    in text order on a tie); returns the kept runs and one row per cell: ``task, model,
    setting, method, metric, picked, mean, n_seeds, n_candidates``."""
    groups: dict[tuple[Any, ...], dict[str, list[Run]]] = {}
    for r in runs:
        groups.setdefault((r.task, r.model, r.setting, r.method.key), {}) \
            .setdefault(r.tuned, []).append(r)
    kept: list[Run] = []
    picks: list[dict[str, Any]] = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3])):
        candidates = groups[key]
        means = {t: mean_std([v for r in rs if (v := r.value(r.main_metric, which))
                              is not None])[0] for t, rs in candidates.items()}
        metric = candidates[next(iter(candidates))][0].main_metric
        sign = 1.0 if lower_is_better(metric) else -1.0
        best = min(sorted(means), key=lambda t: sign * means[t])
        chosen = candidates[best]
        kept += chosen
        picks.append({"task": key[0], "model": key[1], "setting": key[2],
                      "method": chosen[0].method.label, "metric": metric, "picked": best,
                      "mean": means[best], "n_seeds": len(chosen),
                      "n_candidates": len(candidates)})
    return kept, picks


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


def _setting_text(value: str | None) -> str:
    if value is None:
        return "absent"
    v = json.loads(value)
    return _num(v) if isinstance(v, float) else str(v)


def group_cells(runs: Iterable[Run]) -> list[Cell]:
    """Cells in the order task, model, setting, method; runs in seed order."""
    cells: dict[tuple[Any, ...], Cell] = {}
    for r in runs:
        key = (r.task, r.model, r.setting, r.method.key)
        cell = cells.setdefault(key, Cell(r.task, r.model, r.method, setting=r.setting))
        cell.runs.append(r)
    for c in cells.values():
        c.runs.sort(key=lambda r: r.seed)
    return [cells[k] for k in sorted(cells, key=lambda k: (k[0], k[1], k[2], k[3]))]


# --------------------------------------------------------------------------- tables


def table1_metrics(cell: Cell) -> list[str]:
    """The metrics Table 1 reports for ``cell``: its main metric, then the others the I-STAR
    paper's Table 1 gives for the task (:data:`TABLE1_METRICS`: SQuAD F1 and EM)."""
    return list(dict.fromkeys([cell.main_metric, *TABLE1_METRICS.get(cell.task, ())]))


def table1_rows(cells: Sequence[Cell], which: str = "final") -> list[dict[str, Any]]:
    """Table 1: mean and sample std over seeds per cell and reported metric
    (:func:`table1_metrics`; one row each, the main metric first; a metric no run of the cell
    recorded is left out)."""
    rows = []
    for c in cells:
        for metric in table1_metrics(c):
            st = c.stat(metric, which)
            if st is None:
                assert metric != c.main_metric  # load_run checked it
                continue
            seeds = [r.seed for r in c.runs if r.value(metric, which) is not None]
            rows.append({"task": c.task, "model": c.model, "setting": c.setting,
                         "method": c.method.label, "metric": metric, "mean": st[0],
                         "std": st[1], "n_seeds": st[2], "seeds": " ".join(map(str, seeds))})
    return rows


def table2_rows(cells: Sequence[Cell], which: str = "final") -> list[dict[str, Any]]:
    """Table 2: per task x model, the global I-STAR cell (regularizer istar alone, on all
    layers) of highest mean main metric (the first in λ, ζ order on a tie)."""
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
        if c.method.regularizers == ("istar",) and c.method.get("istar_layers") == "all":
            groups.setdefault((c.task, c.model, c.setting), []).append(c)
    rows = []
    for (task, model, setting), group in groups.items():
        stats = [c.stat(c.main_metric, which) for c in group]
        i = max(range(len(group)), key=lambda j: (stats[j][0], -j))  # type: ignore[index]
        c, st = group[i], stats[i]
        assert st is not None
        rows.append({"task": task, "model": model, "setting": setting,
                     "metric": c.main_metric,
                     "lambda": c.method.get("istar_lambda"), "zeta": c.method.get("istar_zeta"),
                     "mean": st[0], "std": st[1], "n_seeds": st[2],
                     "n_istar_cells": len(group)})
    return rows


def spectrum_tail_means(logs: Sequence[Mapping[str, float]],
                        fraction: float = LAST_FRACTION) -> dict[str, float] | None:
    r"""Mean of each ``cls_spectrum_*`` value over the logs of the last ``fraction`` of training:
    steps :math:`t \ge (1-f)\,t_{max}`."""
    if not logs:
        return None
    t_max = max(r["step"] for r in logs)
    tail = [r for r in logs if r["step"] >= (1.0 - fraction) * t_max]
    return {k: float(np.mean([r[k] for r in tail])) for k in SPECTRUM_KEYS}


def pe_table2_rows(cells: Sequence[Cell],
                   fraction: float = LAST_FRACTION) -> list[dict[str, Any]]:
    r"""Persistent-entropy paper, Table 2: per run, the main metric averaged over its
    evaluations in the last ``fraction`` of training (steps :math:`t \ge 0.7\,T`, :math:`T`
    the run's training steps, :attr:`Run.total_steps`); then mean and sample std of those
    averages over seeds, per cell.

    ``n_evals`` lists the evaluations used per run (in seed order); ``few_evals`` is true when
    a run used fewer than 2 (its average is one evaluation); ``n_no_evals`` counts the runs
    with none in the window (left out). Cells none of whose runs has one are left out."""
    rows = []
    for c in cells:
        used: list[tuple[int, float, int]] = []  # (seed, average, number of evaluations)
        missing = 0
        for r in c.runs:
            total = r.total_steps
            tail = tail_evaluations(r.evaluations, total, fraction) if total else []
            if tail:
                used.append((r.seed, float(np.mean(tail)), len(tail)))
            else:
                missing += 1
        if not used:
            continue
        m, s = mean_std([u[1] for u in used])
        rows.append({"task": c.task, "model": c.model, "setting": c.setting,
                     "method": c.method.label, "metric": c.main_metric, "mean": m, "std": s,
                     "n_seeds": len(used), "seeds": " ".join(str(u[0]) for u in used),
                     "n_evals": " ".join(str(u[2]) for u in used),
                     "few_evals": any(u[2] < 2 for u in used), "n_no_evals": missing})
    return rows


def format_refusals(runs: Sequence[Run]) -> dict[str, str]:
    """The outputs of :data:`FORMAT_BOUND_OUTPUTS` that ``runs`` cannot make, with the one-line
    reason: all of them when the runs' measurement formats differ, none otherwise."""
    formats = sorted({r.measurement_format for r in runs})
    if len(formats) < 2:
        return {}
    which = " and ".join(f"format {f} ({MEASUREMENT_FORMATS[f]})" for f in formats)
    return {name: f"{what} not drawn: runs of measurement {which} cannot be pooled; report "
                  "them separately"
            for name, what in FORMAT_BOUND_OUTPUTS.items()}


def _format_note(runs: Sequence[Run]) -> list[str]:
    """``report.md``'s line on the runs' measurement format."""
    formats = sorted({r.measurement_format for r in runs})
    if len(formats) > 1:
        counts = ", ".join(f"{sum(r.measurement_format == f for r in runs)} of format {f}"
                           for f in formats)
        return [f"Measurement formats differ ({counts}): outputs built from per-layer "
                "IsoScore* or the training [CLS] spectrum are not made (listed below); Table 1, "
                "Table 2, the persistent-entropy Table 2 and Figs. 3, 4, 5, 7, 8 (union "
                "IsoScore* and task metrics, which mean the same in every format) pool them."]
    if formats == [1]:
        return ["Measurement format 1 (all runs): per-layer IsoScore* (Fig. 6, "
                "`eval_isoscore_star_{cls,token}_layer*`, `eval_isoscore_star_last`) was shrunk "
                "toward the union-of-layers Σ_S, not each layer's own, and the training [CLS] "
                "spectrum (Table 3, persistent-entropy Fig. 1) was taken per micro-batch, not "
                "over the gradient-accumulation cycle; these values are not comparable with "
                "runs of format 2."]
    return [f"Measurement format {formats[0]} (all runs): "
            f"{MEASUREMENT_FORMATS[formats[0]]}."]


def table3_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Table 3 (persistent-entropy paper): top-3 raw and centred anisotropy spectrum of [CLS],
    averaged over the last 30% of training steps of each seed, then mean and sample std over
    seeds; cells whose runs logged no spectrum are left out."""
    rows = []
    for c in cells:
        per_seed = [m for r in c.runs if (m := spectrum_tail_means(r.spectrum_logs)) is not None]
        if not per_seed:
            continue
        row: dict[str, Any] = {"task": c.task, "model": c.model, "setting": c.setting,
                               "method": c.method.label, "n_seeds": len(per_seed)}
        for k in SPECTRUM_KEYS:
            m, s = mean_std([p[k] for p in per_seed])
            short = k.removeprefix("cls_spectrum_")
            row[f"{short}_mean"], row[f"{short}_std"] = m, s
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- markdown


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def esc(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(esc, header)) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def _with_setting(text: str, row: Mapping[str, Any]) -> str:
    """``text`` with the row's setting in brackets, when it has one."""
    return text + (f" [{row['setting']}]" if row["setting"] else "")


def _table1_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """One pivot per model: methods as rows, tasks (metrics) as columns, cells mean ± std (n);
    a task of several metrics (SQuAD F1 / EM) shows them in one cell, ``–`` for one no run
    recorded."""
    parts = []
    for model in dict.fromkeys(r["model"] for r in rows):
        sub = [r for r in rows if r["model"] == model]
        metrics: dict[str, list[str]] = {}
        for r in sub:
            ms = metrics.setdefault(r["task"], [])
            if r["metric"] not in ms:
                ms.append(r["metric"])
        for task, ms in metrics.items():  # SQuAD's EM shown as "–" where no run recorded it
            ms += [m for m in TABLE1_METRICS.get(task, ()) if m not in ms]
        methods = list(dict.fromkeys(_with_setting(r["method"], r) for r in sub))
        found = {(_with_setting(r["method"], r), r["task"], r["metric"]): r for r in sub}
        header = [f"{t} ({' / '.join(ms)})" for t, ms in metrics.items()]
        parts.append(f"Model `{model}`:\n\n" + _md_table(
            ["method", *header],
            [[m, *(_table1_cell([found.get((m, t, k)) for k in ms]) for t, ms in metrics.items())]
             for m in methods]))
    return "\n\n".join(parts)


def _table1_cell(got: Sequence[Mapping[str, Any] | None]) -> str:
    """``mean ± std / mean ± std (n=...)`` of one method and task, ``–`` for an absent metric."""
    if not any(got):
        return "–"
    ns = list(dict.fromkeys(r["n_seeds"] for r in got if r))
    return (" / ".join("–" if r is None else _fmt(r["mean"], r["std"]) for r in got)
            + f" (n={'/'.join(map(str, ns))})")


def _pe_table2_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """The persistent-entropy Table 2 as one table, a mark on rows with a run of fewer than 2
    evaluations in the window."""
    return _md_table(
        ["task", "model", "method", "metric", "mean ± std", "n", "evaluations per run"],
        [[r["task"], r["model"], _with_setting(r["method"], r), r["metric"],
          _fmt(r["mean"], r["std"]), r["n_seeds"],
          r["n_evals"] + (" (a run has fewer than 2)" if r["few_evals"] else "")
          + (f"; {r['n_no_evals']} run(s) with none, left out" if r["n_no_evals"] else "")]
         for r in rows])


def setting_tags(cells: Sequence[Cell]) -> dict[str, str]:
    """A short tag per setting of ``cells`` (``s1``, ``s2``, ... in sorted order) for figure
    file names and titles; ``report.md`` lists what each stands for."""
    return {s: f"s{i}" for i, s in enumerate(sorted({c.setting for c in cells if c.setting}), 1)}


def write_report(paths: Sequence[str | os.PathLike[str]], output_dir: str | os.PathLike[str],
                 which: str = "final", figures: bool = True,
                 pick_best_over: Sequence[str] = ()) -> dict[str, Any]:
    """Read the runs (:func:`expand_inputs`), write ``report.md``, ``table1.csv``,
    ``table2.csv``, ``table3.csv``, ``pe_table2.csv``, ``runs.csv`` (and ``picks.csv`` with
    ``pick_best_over``) and the figures (``figures/*.png`` and ``.svg``) into ``output_dir``.

    ``pick_best_over``: settings of a tuning grid (e.g. ``learning_rate``); within each cell
    only the runs of the value of best mean main metric are kept (:func:`pick_best`).
    Outputs of :data:`FORMAT_BOUND_OUTPUTS` are not made when the runs' measurement formats
    differ (:func:`format_refusals`).

    Returns ``{"runs", "skipped", "cells", "files", "skipped_figures", "refused", "picks"}``.
    ``ValueError`` when no run is usable (nothing is written then).
    """
    if which not in ("final", "best"):
        raise ValueError(f"which must be 'final' or 'best', got {which!r}")
    runs, skipped = collect_runs(expand_inputs(map(str, paths)), which, pick_best_over)
    if not runs:
        first = f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise ValueError(f"no usable run among {len(skipped)} run directories{first}")
    picks: list[dict[str, Any]] = []
    if pick_best_over:
        runs, picks = pick_best(runs, which)
    refused = format_refusals(runs)
    out = Path(output_dir)
    cells = group_cells(runs)
    t1, t2 = table1_rows(cells, which), table2_rows(cells, which)
    t3 = [] if "table3" in refused else table3_rows(cells)
    pt2 = pe_table2_rows(cells)
    files: list[Path] = []
    files.append(write_csv_atomic(out / "table1.csv", t1, list(t1[0])))
    t2_fields = ["task", "model", "setting", "metric", "lambda", "zeta", "mean", "std",
                 "n_seeds", "n_istar_cells"]
    files.append(write_csv_atomic(out / "table2.csv", t2, t2_fields))
    t3_fields = ["task", "model", "setting", "method", "n_seeds"] + [
        f"{k.removeprefix('cls_spectrum_')}_{s}" for k in SPECTRUM_KEYS for s in ("mean", "std")]
    files.append(write_csv_atomic(out / "table3.csv", t3, t3_fields))
    pt2_fields = ["task", "model", "setting", "method", "metric", "mean", "std", "n_seeds",
                  "seeds", "n_evals", "few_evals", "n_no_evals"]
    files.append(write_csv_atomic(out / "pe_table2.csv", pt2, pt2_fields))
    if pick_best_over:
        files.append(write_csv_atomic(out / "picks.csv", picks, list(picks[0])))
    run_rows = [{"path": str(r.path), "task": r.task, "model": r.model,
                 "setting": r.setting, "method": r.method.label, "seed": r.seed,
                 "metric": r.main_metric, "value": r.value(r.main_metric, which),
                 "measurement_format": r.measurement_format,
                 **({"picked": r.tuned} if pick_best_over else {})} for r in runs]
    files.append(write_csv_atomic(out / "runs.csv", run_rows))

    fig_files: list[Path] = []
    fig_skipped: list[tuple[str, str]] = []
    if figures:
        from isotropy.experiments.figures import make_figures

        fig_files, fig_skipped = make_figures(cells, out / "figures", which, refused=refused)
    files += fig_files

    md = [f"# Report of {len(runs)} runs in {len(cells)} cells",
          "",
          f"Values are the `{which}` evaluation of each run (`results.json`), mean ± sample "
          "standard deviation (ddof=1) over seeds; n = number of seeds.",
          *(["\nSome runs of one task and model differ in settings that define the experiment; "
             "they are kept apart, with the setting in brackets (figure files tagged "
             + "; ".join(f"`{tag}`: `{s}`" for s, tag in setting_tags(cells).items()) + ")."]
            if any(c.setting for c in cells) else []),
          "", *_format_note(runs)]
    if refused:
        md += ["", *(f"- {why}" for why in refused.values())]
    if pick_best_over:
        over = ", ".join(f"`{k}`" for k in pick_best_over)
        md += ["", f"## Settings picked over {over}", "",
               f"Within each cell, the runs that differ only in {over} were compared and the "
               "setting of best mean main metric over seeds kept (greater is better, less for "
               "a loss); every table and figure below uses only the kept runs.", "",
               _md_table(["task", "model", "method", "picked", "metric", "mean", "n",
                          "candidates"],
                         [[p["task"], _with_setting(p["model"], p), p["method"], p["picked"],
                           p["metric"], f"{p['mean']:.4f}", p["n_seeds"], p["n_candidates"]]
                          for p in picks])]
    md += ["", "## Table 1: main metric per task, model and method", "", _table1_md(t1), "",
           "## Table 2: best I-STAR λ and ζ per task and model (I-STAR on all layers)", ""]
    if t2:
        md.append(_md_table(
            ["task", "model", "metric", "λ", "ζ", "mean ± std", "n", "I-STAR cells"],
            [[r["task"], _with_setting(r["model"], r),
              r["metric"], _num(r["lambda"]), _num(r["zeta"]),
              _fmt(r["mean"], r["std"]), r["n_seeds"], r["n_istar_cells"]] for r in t2]))
    else:
        md.append("No runs of I-STAR on all layers.")
    md += ["", "## Table 3: top-3 anisotropy spectrum of [CLS], last 30% of training", ""]
    if "table3" in refused:
        md.append(refused["table3"] + ".")
    elif t3:
        md.append(_md_table(
            ["task", "model", "method", "n", *(k.removeprefix("cls_spectrum_")
                                                 for k in SPECTRUM_KEYS)],
            [[r["task"], r["model"], _with_setting(r["method"], r), r["n_seeds"],
              *(_fmt(r[f"{k.removeprefix('cls_spectrum_')}_mean"],
                     r[f"{k.removeprefix('cls_spectrum_')}_std"], 3) for k in SPECTRUM_KEYS)]
             for r in t3]))
    else:
        md.append("No run logged `cls_spectrum_*` training values.")
    md += ["", "## Persistent-entropy Table 2: main metric over the last 30% of training", "",
           "Per run, the main metric averaged over the evaluations of `metrics.jsonl` at steps "
           "≥ 0.7 × the run's training steps (`results.json` `train.global_step`); then mean ± "
           "sample std over seeds. The last column gives the number of evaluations averaged "
           "per run, in seed order.", ""]
    if pt2:
        md.append(_pe_table2_md(pt2))
        few = [r for r in pt2 if r["few_evals"]]
        if few:
            md += ["", f"Note: in {len(few)} of {len(pt2)} cells a run had fewer than 2 "
                   "evaluations in the last 30% of training, so its value is one evaluation, "
                   "not an average (evaluate more often, e.g. `--eval_strategy steps`)."]
    else:
        md.append("No run has evaluations of its main metric in `metrics.jsonl` in the last "
                  "30% of training.")
    if figures:
        md += ["", "## Figures", ""]
        for f in fig_files:
            if f.suffix == ".png":
                md.append(f"![{f.stem}](figures/{f.name})")
                md.append("")
        if fig_skipped or refused:
            md += ["Figures not drawn:", ""]
            md += [f"- {refused[name]}" for name in refused if name != "table3"]
            md += [f"- {name}: {why}" for name, why in fig_skipped]
    for r in runs:  # read both files of every run, so that every cut is noted
        _ = r.metrics_records, r.measurement_records
    read_in_part = [(r.path, note) for r in runs for note in r.read_notes]
    if read_in_part:
        md += ["", "## Runs read in part", ""]
        md += [f"- `{p}`: {note}" for p, note in read_in_part]
    md += ["", "## Skipped run directories", ""]
    md += [f"- `{p}`: {why}" for p, why in skipped] if skipped else ["None."]
    files.append(write_text_atomic(out / "report.md", "\n".join(md) + "\n"))
    return {"runs": runs, "skipped": skipped, "cells": cells, "files": files,
            "skipped_figures": fig_skipped, "refused": refused, "picks": picks}
