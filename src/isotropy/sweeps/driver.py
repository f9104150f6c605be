"""The sweep driver (:func:`run_sweep`): plans the points, runs them on an engine, and is the
only writer of ``sweep.json`` and ``results.csv``."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotropy.io import write_csv_atomic
from isotropy.reporting.report import mean_std
from isotropy.rundir import RunDirectory
from isotropy.sweeps.local_engine import LocalEngine
from isotropy.sweeps.lock import _sweep_lock
from isotropy.sweeps.points import SweepPoint, check_finished_runs
from isotropy.sweeps.ray_engine import RayEngine
from isotropy.sweeps.spec import SweepSpec
from isotropy.sweeps.state import SweepStatus
from isotropy.sweeps.worker import _LOGS, Outcome, _log_path

__all__ = [
    "ENGINES",
    "SweepOutcome",
    "cell_summary",
    "make_engine",
    "plan",
    "run_sweep",
]

ENGINES = ("local", "ray")


@dataclass
class SweepOutcome:
    """The end state of every point (``states``: name -> state), the failed points'
    errors, in run order, and the points left unstarted once ``max_failures`` was reached."""

    states: dict[str, str]
    failed: list[tuple[str, str]] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)
    status_file: Path | None = None
    results_file: Path | None = None

    def count(self, state: str) -> int:
        return sum(1 for s in self.states.values() if s == state)


def _metric(point: SweepPoint) -> tuple[str | None, float | None]:
    run = RunDirectory(point.run_dir)
    if not run.finished:
        return None, None
    try:
        res = run.read_results()
    except (OSError, ValueError):
        return None, None
    metric = res.get("main_metric")
    value = res.get("final", {}).get(f"eval_{metric}")
    return metric, (float(value) if isinstance(value, (int, float)) else None)


def cell_summary(points: Sequence[SweepPoint]) -> list[dict[str, Any]]:
    """Per cell (a point's settings less its seed), over its finished seeds: the main metric's
    mean and sample standard deviation (``n - 1``; ``None`` for one seed)."""
    cells: dict[str, dict[str, Any]] = {}
    for p in points:
        c = cells.setdefault(p.cell, {"cell": p.cell, "method": p.method, "metric": None,
                                      "values": [], "seeds": 0})
        c["seeds"] += 1
        metric, value = _metric(p)
        if value is not None and math.isfinite(value):
            c["metric"] = metric
            c["values"].append(value)
    rows = []
    for c in cells.values():
        v = c.pop("values")
        mean, std = mean_std(v) if v else (None, None)
        rows.append({**c, "n": len(v), "mean": mean, "std": std})
    return rows


def _format_cells(rows: Sequence[Mapping[str, Any]]) -> str:
    width = max([len(r["cell"]) for r in rows] + [4])
    lines = [f"{'cell':<{width}}  {'metric':<9} {'mean ± std':<17} seeds done"]
    for r in rows:
        if r["mean"] is None:
            value = "-"
        else:
            value = f"{r['mean']:.4f}" + (f" ± {r['std']:.4f}" if r["std"] is not None else "")
        lines.append(f"{r['cell']:<{width}}  {(r['metric'] or '-'):<9} {value:<17} "
                     f"{r['n']}/{r['seeds']}")
    return "\n".join(lines)


def _results_rows(points: Sequence[SweepPoint], status: SweepStatus) -> list[dict[str, Any]]:
    rows = []
    for p in points:
        rec = status.records.get(p.name, {})
        metric, value = _metric(p)
        rows.append({"index": p.index + 1, "name": p.name, "cell": p.cell, "method": p.method,
                     "seed": p.seed, "state": rec.get("state"), "metric": metric,
                     "value": value, "seconds": rec.get("seconds"), "error": rec.get("error"),
                     "run_dir": str(p.run_dir)})
    return rows


def plan(points: Sequence[SweepPoint], status: SweepStatus, *, retry_failed: bool = False
         ) -> list[tuple[SweepPoint, str, str, str]]:
    """``(point, state, detail, action)`` per point; action ``skip``, ``run`` or ``resume``."""
    out = []
    for p in points:
        state, detail = status.state(p)
        if state == "done" or (state == "failed" and not retry_failed):
            action = "skip"
        elif state == "interrupted":
            action = "resume"
        else:
            action = "run"
        out.append((p, state, detail, action))
    return out


def make_engine(engine: str, *, workers: int | None = None, ray_address: str | None = None,
                ray_num_cpus: int | None = None, cpus_per_trial: int | None = None,
                workers_per_gpu: int | None = None) -> LocalEngine | RayEngine:
    """The engine named ``engine`` (``local`` or ``ray``); ``ValueError`` for another name or
    options that do not apply to it."""
    if engine == "local":
        for flag, v in (("--ray-address", ray_address), ("--ray-num-cpus", ray_num_cpus),
                        ("--cpus-per-trial", cpus_per_trial)):
            if v is not None:
                raise ValueError(f"{flag} applies to --engine ray only")
        return LocalEngine(workers, workers_per_gpu=workers_per_gpu or 1)
    if engine == "ray":
        if workers_per_gpu is not None:
            raise ValueError("--workers-per-gpu applies to --engine local only")
        return RayEngine(address=ray_address, num_cpus=ray_num_cpus, workers=workers,
                         cpus_per_trial=cpus_per_trial)
    raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")


def run_sweep(
    spec: SweepSpec,
    points: Sequence[SweepPoint],
    engine: LocalEngine | RayEngine,
    *,
    retry_failed: bool = False,
    max_failures: int | None = None,
    echo: Callable[[str], None] = print,
) -> SweepOutcome:
    """Run the points that are not done, in order, on ``engine``; keep ``sweep.json`` up to
    date; then write ``results.csv`` (one row per point) and print the per-cell summary.

    Finished points are skipped, interrupted ones resumed from their last checkpoint, failed
    ones skipped (reported) unless ``retry_failed``. Once ``max_failures`` points have failed
    in this call, no further point starts (the running ones finish; the others keep their
    state, for the same command to run later). On ``KeyboardInterrupt`` the running points are
    stopped and recorded as interrupted, then the interrupt is raised again.
    """

    if not points:
        raise ValueError("the sweep has no points")
    if max_failures is not None and (isinstance(max_failures, bool)
                                     or not isinstance(max_failures, int) or max_failures < 1):
        raise ValueError(f"--max-failures must be an integer >= 1, got {max_failures!r}")
    root = points[0].run_dir.parent
    check_finished_runs(points)
    with _sweep_lock(root) as lock_fd:
        status = SweepStatus(root)
        status.set_points(spec, points)
        steps = plan(points, status, retry_failed=retry_failed)
        _record_plan(status, steps)
        todo = [p for p, _, _, action in steps if action != "skip"]
        _say_plan(len(points), root, steps, retry_failed, echo)
        if todo:
            if isinstance(engine, RayEngine):
                engine.start()
            if isinstance(engine, LocalEngine):
                engine.lock_fd = lock_fd
            echo(f"running {len(todo)} point(s) on the {engine.describe()}; logs in "
                 f"{root / _LOGS}")
            started = _run(engine, todo, root, status, echo, max_failures)
            not_started = [p.name for p in todo if p.name not in started]
        else:
            not_started = []
        return _finish(points, root, status, echo, not_started)


def _record_plan(status: SweepStatus, steps: Sequence[tuple[SweepPoint, str, str, str]]) -> None:
    """Each point's state before the run (``sweep.json``, written now)."""
    for p, state, detail, _ in steps:
        rec = status.records.setdefault(p.name, {"name": p.name})
        rec["state"] = state
        if state != "failed":
            rec.pop("error", None)
        if state == "interrupted":
            rec["detail"] = detail
    status.write()


def _say_plan(n_points: int, root: Path, steps: Sequence[tuple[SweepPoint, str, str, str]],
              retry_failed: bool, echo: Callable[[str], None]) -> None:
    """One line of how many points are done, failed, interrupted and pending."""
    counts = {s: sum(1 for _, st, _, _ in steps if st == s)
              for s in ("done", "failed", "interrupted", "pending")}
    echo(f"sweep of {n_points} point(s) in {root}: {counts['done']} done, "
         f"{counts['failed']} failed, {counts['interrupted']} interrupted, "
         f"{counts['pending']} pending")
    if counts["failed"] and not retry_failed:
        echo(f"  {counts['failed']} failed point(s) are not retried (--retry-failed "
             "retries them)")


def _finish(points: Sequence[SweepPoint], root: Path, status: SweepStatus,
            echo: Callable[[str], None], not_started: Sequence[str] = ()) -> SweepOutcome:
    """``results.csv``, the per-cell summary, the failed points and those not started."""
    rows = _results_rows(points, status)
    results = write_csv_atomic(root / "results.csv", rows)
    outcome = SweepOutcome(
        states={p.name: status.records.get(p.name, {}).get("state", "pending")
                for p in points},
        failed=[(p.name, str(status.records.get(p.name, {}).get("error") or ""))
                for p in points if status.records.get(p.name, {}).get("state") == "failed"],
        not_started=list(not_started), status_file=status.path, results_file=results)
    summary = cell_summary(points)
    if any(r["n"] for r in summary):
        echo("\n" + _format_cells(summary))
    echo(f"\n{outcome.count('done')}/{len(points)} point(s) done, {len(outcome.failed)} "
         f"failed; status in {status.path}, one row per point in {results}")
    for name, error in outcome.failed:
        echo(f"  FAILED {name}: {error}")
    if not_started:
        echo(f"  {len(not_started)} point(s) not started after --max-failures was reached; "
             "the same command runs them")
    return outcome


def _run(engine: LocalEngine | RayEngine, todo: Sequence[SweepPoint], root: Path,
         status: SweepStatus, echo: Callable[[str], None], max_failures: int | None = None
         ) -> set[str]:
    """Run ``todo`` on ``engine``; the names of the points it started."""
    lock = threading.Lock()
    failures = 0
    numbers: dict[str, int] = {}
    attempts = {p.name: int(status.records.get(p.name, {}).get("attempts", 0)) for p in todo}

    def started(p: SweepPoint, where: str) -> None:
        with lock:
            numbers[p.name] = len(numbers) + 1
            k = numbers[p.name]
        rec = status.records.get(p.name, {})
        how = f" ({rec['detail']})" if rec.get("state") == "interrupted" and rec.get(
            "detail") else ""
        attempts[p.name] += 1
        status.update(p.name, state="running", error=None, detail=where,
                      attempts=attempts[p.name])
        echo(f"[{k}/{len(todo)}] start {p.name}{how} on {where}")

    def finished(p: SweepPoint, o: Outcome) -> None:
        nonlocal failures
        k = numbers.get(p.name, 0)
        if o.interrupted:
            status.update(p.name, state="interrupted", detail="stopped by the user",
                          seconds=round(o.seconds, 1))
            echo(f"[{k}/{len(todo)}] interrupted {p.name}")
        elif o.ok:
            status.update(p.name, state="done", detail=o.status, error=None,
                          seconds=round(o.seconds, 1), main_metric=o.main_metric,
                          value=o.value)
            value = "n/a" if o.value is None else f"{o.value:.4f}"
            echo(f"[{k}/{len(todo)}] done {p.name}: {o.main_metric} {value} "
                 f"({o.seconds:.0f} s)")
        else:
            status.update(p.name, state="failed", error=o.error, detail=None,
                          seconds=round(o.seconds, 1))
            echo(f"[{k}/{len(todo)}] FAILED {p.name}: {o.error} (log: "
                 f"{_log_path(root, p)})")
            with lock:
                failures += 1
                reached = failures == max_failures
            if reached:
                engine.hold()
                echo(f"{failures} point(s) failed (--max-failures {max_failures}): no further "
                     "point starts; the running ones finish")

    try:
        engine.run(todo, root, started, finished)
    finally:
        if isinstance(engine, RayEngine):
            engine.close()
    return set(numbers)
