"""Text helpers without heavy imports (the command line's start uses them before torch)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["accept_negative_numbers", "one_line"]


def one_line(message: object, limit: int | None = None) -> str:
    """``message`` with its whitespace (newlines included) collapsed to single spaces; with
    ``limit``, cut to at most that many characters (ending in ``...``).

    >>> one_line("CUDA out of memory.\\n  Tried to allocate")
    'CUDA out of memory. Tried to allocate'
    >>> one_line("x" * 10, limit=8)
    'xxxxx...'
    """
    s = " ".join(str(message).split())
    return s if limit is None or len(s) <= limit else s[: limit - 3] + "..."


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$",
                              re.IGNORECASE)


def accept_negative_numbers(parser: Any) -> None:
    """Let an ``argparse`` parser take ``-1e-5``, ``-.5`` or ``-inf`` as an option's value
    (its own rule knows only ``-1`` and ``-1.5``, and calls ``-1e-5`` a missing argument);
    the value is then checked as any other.

    >>> import argparse
    >>> p = argparse.ArgumentParser(); _ = p.add_argument("--lr", type=float)
    >>> accept_negative_numbers(p); p.parse_args(["--lr", "-1e-5"]).lr
    -1e-05
    """
    parser._negative_number_matcher = _NEGATIVE_NUMBER


def plain_help(text: str) -> str:
    """A help text as a terminal shows it: the docstrings' reStructuredText literals
    (double backticks) as single backticks.

    >>> plain_help("Run ``isotropy train --help``.")
    'Run `isotropy train --help`.'
    """
    return text.replace("``", "`")
