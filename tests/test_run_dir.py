"""What ``RunDirectory.prepare`` decides for each state a run directory can be left in."""

from __future__ import annotations

import json

import pytest

from isotropy.rundir import CHECKPOINT_STATE, TRAINER_STATE, RunDirectory


def make(tmp_path, *, metrics: int = 0, checkpoints: dict[int, bool] | None = None):
    """A run directory with config.json, ``metrics`` log lines and checkpoints
    (step -> complete)."""
    rd = RunDirectory(tmp_path / "run")
    rd.path.mkdir()
    rd.write_config({"settings": {"isotropy": {"tuning": -1.0}}})
    for i in range(metrics):
        rd.append_metrics({"step": i + 1, "loss": 0.5})
    for step, complete in (checkpoints or {}).items():
        folder = rd.path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / TRAINER_STATE).write_text("{}")
        if complete:
            (folder / CHECKPOINT_STATE).write_bytes(b"state")
    return rd


def same(old):
    return None


def other(old):
    return "setting tuning was -1.0, now 1.0"


def test_a_run_that_did_no_work_never_blocks_the_next(tmp_path):
    rd = make(tmp_path)  # config.json only: the run stopped before logging anything
    assert rd.prepare(resume=False, overwrite=False, same_settings=other) == "restart"
    assert list(rd.path.iterdir()) == []


def test_the_same_run_without_a_checkpoint_starts_again(tmp_path):
    rd = make(tmp_path, metrics=3, checkpoints={2: False})  # only an incomplete checkpoint
    assert rd.last_checkpoint() is None
    assert rd.prepare(resume=False, overwrite=False, same_settings=same) == "restart"
    assert list(rd.path.iterdir()) == []


def test_another_run_that_logged_work_is_refused(tmp_path):
    rd = make(tmp_path, metrics=3)
    with pytest.raises(ValueError, match="other settings .setting tuning.*and no checkpoint: "
                                         "pass --overwrite"):
        rd.prepare(resume=False, overwrite=False, same_settings=other)
    with pytest.raises(ValueError, match="cannot resume"):
        rd.prepare(resume=True, overwrite=False, same_settings=other)


def test_a_complete_checkpoint_is_resumed_and_an_incomplete_one_is_not(tmp_path):
    rd = make(tmp_path, metrics=5, checkpoints={2: True, 4: False})
    assert rd.last_checkpoint() == rd.path / "checkpoint-2"
    with pytest.raises(ValueError, match="pass --resume"):
        rd.prepare(resume=False, overwrite=False, same_settings=same)
    assert rd.prepare(resume=True, overwrite=False, same_settings=same) == "resume"
    assert rd.drop_checkpoints() == [rd.path / "checkpoint-4"]
    assert [p.name for p in rd.checkpoints()] == ["checkpoint-2"]


def steps(rd):
    return [json.loads(x)["step"] for x in rd.file("metrics.jsonl").read_text().splitlines()]


def cut(rd):
    with rd.file("metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "lo')  # cut short by a kill


def test_records_are_kept_by_count_and_a_cut_line_is_not_counted(tmp_path):
    rd = make(tmp_path, metrics=4)
    cut(rd)
    assert rd.record_counts()["metrics.jsonl"] == 4
    rd.keep_records({"metrics.jsonl": 2})
    assert steps(rd) == [1, 2]


def test_a_count_larger_than_the_file_keeps_its_whole_records_only(tmp_path):
    rd = make(tmp_path, metrics=4)
    cut(rd)
    rd.keep_records({"metrics.jsonl": 9})  # the file was edited since the checkpoint
    assert steps(rd) == [1, 2, 3, 4]
    rd.append_metrics({"step": 5, "loss": 0.1})  # the next record is not glued to a fragment
    assert steps(rd) == [1, 2, 3, 4, 5]


def test_truncating_by_step_drops_a_cut_line(tmp_path):
    rd = make(tmp_path, metrics=4)
    cut(rd)
    rd.truncate_metrics(10)
    assert steps(rd) == [1, 2, 3, 4]


def test_one_rule_for_a_damaged_line_reading_and_resuming(tmp_path):
    """Reading (report, RunDirectory) and resuming (truncation) stop at the first line that is
    not a whole JSON object: records after damage are never read nor kept."""
    from isotropy.reporting.runs import read_jsonl_whole as report_reader
    from isotropy.rundir import METRICS, RunDirectory, read_jsonl_whole

    assert report_reader is read_jsonl_whole
    run = RunDirectory(tmp_path)
    path = tmp_path / METRICS
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste\n{"step": 3}\n', encoding="utf-8")
    records, note = read_jsonl_whole(path)
    assert [r["step"] for r in records] == [1, 2] and "line 3 of 4" in note
    assert run.read_metrics() == records
    assert run.record_counts()[METRICS] == 2
    run.truncate_metrics(max_step=10)
    assert path.read_text(encoding="utf-8") == '{"step": 1}\n{"step": 2}\n'
    path.write_text('{"step": 1}\n{"step": 2}', encoding="utf-8")  # no newline: not appendable
    assert run.record_counts()[METRICS] == 1
    run.keep_records({METRICS: 5})
    assert path.read_text(encoding="utf-8") == '{"step": 1}\n'
