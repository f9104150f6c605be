"""``output_root/sweep.json``: the state of every point (``pending``, ``running``, ``done``,
``failed`` with a one-line error, ``interrupted``), written atomically by the driver; a run
directory holding ``results.json`` is done whatever the file says."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotropy._validation import one_line
from isotropy.io import write_json_atomic
from isotropy.rundir import RunDirectory
from isotropy.sweeps.points import SweepPoint
from isotropy.sweeps.spec import SweepSpec

__all__ = [
    "STATES",
    "SWEEP_FILE",
    "SweepStatus",
    "check_sweep_root",
]

STATES = ("pending", "running", "done", "failed", "interrupted")
SWEEP_FILE = "sweep.json"


# --------------------------------------------------------------------------- state


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def check_sweep_root(root: Path) -> None:
    """``ValueError`` (one line) when the output root holds a ``sweep.json`` that a sweep did
    not write (not a JSON object with ``spec`` and ``points``), or a ``results.csv`` without
    a ``sweep.json``: the sweep would replace them. Changes nothing."""
    status, results = root / SWEEP_FILE, root / "results.csv"
    if status.is_file():
        try:
            data = json.loads(status.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ValueError(f"{status} is not valid JSON ({one_line(err)}); move it away to "
                             "start the status afresh (run directories are kept)") from None
        if not (isinstance(data, dict) and isinstance(data.get("points"), list)
                and isinstance(data.get("spec"), dict)):
            raise ValueError(f"{status} is not a sweep's status file (no spec and points): "
                             "choose another output_root (nothing in it is changed)")
    elif results.exists():
        raise ValueError(f"{root} holds {results.name} but no {SWEEP_FILE}, so no sweep wrote "
                         "it: choose another output_root (nothing in it is changed)")


class SweepStatus:
    """``output_root/sweep.json``: the spec, the points in run order and each point's state.

    Records of points no longer in the spec are kept under ``other_points``. Every change is
    written at once, atomically; one driver writes it (the caller holds the sweep's lock).
    """

    def __init__(self, output_root: str | os.PathLike[str]) -> None:
        self.root = Path(output_root)
        self.path = self.root / SWEEP_FILE
        self.records: dict[str, dict[str, Any]] = {}
        self.spec: dict[str, Any] = {}
        self.points: list[SweepPoint] = []
        self.live = False  # a sweep holds the lock now: its "running" points are running
        self._lock = threading.Lock()
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except ValueError as err:
                raise ValueError(f"{self.path} is not valid JSON ({err}); move it away to "
                                 "start the status afresh (run directories are kept)") from None
            for rec in [*data.get("points", []), *data.get("other_points", [])]:
                if isinstance(rec, dict) and "name" in rec:
                    self.records[rec["name"]] = {k: v for k, v in rec.items()
                                                 if k not in ("index", "settings")}

    def state(self, point: SweepPoint) -> tuple[str, str]:
        """``(state, detail)`` of a point: the run directory first (``results.json`` means
        done, ``config.json`` without it interrupted), then the recorded state; ``running``
        only while :attr:`live` (another process's sweep holds the lock)."""

        run = RunDirectory(point.run_dir)
        rec = self.records.get(point.name, {})
        if run.finished:
            return "done", ""
        if rec.get("state") == "failed":
            return "failed", str(rec.get("error") or "")
        if self.live and rec.get("state") == "running":
            return "running", "in the sweep running now"
        if run.file("config.json").is_file() or rec.get("state") in ("running", "interrupted"):
            cp = run.last_checkpoint()
            return "interrupted", f"resumes from {cp.name}" if cp else "restarts (no checkpoint)"
        return "pending", ""

    def set_points(self, spec: SweepSpec, points: Sequence[SweepPoint]) -> None:
        self.spec = spec.to_dict()
        self.points = list(points)

    def update(self, name: str, **values: Any) -> None:
        """Change a point's record (``state``, ``error``, ...) and write the file."""
        with self._lock:
            rec = self.records.setdefault(name, {"name": name})
            rec.update(values, updated=_now())
            self._write()

    def write(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        current = {p.name for p in self.points}
        points = []
        for p in self.points:
            rec = dict(self.records.get(p.name, {}))
            rec.setdefault("state", self.state(p)[0])
            points.append({"index": p.index, "name": p.name, "cell": p.cell,
                           "method": p.method, "seed": p.seed, "run_dir": str(p.run_dir),
                           **{k: v for k, v in rec.items() if k != "name"},
                           "settings": p.settings})
        other = [{"name": n, **{k: v for k, v in r.items() if k != "name"}}
                 for n, r in self.records.items() if n not in current]
        write_json_atomic(self.path, {"output_root": str(self.root), "spec": self.spec,
                                      "updated": _now(), "points": points,
                                      "other_points": other})
