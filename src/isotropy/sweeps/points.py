"""A spec -> its points in run order, each with its settings and run directory name, and the
checks made before anything runs.

A point's settings are ``base``, then its cell (grid values, then method or point values),
then its seed; each is checked with :func:`isotropy.training.settings.args_from_dict`. Its run
directory is named by :func:`isotropy.training.config.default_run_name`, extended with the
settings that tell apart points of the same default name (``-lr3e-05_bs16-seed1``)."""

from __future__ import annotations

import enum
import itertools
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from isotropy.data.glue import require_split
from isotropy.io import to_jsonable
from isotropy.models.loading import resolve_model
from isotropy.rundir import RunDirectory
from isotropy.sweeps.spec import SWEEP_DEFAULTS, SweepSpec, _suggest
from isotropy.training.config import default_run_name
from isotropy.training.model_kind import check_pooling
from isotropy.training.settings import args_from_dict, typed_settings

__all__ = [
    "SweepPoint",
    "check_finished_runs",
    "check_inputs",
    "expand",
    "finished_difference",
]

# Short names of settings in run directory names.
_SHORT = {
    "learning_rate": "lr", "per_device_train_batch_size": "bs", "num_train_epochs": "ep",
    "gradient_accumulation_steps": "ga", "weight_decay": "wd", "warmup_ratio": "wr",
    "warmup_steps": "ws", "max_seq_length": "len", "max_train_samples": "ntrain",
    "max_eval_samples": "neval", "subset_seed": "dseed", "in_cluster_weight": "g",
    "pooling": "pool",
    "shrinkage_tokens": "sT", "entropy_window": "win", "lr_scheduler_type": "sched",
    "entropy_accumulation": "acc", "include_padding": "pad",
    "classifier_pooling": "head",
}


# --------------------------------------------------------------------------- points


@dataclass(frozen=True)
class SweepPoint:
    """One ``isotropy train`` run of a sweep.

    ``settings`` are the run's ``isotropy train`` settings (with ``output_dir``), ``cell`` the
    name of the point's cell (its name without the seed), ``method`` the method or point name.
    """

    index: int
    name: str
    cell: str
    method: str | None
    seed: int
    settings: dict[str, Any]
    given: tuple[str, ...] = ()  # settings named by the spec (compared with finished runs)

    @property
    def run_dir(self) -> Path:
        return Path(self.settings["output_dir"])

    def describe(self) -> str:
        return f"point {self.index + 1} ({self.name})"


def _product(axes: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(axes)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(axes[k] for k in keys))]


def _cells(spec: SweepSpec) -> list[tuple[str | None, dict[str, Any], str]]:
    """(method, settings, where) of every cell: grid x methods, then the explicit points."""
    grid_cells = _product(spec.grid) if spec.grid else []
    method_cells: list[tuple[str | None, dict[str, Any]]] = []
    for m in spec.methods:
        fixed = {k: v for k, v in m.items()
                 if k != "name" and (k == "regularizer" or not isinstance(v, list))}
        axes = {k: v for k, v in m.items()
                if k not in ("name", "regularizer") and isinstance(v, list)}
        method_cells += [(m["name"], {**fixed, **combo}) for combo in _product(axes)]
    cells: list[tuple[str | None, dict[str, Any], str]] = []
    if grid_cells or method_cells:
        for g in grid_cells or [{}]:
            for name, m in method_cells or [(None, {})]:
                where = "grid" if not name else f"methods.{name}"
                cells.append((name, {**g, **m}, where))
    for i, p in enumerate(spec.points):
        cells.append((p.get("name"), {k: v for k, v in p.items() if k != "name"},
                      f"points[{i}]"))
    return cells or [(None, {}, "base")]


def _resolved(iso_args: Any, train_args: Any, key: str) -> Any:
    return getattr(iso_args, key) if hasattr(iso_args, key) else getattr(train_args, key)


def _text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "+".join(_text(v) for v in value) or "none"
    return re.sub(r"[^A-Za-z0-9.+=-]", "_", str(value).rstrip("/").split("/")[-1])


