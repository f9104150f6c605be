"""What every ``isotropy`` subcommand's command line shares: one-line errors, exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

from isotropy._validation import one_line

__all__ = ["OneLineParser", "one_line", "positive_int", "task_name"]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ``<error_prefix>: error: ...``, exit
    status 2. Subcommand parsers are of the same class (``add_subparsers`` uses
    ``type(self)``), so they share the prefix."""

    error_prefix = "isotropy"

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.error_prefix}: error: {one_line(message)}\n")


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1.

    >>> positive_int("3")
    3
    """
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def task_name(text: str) -> str:
    """An ``argparse`` type: a task name in any spelling (``SST-2``, ``sst2``), as its
    canonical name; an unknown one is an error naming the known tasks."""
    from isotropy.data.glue import get_task

    try:
        return get_task(text).name
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
