"""The Ray engine of ``isotropy sweep`` on a real local Ray instance with 2 CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _sweep_fixtures import make_tiny_model, tiny_base, write_sst2

ray = pytest.importorskip("ray", reason="the Ray engine needs ray (pip install 'isotropy[ray]')")

from isotropy.sweeps.driver import run_sweep  # noqa: E402
from isotropy.sweeps.points import expand  # noqa: E402
from isotropy.sweeps.ray_engine import RayEngine, _workers_at_own_niceness  # noqa: E402
from isotropy.sweeps.spec import spec_from_dict  # noqa: E402


@pytest.fixture
def no_ray_left():
    """Whatever happens in the test, no Ray instance outlives it."""
    assert not ray.is_initialized()
    try:
        yield
    finally:
        ray.shutdown()


def _good_and_broken(tmp_path, *, broken_first: bool = False):
    """A spec of two points on a tiny model, one on good data and one whose training labels
    are broken (in that order, or the broken one first); returns the spec and its points."""
    model = make_tiny_model(tmp_path / "model")
    glue = write_sst2(tmp_path / "glue")
    broken = write_sst2(tmp_path / "broken", bad_label_in_train=True)
    dirs = [str(broken), str(glue)] if broken_first else [str(glue), str(broken)]
    spec = spec_from_dict({"output_root": str(tmp_path / "out"), "base": tiny_base(model, glue),
                           "points": [{"data_dir": d} for d in dirs]})
    return spec, expand(spec)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ray_engine_runs_points_as_tasks_and_reports_failures(tmp_path, no_ray_left):
    spec, (good, bad) = _good_and_broken(tmp_path)
    root = tmp_path / "out"
    engine = RayEngine(num_cpus=2, workers=2)
    lines: list[str] = []
    outcome = run_sweep(spec, [good, bad], engine, echo=lines.append)
    assert not ray.is_initialized()  # the engine shut down the instance it started
    assert any("up to 2 trial(s) at a time, 1 CPU(s) each" in x for x in lines)
    assert outcome.states == {good.name: "done", bad.name: "failed"}
    assert "label 'x' is not one of ['0', '1']" in dict(outcome.failed)[bad.name]
    results = json.loads((good.run_dir / "results.json").read_text())
    assert results["task"] == "sst2" and "eval_accuracy" in results["final"]
    assert not (bad.run_dir / "results.json").exists()
    status = {p["name"]: p for p in json.loads((root / "sweep.json").read_text())["points"]}
    assert status[good.name]["state"] == "done"
    assert status[good.name]["value"] == results["final"]["eval_accuracy"]
    assert "label 'x'" in status[bad.name]["error"]
    log = (root / "logs" / f"{good.name}.log").read_text()
    assert any(x.startswith("eval step ") and ": accuracy " in x for x in log.splitlines())

    # Same spec again: the finished point is skipped, the failed one is not retried, and
    # Ray is not even started.
    stamp = (good.run_dir / "results.json").stat().st_mtime_ns
    again = run_sweep(spec, [good, bad], RayEngine(num_cpus=2, workers=2),
                      echo=lines.append)
    assert again.states == outcome.states
    assert (good.run_dir / "results.json").stat().st_mtime_ns == stamp
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ray_engine_submits_no_point_after_max_failures(tmp_path, no_ray_left):
    """One trial at a time, the broken point first and --max-failures 1: the good point is
    never submitted (no run directory), stays pending, and the engine returns."""
    spec, (bad, good) = _good_and_broken(tmp_path, broken_first=True)
    outcome = run_sweep(spec, [bad, good], RayEngine(num_cpus=1, workers=1), max_failures=1,
                        echo=lambda line: None)
    assert outcome.states == {bad.name: "failed", good.name: "pending"}
    assert outcome.not_started == [good.name]
    assert not good.run_dir.exists()
    assert not ray.is_initialized()


NICENESS = "RAY_worker_niceness"  # Ray's own (case-sensitive) name


_NICENESS_PROBE = """
import json, os, ray
from isotropy.sweeps.ray_engine import RayEngine
engine = RayEngine(num_cpus=1, workers=1)
engine.start()
try:
    worker = ray.get(ray.remote(lambda: os.nice(0)).remote(), timeout=60)
finally:
    engine.close()
left = os.environ.get("RAY_worker_niceness")
print(json.dumps({"driver": os.nice(0), "worker": worker, "left": left}))
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ray_engine_workers_run_at_the_sweeps_niceness():
    # Ray's default starts its workers at niceness 15, where any other load on the machine
    # starves the trials; the engine's local instance runs them at the driver's niceness.
    # The driver runs niced by 3 in a process of its own, so that a niceness added twice
    # (Ray adds its setting to the inherited one) cannot pass for the driver's.
    # No Ray instance starts in this process.
    env = {k: v for k, v in os.environ.items() if k != NICENESS}
    done = subprocess.run([sys.executable, "-c", _NICENESS_PROBE], env=env, timeout=110,
                          capture_output=True, text=True, preexec_fn=lambda: os.nice(3))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["driver"] == os.nice(0) + 3
    assert seen["worker"] == seen["driver"]
    assert seen["left"] is None  # set only while the instance starts


def test_niceness_setting_keeps_the_users_value(monkeypatch):
    monkeypatch.setenv(NICENESS, "7")
    with _workers_at_own_niceness():
        assert os.environ.get(NICENESS) == "7"
    assert os.environ.get(NICENESS) == "7"
    monkeypatch.delenv(NICENESS)
    with _workers_at_own_niceness():
        assert os.environ.get(NICENESS) == "0"  # an increment over the inherited niceness
    assert NICENESS not in os.environ
