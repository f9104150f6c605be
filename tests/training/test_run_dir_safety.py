"""``isotropy train`` never changes a folder that is not a run of ours, and never resumes from
a damaged checkpoint or drops whole records silently: each case is one line, before any
work, and nothing in the folder changes."""

from __future__ import annotations

import json
import shutil

import pytest
from _models import save_tiny_bert
from _training import WORDS, write_sst2
from _training import Crash as _Crash
from _training import run_train as _run
from _training import train_argv as _argv

from isotropy.cli.train import main as train_main


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), WORDS)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return write_sst2(tmp_path_factory.mktemp("glue"), [("train", 16), ("dev", 8)], 0)


def _tree(root):
    """Every path under ``root`` with its bytes (folders as None), but the run directory's own
    lock file, which every command on the folder takes (and stamps with its start) first."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if p.name != ".isotropy-run.lock"}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


# --------------------------------------------------------------------------- foreign folders

def _thesis(path):
    path.mkdir()
    (path / "config.json").write_text('{"title": "thesis"}')
    (path / "thesis.txt").write_text("years of work")
    (path / "data").mkdir()
    (path / "data" / "a.csv").write_text("x,y\n1,2\n")


def _model_copy(path, model):
    shutil.copytree(model, path)
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
@pytest.mark.parametrize("kind", ["thesis", "model copy", "finished run's model"])
def test_train_refuses_a_folder_that_is_not_a_run_before_any_work(
        tiny_model_dir, glue_dir, tmp_path, capsys, monkeypatch, kind, flags):
    """A folder with someone's config.json, a copy of a model folder, or a finished run's
    ``model/`` as --output_dir: one line, exit 2, before the data or model is loaded, and every
    file is as it was (these were deleted with "held an unfinished run without a complete
    checkpoint: starting it again")."""
    import isotropy.training.run as run_module

    out = tmp_path / "out"
    if kind == "thesis":
        _thesis(out)
    elif kind == "model copy":
        _model_copy(out, tiny_model_dir)
    else:
        finished = tmp_path / "finished"
        _run(_argv(tiny_model_dir, glue_dir, finished, "--task", "sst2",
                   "--num_train_epochs", "1"))
        out = finished / "model"
    before = _tree(out)

    def no_work(*args, **kwargs):
        raise AssertionError("the inputs were loaded")

    monkeypatch.setattr(run_module, "_load_inputs", no_work)
    assert train_main([*_argv(tiny_model_dir, glue_dir, out, "--task", "sst2"), *flags]) == 2
    err = _one_line_error(capsys)
    assert f"output directory {out} holds no run of isotropy: its config.json is not a run's " \
        "record" in err
    assert _tree(out) == before


# ------------------------------------------------------------------------ damaged checkpoints

def _crashed(model, glue, out):
    """A run stopped after step 3: checkpoint-2 complete, 3 training logs."""
    argv = _argv(model, glue, out, "--task", "sst2", "--save_strategy", "steps",
                 "--save_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size",
                 "4")
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(argv, callbacks=[_Crash(3)])
    assert (out / "checkpoint-2" / "isotropy_state.pt").is_file()
    return argv


def _cut(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    # what is done to checkpoint-2, and what the one line says
    "scheduler removed": (lambda cp: (cp / "scheduler.pt").unlink(),
                          "scheduler.pt is missing"),
    "rng state removed": (lambda cp: (cp / "rng_state.pth").unlink(),
                          "rng_state.pth is missing"),
    "optimizer cut short": (lambda cp: _cut(cp / "optimizer.pt"),
                            "optimizer.pt holds"),
    "isotropy state cut short": (lambda cp: _cut(cp / "isotropy_state.pt"),
                                 "isotropy_state.pt is damaged"),
    "trainer state removed": (lambda cp: (cp / "trainer_state.json").unlink(),
                              "trainer_state.json is missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_with_one_line(tiny_model_dir, glue_dir, tmp_path,
                                                       capsys, damage):
    """A complete checkpoint that lost a file or had one cut short after it was written: the
    resume is refused with one line naming the file and what to do, and nothing changes
    (a resume without scheduler.pt restarted the learning-rate schedule, one without
    rng_state.pth drew other random numbers; a cut optimizer.pt or isotropy_state.pt was a
    traceback)."""
    out = tmp_path / "run"
    argv = _crashed(tiny_model_dir, glue_dir, out)
    cp = out / "checkpoint-2"
    harm, says = DAMAGE[damage]
    harm(cp)
    before = _tree(out)
    code = train_main([*argv, "--resume"])
    err = _one_line_error(capsys)
    assert code == 2, err
    assert says in err
    assert f"cannot resume from checkpoint-2: delete {cp} to resume from the checkpoint " \
        "before it, or pass --overwrite to start again" in err
    assert _tree(out) == before


def test_a_checkpoint_list_of_files_detects_what_a_fixed_list_would_miss(tiny_model_dir,
                                                                         glue_dir, tmp_path,
                                                                         capsys):
    """The checkpoint's own list of files (sizes kept in isotropy_state.pt): a cut
    trainer_state.json is named too."""
    out = tmp_path / "run"
    argv = _crashed(tiny_model_dir, glue_dir, out)
    state = out / "checkpoint-2" / "trainer_state.json"
    state.write_text(state.read_text()[:-10])
    assert train_main([*argv, "--resume"]) == 2
    assert "trainer_state.json holds" in _one_line_error(capsys)


def test_a_damaged_log_line_before_whole_records_refuses_the_resume(tiny_model_dir, glue_dir,
                                                                   tmp_path, capsys):
    """Line 1 of metrics.jsonl unparseable with the intact step-2 record after it: one line
    naming the file and line (both were dropped silently)."""
    out = tmp_path / "run"
    argv = _crashed(tiny_model_dir, glue_dir, out)
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    assert json.loads(lines[1])["step"] == 2
    metrics.write_text("{not json\n" + "".join(lines[1:]))
    before = _tree(out)
    assert train_main([*argv, "--resume"]) == 2
    err = _one_line_error(capsys)
    assert f"{metrics} line 1 of {len(lines)} is not a whole JSON record" in err
    assert _tree(out) == before


@pytest.mark.slow
def test_an_undamaged_checkpoint_resumes(tiny_model_dir, glue_dir, tmp_path):
    """The control: the same crash resumes (and a last line cut by the stop is dropped with a
    line saying so)."""
    out = tmp_path / "run"
    argv = _crashed(tiny_model_dir, glue_dir, out)
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "lo')
    res = _run([*argv, "--resume"])
    assert res.status == "trained"
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[:2] == [1, 2] and steps == sorted(steps)


@pytest.mark.parametrize("made", [False, True], ids=["missing", "empty"])
def test_resume_of_a_folder_without_a_run_says_it_starts_a_new_one(tiny_model_dir, glue_dir,
                                                                   tmp_path, capsys, made):
    """``--resume`` where no run is (a mistyped --output_dir): the run starts from scratch
    and says so in one line, rather than looking like the run that was meant."""
    out = tmp_path / "run"
    if made:
        out.mkdir()
    argv = [*_argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                   "--max_train_samples", "8", "--max_eval_samples", "8"), "--resume"]
    assert train_main(argv) == 0
    said = capsys.readouterr().out
    assert f"--resume: {out} holds no run to continue: starting a new one" in said
    assert (out / "results.json").is_file()
    assert train_main(argv) == 0  # now finished: nothing is said of a new run
    assert "holds no run to continue" not in capsys.readouterr().out


def test_a_finished_run_beside_a_users_folder_named_like_a_checkpoint(tiny_model_dir,
                                                                      glue_dir, tmp_path,
                                                                      capsys):
    """``checkpoint-4.bak`` (a user's copy) in a finished run's folder: the run is kept and
    reported finished (nothing trains, nothing is rotated); ``--overwrite`` would train and
    rotate it away, so it is refused before any work, the copy left whole."""
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                 "--max_train_samples", "8", "--max_eval_samples", "8")
    assert train_main(argv) == 0
    keep = out / "checkpoint-4.bak"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert train_main(argv) == 0
    assert "holds this run, finished" in capsys.readouterr().out
    assert train_main([*argv, "--overwrite"]) == 2
    assert "holds checkpoint-4.bak/, not a checkpoint a run wrote" in capsys.readouterr().err
    assert (keep / "notes.txt").read_text() == "mine" and (out / "results.json").is_file()


@pytest.mark.parametrize("where", ["model/my_results.txt", "model/plots/p.png",
                                   "checkpoint-1/mynote.txt", "tensorboard/notes.md"])
def test_overwrite_never_deletes_a_users_file_inside_the_runs_own_folders(
        tiny_model_dir, glue_dir, tmp_path, capsys, where):
    """A user's file put inside ``model/``, a checkpoint or ``tensorboard/`` of a finished
    run: ``--overwrite`` (which deletes those folders) is refused before any work, naming
    it, and nothing changes; once it is moved out, the run is replaced."""
    out = tmp_path / "run"
    argv = _argv(tiny_model_dir, glue_dir, out, "--task", "sst2", "--num_train_epochs", "1",
                 "--max_train_samples", "8", "--max_eval_samples", "8",
                 "--save_total_limit", "2")
    assert train_main(argv) == 0
    mine = out / where
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert train_main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert f"it holds {where}, a file no run wrote, inside a folder a run deletes or " \
        f"replaces ({where.split('/')[0]}/): move it out first" in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    mine.unlink()
    assert train_main([*argv, "--overwrite"]) == 0
