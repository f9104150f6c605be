"""``isotropy demo``: ``stability``, ``measure``, then a fine-tuning comparison of the
regularizers."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from isotropy.cli import _checks, measure, stability
from isotropy.cli._common import (
    one_line,
    positive_int,
    positive_number,
    seed_int,
    task_name,
)

__all__ = ["register", "run"]

FILES = ("comparison.csv", "comparison.json", "comparison.md")
DEFAULT_FINETUNE_TASK = "sst2"  # skipped when its files are absent; a task asked for is not


def _demo_source(data_dir: Path | None) -> tuple[dict[str, Any], str]:
    """SST-2 dev from the GLUE directory if present, else the built-in sentences."""
    from isotropy.data.glue import require_split
    from isotropy.probing.inputs import BUILTIN_SENTENCES

    try:
        require_split("sst2", "dev", data_dir)
        return {"task": "sst2", "split": "dev"}, "SST-2 dev"
    except (FileNotFoundError, ValueError):
        label = f"{len(BUILTIN_SENTENCES)} built-in sentences (SST-2 dev not available)"
        return {"texts": list(BUILTIN_SENTENCES)}, label


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    out: Path = args.output_dir
    _checks.check_model(parser, args.model)
    _checks.check_device(parser, args.device)
    _checks.check_data_dir(parser, args.data_dir)
    _checks.check_output_dir(parser, out / "stability", stability.FILES)
    _checks.check_output_dir(parser, out / "measure", measure.FILES)
    if args.no_finetune:  # a setting of the comparison it skips was meant for something
        given = [flag for flag, default in _FINETUNE_DEFAULTS.items()
                 if getattr(args, flag[2:].replace("-", "_")) != default]
        if given:
            parser.error(f"{given[0]} is a setting of the fine-tuning comparison, which "
                         f"--no-finetune skips: leave out one of the two")
    explicit_task = args.finetune_task is not None  # a task asked for must run, not be skipped
    if not explicit_task:
        args.finetune_task = DEFAULT_FINETUNE_TASK
    finetune_problem = None if args.no_finetune else _finetune_problem(args)
    if explicit_task and finetune_problem is not None:
        parser.error(f"--finetune-task {args.finetune_task}: {finetune_problem}")
    if not args.no_finetune and finetune_problem is None:
        _checks.check_output_dir(parser, out / "finetune", FILES)
        from isotropy.models.loading import resolve_model
        from isotropy.paper.demo import check_run_folders
        from isotropy.reporting.folder import folder_problem
        from isotropy.training.model_kind import check_pooling
        from isotropy.training.settings import args_from_dict

        try:  # the four runs' folders and the report's, before stability and measure run
            check_run_folders(out / "finetune", overwrite=bool(args.overwrite))
            problem = folder_problem(out / "finetune" / "report")
            if problem is not None:
                raise ValueError(f"the comparison's report: {problem}")
            iso_args, _ = args_from_dict(_finetune_settings(args, out / "finetune"))
            path = resolve_model(iso_args.model)
            if Path(path).is_dir():  # the comparison's entropy run pools [CLS]
                check_pooling(path, iso_args.pooling, ["entropy"])
        except ValueError as err:
            parser.error(str(err))
    source, label = _demo_source(args.data_dir)
    inputs = _checks.prepare(parser, args, **source)
    t0 = time.perf_counter()
    print(f"== 1/3 stability (I-STAR Figure 2) -> {out / 'stability'}")
    paths = stability.compute(args, out / "stability")
    print(f"\n== 2/3 measure on {label} -> {out / 'measure'}")
    paths_m = measure.compute(args, inputs, out / "measure")
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


# the comparison's own options and their defaults (--no-finetune refuses the others)
_FINETUNE_DEFAULTS: dict[str, Any] = {
    "--finetune-task": None, "--finetune-train-samples": 1000, "--finetune-eval-samples": 500,
    "--finetune-epochs": 2.0, "--overwrite": False}


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
    if report["claims_why_not"] is None:
        paths["claims"] = Path(out / "report" / "claims.md")
        print(f"both papers' claims on these runs (one seed: no verdicts): {paths['claims']}")
    else:
        print(f"  claims.md not written: {report['claims_why_not']}")
    for name, why in report["skipped_figures"]:
        print(f"  not drawn: {name}: {why}")
    return paths


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` command to the subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "demo", prog="isotropy demo", formatter_class=_checks.HelpFormatter,
        help="stability, measure, then a fine-tuning comparison of the regularizers",
        description=_checks.wrap(
            "Run `stability` with its defaults, then `measure` on SST-2 dev from the local "
            "GLUE directory (or, if it is absent, on a built-in list of sentences) with the "
            "default offline model, then a fine-tuning comparison on a subset of SST-2: no "
            "regularizer vs I-STAR (the paper's SST-2 setting, lambda=-5, zeta=0.2) vs CosReg "
            "vs persistent entropy, same "
            "data, seed and optimiser (fp32; skipped when the task's files are absent). "
            "Outputs go to DIR/stability, DIR/measure and DIR/finetune (one run directory per "
            "method, comparison.md/.csv/.json); finished runs are reused unless --overwrite "
            "is given.",
        ),
    )
    measure.add_options(p, demo=True)
    p.add_argument("--seed", type=seed_int, default=0,
                   help="random seed of both experiments (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_demo"), metavar="DIR",
                   help="where the results go: DIR/stability, DIR/measure and DIR/finetune "
                        "(default: %(default)s)")
    p.add_argument("--finetune-task", type=task_name, default=None, metavar="NAME",
                   help=f"task of the fine-tuning comparison (default: {DEFAULT_FINETUNE_TASK}, "
                        "skipped when its files are absent; a task named here that cannot "
                        "run is an error before any work)")
    p.add_argument("--finetune-train-samples", type=positive_int,
                   default=_FINETUNE_DEFAULTS["--finetune-train-samples"], metavar="N",
                   help="seeded subset of the training split (default: %(default)s)")
    p.add_argument("--finetune-eval-samples", type=positive_int,
                   default=_FINETUNE_DEFAULTS["--finetune-eval-samples"], metavar="N",
                   help="seeded subset of the dev split (default: %(default)s)")
    p.add_argument("--finetune-epochs", type=positive_number,
                   default=_FINETUNE_DEFAULTS["--finetune-epochs"], metavar="E",
                   help="epochs of each fine-tuning run (default: %(default)s)")
    p.add_argument("--no-finetune", action="store_true",
                   help="skip the fine-tuning comparison")
    p.add_argument("--overwrite", action="store_true",
                   help="train the comparison's runs again, replacing finished ones in "
                        "DIR/finetune (default: a finished run is reused)")
    p.set_defaults(func=run, subparser=p)
    return p
