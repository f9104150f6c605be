"""Settings read from files (``--config``, sweep specs) converted to the types of their fields,
once, where they are read: YAML and JSON leave ``"false"`` a string (which ``bool()`` would
call true) and PyYAML reads ``1e-4`` as text. A value that cannot mean its field's type is a
``ValueError`` naming the setting and where it was given. The fields' types come from the
caller (:func:`isotropy.training.config.field_types` for ``isotropy train``'s settings)."""

from __future__ import annotations

import math
import os
import types
import typing
from collections.abc import Mapping
from typing import Any

__all__ = [
    "coerce",
    "coerce_settings",
]

_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _args(hint: Any) -> tuple[Any, ...]:
    """The members of a union hint, or the hint alone."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return typing.get_args(hint) if union else (hint,)


def _scalar_kinds(hint: Any) -> set[type]:
    """The scalar types of a type hint."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    return {a for a in args if a in (int, float, bool, str)}


def coerce(name: str, value: Any, where: str, types_: Mapping[str, Any]) -> Any:
    """A setting's value with the type its field expects (``types_[name]``, a type hint): a
    flag from ``true``/``false``, ``yes``/``no`` or ``1``/``0`` (any case), a number from its
    text; anything else is a ``ValueError`` naming ``name`` and ``where``. Settings of other
    types, and names not in ``types_``, pass unchanged.

    >>> kinds = {"learning_rate": float, "seed": int, "include_padding": bool}
    >>> coerce("learning_rate", "1e-5", "base", kinds), coerce("seed", 3.0, "base", kinds)
    (1e-05, 3)
    >>> coerce("include_padding", "No", "config file c.yaml", kinds)
    False
    >>> coerce("include_padding", "maybe", "config file c.yaml", kinds)
    Traceback (most recent call last):
    ...
    ValueError: config file c.yaml: include_padding must be true or false, got 'maybe'
    >>> coerce("seed", None, "config file c.yaml", kinds)
    Traceback (most recent call last):
    ...
    ValueError: config file c.yaml: seed has no value (null): give one, or leave it out
    """
    hint = types_.get(name)
    if hint is None:
        return value
    args = _args(hint)
    if value is None:
        if type(None) in args or typing.Any in args:
            return value
        raise ValueError(f"{where}: {name} has no value (null): give one, or leave it out")
    if typing.get_origin(hint) is list and not isinstance(value, (str, list, tuple)):
        raise ValueError(f"{where}: {name} must be a name or a list of names, got {value!r}")
    if args and all(a is str for a in args if a is not type(None)):
        if isinstance(value, os.PathLike):  # a path given from Python: its text
            return os.fspath(value)
        if isinstance(value, (bool, int, float)):  # a number where a name or path is meant
            raise ValueError(f"{where}: {name} must be text, got {value!r}")
    kinds = _scalar_kinds(hint)
    if bool in kinds:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float, str)):
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
        if str in kinds and isinstance(value, str):  # a flag that also takes words
            return value
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


def coerce_settings(settings: Mapping[str, Any], where: str,
                    types_: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`coerce` of every setting."""
    return {k: coerce(k, v, where, types_) for k, v in settings.items()}
