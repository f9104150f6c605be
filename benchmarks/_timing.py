"""Wall-clock timing helper shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int = 7, warmup: int = 2) -> float:
    """Median wall-clock seconds of ``repeat`` calls of ``fn()`` after ``warmup`` untimed calls.

    >>> median_time(lambda: sum(range(10)), repeat=3, warmup=1) >= 0.0
    True
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    for _ in range(max(warmup, 0)):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
