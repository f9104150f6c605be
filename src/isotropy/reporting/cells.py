"""Runs -> cells: the runs of one task x model x setting x method, seeds pooled
(:func:`collect_runs`, :func:`group_cells`), and the pick of a tuning grid
(:func:`pick_best`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from isotropy.reporting.runs import COMPARED_SETTINGS, Method, Run, _num, load_run, mean_std

__all__ = [
    "Cell",
    "collect_runs",
    "group_cells",
    "lower_is_better",
    "pick_best",
]


@dataclass
class Cell:
    """The runs of one task x model x setting x method, one per seed (in seed order);
    ``setting`` is ``""`` unless runs of the task and model differ in other settings."""

    task: str
    model: str
    method: Method
    runs: list[Run] = field(default_factory=list)
    setting: str = ""

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def main_metric(self) -> str:
        return self.runs[0].main_metric

    def values(self, name: str, which: str = "final") -> list[float]:
        """Per-seed values of ``eval_<name>`` (runs without it left out)."""
        return [v for r in self.runs if (v := r.value(name, which)) is not None]

    def stat(self, name: str, which: str = "final") -> tuple[float, float | None, int] | None:
        """(mean, sample std, n) over seeds of ``eval_<name>``, ``None`` if no run has it."""
        vals = self.values(name, which)
        if not vals:
            return None
        m, s = mean_std(vals)
        return m, s, len(vals)


def _check_pick_over(pick_over: Sequence[str]) -> None:
    unknown = [k for k in pick_over if k not in COMPARED_SETTINGS]
    if unknown:
        raise ValueError(f"--pick-best-over: {', '.join(unknown)} is not a setting that tells "
                         f"runs apart (one of {', '.join(COMPARED_SETTINGS)})")


def collect_runs(paths: Iterable[str | os.PathLike[str]], which: str = "final",
                 pick_over: Sequence[str] = ()) -> tuple[list[Run], list[tuple[str, str]]]:
    """The usable runs and the skipped ones as ``(path, reason)``.

    Runs of one task and model whose other settings differ (learning rate, epochs, data
    subset, ...; not the seed, the method's own parameters or where the run was written) are
    never pooled: each run's :attr:`Run.setting` names its values of the settings that vary
    (``learning_rate=3e-05``), and cells, tables and figures keep them apart. The settings of
    ``pick_over`` (a tuning grid, see :func:`pick_best`) are left out of :attr:`Run.setting`
    and named in :attr:`Run.tuned` instead. A second run of the same cell, setting and seed is
    skipped as a duplicate."""
    _check_pick_over(pick_over)
    loaded: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for p in paths:
        try:
            loaded.append(load_run(p, which))
        except ValueError as err:
            skipped.append((str(p), str(err)))
    _name_settings(loaded, pick_over)
    runs: list[Run] = []
    seen: dict[tuple[Any, ...], Run] = {}
    for run in loaded:
        key = (run.task, run.model, run.setting, run.tuned, run.method.key, run.seed)
        if key in seen:
            skipped.append((str(run.path), f"duplicate of {seen[key].path} (same cell and "
                                           "seed)"))
            continue
        seen[key] = run
        runs.append(run)
    return runs, skipped


def _name_settings(runs: Sequence[Run], pick_over: Sequence[str] = ()) -> None:
    """Set each run's :attr:`Run.setting` from the compared settings that vary among the runs
    of its task and model (an absent setting reads ``absent``), those of ``pick_over`` aside:
    they go to :attr:`Run.tuned`, all of them, in the order given."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.task, r.model), []).append(r)
    for group in groups.values():
        keys = sorted({k for r in group for k in r.settings} - set(pick_over))
        varying = [k for k in keys if len({r.settings.get(k) for r in group}) > 1]
        for r in group:
            r.setting = ", ".join(
                f"{k}={_setting_text(r.settings.get(k))}" for k in varying)
            r.tuned = ", ".join(f"{k}={_setting_text(r.settings.get(k))}" for k in pick_over)


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is better: a loss; every other task metric is greater
    for better."""
    return metric.endswith("loss")


def pick_best(runs: Sequence[Run], which: str = "final"
              ) -> tuple[list[Run], list[dict[str, Any]]]:
    """Within every task x model x setting x method, keep the runs of the :attr:`Run.tuned`
    setting whose mean main metric over seeds is best (greatest; least for a loss; the first
    in text order on a tie); returns the kept runs and one row per cell: ``task, model,
    setting, method, metric, picked, mean, n_seeds, n_candidates``."""
    groups: dict[tuple[Any, ...], dict[str, list[Run]]] = {}
    for r in runs:
        groups.setdefault((r.task, r.model, r.setting, r.method.key), {}) \
            .setdefault(r.tuned, []).append(r)
    kept: list[Run] = []
    picks: list[dict[str, Any]] = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3])):
        candidates = groups[key]
        means = {t: mean_std([v for r in rs if (v := r.value(r.main_metric, which))
                              is not None])[0] for t, rs in candidates.items()}
        metric = candidates[next(iter(candidates))][0].main_metric
        sign = 1.0 if lower_is_better(metric) else -1.0
        best = min(sorted(means), key=lambda t: sign * means[t])
        chosen = candidates[best]
        kept += chosen
        picks.append({"task": key[0], "model": key[1], "setting": key[2],
                      "method": chosen[0].method.label, "metric": metric, "picked": best,
                      "mean": means[best], "n_seeds": len(chosen),
                      "n_candidates": len(candidates)})
    return kept, picks




def _setting_text(value: str | None) -> str:
    if value is None:
        return "absent"
    v = json.loads(value)
    return _num(v) if isinstance(v, float) else str(v)


def group_cells(runs: Iterable[Run]) -> list[Cell]:
    """Cells in the order task, model, setting, method; runs in seed order."""
    cells: dict[tuple[Any, ...], Cell] = {}
    for r in runs:
        key = (r.task, r.model, r.setting, r.method.key)
        cell = cells.setdefault(key, Cell(r.task, r.model, r.method, setting=r.setting))
        cell.runs.append(r)
    for c in cells.values():
        c.runs.sort(key=lambda r: r.seed)
    return [cells[k] for k in sorted(cells, key=lambda k: (k[0], k[1], k[2], k[3]))]