def expand(spec: SweepSpec, output_root: str | os.PathLike[str] | None = None
           ) -> list[SweepPoint]:
    """Every point of the spec in run order (less those ``exclude`` names, named as in the
    whole spec), each checked with ``args_from_dict`` and named.

    Raises ``ValueError`` (one line, naming the point) for a bad value, a missing
    ``output_root`` or two points with the same settings.
    """
    root_text = output_root if output_root is not None else spec.output_root
    if root_text is None:
        raise ValueError(f"{spec.source}: no output_root (give output_root: in the spec or "
                         "--output-root)")
    root = Path(root_text).expanduser().absolute()
    given_keys = set(spec.base) | set(spec.grid) | {
        k for m in spec.methods for k in m if k != "name"} | {
        k for p in spec.points for k in p if k != "name"}
    parsed = _parsed_points(spec, given_keys)
    names = _distinct_names(spec, parsed, given_keys)
    points = []
    for (method, settings, _iso_args, train_args, _n), name in zip(parsed, names, strict=True):
        head, _, seed_text = name.rpartition("-seed")
        points.append(SweepPoint(
            index=0, name=name, cell=head, method=method, seed=int(train_args.seed),
            settings={**settings, "output_dir": str(root / name)},
            given=tuple(sorted(given_keys | {"seed"}))))
    points = _without(points, spec)
    if spec.order == "seed-major":
        rank = {s: r for r, s in enumerate(dict.fromkeys(p.seed for p in points))}
        points.sort(key=lambda p: rank[p.seed])  # stable: cells keep their order
    else:
        rank = {c: r for r, c in enumerate(dict.fromkeys(p.cell for p in points))}
        points.sort(key=lambda p: rank[p.cell])
    return [replace(p, index=i) for i, p in enumerate(points)]


def _without(points: list[SweepPoint], spec: SweepSpec) -> list[SweepPoint]:
    """The points less those ``spec.exclude`` names (their run directory names, as the full
    spec names them). A name of one of the sweep's cells at a seed the sweep does not run
    (``--seeds`` narrowed it) is passed over; ``ValueError`` for a name of no cell, or when
    no point is left."""
    if not spec.exclude:
        return points
    names, cells, excluded = {p.name for p in points}, {p.cell for p in points}, set(spec.exclude)
    unknown = [n for n in spec.exclude
               if n not in names and n.rpartition("-seed")[0] not in cells]
    if unknown:
        raise ValueError(f"{spec.source}: exclude names {len(unknown)} run(s) the sweep does "
                         f"not have: {', '.join(unknown[:5])}"
                         + (" ..." if len(unknown) > 5 else "")
                         + _suggest(unknown[0], sorted(names)))
    kept = [p for p in points if p.name not in excluded]
    if not kept:
        raise ValueError(f"{spec.source}: exclude leaves out every point of the sweep")
    return kept


_Parsed = tuple[str | None, dict[str, Any], Any, Any, str]


def _parsed_points(spec: SweepSpec, given_keys: set[str]) -> list[_Parsed]:
    """Each cell x seed: ``(method, settings, iso_args, train_args, default run name)``, the
    settings checked by ``args_from_dict`` (a bad one raises, naming the point)."""
    base = typed_settings({**SWEEP_DEFAULTS, **spec.base}, f"{spec.source}: base")
    seeds: list[int | None] = list(spec.seeds) if spec.seeds is not None else [None]
    raw = []
    for method, cell, where in _cells(spec):
        for seed in seeds:
            values = typed_settings(cell, f"{spec.source}: {where}")
            settings = {**base, **values}
            if seed is not None:
                settings["seed"] = seed
            raw.append((method, settings, where, values))
    parsed: list[_Parsed] = []
    for i, (method, settings, where, values) in enumerate(raw):
        try:
            iso_args, train_args = args_from_dict(settings)
        except (ValueError, TypeError) as err:
            shown = "".join(f"{k}={_text(v) if not isinstance(v, str) else v}, "
                            for k, v in values.items())
            raise ValueError(f"{spec.source}: {where} (point {i + 1}: {shown}seed "
                             f"{settings.get('seed', 'default')}): "
                             f"{' '.join(str(err).split())}") from None
        resolved = {**{k: _resolved(iso_args, train_args, k) for k in given_keys},
                    **vars(iso_args), "seed": train_args.seed}
        parsed.append((method, settings, iso_args, train_args, default_run_name(resolved)))
    return parsed


