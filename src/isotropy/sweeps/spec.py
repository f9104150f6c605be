"""Sweeps of ``isotropy train`` runs: the spec, its points, their names and their state.

A sweep spec (YAML or TOML file, or a preset) has these top-level keys:

``output_root``
    where the run directories go: one per point, ``output_root/<name>``.
``base``
    ``isotropy train`` settings shared by every point (the flag names without dashes).
``grid``
    setting -> list of values; the cartesian product of the lists.
``methods``
    named bundles of settings (a list of mappings with ``name``, or a mapping name ->
    settings); a list value inside a method is an axis of that method's own small grid
    (except ``regularizer``, whose list means regularizers used together). The grid is crossed
    with the union of the methods, so I-STAR's λ × ζ does not multiply CosReg's λ.
``points``
    explicit points (mappings of settings), added to the grid × methods cells.
``seeds``
    list of seeds; every cell is run once per seed.
``order``
    ``seed-major`` (default: the first seed of every cell before the second) or
    ``cell-major`` (every seed of a cell before the next cell).

A point's settings are ``base``, then its cell (grid values, then method or point values),
then its seed. Every point is checked with :func:`isotropy.training.config.args_from_dict`
before anything runs. Its run directory is named by
:func:`isotropy.training.config.default_run_name`, extended with the settings that tell apart
points of the same default name (``-lr3e-05_bs16-seed1``); names are unique.

The state of each point (``pending``, ``running``, ``done``, ``failed`` with a one-line error,
``interrupted``) is kept in ``output_root/sweep.json`` (written atomically by the driver);
a run directory holding ``results.json`` is done whatever the file says.
"""

from __future__ import annotations

import difflib
import enum
import itertools
import json
import math
import os
import re
import threading
import time
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from isotropy.data.glue import require_split
from isotropy.io import read_text_utf8, to_jsonable, write_json_atomic
from isotropy.models.loading import resolve_model
from isotropy.rundir import RunDirectory
from isotropy.training.config import (
    IsotropyArguments,
    TrainArguments,
    args_from_dict,
    default_run_name,
    field_names,
)
from isotropy.training.model_kind import check_pooling

__all__ = [
    "ORDERS",
    "PRESETS",
    "STATES",
    "SweepPoint",
    "SweepSpec",
    "SweepStatus",
    "check_finished_runs",
    "check_inputs",
    "expand",
    "load_spec",
    "preset_spec",
    "spec_from_dict",
]

SPEC_KEYS = ("output_root", "base", "grid", "methods", "points", "seeds", "order")
ORDERS = ("seed-major", "cell-major")
STATES = ("pending", "running", "done", "failed", "interrupted")
SWEEP_FILE = "sweep.json"

# Settings a sweep decides itself.
_RESERVED = {
    "output_dir": "the sweep names every run directory itself (output_root/<name>)",
    "resume": "the sweep resumes unfinished runs itself",
    "overwrite": "a sweep never overwrites a run; delete the run directory to redo a point",
    "config": "put the settings of a config file under base:",
}
# Defaults of every sweep point (base: overrides them): workers write to log files.
SWEEP_DEFAULTS: dict[str, Any] = {"disable_tqdm": True}
# Short names of settings in run directory names.
_SHORT = {
    "learning_rate": "lr", "per_device_train_batch_size": "bs", "num_train_epochs": "ep",
    "gradient_accumulation_steps": "ga", "weight_decay": "wd", "warmup_ratio": "wr",
    "warmup_steps": "ws", "max_seq_length": "len", "max_train_samples": "ntrain",
    "max_eval_samples": "neval", "subset_seed": "dseed", "in_cluster_weight": "g",
    "pooling": "pool",
    "shrinkage_tokens": "sT", "entropy_window": "win", "lr_scheduler_type": "sched",
    "entropy_accumulation": "acc", "include_padding": "pad",
}


# --------------------------------------------------------------------------- the spec


