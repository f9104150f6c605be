"""``isotropy train`` refuses settings and damaged files before any work, with one line that
names the setting or the file: a logging integration that is not there, a best-model metric
no evaluation records, a run's unreadable ``config.json``, a checkpoint's unreadable
``trainer_state.json``; a full disk while appending a record names the file."""

from __future__ import annotations

import errno
import json
import pathlib

import pytest
from _models import save_tiny_bert
from _training import WORDS, Crash, run_train, train_argv, write_sst2

from isotropy.cli.train import _write_failure
from isotropy.cli.train import main as train_main
from isotropy.data.glue import get_task
from isotropy.rundir import RunDirectory
from isotropy.training.preconditions import check_best_metric
from isotropy.training.settings import parse_train_args


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread avoids oversubscription."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), WORDS)


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_sst2(tmp_path_factory.mktemp("glue"), [("train", 16), ("dev", 8)], seed=0)


def test_report_to_an_integration_that_is_not_installed(tmp_path, monkeypatch, capsys):
    import transformers.integrations as hf_integrations

    monkeypatch.setattr(hf_integrations, "get_available_reporting_integrations", lambda: [])
    out = tmp_path / "run"
    argv = train_argv("unused-model", tmp_path, out)
    argv[argv.index("--report_to") + 1] = "wandb"
    assert train_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("isotropy train: error: --report_to wandb: the wandb integration is "
                          "not available here") and "\n" not in err
    assert not out.exists()  # nothing loaded, nothing written


def test_report_to_a_name_that_is_no_integration(tmp_path):
    argv = train_argv("unused-model", tmp_path, tmp_path / "run")
    argv[argv.index("--report_to") + 1] = "tensorbord"
    with pytest.raises(ValueError, match=r"--report_to tensorbord: not a logging integration "
                                         r"of transformers \(one of: none, all, .*tensorboard"):
        parse_train_args(argv)


@pytest.mark.parametrize("metric", ["foo", "eval_foo", "isoscore_star_cls_layer3",
                                    "pearson"])
def test_a_best_model_metric_no_evaluation_records(metric):
    from types import SimpleNamespace as NS

    args = NS(metric_for_best_model=metric)
    with pytest.raises(ValueError, match=rf"--metric_for_best_model {metric}: no evaluation "
                                         "of SST-2 records it"):
        check_best_metric(args, get_task("sst2"), NS(num_hidden_layers=2))


@pytest.mark.parametrize("metric", ["accuracy", "eval_accuracy", "loss", "eval_loss",
                                    "isoscore_star_union", "isoscore_star_cls_layer2",
                                    "twonn_cls_layer0", "majority_fraction", None])
def test_best_model_metrics_an_evaluation_records(metric):
    from types import SimpleNamespace as NS

    check_best_metric(NS(metric_for_best_model=metric), get_task("sst2"),
                      NS(num_hidden_layers=2))


def test_a_best_model_metric_is_checked_before_the_run_directory(model_dir, glue, tmp_path):
    out = tmp_path / "run"
    argv = train_argv(model_dir, glue, out, "--task", "sst2", "--metric_for_best_model", "acuracy",
                      "--load_best_model_at_end", "true")
    with pytest.raises(ValueError, match=r"--metric_for_best_model acuracy: .* \(did you mean "
                                         r"accuracy\?\)"):
        run_train(argv)
    assert not out.exists()


def test_an_unreadable_run_record_is_named(model_dir, glue, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{\n")
    (out / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError) as err:
        run_train(train_argv(model_dir, glue, out, "--task", "sst2"))
    # the run directory is not recognised as a run of ours: refused, naming the file and why
    assert str(err.value).startswith(f"output directory {out} holds no run of isotropy: its "
                                     "config.json is not a run's record (it is not readable "
                                     "JSON (")
    assert "line 2 column 1" in str(err.value) and "nothing in it is changed" in str(err.value)
    assert (out / "config.json").read_text() == "{\n"


def test_an_unreadable_trainer_state_is_named_before_resuming(model_dir, glue, tmp_path):
    out = tmp_path / "run"
    argv = train_argv(model_dir, glue, out, "--task", "sst2", "--save_strategy", "steps",
                      "--save_steps", "1", "--save_total_limit", "2")
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_train(argv, callbacks=[Crash(at=2)])
    last = RunDirectory(out).last_checkpoint()
    assert last is not None
    (last / "trainer_state.json").write_text("\n")
    with pytest.raises(ValueError) as err:
        run_train([*argv, "--resume"])
    # the checkpoint's own list of files finds it first (its size differs from the one saved)
    assert str(err.value).startswith(f"checkpoint {last} is damaged: trainer_state.json")
    assert f"delete {last} to resume from the checkpoint before it" in str(err.value)
    assert "\n" not in str(err.value)
    assert last.is_dir()  # nothing deleted


def test_a_full_disk_while_appending_metrics_names_the_file(tmp_path, monkeypatch):
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    run.append_metrics({"step": 1, "loss": 0.5})
    real_open = pathlib.Path.open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_open(self, mode="r", *args, **kwargs):
        f = real_open(self, mode, *args, **kwargs)
        return Full(f) if "a" in mode else f

    monkeypatch.setattr(pathlib.Path, "open", full_open)
    with pytest.raises(OSError) as err:
        run.append_metrics({"step": 2, "loss": 0.4})
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC
    assert _write_failure(err.value, str(run.path)) == (
        f"could not write {run.path / 'metrics.jsonl'}: No space left on device")
    assert [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()] \
        == [{"step": 1, "loss": 0.5}]


def test_save_best_without_evaluations_is_refused(tmp_path):
    argv = train_argv("unused-model", tmp_path, tmp_path / "run", "--save_strategy", "best",
                      "--eval_strategy", "no", "--metric_for_best_model", "accuracy")
    with pytest.raises(ValueError, match="--eval_strategy no never evaluates: no checkpoint "
                                         "would be written"):
        parse_train_args(argv)
