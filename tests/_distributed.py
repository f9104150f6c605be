"""Run a function on several local processes joined by ``gloo`` and collect what each returns.

``worker(rank, *args)`` runs on every rank inside an initialised process group (one CPU
thread per process); its return value is saved by the rank and loaded back in the parent.

Rendezvous goes through a ``FileStore`` in the run's own directory: no TCP port is chosen in
advance, so nothing else on the machine can take it (or be reached through it) between the
choice and the bind; gloo's own connections go to sockets that are already listening.

Every rank writes its stdout/stderr (C++ messages and a faulthandler dump on a fatal signal
included) to ``rank<r>.log``, the traceback of an exception to ``rank<r>.error`` and the name
of the step it is running (see :func:`step`) to ``rank<r>.step``. When a rank fails, every
rank's exit status, traceback, step and log tail are gathered into :class:`RanksFailed`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PG_TIMEOUT = timedelta(seconds=60)  # one collective (and the rendezvous) waits at most this
GRACE_S = 20.0  # after one rank fails, how long the others get to fail on their own
LOG_TAIL = 3000  # characters of each rank's log shown in a report

_STEP_FILE: Path | None = None  # inside a rank process: where it records its steps


def require_gloo() -> None:
    """Skip the calling test when ``torch.distributed`` with ``gloo`` is not available."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")


class RanksFailed(AssertionError):
    """A multi-process run in which some rank did not return a result (report as message)."""


@dataclass(frozen=True)
class StepError:
    """A step that raised on one rank (see :func:`guarded`): its name and traceback."""

    name: str
    traceback: str


def step(name: str) -> None:
    """Record, inside a rank, that it now runs ``name`` (shown if the rank dies)."""
    if _STEP_FILE is not None:
        with open(_STEP_FILE, "a") as f:
            f.write(name + "\n")


def guarded(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` inside a rank; an exception is returned as a :class:`StepError`.

    One failing step then fails only the tests that read it (:func:`value`), not the run.
    """
    step(name)
    try:
        return fn(*args)
    except Exception:
        return StepError(name, traceback.format_exc())


def value(results: list[Any], rank: int, *keys: Any) -> Any:
    """``results[rank][k1][k2]...``, failing the test with the rank's traceback on a
    :class:`StepError`."""
    item = results[rank]
    for key in keys:
        if isinstance(item, StepError):
            break
        item = item[key]
    if isinstance(item, StepError):
        pytest.fail(f"rank {rank} raised in step {item.name!r}:\n{item.traceback}", False)
    return item


def _redirect_output(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)


def _rank_main(
    rank: int, worker: Callable[..., Any], args: tuple, world_size: int, out_dir: str
) -> None:
    """One rank: join the group, run ``worker``, save its result; leave without teardown.

    ``destroy_process_group`` leaves gloo's native threads running (and, with a ``tcp://``
    rendezvous, rank 0's TCPStore server thread). A normal exit then finalizes the interpreter
    and the C++ statics under them, which now and then aborted a rank after its work was done
    ("terminate called without an active exception"). So the process ends with ``os._exit``
    once its files are written.
    """
    global _STEP_FILE
    out = Path(out_dir)
    _STEP_FILE = out / f"rank{rank}.step"
    _redirect_output(out / f"rank{rank}.log")
    torch.set_num_threads(1)
    code = 1
    try:
        step("init_process_group")
        dist.init_process_group(
            "gloo",
            init_method=(out / "filestore").as_uri(),
            rank=rank,
            world_size=world_size,
            timeout=PG_TIMEOUT,
        )
        try:
            result = worker(rank, *args)
            step("final barrier")
            dist.barrier()  # no rank tears down while a peer still talks to it
        finally:
            step("destroy_process_group")
            dist.destroy_process_group()
        tmp = out / f"rank{rank}.pt.tmp"
        torch.save(result, tmp)
        tmp.rename(out / f"rank{rank}.pt")
        step("done")
        code = 0
    except BaseException:
        (out / f"rank{rank}.error").write_text(traceback.format_exc())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _status(proc: Any, killed: bool) -> str:
    code = proc.exitcode
    if killed:
        return "still running at the deadline: killed"
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _tail(path: Path, n: int) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace")
    return text if len(text) <= n else "...\n" + text[-n:]


def _report(out: Path, procs: list[Any], killed: set[int], why: str) -> str:
    lines = [why]
    for rank, proc in enumerate(procs):
        steps = _tail(out / f"rank{rank}.step", 10_000).splitlines()
        lines.append(
            f"--- rank {rank}: {_status(proc, rank in killed)}; "
            f"last step: {steps[-1] if steps else '(none)'}"
        )
        error = _tail(out / f"rank{rank}.error", LOG_TAIL)
        if error:
            lines.append(error.rstrip())
        log = _tail(out / f"rank{rank}.log", LOG_TAIL)
        if log.strip():
            lines.append(f"[rank {rank} log]\n{log.rstrip()}")
    return "\n".join(lines)


def _wait(procs: list[Any], deadline: float) -> bool:
    """Wait until all ranks exit, or one fails and the others have had ``GRACE_S`` to exit;
    False when the deadline passed first."""
    failed_at = None
    while True:
        codes = [p.exitcode for p in procs]
        if all(c is not None for c in codes):
            return True
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if failed_at is not None and now - failed_at > GRACE_S:
            return True
        if now > deadline:
            return False
        procs[codes.index(None)].join(0.2)


def run_on_ranks(
    worker: Callable[..., Any],
    *args: Any,
    world_size: int,
    out_dir: Path,
    timeout: float = 240.0,
) -> list[Any]:
    """Start ``world_size`` processes running ``worker(rank, *args)``; their results by rank.

    Raises :class:`RanksFailed` (with every rank's report) when a rank fails or the run
    exceeds ``timeout`` seconds; processes still running then are killed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(rank, worker, args, world_size, str(out)),
            name=f"rank{rank}",
            daemon=True,
        )
        for rank in range(world_size)
    ]
    killed: set[int] = set()
    try:
        for p in procs:
            p.start()
        in_time = _wait(procs, time.monotonic() + timeout)
    finally:
        for rank, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                killed.add(rank)
            p.join()
    missing = [r for r in range(world_size) if not (out / f"rank{r}.pt").exists()]
    if missing or any(p.exitcode != 0 for p in procs):
        why = f"the {world_size}-process run failed"
        if not in_time:
            why += f" (timed out after {timeout:.0f} s)"
        raise RanksFailed(_report(out, procs, killed, why))
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


class RunResults:
    """What a module fixture hands to its tests: the ranks' results, or the run's failure.

    A failed run fails each test that asks for the results with the full per-rank report,
    instead of erroring every test with the same set-up traceback.
    """

    def __init__(self, results: list[Any] | None, failure: str | None = None) -> None:
        self._results = results
        self._failure = failure

    @classmethod
    def run(cls, worker: Callable[..., Any], *args: Any, **kwargs: Any) -> RunResults:
        """:func:`run_on_ranks`, keeping a :class:`RanksFailed` for the tests to report."""
        try:
            return cls(run_on_ranks(worker, *args, **kwargs))
        except RanksFailed as err:
            return cls(None, str(err))

    @property
    def ranks(self) -> list[Any]:
        """The results by rank (fails the calling test if the run failed)."""
        if self._results is None:
            pytest.fail(str(self._failure), False)
        return self._results

    def value(self, rank: int, *keys: Any) -> Any:
        """See :func:`value`."""
        return value(self.ranks, rank, *keys)