@dataclass
class SweepSpec:
    """A sweep as written (see the module doc); ``source`` names it in error messages."""

    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    methods: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    seeds: list[int] | None = None
    output_root: str | None = None
    order: str = "seed-major"
    source: str = "sweep spec"

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain values, keys in the spec file's order (``source`` left out)."""
        out: dict[str, Any] = {"output_root": self.output_root, "base": dict(self.base)}
        if self.grid:
            out["grid"] = {k: list(v) for k, v in self.grid.items()}
        if self.methods:
            out["methods"] = [dict(m) for m in self.methods]
        if self.points:
            out["points"] = [dict(p) for p in self.points]
        if self.seeds is not None:
            out["seeds"] = list(self.seeds)
        out["order"] = self.order
        return to_jsonable(out)


def _setting_names() -> set[str]:
    return field_names()


def _suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_setting_names(settings: Mapping[str, Any], where: str, source: str,
                         names: set[str], *, allow: Sequence[str] = ()) -> None:
    for key in settings:
        if key in allow:
            continue
        if not isinstance(key, str) or key not in names:
            raise ValueError(f"{source}: unknown setting {key!r} in {where}"
                             f"{_suggest(str(key), sorted(names))}")
        if key in _RESERVED:
            raise ValueError(f"{source}: {key} cannot be set in {where}: {_RESERVED[key]}")


def _mapping(value: Any, what: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{source}: {what} must be a mapping of setting -> value, got "
                         f"{type(value).__name__}")
    return dict(value)


def _methods(value: Any, source: str) -> list[dict[str, Any]]:
    if isinstance(value, Mapping):
        items = []
        for name, body in value.items():
            body = _mapping(body, f"methods.{name}", source)
            if "name" in body and body["name"] != name:
                raise ValueError(f"{source}: methods.{name} has another name {body['name']!r}")
            items.append({"name": name, **body})
        value = items
    if not isinstance(value, list):
        raise ValueError(f"{source}: methods must be a list of mappings (each with a name) or "
                         "a mapping name -> settings")
    out = []
    for i, m in enumerate(value):
        m = _mapping(m, f"methods[{i}]", source)
        name = m.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{source}: methods[{i}] needs a name (name: istar)")
        out.append(m)
    names = [m["name"] for m in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"{source}: two methods are named {dup!r}")
    return out


def _seeds(value: Any, source: str) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{source}: seeds must be a non-empty list of integers, got {value!r}")
    out = []
    for s in value:
        if isinstance(s, bool) or not isinstance(s, int):
            raise ValueError(f"{source}: seeds must be integers, got {s!r}")
        out.append(s)
    if len(set(out)) != len(out):
        raise ValueError(f"{source}: seeds has duplicates: {out}")
    return out


