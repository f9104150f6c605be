"""SIGINT and SIGTERM stop a command as Ctrl-C does, at any moment of its start-up
(:func:`isotropy.runtime.stop_on_signals`): a ``KeyboardInterrupt`` that Python drops because
it was raised inside a finalizer is recorded and raised again at the next safe point."""

from __future__ import annotations

import gc
import os
import signal
import sys

import pytest

from isotropy.runtime import stop_on_signals, stop_point, stop_requested


class _SignalledInFinalizer:
    """Delivers ``sig`` to this process while its finalizer runs (as a Ctrl-C landing while
    the ``regex`` module's objects are collected during start-up)."""

    def __init__(self, sig: int = signal.SIGINT) -> None:
        self.sig = sig

    def __del__(self) -> None:
        os.kill(os.getpid(), self.sig)
        for _ in range(3):  # the handler runs at the next bytecode boundary, in this frame
            pass


def _drop_in_finalizer(sig: int = signal.SIGINT) -> None:
    obj = _SignalledInFinalizer(sig)
    del obj
    gc.collect()


@pytest.fixture
def unraisable(monkeypatch):
    """The exceptions Python drops (``sys.unraisablehook``), recorded instead of printed."""
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    return seen


def test_python_drops_a_keyboard_interrupt_raised_in_a_finalizer(unraisable):
    """Why the record is needed: under Python's own handler the interrupt is only printed."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    _drop_in_finalizer()  # no exception reaches here
    assert [type(e) for e in unraisable] == [KeyboardInterrupt]


def test_a_dropped_interrupt_is_raised_again_at_the_next_stop_point(unraisable):
    with stop_on_signals():
        _drop_in_finalizer()
        assert stop_requested() == signal.SIGINT
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            stop_point()
    assert unraisable == []  # recorded, not printed
    assert stop_requested() is None
    stop_point()  # outside the block: nothing recorded, nothing raised


def test_sigterm_and_an_ignored_sigint_stop_inside_and_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"), stop_on_signals():
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt, match="SIGINT"), stop_on_signals():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
    finally:
        signal.signal(signal.SIGINT, before[signal.SIGINT])


def test_train_stops_on_a_ctrl_c_dropped_while_loading_its_inputs(tmp_path, monkeypatch,
                                                                   capsys, one_thread,
                                                                   unraisable):
    """``isotropy train`` with a Ctrl-C landing in a finalizer while the tokenizer and data
    load: exit 130 with the one line of Ctrl-C, and no training (it trained to the end and
    exited 0)."""
    from _models import save_tiny_bert
    from _training import WORDS, train_argv, write_sst2

    import isotropy.training.run as run_module
    from isotropy.cli.train import main as train_main

    model = save_tiny_bert(tmp_path / "bert", WORDS)
    glue = write_sst2(tmp_path / "glue", [("train", 8), ("dev", 8)], 0)
    load = run_module._load_inputs

    def load_with_a_dropped_ctrl_c(*args, **kwargs):
        inputs = load(*args, **kwargs)
        _drop_in_finalizer()
        return inputs

    monkeypatch.setattr(run_module, "_load_inputs", load_with_a_dropped_ctrl_c)
    out = tmp_path / "run"
    code = train_main([*train_argv(model, glue, out), "--task", "sst2"])
    err = capsys.readouterr().err
    assert code == 130, err
    assert err.strip().splitlines()[-1].startswith("isotropy train: interrupted")
    assert unraisable == []
    assert not (out / "metrics.jsonl").exists() and not (out / "results.json").exists()
