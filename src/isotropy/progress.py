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

__all__ = ["stage"]


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
def stage(what: str, *, bar: bool, echo: Callable[[str], None] | None = print
          ) -> Iterator[Callable[[Iterable[Any]], Iterable[Any]]]:
    """Count the batches a pass reads: yields ``counted(loader)``, the loader's batches as
    they are read (re-iterable where the loader is). ``bar``: a ``tqdm`` bar on stderr while
    it runs; at the end, one line ``<what>: N batches, T tokens in S s`` through ``echo``
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

    def counted(loader: Iterable[Any]) -> Iterable[Any]:
        return Counted(loader)

    try:
        yield counted
    finally:
        if pbar is not None:
            pbar.close()
    if echo is not None:
        echo(f"{what}: {count['batches']:,} batches, {count['tokens']:,} tokens in "
             f"{time.perf_counter() - t0:.1f} s")
