"""The command line of ``isotropy train``: one ``transformers.HfArgumentParser`` over
:class:`~isotropy.training.config.IsotropyArguments` and
:class:`~isotropy.training.config.TrainArguments`, so every ``TrainingArguments`` flag keeps
Hugging Face's spelling (``--learning_rate``, ``--bf16``, ...), with one-line errors and a help
that lists our options first."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, NoReturn

from transformers import HfArgumentParser

from isotropy._text import plain_help
from isotropy._validation import accept_negative_numbers
from isotropy.training.config import IsotropyArguments, TrainArguments

__all__ = [
    "HELP_DESCRIPTION",
    "HELP_EXAMPLES",
    "TrainParser",
    "build_parser",
    "check_one_spelling",
]

HELP_DESCRIPTION = """\
Fine-tune an encoder on a GLUE-style task (or SQuAD) with isotropy regularizers.

Every transformers.TrainingArguments option is accepted as a flag in Hugging Face's spelling
(--learning_rate, --per_device_train_batch_size, --bf16, ...). Our own options come first,
under "isotropy options"; the Hugging Face ones follow under "Hugging Face TrainingArguments".
"""

HELP_EXAMPLES = """\
examples:
  isotropy train --task rte --model minilm --regularizer istar --tuning -1 --zeta 0.2 \\
      --output_dir runs/rte-istar
  isotropy train --task mrpc --preset entropy --output_dir runs/mrpc-entropy
  isotropy train --config settings.yaml --output_dir runs/x --resume
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter,
                     argparse.ArgumentDefaultsHelpFormatter):
    """Keep the description's paragraphs; show defaults where argparse knows them."""


class TrainParser(HfArgumentParser):
    """``HfArgumentParser`` whose errors are one line, ``isotropy train: error: ... (see
    isotropy train --help)``, exit status 2, without the usage message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # --learning_rat is an error, as in a sweep spec, never --learning_rate by prefix
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        accept_negative_numbers(self)  # --learning_rate -1e-5 is a value (then refused)

    def format_help(self) -> str:  # descriptions come from docstrings  # noqa: D102
        return plain_help(super().format_help())

    def error(self, message: str) -> NoReturn:  # noqa: D102
        text = " ".join(str(message).split())
        if text.startswith("unrecognized arguments: "):
            import difflib

            flags = [f for f in self._option_string_actions if f.startswith("--")]
            for token in text.split(": ", 1)[1].split():
                close = difflib.get_close_matches(token.split("=")[0], flags, n=1)
                if token.startswith("--") and close:
                    text += f" (did you mean {close[0]}?)"
                    break
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def _say_default(action: argparse.Action) -> None:
    """Append the action's default to its help text (where it has both and the help does not
    show it already), before the default is suppressed."""
    default = action.default
    if any(o.startswith("--no_") or o.startswith("--no-") for o in action.option_strings):
        return  # the negated twin of a flag: its "default" is the flag's, not its own
    if (not action.help or action.help == argparse.SUPPRESS or default is None
            or default is argparse.SUPPRESS or "%(default)" in action.help
            or "default" in action.help.lower()):
        return
    if isinstance(default, (list, tuple)):
        default = " ".join(str(d) for d in default) or "none"
    text = str(default).replace("%", "%%")
    action.help = f"{action.help} (default: {text})"


def build_parser(suppress_defaults: bool = True) -> HfArgumentParser:
    """The ``HfArgumentParser`` of :class:`IsotropyArguments` and :class:`TrainArguments`.

    With ``suppress_defaults`` a parsed namespace holds only the flags given, so a preset and
    a config file can fill in the rest (:func:`isotropy.training.settings.args_from_dict`).
    The help lists our options first (group "isotropy options"), then every
    ``TrainingArguments`` option.
    """
    parser = TrainParser(
        (IsotropyArguments, TrainArguments), prog="isotropy train",
        usage="%(prog)s [--task TASK] [--model MODEL] [--regularizer R ...] [OPTIONS]",
        description=HELP_DESCRIPTION, epilog=HELP_EXAMPLES, formatter_class=_HelpFormatter,
    )
    isotropy_names = {f.name for f in fields(IsotropyArguments)}
    isotropy_group = parser.add_argument_group(
        "isotropy options", "what to fine-tune, on which data, with which regularizers")
    hf = parser.add_argument_group(
        "Hugging Face TrainingArguments",
        "every option of transformers.TrainingArguments; the harness's own defaults are\n"
        "those of --output_dir, --eval_strategy, --save_strategy, --logging_steps,\n"
        "--save_total_limit, --report_to and --logging_dir")
    for action in list(parser._optionals._group_actions):
        if action.dest == "help":
            continue
        parser._optionals._group_actions.remove(action)
        (isotropy_group if action.dest in isotropy_names else hf)._group_actions.append(action)
    if suppress_defaults:
        for action in parser._actions:
            if action.dest != "help":
                _say_default(action)  # --help still shows it
                action.default = argparse.SUPPRESS
    return parser


def check_one_spelling(parser: HfArgumentParser, argv: Sequence[str]) -> None:
    """A usage error (exit status 2) when a setting is given under two of its names, e.g.
    ``--tuning`` and ``--istar_lambda`` (argparse would keep the last one silently)."""
    seen: dict[str, str] = {}
    for token in argv:
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        action = parser._option_string_actions.get(flag)
        if action is None:
            continue
        name = flag[2:].replace("-", "_")
        first = seen.setdefault(action.dest, name)
        if first != name:
            parser.error(f"--{first} and --{name} are the same setting; give one")
