"""The local engine: ``N`` worker slots, each running one point at a time as a subprocess. With
GPUs each slot owns one (``CUDA_VISIBLE_DEVICES``); without, each gets ``max(1, cpus // N)``
threads (``OMP_NUM_THREADS`` and ``torch.set_num_threads``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from isotropy._validation import one_line
from isotropy.io import write_json_atomic
from isotropy.sweeps.points import SweepPoint
from isotropy.sweeps.worker import (
    _WORK,
    ERROR_CHARS,
    Finished,
    Outcome,
    Started,
    _cpu_count,
    _log_path,
    _package_parent,
    _tail,
    exit_reason,
    visible_gpus,
)

__all__ = [
    "LocalEngine",
    "StopAfterCheckpoints",
]


class LocalEngine:
    """``workers`` slots, each running one point at a time in a fresh subprocess."""

    name = "local"

    def __init__(self, workers: int | None = None, *, gpus: Sequence[str] | None = None,
                 cpus: int | None = None, workers_per_gpu: int = 1) -> None:
        self.gpus = list(visible_gpus() if gpus is None else gpus)
        if isinstance(workers_per_gpu, bool) or not isinstance(workers_per_gpu, int) \
                or workers_per_gpu < 1:
            raise ValueError(f"--workers-per-gpu must be an integer >= 1, got {workers_per_gpu!r}")
        self.workers_per_gpu = workers_per_gpu
        self.workers = int(workers) if workers is not None else max(1, len(self.gpus))
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.gpus and self.workers > len(self.gpus) * workers_per_gpu:
            raise ValueError(
                f"--workers {self.workers} exceeds the {len(self.gpus)} visible GPU(s) x "
                f"--workers-per-gpu {workers_per_gpu} (CUDA_VISIBLE_DEVICES= trains on the CPU)")
        self.threads = max(1, (cpus or _cpu_count()) // self.workers)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hold = threading.Event()
        self.lock_fd: int | None = None  # the sweep's lock, kept open by every worker process

    def describe(self) -> str:
        used = sorted(set(self._gpu(i) for i in range(self.workers))) if self.gpus else []
        share = "one GPU each" if self.workers_per_gpu == 1 else \
            f"up to {self.workers_per_gpu} per GPU"
        where = (f"{share} ({', '.join(used)}), {self.threads} CPU thread(s) each" if self.gpus
                 else f"{self.threads} CPU thread(s) each")
        return f"local engine: {self.workers} worker process(es), {where}"

    def _env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            x for x in (_package_parent(), env.get("PYTHONPATH", "")) if x)
        env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads),
                   TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self._gpu(slot)
        return env

    def _gpu(self, slot: int) -> str:
        """The GPU of worker ``slot``: slots go round the GPUs, so that a GPU takes a second
        worker only when every GPU has one."""
        return self.gpus[slot % len(self.gpus)]

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
                    [sys.executable, "-m", "isotropy.sweeps.worker", str(point_file),
                     str(result_file)],
                    stdout=out, stderr=subprocess.STDOUT, env=self._env(slot), cwd=os.getcwd(),
                    pass_fds=(self.lock_fd,) if self.lock_fd is not None else ())
                self._procs[slot] = proc
            code = proc.wait()
            with self._lock:
                self._procs.pop(slot, None)
        seconds = time.perf_counter() - t0
        if result_file.is_file():  # the worker's own account: done, failed, or interrupted
            outcome = Outcome.from_dict(json.loads(result_file.read_text(encoding="utf-8")))
            outcome.seconds = seconds
            return outcome
        if self._stop.is_set() or code == -signal.SIGINT:
            return Outcome(ok=False, interrupted=True, seconds=seconds)
        return Outcome(ok=False, error=exit_reason(code, _tail(log)), seconds=seconds)

    def run(self, points: Sequence[SweepPoint], root: Path, started: Started,
            finished: Finished) -> None:
        """Run ``points`` in order on the slots; returns when all are done or raises
        ``KeyboardInterrupt`` after stopping the running ones."""
        queue = deque(points)
        self._stop.clear()
        self._hold.clear()

        n_slots = min(self.workers, len(points))
        # Completion is signalled with events rather than Thread.join: a join interrupted by
        # Ctrl-C can return at once afterwards while the thread still runs, and the points'
        # final states would then be written after the interrupt was raised.
        done = [threading.Event() for _ in range(n_slots)]

        def slot(i: int) -> None:
            try:
                while not self._stop.is_set():
                    with self._lock:
                        if not queue or self._hold.is_set():
                            return
                        point = queue.popleft()
                    where = f"worker {i + 1}" + (f", GPU {self._gpu(i)}" if self.gpus else "")
                    started(point, where)
                    try:
                        outcome = self._run_one(i, point, root)
                    except Exception as err:  # could not start the process, write files...
                        outcome = Outcome(ok=False,
                                          error=one_line(f"{type(err).__name__}: {err}",
                                                         limit=ERROR_CHARS))
                    finished(point, outcome)
            finally:
                done[i].set()

        threads = [threading.Thread(target=slot, args=(i,), daemon=True,
                                    name=f"sweep-worker-{i + 1}")
                   for i in range(n_slots)]
        try:
            try:
                for t in threads:
                    t.start()
            finally:
                for t, e in zip(threads, done, strict=True):
                    if t.ident is None:  # a stop came before it started: nothing to wait for
                        e.set()
            _wait_all(done)
        except StopAfterCheckpoints:  # SIGUSR1: every running point writes a checkpoint
            self.checkpoint_and_stop()
            try:
                _wait_all(done)  # as long as their steps and checkpoints take
            except BaseException:  # a second signal: stop them at once
                self.stop()
                for e in done:
                    e.wait(timeout=60)
                raise
            raise
        except BaseException:  # Ctrl-C, a test's timeout...: stop the worker processes
            self.stop()
            for e in done:
                e.wait(timeout=60)
            raise

    def hold(self) -> None:
        """Start no further point; the running ones go on to their end."""
        self._hold.set()

    def checkpoint_and_stop(self) -> None:
        """Start no further point, and send each running worker ``SIGUSR1``: its run ends
        the optimizer step in progress, writes a checkpoint there and stops (the point is
        then interrupted, and resumed from that checkpoint by the next run of the sweep)."""
        with self._lock:
            self._stop.set()
            procs = list(self._procs.values())
        for p in procs:
            with contextlib.suppress(OSError):
                p.send_signal(signal.SIGUSR1)

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


class StopAfterCheckpoints(KeyboardInterrupt):
    """Raised in the thread running :meth:`LocalEngine.run` (by ``isotropy sweep``'s
    ``SIGUSR1`` handler) to stop the sweep once every running point has written a
    checkpoint (:meth:`LocalEngine.checkpoint_and_stop`); any other engine stops its points
    as on Ctrl-C."""


def _wait_all(done: Sequence[threading.Event]) -> None:
    """Wait until every event is set, in short waits (a signal's handler runs between)."""
    while not all(e.is_set() for e in done):
        for e in done:
            e.wait(timeout=0.2)
