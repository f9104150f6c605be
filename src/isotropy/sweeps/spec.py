"""Sweep spec files (YAML, TOML, JSON) -> a validated :class:`SweepSpec` (its setting values
are converted to the types ``isotropy train`` expects where points are expanded:
:func:`isotropy.training.settings.typed_settings`).

A spec's top-level keys: ``output_root`` (where the run directories go), ``base`` (settings of
every point), ``grid`` (setting -> list of values, crossed), ``methods`` (named bundles of
settings; a list inside a method is that method's own axis, except ``regularizer``),
``points`` (explicit points), ``seeds``, ``order`` (``seed-major`` or ``cell-major``) and
``exclude`` (run directory names left out, e.g. runs finished elsewhere); see
``docs/sweeps.md``."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotropy.io import parse_json_unique, parse_yaml_unique, read_text_utf8, to_jsonable
from isotropy.training.config import field_names
from isotropy.training.settings import canonical_settings

__all__ = [
    "ORDERS",
    "SPEC_KEYS",
    "SWEEP_DEFAULTS",
    "SweepSpec",
    "load_spec",
    "spec_from_dict",
]

SPEC_KEYS = ("output_root", "base", "grid", "methods", "points", "seeds", "order", "exclude")
ORDERS = ("seed-major", "cell-major")


# Settings a sweep decides itself.
_RESERVED = {
    "output_dir": "the sweep names every run directory itself (output_root/<name>)",
    "resume": "the sweep resumes unfinished runs itself",
    "overwrite": "a sweep never overwrites a run; delete the run directory to redo a point",
    "config": "put the settings of a config file under base:",
}
# Defaults of every sweep point (base: overrides them): workers write to log files.
SWEEP_DEFAULTS: dict[str, Any] = {"disable_tqdm": True}


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
    exclude: list[str] = field(default_factory=list)  # run directory names left out
    source: str = "sweep spec"

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON values, keys in the spec file's order (``source`` left out)."""
        return to_jsonable(self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        """The spec's mappings and lists as given, keys in the spec file's order (``source``
        left out): a NaN stays a NaN, so that checking the spec again names it."""
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
        if self.exclude:
            out["exclude"] = list(self.exclude)
        return out


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
        if not 0 <= s < 2**32:
            raise ValueError(f"{source}: seeds must be in 0..{2**32 - 1} (NumPy's seeds), "
                             f"got {s}")
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
    base = canonical_settings(_mapping(data.get("base"), "base", source), f"{source}: base")
    _check_setting_names(base, "base", source, names)
    grid = canonical_settings(_mapping(data.get("grid"), "grid", source), f"{source}: grid")
    if "grid" in data and not grid:
        raise ValueError(f"{source}: the grid is empty (give setting: [values, ...])")
    _check_setting_names(grid, "grid", source, names)
    for key, values in grid.items():
        if not isinstance(values, list):
            raise ValueError(f"{source}: grid.{key} must be a list of values, got {values!r} "
                             "(a single value goes under base:)")
        if not values:
            raise ValueError(f"{source}: grid.{key} is an empty list")
    methods = [canonical_settings(m, f"{source}: methods.{m['name']}")
               for m in (_methods(data["methods"], source) if "methods" in data else [])]
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
    points = [canonical_settings(_mapping(p, f"points[{i}]", source), f"{source}: points[{i}]")
              for i, p in enumerate(points or [])]
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
    exclude = data.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(n, str) and n.strip()
                                                for n in exclude):
        raise ValueError(f"{source}: exclude must be a list of run directory names, "
                         f"got {exclude!r}")
    return SweepSpec(base=base, grid=grid, methods=methods, points=points, seeds=seeds,
                     output_root=root, order=order, exclude=list(dict.fromkeys(exclude)),
                     source=source)


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    """Read a sweep spec from a YAML (``.yaml``/``.yml``), TOML (``.toml``) or JSON file."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"sweep file {p} is a directory, not a sweep spec")
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
            data = parse_json_unique(text)
        else:
            data = parse_yaml_unique(text)
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
