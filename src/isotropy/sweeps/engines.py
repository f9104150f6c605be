"""Running the points of a sweep: local worker processes or Ray tasks.

Every point runs in a fresh process, so a crash or an out-of-memory kill fails that point only:

* **local**: ``N`` worker slots; each point is a subprocess
  ``python -m isotropy.sweeps.engines POINT.json RESULT.json``. With GPUs each slot owns
  one (``CUDA_VISIBLE_DEVICES``); without, each gets ``max(1, cpus // N)`` threads
  (``OMP_NUM_THREADS`` and ``torch.set_num_threads``).
* **ray**: each point is a Ray task (``num_cpus`` threads, one GPU where the cluster has GPUs)
  on a worker process that exits after it (``max_calls=1``); against a new local instance
  (``ray.init(num_cpus=...)``) or an existing cluster (``address``), whose workers must see
  the same file system (the run directories) and have ``isotropy`` installed.

Both run :func:`run_point` (``isotropy train`` with resume) and report to the driver,
:func:`run_sweep`, the only writer of ``sweep.json``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import isotropy
from isotropy.io import write_csv_atomic, write_json_atomic
from isotropy.reporting.report import mean_std
from isotropy.rundir import RunDirectory
from isotropy.sweeps.spec import SweepPoint, SweepSpec, SweepStatus, check_finished_runs
from isotropy.training.config import args_from_dict

__all__ = [
    "ENGINES",
    "LocalEngine",
    "Outcome",
    "RayEngine",
    "SweepOutcome",
    "cell_summary",
    "exit_reason",
    "run_point",
    "run_sweep",
    "visible_gpus",
]

ENGINES = ("local", "ray")
_LOGS = "logs"
_WORK = ".sweep"
_LOCK = ".sweep.lock"


def one_line(text: object, limit: int = 500) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# --------------------------------------------------------------------------- one point


def run_point(settings: Mapping[str, Any], threads: int | None = None) -> dict[str, Any]:
    """Train one point in this process: ``isotropy train`` with ``resume`` (a finished run is
    kept, an unfinished one continued from its last checkpoint). Returns the run's status
    (``trained`` or ``finished``), run directory, main metric and its final value."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    from isotropy.training.trainer import run_training

    ours, targs = args_from_dict({**settings, "resume": True})
    result = run_training(ours, targs)
    metric = result.results.get("main_metric")
    value = result.results.get("final", {}).get(f"eval_{metric}")
    return {"status": result.status, "run_dir": str(result.run_dir), "main_metric": metric,
            "value": value}


