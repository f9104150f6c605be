"""What ``RunDirectory.prepare`` decides for each state a run directory can be left in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isotropy.rundir import CHECKPOINT_STATE, TRAINER_STATE, RunDirectory


def make(tmp_path, *, metrics: int = 0, checkpoints: dict[int, bool] | None = None):
    """A run directory with config.json, ``metrics`` log lines and checkpoints
    (step -> complete)."""
    rd = RunDirectory(tmp_path / "run")
    rd.path.mkdir()
    rd.write_config({"settings": {"isotropy": {"tuning": -1.0}, "training": {}},
                     "measurement_format": 2})
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
    not a whole JSON object: records after damage are never read nor kept. The report reads
    the records before it with a note; the run folder's own reader names the damage; a
    truncation that would delete whole records after it is refused; a crash's cut last line
    is dropped."""
    from isotropy.reporting.runs import read_jsonl_whole as report_reader
    from isotropy.rundir import METRICS, RunDirectory, read_jsonl_whole

    assert report_reader is read_jsonl_whole
    run = RunDirectory(tmp_path)
    path = tmp_path / METRICS
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste\n{"step": 3}\n', encoding="utf-8")
    records, note = read_jsonl_whole(path)
    assert [r["step"] for r in records] == [1, 2] and "line 3 of 4" in note
    with pytest.raises(ValueError, match="line 3 of 4 is cut short or unreadable"):
        run.read_metrics()
    assert run.record_counts()[METRICS] == 2
    with pytest.raises(ValueError, match="line 3 of 4 is damaged and 1 line"):
        run.truncate_metrics(max_step=10)
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste\n', encoding="utf-8")  # a crash's cut
    run.truncate_metrics(max_step=10)
    assert path.read_text(encoding="utf-8") == '{"step": 1}\n{"step": 2}\n'
    path.write_text('{"step": 1}\n{"step": 2}', encoding="utf-8")  # no newline: not appendable
    assert run.record_counts()[METRICS] == 1
    run.keep_records({METRICS: 5})
    assert path.read_text(encoding="utf-8") == '{"step": 1}\n'


# --------------------------------------------------------------------------- foreign folders

def _tree(root):
    """Every path under ``root`` with its bytes (folders as None)."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _hf_model_folder(path):
    """What a copy of a Hugging Face model folder (sentence-transformers layout) holds."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(
        {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384}))
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (path / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (path / "tokenizer.json").write_text("{}")
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return path


def _thesis_folder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"title": "my thesis", "chapters": 5}')
    (path / "thesis.txt").write_text("years of work")
    (path / "data").mkdir()
    (path / "data" / "a.csv").write_text("x,y\n1,2\n")
    return path


def _files(path, files):
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


FOREIGN = {
    "a folder with someone's config.json": _thesis_folder,
    "a Hugging Face model folder": _hf_model_folder,
    "a config.json that is not JSON": lambda p: _files(p, {"config.json": "{cut",
                                                           "notes.txt": "mine"}),
    "a config.json holding a list": lambda p: _files(p, {"config.json": "[1, 2]"}),
    "settings without the training section": lambda p: _files(
        p, {"config.json": '{"settings": {"isotropy": {}}}', "x.txt": "x"}),
    "a measurement_format that is not a number": lambda p: _files(
        p, {"config.json": '{"settings": {"isotropy": {}, "training": {}}, '
                           '"measurement_format": "v2"}'}),
}


@pytest.mark.parametrize("flags", [{}, {"overwrite": True}, {"resume": True}])
@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_folder_that_is_not_a_run_of_ours_is_refused_and_never_changed(tmp_path, kind, flags):
    """Only a run's own record (config.json with our settings sections) makes a folder a run:
    anything else is refused with one line, with or without --overwrite/--resume, before the
    lock file is put in, and nothing in it changes."""
    path = FOREIGN[kind](tmp_path / "d")
    before = _tree(path)
    rd = RunDirectory(path)
    with pytest.raises(ValueError) as err:
        rd.check_not_foreign()
    assert "holds no run of isotropy" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="holds no run of isotropy"), rd.writer():
        rd.prepare(resume=flags.get("resume", False), overwrite=flags.get("overwrite", False),
                   same_settings=same)
    with pytest.raises(ValueError, match="holds no run of isotropy"):
        rd.prepare(resume=flags.get("resume", False), overwrite=flags.get("overwrite", False),
                   same_settings=same)
    assert _tree(path) == before


