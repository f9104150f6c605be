"""Crash safety: a real tiny run killed (SIGKILL, or SIGINT as Ctrl-C) at named points, then
resumed, ends with the files of the uninterrupted run.

The run is ``isotropy train`` in a subprocess (a tiny random BERT, 32 SST-2-style sentences,
batch 4 with 2 accumulation steps: 4 optimizer steps per epoch, 2 epochs; I-STAR and the exact
persistent entropy, so Sigma_S and the entropy's two-pass state are exercised; a checkpoint
every 2 steps, an evaluation every epoch). ``ISOTROPY_FAULT`` (:func:`isotropy.runtime.
fault_point`) stops it at a named point; ``--resume`` (or a sweep rerun) then continues it.
Compared with the uninterrupted run: every key of ``results.json`` (``train.train_loss``, the
mean over all steps, included), every record of ``metrics.jsonl`` (the final summary's
included), ``measurements.jsonl`` and the saved model's weights, all exactly, timing keys
aside.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _models import save_tiny_bert

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

WORDS = ["good", "bad", "great", "awful", "nice", "poor", "the", "film", "plot", "was", "very",
         "not", "a", "story", "actor", "dull"]
# timing and throughput vary from run to run (and the FLOS count is of one process's steps);
# everything else, train_loss included, must equal the uninterrupted run's
VOLATILE = ("runtime", "per_second", "seconds", "total_flos", "cwd")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    model = save_tiny_bert(root / "bert", WORDS)
    rng = random.Random(1)
    (root / "glue" / "SST-2").mkdir(parents=True)
    for split, n in (("train", 32), ("dev", 16)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randint(0, 1)
            cue = rng.choice(["good", "great", "nice"] if y else ["bad", "awful", "poor"])
            rows.append(" ".join([*rng.choices(WORDS[6:], k=rng.randint(2, 6)), cue]) + f"\t{y}")
        (root / "glue" / "SST-2" / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root, model


def train_argv(root: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train", "--task", "sst2", "--model", str(model), "--data_dir", str(root / "glue"),
        "--output_dir", str(out), "--regularizer", "istar", "entropy",
        "--max_seq_length", "16", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--per_device_eval_batch_size", "8",
        "--num_train_epochs", "2", "--learning_rate", "1e-3", "--logging_steps", "1",
        "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "epoch",
        "--seed", "7", "--shrinkage_tokens", "200", "--measure_max_tokens", "300",
        "--disable_tqdm", "true", "--report_to", "none", "--use_cpu", "true", *extra,
    ]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job


def run_cli(argv: list[str], fault: str | None = None,
            sigint_ignored: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("ISOTROPY_FAULT", None)
    if fault:
        env["ISOTROPY_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "isotropy.cli.main", *argv], env=env,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=_ignore_sigint if sigint_ignored else None)


def _clean(rec):
    if isinstance(rec, dict):
        return {k: _clean(v) for k, v in rec.items()
                if not any(t in k for t in VOLATILE) and k != "resumed_from"}
    if isinstance(rec, list):
        return [_clean(v) for v in rec]
    return rec


def run_files(out: Path) -> dict:
    """What must equal between an interrupted-and-resumed run and the uninterrupted one."""
    from safetensors.torch import load_file

    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    logs = [_clean(r) for r in metrics]  # every record, the final summary's included
    meas = [_clean(json.loads(x)) for x in (out / "measurements.jsonl").read_text().splitlines()]
    results = _clean(json.loads((out / "results.json").read_text()))
    assert results.pop("model_dir") == str(out / "model")
    weights = load_file(out / "model" / "model.safetensors")
    return {"logs": logs, "measurements": meas, "results": results, "weights": weights}


@pytest.fixture(scope="module")
def reference(setup):
    root, model = setup
    out = root / "reference"
    res = run_cli(train_argv(root, model, out))
    assert res.returncode == 0, res.stderr[-3000:]
    # the exact entropy's training forward replays the no-grad pass's dropout masks (the
    # tiny BERT has dropout 0.1): identical embeddings at every step
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    replay = [r["entropy/replay_max_abs_diff"] for r in logs if "loss" in r]
    assert len(replay) == 8 and all(d == 0.0 for d in replay)
    return run_files(out)


def assert_same_run(out: Path, reference: dict) -> None:
    got = run_files(out)
    assert got["logs"] == reference["logs"]
    assert got["measurements"] == reference["measurements"]
    assert got["results"] == reference["results"]
    assert got["weights"].keys() == reference["weights"].keys()
    for k, v in reference["weights"].items():
        assert torch.equal(got["weights"][k], v), k


# where the run is stopped (ISOTROPY_FAULT) and what the resume must say
CASES = {
    # a training log was appended (step 3, mid-epoch): resume from checkpoint-2
    "training_logged@3": "",
    # the epoch-1 evaluation is logged, its checkpoint (step 4, written after it) is not yet
    "evaluation_logged@1": "",
    # checkpoint-4 is complete, rotation not yet done
    "checkpoint_written@2": "",
    # checkpoint-4's model and optimizer are written, not the rest: resume from checkpoint-2
    "checkpoint_partial@2": "checkpoint-4 is incomplete",
    "checkpoint_partial@2:int": "checkpoint-4 is incomplete",
    # every file but results.json is written: resume from the last checkpoint (step 8)
    "results_writing": "",
    # SIGTERM (kill) mid-epoch: stopped as Ctrl-C stops it
    "training_logged@3:sigterm": "",
    # SIGKILL inside the final save: its temporary .model-* folder is deleted by the resume
    "model_saving": "",
}


@pytest.mark.parametrize("fault", list(CASES))
def test_a_stopped_run_resumes_to_the_uninterrupted_result(setup, reference, fault):
    root, model = setup
    out = root / f"run-{fault.replace(':', '-').replace('@', '-')}"
    argv = train_argv(root, model, out)
    killed = run_cli(argv, fault=fault)
    sig = {"int": signal.SIGINT, "sigterm": signal.SIGTERM}.get(fault.partition(":")[2],
                                                                 signal.SIGKILL)
    assert killed.returncode in (-sig, 128 + sig), (killed.returncode, killed.stderr[-2000:])
    if sig != signal.SIGKILL:  # Ctrl-C, SIGTERM: one line saying how to continue, no traceback
        assert killed.returncode == 128 + sig
        assert "Traceback" not in killed.stderr
        how = " (SIGTERM)" if sig == signal.SIGTERM else ""
        assert f"isotropy train: interrupted{how}; --resume continues {out} from " \
            "checkpoint-2" in killed.stderr.splitlines()
    assert not (out / "results.json").exists()
    if fault == "model_saving":
        assert [p.name for p in out.glob(".model-*")]  # what the kill left
    resumed = run_cli([*argv, "--resume"])
    assert not list(out.glob(".model-*"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if CASES[fault]:
        assert CASES[fault] in resumed.stdout
    assert_same_run(out, reference)


@pytest.fixture(scope="module")
def reference_6_steps(setup):
    """The run ended by --max_steps 6, in the middle of its second epoch."""
    root, model = setup
    out = root / "reference-6"
    res = run_cli(train_argv(root, model, out, "--max_steps", "6"))
    assert res.returncode == 0, res.stderr[-3000:]
    return run_files(out)


@pytest.mark.floor  # transformers 4's loop would train a 7th step (IsotropyTrainer stops it)
@pytest.mark.parametrize("fault", ["checkpoint_written@3", "results_writing"])
def test_a_run_ending_mid_epoch_resumes_from_its_final_checkpoint(setup, reference_6_steps,
                                                                   fault):
    """--max_steps 6 ends mid-epoch: the final checkpoint comes after the final evaluation,
    and resuming from it trains no further step."""
    root, model = setup
    out = root / f"six-{fault.replace('@', '-')}"
    argv = train_argv(root, model, out, "--max_steps", "6")
    assert run_cli(argv, fault=fault).returncode == -signal.SIGKILL
    resumed = run_cli([*argv, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / "results.json").read_text())["train"]["global_step"] == 6
    assert "single sample" not in resumed.stderr  # no warning of an empty data set
    assert_same_run(out, reference_6_steps)


def _without_checkpoints(argv: list[str]) -> list[str]:
    """``argv`` with ``--save_strategy no`` (a save schedule changes no record)."""
    at = argv.index("--save_strategy")
    argv = [*argv[:at], "--save_strategy", "no", *argv[at + 2:]]
    at = argv.index("--save_steps")
    return [*argv[:at], *argv[at + 2:]]


@pytest.mark.parametrize("fault, schedule, step", [
    # step 2's log: a checkpoint at step 3, which the schedule (every 2 steps) has not; the
    # Trainer saving when a callback asks off its schedule, on transformers 4 too
    pytest.param("training_logged@2:sigusr1", "steps", 3, marks=pytest.mark.floor),
    # step 3's log, no save schedule at all: at step 4, the epoch's last, after the epoch's
    # evaluation
    ("training_logged@3:sigusr1", "no", 4)])
def test_sigusr1_stops_after_a_checkpoint_that_resumes_to_the_uninterrupted_result(
        setup, reference, fault, schedule, step):
    """SIGUSR1 (e.g. a cluster's warning before a job's time limit) ends the optimizer step
    in progress, writes a checkpoint there, and stops with one line and status 138: no
    traceback, no results, no record after the checkpoint's step; ``--resume`` continues
    from it to the uninterrupted run's files."""
    root, model = setup
    out = root / f"usr1-{step}"
    argv = train_argv(root, model, out)
    if schedule == "no":
        argv = _without_checkpoints(argv)
    stopped = run_cli(argv, fault=fault)
    assert stopped.returncode == 128 + signal.SIGUSR1, (stopped.returncode,
                                                        stopped.stderr[-2000:])
    assert "Traceback" not in stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"isotropy train: stopped (SIGUSR1) at step {step}, after its checkpoint; --resume "
        f"continues {out} from checkpoint-{step}")
    names = [p.name for p in out.glob("checkpoint-*")]
    assert f"checkpoint-{step}" in names and (schedule != "no" or len(names) == 1)
    assert not (out / "results.json").exists()
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in logged) == step
    assert [_clean(r) for r in logged] == [  # the uninterrupted run's, to the step
        r for r in reference["logs"] if r["step"] <= step and "train_loss" not in r]
    resumed = run_cli([*argv, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_run(out, reference)


def test_a_run_stopped_before_any_checkpoint_starts_again(setup, reference):
    """Nothing to continue: the rerun (with or without --resume) starts again, says so, and
    equals the uninterrupted run."""
    root, model = setup
    out = root / "before-checkpoint"
    argv = train_argv(root, model, out)
    killed = run_cli(argv, fault="training_logged@1")
    assert killed.returncode == -signal.SIGKILL
    again = run_cli(argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "without a complete checkpoint: starting it again" in again.stdout
    assert_same_run(out, reference)


def test_resume_from_a_chosen_checkpoint(setup, reference):
    """--resume_from_checkpoint resumes from that checkpoint of the run (later ones are the
    abandoned future and are deleted, with a line); a path that is not one is refused."""
    root, model = setup
    out = root / "chosen"
    argv = train_argv(root, model, out, "--save_total_limit", "10")
    killed = run_cli(argv, fault="training_logged@7")
    assert killed.returncode == -signal.SIGKILL
    assert (out / "checkpoint-6").is_dir()
    bad = run_cli([*argv, "--resume_from_checkpoint", str(root)])
    assert bad.returncode != 0 and "not a complete checkpoint" in bad.stderr
    res = run_cli([*argv, "--resume_from_checkpoint", str(out / "checkpoint-2")])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "the later checkpoint-4, checkpoint-6 deleted" in res.stdout
    assert_same_run(out, reference)


def _sweep_settings(root: Path, model: Path) -> dict:
    """:func:`train_argv` as a sweep's base settings (no output directory)."""
    argv = train_argv(root, model, root / "unused")
    settings = {}
    i = 1
    while i < len(argv):
        key = argv[i].lstrip("-")
        values = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        settings[key] = values if key == "regularizer" else values[0]
    settings.pop("output_dir")
    return settings


def _sweep_spec(root: Path, model: Path, where: Path, name: str) -> Path:
    """A sweep of one point (seed 7) of the crash tests' run, its output root ``where/name``."""
    spec = where / f"{name}.json"
    spec.write_text(json.dumps({"output_root": str(where / name),
                                "base": _sweep_settings(root, model), "grid": {"seed": [7]}}))
    return spec


def _sweep_point(where: Path) -> Path:
    """The run directory of a one-point sweep's output root."""
    (point,) = [p for p in where.iterdir() if (p / "config.json").exists()]
    return point


@pytest.fixture(scope="module")
def uninterrupted_sweep(setup):
    """The one-point sweep run to its end (sweep workers set their own thread count, so a
    stopped sweep is compared with a sweep)."""
    root, model = setup
    spec = _sweep_spec(root, model, root, "uninterrupted-sweep")
    res = run_cli(["sweep", str(spec), "--workers", "1"])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return run_files(_sweep_point(root / "uninterrupted-sweep"))


def test_a_sweep_rerun_resumes_a_point_cut_inside_a_checkpoint(setup, uninterrupted_sweep,
                                                               tmp_path):
    """A sweep whose worker was killed inside a checkpoint write (the point is reported
    failed): ``--retry-failed`` resumes the point from its last complete checkpoint to the
    result of the same sweep uninterrupted."""
    root, model = setup
    spec = _sweep_spec(root, model, tmp_path, "killed")
    first = run_cli(["sweep", str(spec), "--workers", "1"], fault="checkpoint_partial@2")
    assert first.returncode != 0
    assert "killed by SIGKILL" in first.stdout + first.stderr
    again = run_cli(["sweep", str(spec), "--workers", "1", "--retry-failed"])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert_same_run(_sweep_point(tmp_path / "killed"), uninterrupted_sweep)


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (of any of its threads)."""
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def _pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` waits, sent to process ``pid`` and not yet delivered."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _wait_until(check, what: str, timeout: float = 240.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc (Linux)")
def test_sigusr1_stops_a_sweep_after_its_running_point_wrote_a_checkpoint(
        setup, uninterrupted_sweep, tmp_path):
    """SIGUSR1 to ``isotropy sweep`` (its worker paused at step 2's log, so that the signal
    arrives mid-run): the sweep forwards it, the point writes checkpoint-3 and stops, the
    sweep records it interrupted and exits 138 with one line; run again, the sweep resumes it
    from checkpoint-3 to the uninterrupted sweep's files."""
    root, model = setup
    spec = _sweep_spec(root, model, tmp_path, "asked")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "ISOTROPY_FAULT": "training_logged@2:stop"}
    sweep = subprocess.Popen([sys.executable, "-m", "isotropy.cli.main", "sweep", str(spec),
                              "--workers", "1"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        (worker,) = _wait_until(lambda: _children(sweep.pid), "the worker process")
        _wait_stopped(worker)
        os.kill(sweep.pid, signal.SIGUSR1)
        _wait_until(lambda: _pending(worker, signal.SIGUSR1), "SIGUSR1 sent to the worker")
        os.kill(worker, signal.SIGCONT)
        out, err = sweep.communicate(timeout=240)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 128 + signal.SIGUSR1, (sweep.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == (
        "isotropy sweep: stopped (SIGUSR1): each running point wrote a checkpoint at its step "
        "in progress; run the same command to resume")
    point = _sweep_point(tmp_path / "asked")
    assert (point / "checkpoint-3").is_dir() and not (point / "results.json").exists()
    status = json.loads((tmp_path / "asked" / "sweep.json").read_text())
    assert [(r["state"], r["detail"]) for r in status["points"]] == [
        ("interrupted", "stopped by the user")]
    again = run_cli(["sweep", str(spec), "--workers", "1"])
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "resumes from checkpoint-3" in again.stdout
    assert_same_run(point, uninterrupted_sweep)


def test_sigint_stops_a_run_started_with_sigint_ignored(setup, tmp_path):
    """A background job inherits "ignore SIGINT" from its shell: the run still stops on
    SIGINT, with the one line of Ctrl-C (it ignored the signal and trained to the end)."""
    root, model = setup
    out = tmp_path / "background"
    res = run_cli(train_argv(root, model, out), fault="training_logged@3:sigint",
                  sigint_ignored=True)
    assert res.returncode == 130, (res.returncode, res.stderr[-2000:])
    assert res.stderr.strip().splitlines()[-1] == (
        f"isotropy train: interrupted; --resume continues {out} from checkpoint-2")
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("how", ["sigint", "sigint-in-finalizer"])
def test_ctrl_c_at_start_up_stops_the_run(setup, tmp_path, how):
    """SIGINT once the tokenizer is loaded, delivered plainly or while a finalizer runs
    (``__del__``, where Python prints "Exception ignored in ..." and drops the
    KeyboardInterrupt: the run then trained to the end and exited 0): the run stops before
    any training, with one line."""
    root, model = setup
    out = tmp_path / "start-up"
    res = run_cli(train_argv(root, model, out), fault=f"tokenizer_loaded:{how}")
    assert res.returncode == 130, (res.returncode, res.stderr[-2000:])
    assert f"isotropy train: interrupted; no checkpoint was written, so the same command " \
        f"starts {out} again" in res.stderr.splitlines()
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    assert not (out / "metrics.jsonl").exists() and not (out / "results.json").exists()


def _wait_stopped(pid: int, timeout: float = 240.0) -> None:
    """Wait until process ``pid`` is stopped (state ``T`` in ``/proc``)."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.2)
    raise AssertionError(f"process {pid} did not reach its stop point")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_a_second_writer_on_a_run_in_use_is_refused(setup, reference):
    """Two writers on one run directory: the first, paused mid-training (SIGSTOP at its
    third training log), holds the folder; a second command (the same one, or one with
    another learning rate; plain, --resume or --overwrite) is refused with one line naming the
    first process and changes nothing; the first, continued, ends with the uninterrupted
    run's files."""
    root, model = setup
    out = root / "two-writers"
    argv = train_argv(root, model, out)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "ISOTROPY_FAULT": "training_logged@3:stop"}
    first = subprocess.Popen([sys.executable, "-m", "isotropy.cli.main", *argv], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_stopped(first.pid)
        before = sorted(p.name for p in out.iterdir())
        metrics_before = (out / "metrics.jsonl").read_bytes()
        for extra, flags in (([], []), ([], ["--resume"]), (["--learning_rate", "2e-3"], []),
                             (["--learning_rate", "2e-3"], ["--overwrite"])):
            again = run_cli([*argv, *extra, *flags])
            assert again.returncode != 0
            lines = again.stderr.strip().splitlines()
            assert len(lines) == 1, again.stderr
            assert f"process {first.pid} " in lines[0]
            assert f"is writing run directory {out}" in lines[0]
        assert sorted(p.name for p in out.iterdir()) == before
        assert (out / "metrics.jsonl").read_bytes() == metrics_before
    finally:
        first.send_signal(signal.SIGCONT)
        stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    assert_same_run(out, reference)