def spec_from_dict(data: Mapping[str, Any], source: str = "sweep spec") -> SweepSpec:
    """Check a spec's structure and setting names (types and values are checked by
    :func:`expand`); ``ValueError`` with a one-line message naming the problem."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{source} must hold a mapping with keys such as base, grid, seeds")
    for key in data:
        if key not in SPEC_KEYS:
            raise ValueError(f"{source}: unknown key {key!r}{_suggest(str(key), SPEC_KEYS)}; "
                             f"a sweep has {', '.join(SPEC_KEYS)}")
    names = _setting_names()
    base = _mapping(data.get("base"), "base", source)
    _check_setting_names(base, "base", source, names)
    grid = _mapping(data.get("grid"), "grid", source)
    if "grid" in data and not grid:
        raise ValueError(f"{source}: the grid is empty (give setting: [values, ...])")
    _check_setting_names(grid, "grid", source, names)
    for key, values in grid.items():
        if not isinstance(values, list):
            raise ValueError(f"{source}: grid.{key} must be a list of values, got {values!r} "
                             "(a single value goes under base:)")
        if not values:
            raise ValueError(f"{source}: grid.{key} is an empty list")
    methods = _methods(data["methods"], source) if "methods" in data else []
    if "methods" in data and not methods:
        raise ValueError(f"{source}: methods is empty")
    for m in methods:
        where = f"methods.{m['name']}"
        _check_setting_names(m, where, source, names, allow=("name",))
        for key, values in m.items():
            if key not in ("name", "regularizer") and isinstance(values, list) and not values:
                raise ValueError(f"{source}: {where}.{key} is an empty list")
            if key in grid:
                raise ValueError(f"{source}: {key} is set both in grid and in {where}")
    points = data.get("points")
    if points is not None and (not isinstance(points, list) or not points):
        raise ValueError(f"{source}: points must be a non-empty list of mappings")
    points = [_mapping(p, f"points[{i}]", source) for i, p in enumerate(points or [])]
    for i, p in enumerate(points):
        _check_setting_names(p, f"points[{i}]", source, names, allow=("name",))
    seeds = _seeds(data.get("seeds"), source)
    if seeds is not None:
        for where, settings in [("base", base), ("grid", grid),
                                *[(f"methods.{m['name']}", m) for m in methods],
                                *[(f"points[{i}]", p) for i, p in enumerate(points)]]:
            if "seed" in settings:
                raise ValueError(f"{source}: seed is set in {where} and seeds: is given; "
                                 "use one of the two")
    order = data.get("order", "seed-major")
    if order not in ORDERS:
        raise ValueError(f"{source}: order must be {' or '.join(ORDERS)}, got {order!r}")
    root = data.get("output_root")
    if root is not None and (not isinstance(root, str) or not root.strip()):
        raise ValueError(f"{source}: output_root must be a directory path, got {root!r}")
    return SweepSpec(base=base, grid=grid, methods=methods, points=points, seeds=seeds,
                     output_root=root, order=order, source=source)


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    """Read a sweep spec from a YAML (``.yaml``/``.yml``), TOML (``.toml``) or JSON file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sweep file {p} does not exist")

    text = read_text_utf8(p)
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                try:
                    import tomli as tomllib  # type: ignore[no-redef]
                except ImportError:
                    raise ValueError(f"reading the TOML file {p} needs Python >= 3.11 or "
                                     "tomli (pip install tomli)") from None
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except ValueError as err:  # json.JSONDecodeError and tomllib.TOMLDecodeError
        raise ValueError(f"sweep file {p} could not be parsed: {' '.join(str(err).split())}"
                         ) from None
    except Exception as err:  # yaml.YAMLError
        if type(err).__module__.startswith("yaml"):
            raise ValueError(f"sweep file {p} is not valid YAML: "
                             f"{' '.join(str(err).split())}") from None
        raise
    if data is None:
        raise ValueError(f"sweep file {p} is empty")
    return spec_from_dict(data, source=f"sweep file {p}")


# --------------------------------------------------------------------------- presets

