"""What every ``isotropy`` subcommand's command line shares: one-line errors, exit status 2."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

from isotropy._text import accept_negative_numbers, one_line, plain_help

__all__ = ["OneLineParser", "one_line", "one_line_warnings", "positive_int", "task_name"]


@contextlib.contextmanager
def one_line_warnings(prog: str = "isotropy") -> Iterator[None]:
    """Show each warning as one line, ``<prog>: warning: ...``, once per text (a warning
    raised from two places, or every epoch, is said once), without Python's echo of the
    source line. Left alone where warnings are being recorded (``catch_warnings``, pytest)."""
    original = getattr(warnings, "_showwarning_orig", None)
    if warnings.showwarning is not original:
        yield
        return
    seen: set[str] = set()

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:
        text = one_line(message)
        if text not in seen:
            seen.add(text)
            print(f"{prog}: warning: {text}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``<error_prefix>: error: ...``, exit
    status 2; flags are never taken by a unique prefix (``--max-len`` is an error, as an
    unknown setting in a sweep spec is). Subcommand parsers are of the same class
    (``add_subparsers`` uses ``type(self)``), so they share the prefix."""

    error_prefix = "isotropy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # a typo is an error, never another flag
        super().__init__(*args, **kwargs)
        accept_negative_numbers(self)  # --tuning -1e-1 is a value

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.error_prefix}: error: {one_line(message)}\n")

    def format_help(self) -> str:  # descriptions come from docstrings
        return plain_help(super().format_help())


def _int_in(text: str, lo: int, hi: int | None, expected: str) -> int:
    """``text`` as an integer in ``lo .. hi`` (``hi`` ``None``: no bound), else an
    ``argparse.ArgumentTypeError`` saying ``expected {expected}, got {text!r}``."""
    try:
        v = int(text)
    except ValueError:
        v = None
    if v is None or v < lo or (hi is not None and v > hi):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return v


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1.

    >>> positive_int("3")
    3
    """
    return _int_in(text, 1, None, "a positive integer")


def positive_number(text: str) -> float:
    """An ``argparse`` type: a finite number > 0.

    >>> positive_number("0.5")
    0.5
    >>> positive_number("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a finite number > 0, got 'nan'
    """
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


def at_least_two(text: str) -> int:
    """An ``argparse`` type: an integer >= 2 (a covariance needs two rows).

    >>> at_least_two("2")
    2
    >>> at_least_two("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer >= 2 (a covariance needs two rows), got '1'
    """
    return _int_in(text, 2, None, "an integer >= 2 (a covariance needs two rows)")


def seed_int(text: str) -> int:
    """An ``argparse`` type: a seed in ``0 .. 2**32 - 1``, the range NumPy and
    ``isotropy train`` take (a seed outside it would fail only once the work has started).

    >>> seed_int("7")
    7
    >>> seed_int("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a seed in 0..4294967295, got '-1'
    """
    return _int_in(text, 0, 2**32 - 1, f"a seed in 0..{2**32 - 1}")


def task_name(text: str) -> str:
    """An ``argparse`` type: a task name in any spelling (``SST-2``, ``sst2``), as its
    canonical name; an unknown one is an error naming the known tasks."""
    from isotropy.data.glue import get_task

    try:
        return get_task(text).name
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
