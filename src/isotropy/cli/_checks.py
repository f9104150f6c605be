"""Help formatting, argument types, input checks and result printing shared by
``stability``, ``measure``, ``analyze`` and ``demo``. Every command checks all of its inputs,
cheap ones first, then loads what it needs (texts, model, tokenizer) before it computes
anything; any failure is a one-line usage error."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotropy.io import not_found

__all__ = [
    "HelpFormatter",
    "check_data_dir",
    "check_device",
    "check_model",
    "check_output_dir",
    "flatten",
    "int_list",
    "prepare",
    "print_paths",
    "print_table_and_notes",
    "wrap",
    "zeta_list",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep the descriptions' paragraphs (each is wrapped by :func:`wrap`)."""


def wrap(*paragraphs: str) -> str:
    return "\n\n".join(textwrap.fill(p, width=78) for p in paragraphs)


def int_list(text: str) -> list[int]:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers, got {part!r}") from None
        if v < 2:
            raise argparse.ArgumentTypeError(f"sub-sample sizes must be >= 2, got {v}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("expected at least one size")
    return out


def zeta_list(text: str) -> list[float]:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers in [0, 1], got {part!r}") from None
        if not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise argparse.ArgumentTypeError(f"zeta must lie in [0, 1], got {part!r}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("expected at least one zeta")
    return out


def flatten(values: list[list[Any]] | None) -> list[Any] | None:
    return None if values is None else [v for group in values for v in group]


def check_model(parser: argparse.ArgumentParser, model: str | None) -> None:
    from isotropy.models.loading import check_model_path

    if model is None:
        return
    try:
        check_model_path(model)
    except FileNotFoundError as err:
        parser.error(f"--model: {err}")


def check_device(parser: argparse.ArgumentParser, device: str) -> None:
    from isotropy.probing.inputs import resolve_device

    try:
        resolve_device(device)
    except ValueError as err:
        parser.error(f"--device: {err}")


def check_data_dir(parser: argparse.ArgumentParser, data_dir: Path | None) -> None:
    if data_dir is not None and (why := not_found(data_dir, "directory")) is not None:
        parser.error(f"--data-dir: directory {data_dir} {why}")


def check_output_dir(parser: argparse.ArgumentParser, path: Path, names: Sequence[str]) -> None:
    """A usage error when the files ``names`` cannot be written into ``path``, or would replace
    files that an earlier run of the command did not write
    (:func:`isotropy.io.earlier_outputs_problem`)."""
    from isotropy.io import earlier_outputs_problem, output_dir_problem

    problem = output_dir_problem(path, names) or earlier_outputs_problem(path, names)
    if problem is not None:
        parser.error(f"--output-dir {path}: {problem}")


def prepare(parser: argparse.ArgumentParser, args: argparse.Namespace, **source: Any) -> Any:
    """Read the texts, load the model and tokenizer and check ``--max-length`` against it
    (:func:`isotropy.probing.layerwise.prepare_measure`); a failure is a usage error."""
    from isotropy.probing.layerwise import prepare_measure

    try:
        return prepare_measure(args.model, data_dir=args.data_dir, max_texts=args.max_texts,
                               device=args.device, max_length=args.max_length, **source)
    except (OSError, ValueError) as err:
        parser.error(str(err))


def print_paths(paths: dict[str, Path]) -> None:
    for p in paths.values():
        print(f"  wrote {p}")


def print_table_and_notes(table: str, errors: list[str], paths: dict[str, Path]) -> None:
    """A probe's table, how many measures were undefined (with the first reason), and the
    files written."""
    print(table)
    if errors:
        print(f"{len(errors)} undefined measure(s), recorded as null, e.g.: {errors[0]}")
    print_paths(paths)
