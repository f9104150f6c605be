"""What differs between the transformers versions we support (>= 4.48, up to 5.x)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import transformers
import transformers.trainer_utils

from isotropy.training import _compat
from isotropy.training.exact_cycle import ExactCycleMixin
from isotropy.training.trainer import IsotropyTrainer

pytestmark = pytest.mark.floor  # run by make test-min too


@pytest.mark.parametrize(("accepts_kwargs", "items", "loss_func", "divisor"), [
    (False, None, None, 4.0),  # the Trainer divides each micro-batch's loss by the steps
    # a model that takes num_items_in_batch but was not given it: from 4.53 on the Trainer
    # divides; before, taking it was enough for no division
    (True, None, None, 4.0 if _compat.TRANSFORMERS_VERSION >= (4, 53) else 1.0),
    (True, 64, None, 1.0),  # scaled by num_items_in_batch in the model
    (False, 64, None, 4.0),
    (False, None, object(), 1.0),  # a compute_loss_func scales it
])
def test_loss_divisor_without_loss_is_scaled_for_ga(monkeypatch, accepts_kwargs, items,
                                                    loss_func, divisor):
    """``Trainer.loss_is_scaled_for_ga`` exists from transformers 5.20 on only (on 5.17 the
    exact entropy cycle raised AttributeError): without it, the divisor follows the rule of
    the older ``training_step`` (divide unless the model took ``num_items_in_batch`` or a
    ``compute_loss_func`` is set)."""
    monkeypatch.delattr(transformers.Trainer, "loss_is_scaled_for_ga", raising=False)
    trainer = object.__new__(IsotropyTrainer)
    trainer.model_accepts_loss_kwargs = accepts_kwargs
    trainer._cycle_items = items
    trainer.compute_loss_func = loss_func
    trainer.current_gradient_accumulation_steps = 4
    assert not hasattr(trainer, "loss_is_scaled_for_ga")
    assert trainer._loss_divisor() == divisor


# ---------------------------------------------------------------- isotropy.training._compat


class _Recorder:
    """A ``Trainer`` stand-in: the arguments, the state and the method calls the shims use."""

    def __init__(self, **attrs):
        self.args = SimpleNamespace(save_total_limit=2, gradient_accumulation_steps=4)
        self.state = SimpleNamespace(best_model_checkpoint=None)
        self.calls = []
        self.__dict__.update(attrs)

    def _rotate_checkpoints(self, use_mtime=False, output_dir=None):
        self.calls.append(("_rotate_checkpoints", use_mtime, output_dir))


def test_rotation_uses_the_function_of_transformers_5_2_where_there_is_one(monkeypatch):
    seen = []
    monkeypatch.setattr(transformers.trainer_utils, "rotate_checkpoints",
                        lambda **kw: seen.append(kw), raising=False)
    trainer = _Recorder()
    trainer.state.best_model_checkpoint = "run/checkpoint-2"
    _compat.rotate_checkpoints(trainer, "run")
    assert seen == [{"output_dir": "run", "save_total_limit": 2,
                     "best_model_checkpoint": "run/checkpoint-2", "use_mtime": False}]
    assert trainer.calls == []


def test_rotation_before_transformers_5_2_is_the_trainers_own_method(monkeypatch):
    """``transformers.trainer_utils.rotate_checkpoints`` is new in 5.2 (importing it broke
    every ``Trainer`` of the package on 4.x and 5.0-5.1)."""
    monkeypatch.delattr(transformers.trainer_utils, "rotate_checkpoints", raising=False)
    trainer = _Recorder()
    _compat.rotate_checkpoints(trainer, "run")
    assert trainer.calls == [("_rotate_checkpoints", False, "run")]


def test_accumulation_steps_of_a_trainer_without_the_current_count():
    """``current_gradient_accumulation_steps`` is new in transformers 4.55: before, the
    ``Trainer`` divides by ``args.gradient_accumulation_steps``."""
    assert _compat.accumulation_steps(_Recorder()) == 4
    assert _compat.accumulation_steps(_Recorder(current_gradient_accumulation_steps=3)) == 3


@pytest.mark.parametrize(("version", "items", "scaled"), [
    ((4, 52), None, True),  # 4.48-4.52: a model taking loss kwargs is never divided
    ((4, 52), 64, True),
    ((4, 53), None, False),  # from 4.53: divided unless it was given num_items_in_batch
    ((4, 53), 64, True),
])
def test_loss_scaled_for_accumulation_follows_the_versions_rule(monkeypatch, version, items,
                                                                 scaled):
    """The rule of each version's ``Trainer.training_step`` for a model that takes loss
    kwargs (``loss_is_scaled_for_ga`` absent: transformers < 5.20)."""
    monkeypatch.setattr(_compat, "TRANSFORMERS_VERSION", version)
    trainer = _Recorder(model_accepts_loss_kwargs=True, compute_loss_func=None)
    assert _compat.loss_scaled_for_accumulation(trainer, items) is scaled


def test_version_strings_of_releases_and_previews():
    assert _compat._version("4.48.0") == (4, 48)
    assert _compat._version("5.0.0.dev0") == (5, 0)
    assert _compat._version("4.57.0rc1") == (4, 57)


class _OldBase:
    """The ``Trainer`` methods of transformers 4.48-4.49, whose signatures the overrides meet:
    ``get_batch_samples`` without the device, ``_maybe_log_save_evaluate`` without the
    learning rate."""

    def __init__(self):
        self.calls = []

    def get_batch_samples(self, epoch_iterator, num_batches):
        return [next(epoch_iterator) for _ in range(num_batches)], None

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, epoch,
                                 ignore_keys_for_eval, start_time):
        self.calls.append(start_time)


def test_the_exact_cycle_takes_the_batches_of_an_older_trainer():
    class Old(ExactCycleMixin, _OldBase):
        model = None
        args = SimpleNamespace(gradient_accumulation_steps=2)

    batches, items = Old().get_batch_samples(iter([{"a": 1}, {"a": 2}, {"a": 3}]), 2)
    assert (batches, items) == ([{"a": 1}, {"a": 2}], None)


def test_the_isotropy_trainer_passes_an_older_trainers_arguments_on(monkeypatch):
    calls = []
    monkeypatch.setattr(
        transformers.Trainer, "get_batch_samples",
        lambda self, it, n: ([next(it) for _ in range(n)], None))
    monkeypatch.setattr(
        transformers.Trainer, "_maybe_log_save_evaluate",
        lambda self, tr_loss, grad_norm, model, trial, epoch, ignore, start_time:
        calls.append(start_time))
    trainer = object.__new__(IsotropyTrainer)
    trainer.model, trainer.args = None, SimpleNamespace(gradient_accumulation_steps=1,
                                                        eval_strategy="no", eval_delay=0)
    trainer.state = SimpleNamespace(global_step=1, epoch=0.5, max_steps=10)
    trainer.control = SimpleNamespace(should_save=False, should_evaluate=False,
                                      should_log=False, should_training_stop=False)
    trainer._deferred_save_step, trainer._ended_before_epoch = None, False
    assert trainer.get_batch_samples(iter([1, 2, 3]), 2) == ([1, 2], None)
    trainer._maybe_log_save_evaluate(0.0, None, None, None, 0, None, 12.5)
    assert calls == [12.5] and trainer._unlogged_loss is None


def test_group_by_length_is_one_flag_that_reaches_the_trainers_sampler(tmp_path):
    """``--group_by_length`` of ``isotropy train`` on every version (on transformers 4.x,
    ``TrainingArguments`` has a flag of that name too: the parser could not be built), and
    the ``Trainer`` then draws length-grouped batches."""
    from _models import tiny_bert
    from transformers import BertForSequenceClassification, Trainer
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from isotropy.training.settings import parse_train_args

    _, args = parse_train_args(["--output_dir", str(tmp_path / "run"), "--group_by_length",
                                "--report_to", "none", "--use_cpu", "--eval_strategy", "no"])
    rows = [{"input_ids": [1] * n, "labels": 0} for n in (3, 9, 5, 7)]
    trainer = Trainer(model=tiny_bert(BertForSequenceClassification, vocab_size=16),
                      args=args, train_dataset=rows)
    assert isinstance(trainer._get_train_sampler(), LengthGroupedSampler)


@pytest.mark.parametrize("is_field", [True, False])
def test_group_by_length_sets_what_each_version_reads(monkeypatch, is_field):
    monkeypatch.setattr(_compat, "GROUP_BY_LENGTH_IS_A_TRAINING_ARGUMENT", is_field)
    args = SimpleNamespace()
    _compat.group_by_length(args)
    assert vars(args) == ({"group_by_length": True} if is_field
                          else {"train_sampling_strategy": "group_by_length"})