def test_a_finished_runs_model_folder_is_not_a_run(tmp_path):
    rd = make(tmp_path, metrics=2)
    model = rd.file("model")
    _hf_model_folder(model)
    before = _tree(model)
    with pytest.raises(ValueError, match=f"{model} holds no run of isotropy: its config.json "
                                         "is not a run's record .it has no settings"):
        RunDirectory(model).prepare(resume=False, overwrite=True, same_settings=same)
    assert _tree(model) == before


def test_clearing_a_run_deletes_only_what_a_run_writes(tmp_path):
    """--overwrite (and a restart) delete the run's files, never a file a run does not write
    that someone put beside them."""
    rd = make(tmp_path, metrics=3, checkpoints={2: True})
    for name in ("results.json", "eval_predictions.csv"):
        rd.file(name).write_text("{}")
    rd.file("model").mkdir()
    (rd.file("model") / "config.json").write_text("{}")
    rd.file("notes.md").write_text("mine")
    rd.file("plots").mkdir()
    (rd.file("plots") / "a.png").write_bytes(b"png")
    assert rd.prepare(resume=False, overwrite=True, same_settings=same) == "new"
    assert _tree(rd.path) == {"notes.md": b"mine", "plots": None, "plots/a.png": b"png"}


def test_what_a_stop_left_of_a_write_is_cleaned_up_and_nothing_else(tmp_path):
    """A SIGKILL inside save_model leaves ``.model-XXXXXXXX/``, one inside an atomic write a
    ``.<file>.XXXXXXXX.tmp<suffix>``: the next command on the run deletes them (ours by their
    names); look-alikes of other names are kept."""
    rd = make(tmp_path, metrics=3, checkpoints={2: True})
    rd.file(".model-ab12_x9z").mkdir()
    (rd.file(".model-ab12_x9z") / "model.safetensors").write_bytes(b"part")
    rd.file(".results.json.k2j4h5g6.tmp.json").write_text("{")
    rd.file(".model-mine").mkdir()  # not save_model's name
    rd.file(".thesis.txt.k2j4h5g6.tmp.txt").write_text("x")
    assert rd.prepare(resume=True, overwrite=False, same_settings=same) == "resume"
    names = sorted(p.name for p in rd.path.iterdir())
    assert ".model-ab12_x9z" not in names and ".results.json.k2j4h5g6.tmp.json" not in names
    assert ".model-mine" in names and ".thesis.txt.k2j4h5g6.tmp.txt" in names


def test_a_folder_holding_only_a_cut_config_write_is_a_new_run(tmp_path):
    """A run killed while writing its first config.json leaves only the writer's temporary
    file: the next run starts there (the folder is not refused as foreign forever)."""
    path = tmp_path / "run"
    path.mkdir()
    (path / ".config.json.a1b2c3d4.tmp.json").write_text('{"sett')
    rd = RunDirectory(path)
    rd.check_not_foreign()
    assert rd.prepare(resume=False, overwrite=False, same_settings=same) == "new"
    assert list(path.iterdir()) == []


def test_a_damaged_first_log_line_is_not_a_run_that_logged_nothing(tmp_path):
    """A run of other settings whose metrics.jsonl has a damaged first line but whole records
    after it logged work: it is refused, not cleared as a run that did nothing."""
    rd = make(tmp_path, metrics=2)
    text = rd.file("metrics.jsonl").read_text()
    rd.file("metrics.jsonl").write_text("garbage\n" + text.split("\n", 1)[1])
    with pytest.raises(ValueError, match="other settings"):
        rd.prepare(resume=False, overwrite=False, same_settings=other)
    assert rd.file("metrics.jsonl").is_file()


# --------------------------------------------------------------------- damaged records on resume

def test_a_damaged_line_before_whole_records_refuses_the_resume(tmp_path):
    rd = make(tmp_path, metrics=3, checkpoints={2: True})
    lines = rd.file("metrics.jsonl").read_text().splitlines(keepends=True)
    rd.file("metrics.jsonl").write_text('{"step": 1, "lo\n' + "".join(lines[1:]))
    before = rd.file("metrics.jsonl").read_bytes()
    with pytest.raises(ValueError) as err:
        rd.check_records({"metrics.jsonl": 2}, "checkpoint-2")
    msg = str(err.value)
    assert f"{rd.file('metrics.jsonl')} line 1 of 3 is not a whole JSON record and 2 line(s) " \
        "follow it" in msg and "\n" not in msg
    assert rd.file("metrics.jsonl").read_bytes() == before


