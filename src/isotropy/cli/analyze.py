"""``isotropy analyze MODEL_OR_RUN``: the representation measurements of a checkpoint (an
``isotropy train`` run directory, a local model directory or a hub id, encoder or decoder-only
language model) on a task split: layer-wise IsoScore and IsoScore* (Sigma_S from the task's
training split), TwoNN and average cosine of the pooled cloud, the last layer's anisotropy
spectrum and per-dimension mean/std, effective rank, RankMe and the outlier dimensions of
every published definition. Writes analyze.json, analyze.csv, analyze_dims.csv and the
outlier figure outliers.png to --output-dir and prints a table.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from isotropy.cli import _checks
from isotropy.cli._common import OneLineParser, at_least_two, one_line, positive_int, task_name

__all__ = ["build_parser", "main"]

_EPILOG = """\
pooling (one row per text): cls = first non-padding token (default for encoders), last = last
non-padding token (default for decoder-only models: GPT-2, Llama, ...), mean = mean of the
non-padding tokens. Decoders without a padding token pad with end-of-sequence; positions are
counted over the non-padding tokens, so left and right padding give the same states.

examples:
  isotropy analyze runs/sst2-istar                      # task and data from the run
  isotropy analyze runs/sst2-istar --split train --max-texts 1000
  isotropy analyze path/to/gpt2 --task SST-2 --pooling mean --zeta 0.4
  isotropy analyze bert-base-uncased --task RTE --device cuda