# I-STAR paper (Rudman & Eickhoff, ICLR 2024). Section 4.1 and Table 2: lambda in
# {-5, -3, -1, 1, 3, 5} x zeta in {0.2, 0.4, 0.6, 0.8}; Fig. 3 adds lambda = 0.5 ("0.50").
_ISTAR_LAMBDAS = [-5.0, -3.0, -1.0, 0.5, 1.0, 3.0, 5.0]
_ISTAR_ZETAS = [0.2, 0.4, 0.6, 0.8]
# Appendix D, Fig. 7: zeta in {0, 0.2, ..., 1} on RTE with "all hyperparameters found in
# Table 2" fixed, i.e. lambda = -1 (Table 2's RTE value for ALBERT, BERT and DistilBERT); the
# ends 0 and 1 are the zetas the grid above lacks.
_FIG7_LAMBDA = -1.0
_FIG7_ZETAS = [0.0, 1.0]
# Section 4.1: "For each model and each task, we hyperparameter tune for batch size (8, 16, 32),
# training epochs (3,4,5), and learning rate (1e-5, 3e-5, 5e-5)".
_TUNING_BATCH = [8, 16, 32]
_TUNING_EPOCHS = [3, 4, 5]
_TUNING_LR = [1e-5, 3e-5, 5e-5]
# Section 4.1: every reported metric is a mean over five random seeds.
_FIVE_SEEDS = [1, 2, 3, 4, 5]

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "istar-grid": (
        "I-STAR paper (Rudman & Eickhoff, ICLR 2024), every point of its Table 1-2 and "
        "Figs. 3-7: base; CosReg lambda in {1, -1} (Table 1; Fig. 4); I-STAR lambda in "
        "{-5,-3,-1,0.5,1,3,5} x zeta in {0.2,0.4,0.6,0.8} (Table 2; Fig. 3) and lambda=-1 x "
        "zeta in {0, 1} (Fig. 7); 5 seeds, with the istar training preset; task and model "
        "are base settings (--set task=mrpc)",
        {
            "output_root": "runs/istar-grid",
            "base": {"preset": "istar", "task": "rte", "model": "minilm"},
            "methods": [
                {"name": "base", "regularizer": "none"},
                # Section 4: lambda = 1 as Gao et al.; Fig. 4 also shows lambda = -1
                {"name": "cosreg", "regularizer": "cosreg", "cosreg_tuning": [1.0, -1.0]},
                {"name": "istar", "regularizer": "istar", "tuning": _ISTAR_LAMBDAS,
                 "zeta": _ISTAR_ZETAS},
                {"name": "istar-zeta-ends", "regularizer": "istar", "tuning": _FIG7_LAMBDA,
                 "zeta": _FIG7_ZETAS},
            ],
            "seeds": _FIVE_SEEDS,
        },
    ),
    "istar-tuning": (
        "I-STAR paper's hyper-parameter search (Section 4.1): batch {8,16,32} x epochs "
        "{3,4,5} x learning rate {1e-5,3e-5,5e-5} per task and model, without a regularizer "
        "(the paper tunes these per model and task, then lambda and zeta for I-STAR: "
        "istar-grid); 5 seeds (--seeds 1 for a cheaper pass), with the istar training preset",
        {
            "output_root": "runs/istar-tuning",
            "base": {"preset": "istar", "task": "rte", "model": "minilm"},
            "grid": {"per_device_train_batch_size": _TUNING_BATCH,
                     "num_train_epochs": _TUNING_EPOCHS, "learning_rate": _TUNING_LR},
            "methods": [{"name": "base", "regularizer": "none"}],
            "seeds": _FIVE_SEEDS,
        },
    ),
    "entropy-grid": (
        "persistent-entropy paper: base vs entropy (beta=1) with and without prominent-feature "
        "selection, 5 seeds, with the entropy training preset (per-task lr, 10 epochs, "
        "64 [CLS] points as 8 x 8); task and model are base settings",
        {
            "output_root": "runs/entropy-grid",
            "base": {"preset": "entropy", "task": "mrpc", "model": "minilm"},
            "methods": [
                {"name": "base", "regularizer": "none"},
                {"name": "entropy", "regularizer": "entropy", "entropy_weight": 1.0,
                 "select_features": True},
                {"name": "entropy-allbars", "regularizer": "entropy", "entropy_weight": 1.0,
                 "select_features": False},
            ],
            "seeds": _FIVE_SEEDS,
        },
    ),
}


def preset_spec(name: str) -> SweepSpec:
    """The spec of a preset grid (:data:`PRESETS`)."""
    if name not in PRESETS:
        raise ValueError(f"unknown sweep preset {name!r}{_suggest(name, list(PRESETS))}; "
                         f"choose from {', '.join(PRESETS)}")
    return spec_from_dict(json.loads(json.dumps(PRESETS[name][1])), source=f"preset {name}")