def test_a_last_line_cut_by_the_stop_is_dropped_with_a_line(tmp_path):
    rd = make(tmp_path, metrics=3, checkpoints={2: True})
    cut(rd)
    notes = rd.check_records({"metrics.jsonl": 2}, "checkpoint-2")
    assert notes == ["metrics.jsonl: line 4 of 4 was cut short when the run stopped: dropped"]


def test_records_the_checkpoint_counted_but_the_file_lost_refuse_the_resume(tmp_path):
    rd = make(tmp_path, metrics=2, checkpoints={2: True})
    with pytest.raises(ValueError, match=r"holds 2 whole records, but checkpoint-2 was written "
                                         r"after 5 .records before it are lost"):
        rd.check_records({"metrics.jsonl": 5}, "checkpoint-2")
    assert rd.check_records({"metrics.jsonl": 2}, "checkpoint-2") == []


def test_a_checkpoint_without_a_list_of_files_is_damaged_when_a_state_file_is_empty(tmp_path):
    # a checkpoint written before isotropy_state.pt listed its files: each file the resume
    # reads must be there and hold something (zero bytes passed, then torch.load failed)
    from isotropy.rundir import checkpoint_problem

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    for name in ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (folder / name).write_bytes(b"x" * 10)
    assert checkpoint_problem(folder, None) is None
    for name in ("optimizer.pt", "rng_state.pth"):
        (folder / name).write_bytes(b"")
    assert checkpoint_problem(folder, None) == "optimizer.pt, rng_state.pth are empty"
    # a list of files that is not one is a damaged checkpoint, said so
    assert "not a list of names and sizes" in checkpoint_problem(folder, "not-a-mapping")
    assert "not a list of names and sizes" in checkpoint_problem(folder, {"optimizer.pt": "9"})


def test_a_linked_checkpoint_or_model_folder_is_refused_and_left_whole(tmp_path):
    # an incomplete checkpoint-N that is a link to a folder elsewhere: before, shutil's bare
    # "Cannot call rmtree on a symbolic link"; now one line, and neither link nor target goes
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "optimizer.pt").write_bytes(b"mine")
    rd = make(tmp_path, checkpoints={2: True})
    (rd.path / "checkpoint-3").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="checkpoint-3 is a link to .*elsewhere, not a "
                                         "checkpoint this run wrote; nothing is removed"):
        rd.drop_checkpoints()
    assert (rd.path / "checkpoint-3").is_symlink() and (rd.path / "checkpoint-2").is_dir()
    assert (elsewhere / "optimizer.pt").read_bytes() == b"mine"

    class Saves:
        def save_pretrained(self, path):
            Path(path, "model.safetensors").write_bytes(b"new")

    (rd.path / "model").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="model is a link, not the model folder this run"):
        rd.save_model(Saves(), Saves())
    assert sorted(p.name for p in elsewhere.iterdir()) == ["optimizer.pt"]
    assert not list(rd.path.glob(".model-*"))


def test_reading_a_damaged_record_file_says_so_instead_of_returning_fewer_records(tmp_path):
    # before: read_metrics() gave [] for a file whose first line is damaged, without a word
    rd = make(tmp_path, metrics=2)
    assert [r["step"] for r in rd.read_metrics()] == [1, 2]
    text = rd.file("metrics.jsonl").read_text()
    rd.file("metrics.jsonl").write_text("garbage{\n" + text)
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 1 of 3 is cut short or "
                                         "unreadable"):
        rd.read_metrics()
    rd.file("metrics.jsonl").write_bytes(b'{"step": 1, "note": "caf\xe9"}\n')
    with pytest.raises(ValueError, match="metrics.jsonl: unreadable"):
        rd.read_metrics()


def test_truncating_past_a_damaged_line_with_records_after_it_is_refused(tmp_path):
    # before: every whole record after a damaged first line was deleted without a word; a
    # crash's cut last line is still dropped (a resume redoes that step)
    rd = make(tmp_path, metrics=3)
    path = rd.file("metrics.jsonl")
    whole = path.read_text()
    path.write_text("garbage{\n" + whole)
    with pytest.raises(ValueError, match="line 1 of 4 is damaged and 3 line"):
        rd.truncate_metrics(5)
    assert path.read_text() == "garbage{\n" + whole
    path.write_text(whole + '{"step": 4, "lo')
    rd.truncate_metrics(2)
    assert [r["step"] for r in rd.read_metrics()] == [1, 2]


@pytest.mark.parametrize("name", ["checkpoint-4.bak", "checkpoint-2-before-fix",
                                  "checkpoint-007"])
