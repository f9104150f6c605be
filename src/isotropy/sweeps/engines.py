"""Running the points of a sweep, in one place: the driver (:func:`run_sweep`), the local and
Ray engines and the worker (:func:`run_point`). The parts live in
:mod:`~isotropy.sweeps.driver`, :mod:`~isotropy.sweeps.local_engine`,
:mod:`~isotropy.sweeps.ray_engine`, :mod:`~isotropy.sweeps.worker` and
:mod:`~isotropy.sweeps.lock`."""

from __future__ import annotations

from isotropy.sweeps.driver import ENGINES, SweepOutcome, cell_summary, plan, run_sweep
from isotropy.sweeps.local_engine import LocalEngine
from isotropy.sweeps.lock import sweep_in_progress
from isotropy.sweeps.ray_engine import RayEngine, require_ray
from isotropy.sweeps.worker import Outcome, exit_reason, run_point, visible_gpus

__all__ = [
    "ENGINES",
    "LocalEngine",
    "Outcome",
    "RayEngine",
    "SweepOutcome",
    "cell_summary",
    "exit_reason",
    "plan",
    "require_ray",
    "run_point",
    "run_sweep",
    "sweep_in_progress",
    "visible_gpus",
]