exit status: 0 done, 1 failed while computing, 2 bad input (nothing was computed).
"""


class _Parser(OneLineParser):
    """Errors are one line, ``isotropy analyze: error: ...``, exit status 2."""

    error_prefix = "isotropy analyze"


def _zeta(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"zeta must lie in [0, 1], got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The ``isotropy analyze`` argument parser."""
    from isotropy.probing import analyze as a

    p = _Parser(prog="isotropy analyze", description=__doc__, epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", metavar="MODEL_OR_RUN",
                   help="an isotropy train run directory (its model/ is loaded; task, data "
                        "directory and max length come from its config.json), a model "
                        "directory, or a hub id")
    p.add_argument("--task", type=task_name, metavar="NAME",
                   help="SST-2, QNLI, RTE, MRPC, QQP, CoLA, STS-B, SST-5 or SQuAD (default: "
                        "the run's task; required for a model directory or hub id)")
    p.add_argument("--split", choices=["train", "dev", "test"], default="dev",
                   help="split to measure (default: %(default)s)")
    p.add_argument("--data-dir", type=Path, metavar="DIR",
                   help="GLUE directory, classic glue_data/ layout (default: the run's, else "
                        "$GLUE_DIR, else ../shared/glue_data next to the repository)")
    p.add_argument("--data-source", choices=["local", "hub"], default=None,
                   help="where the task's data comes from (default: the run's, else local)")
    p.add_argument("--max-texts", type=positive_int, default=a.DEFAULT_MAX_TEXTS, metavar="N",
                   help="measure the first N texts of the split (default: %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=a.DEFAULT_BATCH_SIZE,
                   metavar="N", help="texts per forward pass (default: %(default)s)")
    p.add_argument("--max-length", type=positive_int, default=None, metavar="N",
                   help="truncate texts to N tokens, or SQuAD windows of N tokens (default: "
                        "the run's max_seq_length when measuring the run's own task, else "
                        f"{a.DEFAULT_MAX_LENGTH}, {a.DEFAULT_SPAN_MAX_LENGTH} for SQuAD)")
    p.add_argument("--doc-stride", type=positive_int, default=None, metavar="N",
                   help="SQuAD only: context tokens shared by consecutive windows (default: "
                        f"the run's, else {a.DEFAULT_DOC_STRIDE}; max length default "
                        f"{a.DEFAULT_SPAN_MAX_LENGTH})")
    p.add_argument("--zeta", type=_zeta, default=a.DEFAULT_ZETA,
                   help="IsoScore* shrinkage weight; 0 = plain IsoScore, no Sigma_S "
                        "(default: %(default)s)")
    p.add_argument("--shrinkage-tokens", type=at_least_two,
                   default=a.DEFAULT_SHRINKAGE_TOKENS, metavar="N",
                   help="rows of the training split's union of layers 1..L whose covariance "
                        "is Sigma_S (default: %(default)s, as in the I-STAR paper)")
    p.add_argument("--max-tokens", type=positive_int, default=a.DEFAULT_MAX_TOKENS,
                   metavar="N", help="token rows measured per layer, the first ones "
                                     "(default: %(default)s)")
    p.add_argument("--top-k", type=positive_int, default=a.DEFAULT_TOP_K, metavar="K",
                   help="components of the last layer's spectrum (default: %(default)s)")
    p.add_argument("--pooling", choices=["cls", "last", "mean"], default=None,
                   help="row of each text (default: cls for encoders, last for decoders)")
    p.add_argument("--device", default="auto",
                   help="torch device: auto, cpu, cuda, cuda:N (default: %(default)s)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "auto"],
                   default=None,
                   help="the weights' dtype; auto = the checkpoint's own (default: the "
                        "checkpoint's own, half precision loaded as float32; the measures "
                        "accumulate in float32 or wider either way)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_analyze"), metavar="DIR",
                   help="where the results go, created if needed (default: %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``isotropy analyze``; returns the exit status (module doc): bad input
    and ``--help`` return (2, 0) instead of raising ``SystemExit``."""
    try:
        return _main(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2


def _main(argv: Sequence[str] | None) -> int:
    from isotropy.io import earlier_outputs_problem, output_dir_problem
    from isotropy.probing import analyze as a
    from isotropy.probing.inputs import resolve_device

    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        resolve_device(args.device)
    except ValueError as err:
        parser.error(f"--device: {err}")
    _checks.check_data_dir(parser, args.data_dir)
    problem = output_dir_problem(args.output_dir, a.FILES) or earlier_outputs_problem(
        args.output_dir, a.FILES)
    if problem is not None:
        parser.error(f"--output-dir {args.output_dir}: {problem}")
    try:
        inputs = a.prepare_analyze(
            args.checkpoint, task=args.task, split=args.split, data_dir=args.data_dir,
            data_source=args.data_source, max_texts=args.max_texts, max_length=args.max_length,
            zeta=args.zeta, pooling=args.pooling, device=args.device,
            doc_stride=args.doc_stride, dtype=args.dtype)
    except (OSError, ValueError) as err:
        parser.error(str(err))
    try:
        result = a.analyze_model(inputs, batch_size=args.batch_size, zeta=args.zeta,
                                 shrinkage_tokens=args.shrinkage_tokens,
                                 max_tokens=args.max_tokens, top_k=args.top_k,
                                 bar=sys.stderr.isatty(), echo=print)
        cfg = result.config
        sigma = cfg["shrinkage"]
        rows = f", Sigma_S from {sigma['n_rows']:,} training rows" if "n_rows" in sigma else ""
        print(f"{cfg['checkpoint']['model']} ({cfg['architecture']}, {cfg['num_layers']} "
              f"layers, d = {cfg['hidden_size']}); {cfg['n_texts']} texts of {cfg['task']} "
              f"{cfg['split']}, {cfg['n_tokens']:,} tokens; pooling {cfg['pooling']}; zeta "
              f"{cfg['zeta']:g}{rows}; {result.seconds:.1f} s")
        _checks.print_table_and_notes(a.format_analyze_table(result), result.errors,
                                      a.write_analyze(result, args.output_dir))
    except (OSError, ValueError, RuntimeError) as err:
        print(f"isotropy analyze: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("isotropy analyze: interrupted", file=sys.stderr)
        return 130
    return 0