def test_a_folder_the_trainers_rotation_would_delete_is_refused_before_any_work(tmp_path, name):
    """A user's ``checkpoint-4.bak`` beside a run's checkpoints: transformers' rotation takes
    any folder whose name starts ``checkpoint-<digits>`` for an old checkpoint and deletes it
    (save_total_limit, and at the end of training); so the run is refused up front, and the
    folder is left whole."""
    rd = make(tmp_path, checkpoints={2: True})
    keep = rd.path / name
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"holds {name}/, not a checkpoint a run wrote, which "
                                         "the Trainer's checkpoint rotation would delete"):
        rd.check_not_foreign()
    assert (keep / "notes.txt").read_text() == "mine"
    # the premise: the Trainer's own rule counts it as a checkpoint (transformers >= 5.2)
    trainer_utils = pytest.importorskip("transformers.trainer_utils")
    if hasattr(trainer_utils, "sort_checkpoints"):
        assert str(keep) in trainer_utils.sort_checkpoints(str(rd.path))
    # a name the Trainer passes over, and a file, are no checkpoint of its: the run goes on
    keep.rename(rd.path / "checkpoint-notes")
    (rd.path / "checkpoint-7.txt").write_text("a file")
    rd.check_not_foreign()


def test_a_finished_run_beside_a_users_checkpoint_copy_is_kept_unless_overwritten(tmp_path):
    """A finished run trains nothing and rotates no checkpoint: a user's ``checkpoint-4.bak``
    beside it does not stop the run from being reported finished (it once stopped a whole
    sweep); ``--overwrite`` would train, and is refused with the folder left whole."""
    rd = make(tmp_path, checkpoints={2: True})
    rd.write_results({"final": {}})
    keep = rd.path / "checkpoint-4.bak"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    rd.check_not_foreign()
    with pytest.raises(ValueError, match="holds checkpoint-4.bak/, not a checkpoint a run "
                                         "wrote"):
        rd.check_not_foreign(overwrite=True)
    assert (keep / "notes.txt").read_text() == "mine"
    assert rd.prepare(resume=False, overwrite=False, same_settings=same) == "finished"
    assert (keep / "notes.txt").read_text() == "mine"


def test_a_checkpoint_that_is_a_link_is_refused_before_a_resume_reads_it(tmp_path):
    """``checkpoint-5`` linking to another run's whole checkpoint: a resume would have taken
    it for this run's last one; refused up front, neither link nor target changed."""
    (tmp_path / "other").mkdir()
    other = make(tmp_path / "other", checkpoints={9: True})
    rd = make(tmp_path, checkpoints={2: True})
    (rd.path / "checkpoint-5").symlink_to(other.path / "checkpoint-9")
    assert rd.last_checkpoint() == rd.path / "checkpoint-5"  # what a resume would read
    with pytest.raises(ValueError, match="checkpoint-5 is a link to .*checkpoint-9, not a "
                                         "checkpoint a run wrote"):
        rd.check_not_foreign()
    assert (rd.path / "checkpoint-5").is_symlink()
    assert (other.path / "checkpoint-9" / CHECKPOINT_STATE).is_file()


def test_a_file_or_a_dangling_link_named_like_a_checkpoint_is_refused(tmp_path):
    """A file ``checkpoint-4`` (the Trainer's save at step 4 would fail on it after the work,
    and --overwrite's clearing deleted it as a checkpoint) and a link to nothing."""
    rd = make(tmp_path, checkpoints={2: True})
    (rd.path / "checkpoint-4").write_text("mine")
    with pytest.raises(ValueError, match="holds a file named checkpoint-4, where the Trainer "
                                         "writes the checkpoint of that step"):
        rd.check_not_foreign()
    (rd.path / "checkpoint-4").unlink()
    (rd.path / "checkpoint-6").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match="checkpoint-6 is a link to .*gone, not a checkpoint"):
        rd.check_not_foreign()


def test_the_trainers_rule_reads_the_whole_path(tmp_path):
    """transformers matches ``.*checkpoint-<digits>`` against the folder's whole path: under
    ``.../checkpoint-2024/run`` even ``checkpoint-best/`` would be rotated out."""
    (tmp_path / "checkpoint-2024").mkdir()
    rd = make(tmp_path / "checkpoint-2024", checkpoints={2: True})
    (rd.path / "checkpoint-best").mkdir()
    with pytest.raises(ValueError, match="holds checkpoint-best/, not a checkpoint a run wrote"):
        rd.check_not_foreign()
    trainer_utils = pytest.importorskip("transformers.trainer_utils")
    if hasattr(trainer_utils, "sort_checkpoints"):
        assert str(rd.path / "checkpoint-best") in trainer_utils.sort_checkpoints(str(rd.path))
