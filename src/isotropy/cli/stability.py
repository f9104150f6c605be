"""``isotropy stability``: the mini-batch stability of IsoScore* (I-STAR paper, Figure 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from isotropy.cli import _checks
from isotropy.cli._common import positive_int, seed_int

__all__ = ["add_options", "check_args", "compute", "register", "run"]


def add_options(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--sizes", type=_checks.int_list, nargs="+", metavar="N",
                   help="sub-sample sizes, space- or comma-separated (default: "
                        + ", ".join(map(str, DEFAULT_SIZES)) + ")")
    p.add_argument("--zetas", type=_checks.zeta_list, nargs="+", metavar="ZETA",
                   help="shrinkage weights in [0, 1]; 0 is plain IsoScore (default: "
                        + ", ".join(f"{z:g}" for z in DEFAULT_ZETAS) + ")")
    p.add_argument("--shrinkage-points", type=positive_int, default=DEFAULT_SHRINKAGE_POINTS,
                   metavar="N", help="points in the sample S whose covariance is Sigma_S, drawn "
                                     "disjointly from the sub-samples (default: %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS, metavar="R",
                   help="sub-samples per size; mean and std over them (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they show only where stderr is a terminal)")


FILES = ("stability.csv", "stability.json", "stability.png")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.dim < 4:
        parser.error(f"--dim must be >= 4 (the covariance starts 10, 6, 4, 4), got {args.dim}")
    if args.shrinkage_points < 2:
        parser.error("--shrinkage-points must be >= 2")
    if args.repeats < 2:
        parser.error(f"--repeats must be >= 2 (the table shows mean ± std over repeats; one "
                     f"value has no spread), got {args.repeats}")
    from isotropy.paper import stability

    try:  # the rest, and a --dim this machine's memory cannot hold
        stability.check_arguments(
            args.dim, _checks.flatten(args.sizes) or stability.DEFAULT_SIZES,
            _checks.flatten(args.zetas) or stability.DEFAULT_ZETAS, args.shrinkage_points,
            args.repeats)
    except ValueError as err:
        parser.error(str(err))


def compute(args: argparse.Namespace, output_dir: Path) -> dict[str, Path]:
    from isotropy.paper import stability

    sizes = _checks.flatten(getattr(args, "sizes", None)) or list(stability.DEFAULT_SIZES)
    zetas = _checks.flatten(getattr(args, "zetas", None)) or list(stability.DEFAULT_ZETAS)
    dim = getattr(args, "dim", None)
    kwargs: dict[str, Any] = {"sizes": sizes, "zetas": zetas, "seed": args.seed,
                              "progress": not getattr(args, "no_progress", False)}
    if dim is not None:
        kwargs.update(dim=dim, shrinkage_points=args.shrinkage_points, repeats=args.repeats)
    result = stability.run_stability(**kwargs)
    print(f"IsoScore*(X_n, zeta, Sigma_S): mean ± std over {result.repeats} sub-samples per size "
          f"(d = {result.dim}, |S| = {result.shrinkage_points:,}, {result.seconds:.1f} s)")
    print(stability.format_stability_table(result))
    paths = stability.write_stability(result, output_dir)
    _checks.print_paths(paths)
    return paths


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_args(parser, args)
    _checks.check_output_dir(parser, args.output_dir, FILES)
    compute(args, args.output_dir)
    return 0


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``stability`` command to the subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "stability", prog="isotropy stability", formatter_class=_checks.HelpFormatter,
        help="mini-batch stability of IsoScore* (I-STAR paper, Figure 2)",
        description=_checks.wrap(
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
    add_options(p)
    p.add_argument("--seed", type=seed_int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--output-dir", type=Path, default=Path("isotropy_stability"), metavar="DIR",
                   help="where the results go, created if needed (default: %(default)s)")
    p.set_defaults(func=run, subparser=p)
    return p
