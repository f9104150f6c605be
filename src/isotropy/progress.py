"""Feedback from long passes that are not training steps (the :math:`\\Sigma_S` passes, the
measurements of ``analyze``): a progress bar on a terminal, as the Trainer shows, else one
line per stage when it ends.

>>> with stage("Sigma_S", bar=False, echo=print) as counted:
...     batches = list(counted([{"attention_mask": [[1, 1, 0]]}] * 3))
Sigma_S: 3 batches, 6 tokens in ... s
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["progress_bar", "stage"]


def _tokens(batch: Any) -> int:
    """Non-padding tokens of a batch (its ``attention_mask``'s sum; every position without)."""
    if not isinstance(batch, Mapping):
        return 0
    mask = batch.get("attention_mask")
    if mask is None:
        ids = batch.get("input_ids")
        return int(getattr(ids, "numel", lambda: 0)()) if ids is not None else 0
    total = mask.sum() if hasattr(mask, "sum") else sum(sum(row) for row in mask)
    return int(total)


@contextlib.contextmanager
def progress_bar(what: str, total: int, *, unit: str = "row", show: bool = True
                 ) -> Iterator[Callable[[int], None]]:
    """A ``tqdm`` bar of ``total`` units (rows) on stderr, as the Trainer's (shown only where
    stderr is a terminal, and never with ``show=False``); yields ``advance(n)``, which moves it
    on by ``n`` (at most to ``total``).

    >>> with progress_bar("Sigma_S", 10, show=False) as advance:
    ...     advance(4); advance(20)
    """
    pbar = None
    if show:
        from tqdm.auto import tqdm

        # disable=None: tqdm's own rule, no bar where stderr is not a terminal
        pbar = tqdm(desc=what, total=total, unit=unit, unit_scale=total >= 10_000,  # 250k
                    file=sys.stderr, leave=False, disable=None)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        step = max(0, min(int(n), total - done))
        done += step
        if pbar is not None and step:
            pbar.update(step)

    try:
        yield advance
    finally:
        if pbar is not None:
            pbar.close()


@contextlib.contextmanager
def stage(what: str, *, bar: bool, echo: Callable[[str], None] | None = print
          ) -> Iterator[Callable[[Iterable[Any]], Iterable[Any]]]:
    """Count the batches a pass reads: yields ``counted(loader, total=None)``, the loader's
    batches as they are read (re-iterable where the loader is). ``bar``: a ``tqdm`` bar on
    stderr while it runs, out of ``total`` batches (or ``len(loader)`` where the loader has a
    length); at the end, one line ``<what>: N batches, T tokens in S s`` through ``echo``
    (``None``: silent)."""
    t0 = time.perf_counter()
    count = {"batches": 0, "tokens": 0}
    pbar = None
    if bar:
        from tqdm.auto import tqdm

        pbar = tqdm(desc=what, unit="batch", file=sys.stderr, leave=False)

    class Counted:
        """The loader, re-iterable as it is (a pass may read it more than once)."""

        def __init__(self, loader: Iterable[Any]) -> None:
            self.loader = loader

        def __iter__(self) -> Iterator[Any]:
            for batch in self.loader:
                count["batches"] += 1
                count["tokens"] += _tokens(batch)
                if pbar is not None:
                    pbar.update(1)
                yield batch

    def counted(loader: Iterable[Any], total: int | None = None) -> Iterable[Any]:
        if total is None and hasattr(loader, "__len__"):
            try:
                total = len(loader)  # type: ignore[arg-type]
            except TypeError:  # an iterable dataset's loader has no length
                total = None
        if pbar is not None and total is not None:
            pbar.total = total
            pbar.refresh()
        return Counted(loader)

    try:
        yield counted
    finally:
        if pbar is not None:
            pbar.close()
    if echo is not None:
        echo(f"{what}: {count['batches']:,} batches, {count['tokens']:,} tokens in "
             f"{time.perf_counter() - t0:.1f} s")