def override(spec: SweepSpec, *, base: Mapping[str, Any] | None = None,
             grid: Mapping[str, list[Any]] | None = None, seeds: list[int] | None = None,
             output_root: str | None = None, order: str | None = None) -> SweepSpec:
    """The spec with command-line values: ``base`` and ``grid`` entries added (replacing
    those of the same setting), ``seeds``, ``output_root`` and ``order`` replaced; the result
    is checked again like a spec file."""
    data = spec.to_dict()
    data["base"] = {**data.get("base", {}), **(base or {})}
    if grid:
        data["grid"] = {**data.get("grid", {}), **grid}
        for k in grid:
            data["base"].pop(k, None)
    for k in (base or {}):
        if k in data.get("grid", {}) and k not in (grid or {}):
            del data["grid"][k]
    if seeds is not None:
        data["seeds"] = seeds
        data["base"].pop("seed", None)
    if output_root is not None:
        data["output_root"] = output_root
    if order is not None:
        data["order"] = order
    if data.get("output_root") is None:
        data.pop("output_root", None)
    return spec_from_dict(data, source=spec.source)


# --------------------------------------------------------------------------- values

_HINTS: dict[str, Any] | None = None


def _hints() -> dict[str, Any]:
    global _HINTS
    if _HINTS is None:

        _HINTS = {**typing.get_type_hints(TrainArguments),
                  **typing.get_type_hints(IsotropyArguments)}
    return _HINTS


