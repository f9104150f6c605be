"""One sweep point in its own process: ``isotropy train`` with resume (:func:`run_point`), run by
the local engine as ``python -m isotropy.sweeps.worker POINT.json RESULT.json`` (where
``SIGUSR1`` makes the run write a checkpoint and stop) and by Ray as a task, and how a
worker's end reads (:func:`exit_reason`)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import isotropy
from isotropy._validation import one_line
from isotropy.io import write_json_atomic
from isotropy.sweeps.points import SweepPoint
from isotropy.training.settings import args_from_dict

__all__ = [
    "Outcome",
    "exit_reason",
    "ERROR_CHARS",
    "run_point",
    "visible_gpus",
]

ERROR_CHARS = 500  # a point's error message in sweep.json and the console is cut here
_LOGS = "logs"
_WORK = ".sweep"


def run_point(settings: Mapping[str, Any], threads: int | None = None) -> dict[str, Any]:
    """Train one point in this process: ``isotropy train`` with ``resume`` (a finished run is
    kept, an unfinished one continued from its last checkpoint). Returns the run's status
    (``trained`` or ``finished``), run directory, main metric and its final value."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    from isotropy.training.run import run_training

    iso_args, train_args = args_from_dict({**settings, "resume": True})
    result = run_training(iso_args, train_args)
    metric = result.results.get("main_metric")
    value = result.results.get("final", {}).get(f"eval_{metric}")
    return {"status": result.status, "run_dir": str(result.run_dir), "main_metric": metric,
            "value": value}


def _point_outcome(settings: Mapping[str, Any], threads: int | None) -> dict[str, Any]:
    from isotropy.runtime import StoppedAtCheckpoint

    t0 = time.perf_counter()
    try:
        out = {"ok": True, **run_point(settings, threads)}
    except StoppedAtCheckpoint as stop:  # SIGUSR1: a checkpoint, then the point stopped
        out = {"ok": False, "interrupted": True, "signal": stop.signum,
               "detail": f"stopped at step {stop.step}, after its checkpoint"}
    except Exception as err:  # the point fails; the error goes to the sweep's status
        traceback.print_exc()
        out = {"ok": False, "error": one_line(f"{type(err).__name__}: {err}", limit=ERROR_CHARS)}
    out["seconds"] = time.perf_counter() - t0
    return out


def _worker_main(argv: Sequence[str]) -> int:
    """``python -m isotropy.sweeps.worker POINT.json RESULT.json``."""
    point_file, result_file = argv
    from isotropy.runtime import checkpoint_on_signal

    job = json.loads(Path(point_file).read_text(encoding="utf-8"))
    with checkpoint_on_signal():  # SIGUSR1: the run writes a checkpoint, then stops
        out = _point_outcome(job["settings"], job.get("threads"))
        write_json_atomic(result_file, out)  # a second SIGUSR1 (forwarded) cannot cut it
        sys.stdout.flush()
    if out.get("interrupted"):
        return 128 + int(out["signal"])
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
    return one_line(why + (f"; last output: {lines[-1]}" if lines else ""), limit=ERROR_CHARS)


@dataclass
class Outcome:
    """What a point's run gave: ``ok`` with ``status`` ``trained``/``finished``, or an
    ``error``; ``interrupted`` when the sweep was stopped while it ran, or the run stopped
    after a checkpoint (SIGUSR1)."""

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
                   value=d.get("value"), interrupted=bool(d.get("interrupted")))


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


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
