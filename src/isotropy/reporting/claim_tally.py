"""A claim's units, one per task, as the claims' tables record them (:class:`Tally`), and
the per-task means that the summary's task-level sign test reads (:func:`task_means`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Tally", "task_means"]


@dataclass
class Tally:
    """A claim's units, one per task: each one's verdict and its per-seed values, oriented so
    that > 0 is the claimed direction (for a "no rise" claim: > 0 is a rise).

    ``seeds[i]`` is how many values unit ``i`` gave (its values follow one another in
    ``values``); ``tasks[i]`` its task, where known; ``left_out``: the units shown but not
    counted, as ``"task: why"``, and in :attr:`left_out_units` as a Tally of their own."""

    verdicts: list[str]
    values: list[float]
    seeds: list[int] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    left_out_units: Tally | None = None

    def add(self, verdict: str, values: Sequence[float], task: str) -> None:
        """Record one task's unit."""
        self.verdicts.append(verdict)
        self.values.extend(values)
        self.seeds.append(len(values))
        self.tasks.append(task)

    def counting_left_out(self) -> Tally:
        """This tally with its left-out units counted."""
        extra = self.left_out_units or Tally([], [])
        return Tally(self.verdicts + extra.verdicts, self.values + extra.values,
                     self.seeds + extra.seeds, self.tasks + extra.tasks)


def task_means(t: Tally) -> list[float]:
    """One value per unit that gave any: the mean of its per-seed values.

    >>> task_means(Tally(["a", "b", "c"], [1.0, 2.0, 3.0, -1.0], [3, 0, 1]))
    [2.0, -1.0]
    """
    out, start = [], 0
    for n in t.seeds:
        if n:
            out.append(float(np.mean(t.values[start:start + n])))
        start += n
    return out