def _distinct_names(spec: SweepSpec, parsed: Sequence[_Parsed],
                    given_keys: set[str]) -> list[str]:
    """The run directory names: points of equal default names get the settings that tell
    them apart (``-lr3e-05_bs16-seed1``); two points left with one name raise."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(parsed):
        groups.setdefault(p[4], []).append(i)
    compared = sorted(given_keys - {"seed"},
                      key=lambda k: (list(_SHORT).index(k) if k in _SHORT else len(_SHORT), k))
    names = []
    for _method, _settings, iso_args, train_args, name in parsed:
        members = groups[name]
        differing = [k for k in compared if len({json.dumps(to_jsonable(
            _resolved(parsed[j][2], parsed[j][3], k)), sort_keys=True) for j in members}) > 1]
        if len(members) > 1 and differing:
            head, _, seed_text = name.rpartition("-seed")
            suffix = "_".join(
                _SHORT.get(k, f"{k}=") + _text(_resolved(iso_args, train_args, k))
                for k in differing)
            name = f"{head}-{suffix}-seed{seed_text}"
        names.append(name)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise ValueError(f"{spec.source}: points {seen[name] + 1} and {i + 1} have the same "
                             f"settings (run directory {name}); remove the duplicate")
        seen[name] = i
    return names


def check_inputs(points: Sequence[SweepPoint]) -> None:
    """Every model directory and local data file the points need exists (else
    ``FileNotFoundError``/``ValueError`` naming it), and no point pools a local decoder-only
    model's first token (:func:`isotropy.training.model_kind.check_pooling`); hub models and
    data are checked when the runs load them."""

    seen: set[tuple[Any, ...]] = set()
    for p in points:
        iso_args, _ = args_from_dict(p.settings)
        key = (iso_args.model, iso_args.task, iso_args.data_source, iso_args.data_dir,
               iso_args.split_dev_for_training is None,
               iso_args.validation_split_percentage is None, iso_args.pooling,
               tuple(iso_args.regularizers))
        if key in seen:
            continue
        seen.add(key)
        try:
            path = resolve_model(iso_args.model)
            if os.path.isdir(path):
                check_pooling(path, iso_args.pooling, iso_args.regularizers)
            if iso_args.data_source == "local":
                splits = (("dev",) if iso_args.split_dev_for_training is not None
                          else ("train",) if iso_args.validation_split_percentage is not None
                          else ("train", "dev"))
                for split in splits:
                    require_split(iso_args.task, split, iso_args.data_dir)
        except (FileNotFoundError, ValueError) as err:
            raise type(err)(f"{p.describe()}: {' '.join(str(err).split())}") from None


def _same(a: Any, b: Any) -> bool:
    a, b = to_jsonable(a), to_jsonable(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (
            isinstance(a, bool) or isinstance(b, bool)):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b


def finished_difference(point: SweepPoint) -> str | None:
    """How the finished run in the point's directory differs from the point in the settings
    the spec names (``None``: the same, or no finished run there)."""

    run = RunDirectory(point.run_dir)
    if not run.finished or not run.file("config.json").is_file():
        return None
    try:
        old = run.read_config().get("settings", {})
    except (OSError, ValueError):
        return "its config.json cannot be read"
    iso_args, train_args = args_from_dict(point.settings)
    for key in point.given:
        section = "isotropy" if hasattr(iso_args, key) else "training"
        stored = old.get(section, {})
        if key not in stored:
            continue
        now = _resolved(iso_args, train_args, key)
        if not _same(stored[key], now):
            return f"setting {key} was {stored[key]!r}, now {to_jsonable(now)!r}"
    return None


def check_finished_runs(points: Sequence[SweepPoint]) -> None:
    """``ValueError`` if a finished run in a point's directory has other settings than the
    point: the sweep would otherwise count it as done (it is never overwritten); also if a
    point's directory holds files but no run of ours (:meth:`RunDirectory.check_not_foreign`),
    which the sweep would otherwise count as done, or refuse at that point."""
    for p in points:
        try:
            RunDirectory(p.run_dir).check_not_foreign()
        except ValueError as err:
            raise ValueError(f"{p.describe()}: {err}") from None
        diff = finished_difference(p)
        if diff is not None:
            raise ValueError(
                f"{p.run_dir} holds a finished run with other settings ({diff}): choose "
                "another output_root, or move that run away to redo the point")
