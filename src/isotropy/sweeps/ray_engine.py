"""The Ray engine: each point is a Ray task (``num_cpus`` threads, one GPU where the cluster
has GPUs) on a worker process that exits after it (``max_calls=1``), against a new local
instance (``ray.init(num_cpus=...)``) or an existing cluster (``address``) whose workers see
the same file system and have ``isotropy`` installed."""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from isotropy._validation import one_line
from isotropy.sweeps.points import SweepPoint
from isotropy.sweeps.worker import (
    ERROR_CHARS,
    Finished,
    Outcome,
    Started,
    _cpu_count,
    _log_path,
    _package_parent,
    _point_outcome,
)

__all__ = [
    "RayEngine",
    "require_ray",
]


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


_NICENESS = "RAY_worker_niceness"  # Ray's config of its workers' niceness (case-sensitive)


@contextlib.contextmanager
def _workers_at_own_niceness() -> Iterator[None]:
    """Start a local instance whose workers run at this process's niceness, as the local
    engine's do: Ray's default (``RAY_worker_niceness`` = 15) starves trials on a machine
    that is busy with anything else. Ray adds the value to the niceness its processes inherit
    from this one, so 0 keeps this process's own. A ``RAY_worker_niceness`` set by the user
    is kept."""
    if _NICENESS in os.environ:
        yield
        return
    os.environ[_NICENESS] = "0"
    try:
        yield
    finally:
        os.environ.pop(_NICENESS, None)


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
        self._hold = False

    def start(self) -> None:
        """Connect to ``address`` or start a local instance; check the trials fit a node."""
        ray = self.ray
        if not ray.is_initialized():
            try:
                if self.address:
                    ray.init(address=self.address, log_to_driver=False)
                else:
                    cpus = self.num_cpus or _cpu_count()
                    path = (_package_parent(), os.environ.get("PYTHONPATH", ""))
                    env_vars = {"PYTHONPATH": os.pathsep.join(x for x in path if x),
                                "TOKENIZERS_PARALLELISM": "false"}
                    # address="local": a new instance even where another one is running
                    with _workers_at_own_niceness():
                        ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                                 log_to_driver=False, configure_logging=False,
                                 runtime_env={"env_vars": env_vars})
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"at {self.address}" if self.address else "locally"
                why = one_line(err, ERROR_CHARS)
                raise ValueError(f"could not start Ray {where}: {why}") from None
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
        self._hold = False
        try:
            while (queue and not self._hold) or running:
                while queue and not self._hold and len(running) < (self.workers or 1):
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
                            f"{type(err).__name__}: {lines[-1] if lines else ''}", ERROR_CHARS))
                    outcome.seconds = time.perf_counter() - t0
                    finished(p, outcome)
        except BaseException:
            for ref, (p, t0) in running.items():
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
                finished(p, Outcome(ok=False, interrupted=True,
                                    seconds=time.perf_counter() - t0))
            raise

    def hold(self) -> None:
        """Submit no further point; the running ones go on to their end."""
        self._hold = True

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False