def _point_outcome(settings: Mapping[str, Any], threads: int | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        out = {"ok": True, **run_point(settings, threads)}
    except Exception as err:  # the point fails; the error goes to the sweep's status
        traceback.print_exc()
        out = {"ok": False, "error": one_line(f"{type(err).__name__}: {err}")}
    out["seconds"] = time.perf_counter() - t0
    return out


def _worker_main(argv: Sequence[str]) -> int:
    """``python -m isotropy.sweeps.engines POINT.json RESULT.json``."""
    point_file, result_file = argv
    job = json.loads(Path(point_file).read_text(encoding="utf-8"))
    out = _point_outcome(job["settings"], job.get("threads"))
    write_json_atomic(result_file, out)
    sys.stdout.flush()
    return 0 if out["ok"] else 1


def exit_reason(returncode: int, log_tail: str = "") -> str:
    """Why a worker process that wrote no result ended, with the last line of its log.

    >>> exit_reason(-9, "Epoch 1\\n")
    'the worker process was killed by SIGKILL (out of memory?); last output: Epoch 1'
    """
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = f"the worker process was killed by {name}"
        if name == "SIGKILL":
            why += " (out of memory?)"
    else:
        why = f"the worker process exited with status {returncode} without a result"
    lines = [x for x in log_tail.splitlines() if x.strip()]
    return one_line(why + (f"; last output: {lines[-1]}" if lines else ""))


@dataclass
class Outcome:
    """What a point's run gave: ``ok`` with ``status`` ``trained``/``finished``, or an
    ``error``; ``interrupted`` when the sweep was stopped while it ran."""

    ok: bool
    status: str | None = None
    error: str | None = None
    seconds: float = 0.0
    main_metric: str | None = None
    value: float | None = None
    interrupted: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Outcome:
        return cls(ok=bool(d.get("ok")), status=d.get("status"), error=d.get("error"),
                   seconds=float(d.get("seconds") or 0.0), main_metric=d.get("main_metric"),
                   value=d.get("value"))


Started = Callable[[SweepPoint, str], None]
Finished = Callable[[SweepPoint, Outcome], None]


def _log_path(root: Path, point: SweepPoint) -> Path:
    return root / _LOGS / f"{point.name}.log"


def _tail(path: Path, size: int = 4096) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries."""
    import torch

    n = torch.cuda.device_count()
    if n == 0:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        return ids[:n]
    return [str(i) for i in range(n)]


def _package_parent() -> str:
    return str(Path(isotropy.__file__).resolve().parent.parent)


# --------------------------------------------------------------------------- local engine


class LocalEngine:
    """``workers`` slots, each running one point at a time in a fresh subprocess."""

    name = "local"

    def __init__(self, workers: int | None = None, *, gpus: Sequence[str] | None = None,
                 cpus: int | None = None) -> None:
        self.gpus = list(visible_gpus() if gpus is None else gpus)
        self.workers = int(workers) if workers is not None else max(1, len(self.gpus))
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.gpus and self.workers > len(self.gpus):
            raise ValueError(
                f"--workers {self.workers} exceeds the {len(self.gpus)} visible GPU(s): one GPU "
                "per worker (CUDA_VISIBLE_DEVICES= trains on the CPU)")
        self.threads = max(1, (cpus or _cpu_count()) // self.workers)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lock_fd: int | None = None  # the sweep's lock, kept open by every worker process

    def describe(self) -> str:
        where = (f"one GPU each ({', '.join(self.gpus[: self.workers])})" if self.gpus
                 else f"{self.threads} CPU thread(s) each")
        return f"local engine: {self.workers} worker process(es), {where}"

    def _env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            x for x in (_package_parent(), env.get("PYTHONPATH", "")) if x)
        env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads),
                   TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot]
        return env

    def _run_one(self, slot: int, point: SweepPoint, root: Path) -> Outcome:
        work = root / _WORK
        work.mkdir(parents=True, exist_ok=True)
        point_file, result_file = work / f"{point.name}.json", work / f"{point.name}.result.json"
        write_json_atomic(point_file, {"settings": point.settings, "threads": self.threads})
        result_file.unlink(missing_ok=True)
        log = _log_path(root, point)
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} worker {slot + 1} ===\n"
                      .encode())
            out.flush()
            with self._lock:
                if self._stop.is_set():
                    return Outcome(ok=False, interrupted=True)
                proc = subprocess.Popen(
                    [sys.executable, "-m", "isotropy.sweeps.engines", str(point_file),
                     str(result_file)],
                    stdout=out, stderr=subprocess.STDOUT, env=self._env(slot), cwd=os.getcwd(),
                    pass_fds=(self.lock_fd,) if self.lock_fd is not None else ())
                self._procs[slot] = proc
            code = proc.wait()
            with self._lock:
                self._procs.pop(slot, None)
        seconds = time.perf_counter() - t0
        if self._stop.is_set() or code == -signal.SIGINT:
            return Outcome(ok=False, interrupted=True, seconds=seconds)
        if result_file.is_file():
            outcome = Outcome.from_dict(json.loads(result_file.read_text(encoding="utf-8")))
            outcome.seconds = seconds
            return outcome
        return Outcome(ok=False, error=exit_reason(code, _tail(log)), seconds=seconds)

    def run(self, points: Sequence[SweepPoint], root: Path, started: Started,
            finished: Finished) -> None:
        """Run ``points`` in order on the slots; returns when all are done or raises
        ``KeyboardInterrupt`` after stopping the running ones."""
        queue = deque(points)
        self._stop.clear()

        n_slots = min(self.workers, len(points))
        # Completion is signalled with events rather than Thread.join: a join interrupted by
        # Ctrl-C can return at once afterwards while the thread still runs, and the points'
        # final states would then be written after the interrupt was raised.
        done = [threading.Event() for _ in range(n_slots)]

        def slot(i: int) -> None:
            try:
                while not self._stop.is_set():
                    with self._lock:
                        if not queue:
                            return
                        point = queue.popleft()
                    where = f"worker {i + 1}" + (f", GPU {self.gpus[i]}" if self.gpus else "")
                    started(point, where)
                    try:
                        outcome = self._run_one(i, point, root)
                    except Exception as err:  # could not start the process, write files...
                        outcome = Outcome(ok=False,
                                          error=one_line(f"{type(err).__name__}: {err}"))
                    finished(point, outcome)
            finally:
                done[i].set()

        threads = [threading.Thread(target=slot, args=(i,), daemon=True,
                                    name=f"sweep-worker-{i + 1}")
                   for i in range(n_slots)]
        for t in threads:
            t.start()
        try:
            while not all(e.is_set() for e in done):
                for e in done:
                    e.wait(timeout=0.2)
        except BaseException:  # Ctrl-C, a test's timeout...: stop the worker processes
            self.stop()
            for e in done:
                e.wait(timeout=60)
            raise

    def stop(self, grace: float = 20.0) -> None:
        """Stop the running worker processes (SIGTERM, then SIGKILL after ``grace`` s)."""
        with self._lock:
            self._stop.set()
            procs = list(self._procs.values())
        for p in procs:
            with contextlib.suppress(OSError):
                p.terminate()
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()


# --------------------------------------------------------------------------- Ray engine


def require_ray() -> Any:
    """The ``ray`` module, or ``ValueError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError("the ray engine needs Ray, which is not installed: pip install "
                         "'isotropy[ray]' (or pip install ray)") from None
    return ray


def _ray_point(settings: dict[str, Any], threads: int, log_path: str) -> dict[str, Any]:
    """Body of a Ray task: one point, its output appended to the point's log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        print(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} ray task ===", flush=True)
        return _point_outcome(settings, threads)


class RayEngine:
    """Points as Ray tasks; at most ``workers`` at a time (default: as many as the cluster
    has GPUs, else ``CPUs // cpus_per_trial``)."""

    name = "ray"

    def __init__(self, *, address: str | None = None, num_cpus: int | None = None,
                 workers: int | None = None, cpus_per_trial: int | None = None) -> None:
        self.ray = require_ray()
        if num_cpus is not None and address is not None:
            raise ValueError("--ray-num-cpus starts a local Ray instance; it does not apply to "
                             "--ray-address")
        for flag, v in (("--ray-num-cpus", num_cpus), ("--workers", workers),
                        ("--cpus-per-trial", cpus_per_trial)):
            if v is not None and v < 1:
                raise ValueError(f"{flag} must be >= 1, got {v}")
        self.address, self.num_cpus = address, num_cpus
        self.workers, self.cpus_per_trial = workers, cpus_per_trial
        self.gpus_per_trial = 0
        self._started = False

    def start(self) -> None:
        """Connect to ``address`` or start a local instance; check the trials fit a node."""
        ray = self.ray
        if not ray.is_initialized():
            try:
                if self.address:
                    ray.init(address=self.address, log_to_driver=False)
                else:
                    cpus = self.num_cpus or _cpu_count()
                    # address="local": a new instance even where another one is running
                    ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                             log_to_driver=False,
                             configure_logging=False, runtime_env={"env_vars": {
                                 "PYTHONPATH": os.pathsep.join(x for x in (
                                     _package_parent(), os.environ.get("PYTHONPATH", "")) if x),
                                 "TOKENIZERS_PARALLELISM": "false"}})
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"at {self.address}" if self.address else "locally"
                raise ValueError(f"could not start Ray {where}: {one_line(err)}") from None
            self._started = True
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        total = ray.cluster_resources()
        node_cpus = max((int(n.get("CPU", 0)) for n in nodes), default=0)
        node_gpus = max((int(n.get("GPU", 0)) for n in nodes), default=0)
        self.gpus_per_trial = 1 if node_gpus > 0 else 0
        if self.workers is None:
            self.workers = int(total.get("GPU", 0)) if node_gpus else None
        if self.cpus_per_trial is None:
            share = int(total.get("CPU", 1)) // (self.workers or 1)
            self.cpus_per_trial = max(1, min(node_cpus or 1, share))
        if self.cpus_per_trial > node_cpus:
            self.close()
            raise ValueError(f"--cpus-per-trial {self.cpus_per_trial} exceeds the largest "
                             f"Ray node's {node_cpus} CPUs: no trial could be scheduled")
        if self.workers is None:
            self.workers = max(1, int(total.get("CPU", 1)) // self.cpus_per_trial)

    def describe(self) -> str:
        where = self.address or "a local instance"
        gpu = ", one GPU each" if self.gpus_per_trial else ""
        return (f"ray engine on {where}: up to {self.workers} trial(s) at a time, "
                f"{self.cpus_per_trial} CPU(s){gpu} each")

    def run(self, points: Sequence[SweepPoint], root: Path, started: Started,
            finished: Finished) -> None:
        ray = self.ray
        task = ray.remote(num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial,
                          max_calls=1, max_retries=0)(_ray_point)
        queue = deque(points)
        running: dict[Any, tuple[SweepPoint, float]] = {}
        try:
            while queue or running:
                while queue and len(running) < (self.workers or 1):
                    p = queue.popleft()
                    ref = task.remote(p.settings, self.cpus_per_trial, str(_log_path(root, p)))
                    running[ref] = (p, time.perf_counter())
                    started(p, "ray task")
                done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                for ref in done:
                    p, t0 = running.pop(ref)
                    try:
                        outcome = Outcome.from_dict(ray.get(ref))
                    except Exception as err:  # the worker died, the task was cancelled...
                        lines = str(err).strip().splitlines()
                        outcome = Outcome(ok=False, error=one_line(
                            f"{type(err).__name__}: {lines[-1] if lines else ''}"))
                    outcome.seconds = time.perf_counter() - t0
                    finished(p, outcome)
        except BaseException:
            for ref, (p, t0) in running.items():
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
                finished(p, Outcome(ok=False, interrupted=True,
                                    seconds=time.perf_counter() - t0))
            raise

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False


# --------------------------------------------------------------------------- the driver


@contextlib.contextmanager
def _sweep_lock(root: Path):
    """Hold ``root/.sweep.lock`` (``ValueError`` if another sweep holds it); yields its file
    descriptor, which local workers keep open so an orphaned worker still holds the lock."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            import fcntl

            for attempt in range(5):  # a dry run's probe holds the lock for an instant
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.1)
        except ImportError:  # pragma: no cover - not POSIX
            pass
        except OSError:
            raise ValueError(f"another sweep is running in {root} (or one of its worker "
                             "processes still is)") from None
        yield fd
    finally:
        os.close(fd)


def sweep_in_progress(root: str | os.PathLike[str]) -> bool:
    """Whether a sweep (or one of its workers) holds ``root/.sweep.lock`` now; the lock is
    only tested, never kept."""
    path = Path(root) / _LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # conflicts with the driver's LOCK_EX
    except ImportError:  # pragma: no cover - not POSIX
        return False
    except BlockingIOError:
        return True
    except OSError:  # e.g. a file system without flock: cannot tell
        return False
    finally:
        os.close(fd)  # closing the descriptor releases a lock just taken
    return False


@dataclass
class SweepOutcome:
    """The end state of every point (``states``: name -> state) and the failed points'
    errors, in run order."""

    states: dict[str, str]
    failed: list[tuple[str, str]] = field(default_factory=list)
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
                ray_num_cpus: int | None = None, cpus_per_trial: int | None = None
                ) -> LocalEngine | RayEngine:
    """The engine named ``engine`` (``local`` or ``ray``); ``ValueError`` for another name or
    options that do not apply to it."""
    if engine == "local":
        for flag, v in (("--ray-address", ray_address), ("--ray-num-cpus", ray_num_cpus),
                        ("--cpus-per-trial", cpus_per_trial)):
            if v is not None:
                raise ValueError(f"{flag} applies to --engine ray only")
        return LocalEngine(workers)
    if engine == "ray":
        return RayEngine(address=ray_address, num_cpus=ray_num_cpus, workers=workers,
                         cpus_per_trial=cpus_per_trial)
    raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")


def run_sweep(
    spec: SweepSpec,
    points: Sequence[SweepPoint],
    engine: LocalEngine | RayEngine,
    *,
    retry_failed: bool = False,
    echo: Callable[[str], None] = print,
) -> SweepOutcome:
    """Run the points that are not done, in order, on ``engine``; keep ``sweep.json`` up to
    date; then write ``results.csv`` (one row per point) and print the per-cell summary.

    Finished points are skipped, interrupted ones resumed from their last checkpoint, failed
    ones skipped (reported) unless ``retry_failed``. On ``KeyboardInterrupt`` the running
    points are stopped and recorded as interrupted, then the interrupt is raised again.
    """

    if not points:
        raise ValueError("the sweep has no points")
    root = points[0].run_dir.parent
    check_finished_runs(points)
    with _sweep_lock(root) as lock_fd:
        status = SweepStatus(root)
        status.set_points(spec, points)
        steps = plan(points, status, retry_failed=retry_failed)
        for p, state, detail, _ in steps:
            rec = status.records.setdefault(p.name, {"name": p.name})
            rec["state"] = state
            if state != "failed":
                rec.pop("error", None)
            if state == "interrupted":
                rec["detail"] = detail
        status.write()
        todo = [p for p, _, _, action in steps if action != "skip"]
        counts = {s: sum(1 for _, st, _, _ in steps if st == s)
                  for s in ("done", "failed", "interrupted", "pending")}
        echo(f"sweep of {len(points)} point(s) in {root}: {counts['done']} done, "
             f"{counts['failed']} failed, {counts['interrupted']} interrupted, "
             f"{counts['pending']} pending")
        if counts["failed"] and not retry_failed:
            echo(f"  {counts['failed']} failed point(s) are not retried (--retry-failed "
                 "retries them)")
        if todo:
            if isinstance(engine, RayEngine):
                engine.start()
            if isinstance(engine, LocalEngine):
                engine.lock_fd = lock_fd
            echo(f"running {len(todo)} point(s) on the {engine.describe()}; logs in "
                 f"{root / _LOGS}")
            _run(engine, todo, root, status, echo)
        rows = _results_rows(points, status)
        results = write_csv_atomic(root / "results.csv", rows)
        outcome = SweepOutcome(
            states={p.name: status.records.get(p.name, {}).get("state", "pending")
                    for p in points},
            failed=[(p.name, str(status.records.get(p.name, {}).get("error") or ""))
                    for p in points if status.records.get(p.name, {}).get("state") == "failed"],
            status_file=status.path, results_file=results)
        summary = cell_summary(points)
        if any(r["n"] for r in summary):
            echo("\n" + _format_cells(summary))
        echo(f"\n{outcome.count('done')}/{len(points)} point(s) done, {len(outcome.failed)} "
             f"failed; status in {status.path}, one row per point in {results}")
        for name, error in outcome.failed:
            echo(f"  FAILED {name}: {error}")
        return outcome


def _run(engine: LocalEngine | RayEngine, todo: Sequence[SweepPoint], root: Path,
         status: SweepStatus, echo: Callable[[str], None]) -> None:
    lock = threading.Lock()
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

    try:
        engine.run(todo, root, started, finished)
    finally:
        if isinstance(engine, RayEngine):
            engine.close()


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
