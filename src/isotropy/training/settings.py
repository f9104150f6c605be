"""Settings of ``isotropy train`` from where they are given, lowest priority first: the
dataclass defaults, a ``--preset``, a ``--config`` file (JSON or YAML, keys spelled as the flags
without dashes), the command line or a caller's dict; the papers' names of the regularizer
weights accepted as aliases; each value converted to its field's type once, where it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from isotropy.io import parse_json_unique, parse_yaml_unique, read_text_utf8
from isotropy.training._compat import group_by_length
from isotropy.training.config import (
    REGULARIZER_SETTINGS,
    IsotropyArguments,
    TrainArguments,
    default_run_name,
    field_names,
    field_types,
)
from isotropy.training.flags import build_parser, check_one_spelling
from isotropy.training.presets import preset_values
from isotropy.training.setting_types import coerce_settings

__all__ = [
    "SETTING_ALIASES",
    "args_from_dict",
    "args_from_flags",
    "canonical_settings",
    "check_settings_used",
    "parse_train_args",
    "read_config_file",
    "typed_settings",
]


def read_config_file(path: str) -> dict[str, Any]:
    """The mapping of setting -> value in a ``--config`` file (YAML by its suffix, else
    JSON); ``ValueError`` naming the file, and the line for YAML, when it cannot be read."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"config file {p} is a directory, not a file of settings")
    if not p.is_file():
        raise ValueError(f"config file {p} does not exist")
    try:
        text = read_text_utf8(p)
    except OSError as err:
        raise ValueError(f"config file {p} cannot be read: {err.strerror or err}") from None
    except ValueError as err:
        raise ValueError(f"config file {err}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = parse_yaml_unique(text)
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
            data = parse_json_unique(text)
        except ValueError as err:  # json.JSONDecodeError, or a key given twice
            raise ValueError(f"config file {p} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of setting -> value")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise ValueError(f"config file {p}: setting names must be text, got {odd[0]!r}")
    if "config" in data:  # files do not nest: the inner file's settings would be ignored
        raise ValueError(f"config file {p} sets config ({data['config']!r}): a config file "
                         "cannot name another; copy its settings into this one")
    return data


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
    from_file = (canonical_settings(read_config_file(given["config"]), "config file")
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
        group_by_length(train_args)
    return iso_args, train_args


def parse_train_args(argv: Sequence[str] | None = None) -> tuple[IsotropyArguments, TrainArguments]:
    """Parse command-line flags (plus ``--config`` and ``--preset``) into the two dataclasses.

    Malformed flags exit with status 2 and a one-line error; bad values raise ``ValueError``,
    as does a regularizer's flag given while that regularizer is off
    (:func:`check_settings_used`).
    """
    argv = list(argv if argv is not None else [])
    parser = build_parser()
    check_one_spelling(parser, argv)
    return args_from_flags(vars(parser.parse_args(argv)))


def args_from_flags(given: Mapping[str, Any]) -> tuple[IsotropyArguments, TrainArguments]:
    """:func:`args_from_dict` of the flags given on a command line (only those: the parser
    suppresses its defaults), refusing a regularizer's flag while that regularizer is off
    (:func:`check_settings_used`)."""
    iso_args, train_args = args_from_dict(given)
    check_settings_used(given, iso_args.regularizer)
    if given.get("config"):  # a file's settings are given as much as flags are
        path = given["config"]
        names = field_names()
        from_file = {k: v for k, v in canonical_settings(read_config_file(path)).items()
                     if k in names and k not in canonical_settings(given)}
        check_settings_used(typed_settings(from_file, f"config file {path}"),
                            iso_args.regularizer, where=f"config file {path}")
    return iso_args, train_args


def check_settings_used(given: Mapping[str, Any], regularizers: Sequence[str], *,
                        where: str | None = None) -> None:
    """``ValueError`` when a setting of a regularizer (:data:`REGULARIZER_SETTINGS`) is given,
    at a value other than its default, while none of the regularizers that read it is on:
    ``--tuning -5`` without ``--regularizer istar`` would otherwise train without I-STAR,
    silently.

    >>> check_settings_used({"zeta": 0.4}, ["istar"])
    >>> check_settings_used({"istar_lambda": -5}, ["none"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --tuning is a setting of the istar regularizer, which is not on ...

    ``where`` names the source of settings that are not flags (a config file).
    """
    on = set(regularizers)
    defaults = {f.name: f.default for f in fields(IsotropyArguments)}
    for name, value in canonical_settings(given).items():
        readers = [r for r, names in REGULARIZER_SETTINGS.items() if name in names]
        if readers and not on & set(readers) and value != defaults.get(name):
            said = f"{name} (set in {where})" if where else f"--{name}"
            raise ValueError(
                f"{said} is a setting of the {' or '.join(readers)} regularizer, which is not "
                f"on (--regularizer {' '.join(regularizers)}): add --regularizer "
                f"{readers[0]}, or leave {name if where else said} out")