def _scalar_kinds(hint: Any) -> tuple[set[type], bool]:
    """The scalar types of a type hint and whether it allows ``None``."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    kinds = {a for a in args if a in (int, float, bool, str)}
    return kinds, type(None) in args


def coerce(name: str, value: Any, where: str) -> Any:
    """A setting's value with the type its field expects: numbers written as text
    (YAML reads ``1e-5`` as a string), ``true``/``false`` text for flags.

    >>> coerce("learning_rate", "1e-5", "base"), coerce("seed", 3.0, "base")
    (1e-05, 3)
    """
    hint = _hints().get(name)
    if hint is None or value is None:
        return value
    kinds, _ = _scalar_kinds(hint)
    if bool in kinds:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0"):
            return False
        raise ValueError(f"{where}: {name} must be true or false, got {value!r}")
    if float in kinds and int not in kinds:
        if isinstance(value, bool):
            raise ValueError(f"{where}: {name} must be a number, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            if str in kinds:
                return value
            raise ValueError(f"{where}: {name} must be a number, got {value!r}") from None
        if not math.isfinite(v):
            raise ValueError(f"{where}: {name} must be finite, got {value!r}")
        return v
    if int in kinds and float not in kinds:
        if isinstance(value, bool):
            raise ValueError(f"{where}: {name} must be an integer, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            if str in kinds:
                return value
            raise ValueError(f"{where}: {name} must be an integer, got {value!r}") from None
        if not v.is_integer():
            raise ValueError(f"{where}: {name} must be an integer, got {value!r}")
        return int(v)
    return value


def _coerce_all(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {k: coerce(k, v, where) for k, v in settings.items()}


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


def _resolved(ours: Any, targs: Any, key: str) -> Any:
    return getattr(ours, key) if hasattr(ours, key) else getattr(targs, key)


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
    """Every point of the spec in run order, each checked with ``args_from_dict`` and named.

    Raises ``ValueError`` (one line, naming the point) for a bad value, a missing
    ``output_root`` or two points with the same settings.
    """

    root_text = output_root if output_root is not None else spec.output_root
    if root_text is None:
        raise ValueError(f"{spec.source}: no output_root (give output_root: in the spec or "
                         "--output-root)")
    root = Path(root_text).expanduser().absolute()
    base = _coerce_all({**SWEEP_DEFAULTS, **spec.base}, f"{spec.source}: base")
    seeds: list[int | None] = list(spec.seeds) if spec.seeds is not None else [None]
    given_keys = set(spec.base) | set(spec.grid) | {
        k for m in spec.methods for k in m if k != "name"} | {
        k for p in spec.points for k in p if k != "name"}
    raw = []
    for method, cell, where in _cells(spec):
        for seed in seeds:
            values = _coerce_all(cell, f"{spec.source}: {where}")
            settings = {**base, **values}
            if seed is not None:
                settings["seed"] = seed
            raw.append((method, settings, where, values))
    parsed = []
    for i, (method, settings, where, values) in enumerate(raw):
        try:
            ours, targs = args_from_dict(settings)
        except (ValueError, TypeError) as err:
            shown = "".join(f"{k}={_text(v) if not isinstance(v, str) else v}, "
                            for k, v in values.items())
            raise ValueError(f"{spec.source}: {where} (point {i + 1}: {shown}seed "
                             f"{settings.get('seed', 'default')}): "
                             f"{' '.join(str(err).split())}") from None
        resolved = {**{k: _resolved(ours, targs, k) for k in given_keys},
                    **vars(ours), "seed": targs.seed}
        parsed.append((method, settings, ours, targs, default_run_name(resolved)))
    # Points of equal default names get the settings that tell them apart.
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(parsed):
        groups.setdefault(p[4], []).append(i)
    compared = sorted(given_keys - {"seed"},
                      key=lambda k: (list(_SHORT).index(k) if k in _SHORT else len(_SHORT), k))
    names = []
    for _method, _settings, ours, targs, name in parsed:
        members = groups[name]
        differing = [k for k in compared if len({json.dumps(to_jsonable(
            _resolved(parsed[j][2], parsed[j][3], k)), sort_keys=True) for j in members}) > 1]
        if len(members) > 1 and differing:
            head, _, seed_text = name.rpartition("-seed")
            suffix = "_".join(
                _SHORT.get(k, f"{k}=") + _text(_resolved(ours, targs, k))
                for k in differing)
            name = f"{head}-{suffix}-seed{seed_text}"
        names.append(name)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise ValueError(f"{spec.source}: points {seen[name] + 1} and {i + 1} have the same "
                             f"settings (run directory {name}); remove the duplicate")
        seen[name] = i
    points = []
    for (method, settings, _ours, targs, _n), name in zip(parsed, names, strict=True):
        head, _, seed_text = name.rpartition("-seed")
        points.append(SweepPoint(
            index=0, name=name, cell=head, method=method, seed=int(targs.seed),
            settings={**settings, "output_dir": str(root / name)},
            given=tuple(sorted(given_keys | {"seed"}))))
    if spec.order == "seed-major":
        rank = {s: r for r, s in enumerate(dict.fromkeys(p.seed for p in points))}
        points.sort(key=lambda p: rank[p.seed])  # stable: cells keep their order
    else:
        rank = {c: r for r, c in enumerate(dict.fromkeys(p.cell for p in points))}
        points.sort(key=lambda p: rank[p.cell])
    return [replace(p, index=i) for i, p in enumerate(points)]


def check_inputs(points: Sequence[SweepPoint]) -> None:
    """Every model directory and local data file the points need exists (else
    ``FileNotFoundError``/``ValueError`` naming it), and no point pools a local decoder-only
    model's first token (:func:`isotropy.training.model_kind.check_pooling`); hub models and
    data are checked when the runs load them."""

    seen: set[tuple[Any, ...]] = set()
    for p in points:
        ours, _ = args_from_dict(p.settings)
        key = (ours.model, ours.task, ours.data_source, ours.data_dir,
               ours.split_dev_for_training is None, ours.pooling, tuple(ours.regularizers))
        if key in seen:
            continue
        seen.add(key)
        try:
            path = resolve_model(ours.model)
            if os.path.isdir(path):
                check_pooling(path, ours.pooling, ours.regularizers)
            if ours.data_source == "local":
                splits = ("dev",) if ours.split_dev_for_training is not None else ("train", "dev")
                for split in splits:
                    require_split(ours.task, split, ours.data_dir)
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
    ours, targs = args_from_dict(point.settings)
    for key in point.given:
        section = "isotropy" if hasattr(ours, key) else "training"
        stored = old.get(section, {})
        if key not in stored:
            continue
        now = _resolved(ours, targs, key)
        if not _same(stored[key], now):
            return f"setting {key} was {stored[key]!r}, now {to_jsonable(now)!r}"
    return None


def check_finished_runs(points: Sequence[SweepPoint]) -> None:
    """``ValueError`` if a finished run in a point's directory has other settings than the
    point: the sweep would otherwise count it as done (it is never overwritten)."""
    for p in points:
        diff = finished_difference(p)
        if diff is not None:
            raise ValueError(
                f"{p.run_dir} holds a finished run with other settings ({diff}): choose "
                "another output_root, or move that run away to redo the point")


# --------------------------------------------------------------------------- state


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class SweepStatus:
    """``output_root/sweep.json``: the spec, the points in run order and each point's state.

    Records of points no longer in the spec are kept under ``other_points``. Every change is
    written at once, atomically; one driver writes it (the caller holds the sweep's lock).
    """

    def __init__(self, output_root: str | os.PathLike[str]) -> None:
        self.root = Path(output_root)
        self.path = self.root / SWEEP_FILE
        self.records: dict[str, dict[str, Any]] = {}
        self.spec: dict[str, Any] = {}
        self.points: list[SweepPoint] = []
        self.live = False  # a sweep holds the lock now: its "running" points are running
        self._lock = threading.Lock()
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except ValueError as err:
                raise ValueError(f"{self.path} is not valid JSON ({err}); move it away to "
                                 "start the status afresh (run directories are kept)") from None
            for rec in [*data.get("points", []), *data.get("other_points", [])]:
                if isinstance(rec, dict) and "name" in rec:
                    self.records[rec["name"]] = {k: v for k, v in rec.items()
                                                 if k not in ("index", "settings")}

    def state(self, point: SweepPoint) -> tuple[str, str]:
        """``(state, detail)`` of a point: the run directory first (``results.json`` means
        done, ``config.json`` without it interrupted), then the recorded state; ``running``
        only while :attr:`live` (another process's sweep holds the lock)."""

        run = RunDirectory(point.run_dir)
        rec = self.records.get(point.name, {})
        if run.finished:
            return "done", ""
        if rec.get("state") == "failed":
            return "failed", str(rec.get("error") or "")
        if self.live and rec.get("state") == "running":
            return "running", "in the sweep running now"
        if run.file("config.json").is_file() or rec.get("state") in ("running", "interrupted"):
            cp = run.last_checkpoint()
            return "interrupted", f"resumes from {cp.name}" if cp else "restarts (no checkpoint)"
        return "pending", ""

    def set_points(self, spec: SweepSpec, points: Sequence[SweepPoint]) -> None:
        self.spec = spec.to_dict()
        self.points = list(points)

    def update(self, name: str, **values: Any) -> None:
        """Change a point's record (``state``, ``error``, ...) and write the file."""
        with self._lock:
            rec = self.records.setdefault(name, {"name": name})
            rec.update(values, updated=_now())
            self._write()

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        current = {p.name for p in self.points}
        points = []
        for p in self.points:
            rec = dict(self.records.get(p.name, {}))
            rec.setdefault("state", self.state(p)[0])
            points.append({"index": p.index, "name": p.name, "cell": p.cell,
                           "method": p.method, "seed": p.seed, "run_dir": str(p.run_dir),
                           **{k: v for k, v in rec.items() if k != "name"},
                           "settings": p.settings})
        other = [{"name": n, **{k: v for k, v in r.items() if k != "name"}}
                 for n, r in self.records.items() if n not in current]
        write_json_atomic(self.path, {"output_root": str(self.root), "spec": self.spec,
                                      "updated": _now(), "points": points,
                                      "other_points": other})
