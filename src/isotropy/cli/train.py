"""``isotropy train``: fine-tune an encoder on a GLUE-style task with a regularizer.

Every ``transformers.TrainingArguments`` option is a flag in Hugging Face's spelling
(``--learning_rate``, ``--per_device_train_batch_size``, ``--bf16``, ...), plus ours (``--task``,
``--model``, ``--regularizer``, ...). ``isotropy train --help`` lists them all.

The Trainer's progress bars are shown only when stderr is a terminal, unless
``--disable_tqdm`` is given (on the command line or in the ``--config`` file).
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_train_parser", "bars_only_on_a_terminal", "main", "run_train"]

def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand, with every option of the training parser, to a
    ``subparsers`` object; its handler is :func:`run_train`."""
    from isotropy.training.flags import HELP_DESCRIPTION, HELP_EXAMPLES, build_parser

    p = subparsers.add_parser(
        "train", help="fine-tune an encoder with a regularizer (Hugging Face Trainer)",
        description=HELP_DESCRIPTION, epilog=HELP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for action in build_parser()._actions:
        if action.dest != "help":
            p._add_action(action)
    p.set_defaults(handler=run_train)
    return p


def run_train(args: argparse.Namespace) -> int:
    """Run ``isotropy train`` from the namespace of :func:`add_train_parser`; returns the
    exit code (0 ok, 2 bad input)."""
    return _run(lambda: _from_command_line(vars(args)))


def _from_command_line(given: dict[str, Any]) -> Any:
    """The settings of the flags given, with the progress bars only on a terminal."""
    from isotropy.training.settings import args_from_flags

    return args_from_flags(bars_only_on_a_terminal(given))


def bars_only_on_a_terminal(given: dict[str, Any]) -> dict[str, Any]:
    """The settings given, with ``disable_tqdm`` true when stderr is not a terminal (a log
    file would fill with the Trainer's progress bars) and neither the command line nor the
    ``--config`` file sets it."""
    from isotropy.training.settings import read_config_file

    if "disable_tqdm" in given or sys.stderr.isatty():
        return given
    if given.get("config") and "disable_tqdm" in read_config_file(given["config"]):
        return given
    return {**given, "disable_tqdm": True}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the flags, train, print where the run is; one-line errors."""
    from isotropy.training.flags import build_parser, check_one_spelling

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    check_one_spelling(parser, argv)
    return _run(lambda: _from_command_line(vars(parser.parse_args(argv))))


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NEARLY_FULL = 64 * 2**20  # bytes free below which a failed write is put down to space


def _write_failure(err: BaseException, run_dir: str | None) -> str | None:
    """What could not be written when ``err`` is a write failing for lack of space, else
    ``None``: an ``OSError`` that says so (``ENOSPC``, ``EDQUOT``, ``EFBIG``), safetensors'
    ``SafetensorError`` carrying one of those, or torch's zip writer's ``RuntimeError``
    (``"... unexpected pos ..."``, which does not say why) while the run directory's file
    system is nearly full."""
    import shutil

    from isotropy._validation import one_line

    if isinstance(err, OSError) and err.errno in _DISK_FULL:
        where = f" {err.filename}" if err.filename else ""
        return f"could not write{where}: {err.strerror}"
    text = str(err)
    if type(err).__name__ == "SafetensorError" and any(
            t in text for t in ("os error 28", "os error 27", "os error 122")):
        return f"could not write a weights file ({one_line(text, 200)})"
    # torch's writer says only "unexpected pos" or "failed writing": put down to space only
    # when the run directory's file system is nearly full, never for other errors (memory)
    if run_dir is None or not isinstance(err, RuntimeError) or not any(
            t in text for t in ("unexpected pos", "failed writing", "file write failed")):
        return None
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    if free >= _NEARLY_FULL:
        return None
    return (f"could not write into {run_dir}: its file system is full ({free // 1024} KiB "
            f"free; {type(err).__name__}: {one_line(err, 160)})")


def _run(parse: Any) -> int:
    """Train; SIGINT and SIGTERM, from the first line on, stop the run as Ctrl-C does
    (:func:`isotropy.runtime.stop_on_signals`): one line saying how to continue, status 130
    (SIGINT) or 143 (SIGTERM). SIGUSR1 stops it after a checkpoint written at the end of the
    optimizer step in progress (:func:`isotropy.runtime.checkpoint_on_signal`): one line
    naming it, status 138."""
    from isotropy.runtime import checkpoint_on_signal, stop_on_signals

    with stop_on_signals(), checkpoint_on_signal():
        return _run_stoppable(parse)


def _run_stoppable(parse: Any) -> int:
    import signal

    from isotropy.runtime import StoppedAtCheckpoint, stop_point, stop_requested

    run_dir = None
    try:
        stop_point()  # a Ctrl-C dropped while the modules were imported
        from isotropy.training.run import run_training

        iso_args, train_args = parse()
        run_dir = train_args.output_dir
        result = run_training(iso_args, train_args)
    except StoppedAtCheckpoint as stop:
        print(f"isotropy train: stopped ({signal.Signals(stop.signum).name}) at step "
              f"{stop.step}, after its checkpoint{_resume_hint(run_dir)}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        signum = stop_requested() or signal.SIGINT
        how = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
        print(f"isotropy train: interrupted{how}{_resume_hint(run_dir)}", file=sys.stderr)
        return 128 + signum
    except (ValueError, FileNotFoundError, TypeError) as err:
        print(f"isotropy train: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a write failing for lack of space, whoever raised it
        what = _write_failure(err, run_dir)
        if what is None:
            raise
        print(f"isotropy train: error: {what}; every record written before it is kept"
              f"{_resume_hint(run_dir)}", file=sys.stderr)
        return 1
    final = result.results.get("final", {})
    main_metric = result.results.get("main_metric")
    value = final.get(f"eval_{main_metric}")
    print(f"run directory: {result.run_dir} ({result.status})")
    print(f"{main_metric}: {value}")
    summary = result.results.get("prediction_summary", {})
    if summary.get("collapsed"):
        print("WARNING: the classifier collapsed: every evaluation prediction is one class")
    elif summary.get("near_collapse"):
        print(f"WARNING: the classifier nearly collapsed: "
              f"{100 * summary['majority_fraction']:.1f}% of the evaluation predictions are "
              "one class")
    return 0


def _resume_hint(run_dir: str | None) -> str:
    """How to continue an interrupted run: from its last complete checkpoint, if it has one."""
    if run_dir is None:
        return ""
    from isotropy.rundir import RunDirectory

    rd = RunDirectory(run_dir)
    if rd.finished:
        return f"; {run_dir} holds the finished run"
    last = rd.last_checkpoint()
    if last is None:
        return f"; no checkpoint was written, so the same command starts {run_dir} again"
    return f"; --resume continues {run_dir} from {last.name}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
