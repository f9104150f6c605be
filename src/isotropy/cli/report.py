"""``isotropy report``: the papers' tables, figures and claims from ``isotropy train`` run
directories.

Each argument is a run directory, a sweep output root (its sub-directories are the runs; a
sweep root inside it is expanded too) or a glob of either. Runs are grouped into cells (task x
model x method), seeds aggregated as mean ± sample standard deviation. An argument that is a
folder of sweep roots is reported as a whole, and each of its sweeps also on its own in
sweeps/NAME/ (the same outputs), so that one sweep's tables and figures are not tagged by the
settings that only tell it apart from the others (a glob such as 'runs/*' names the sweep
roots themselves and gets no such sub-reports; two sweeps that would share a name are
refused). A sweep packed as NAME.tar.xz (docs/results/runs/ keeps its sweeps so) reads as the
folder NAME beside it, in arguments and globs alike. Unfinished, unreadable or foreign
directories are skipped and listed in report.md with the reason. The outputs are described in
docs/report.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from isotropy.cli._common import OneLineParser, one_line

__all__ = ["build_parser", "main"]

_EPILOG = """\
outputs (in --output-dir):
  report.md             the tables, the figures and the skipped runs and figures with reasons
  table1.csv            main metric per task x model x method: mean, std, number of seeds
  table2.csv            the best I-STAR lambda and zeta per task x model
  table3.csv            top-3 raw and centred anisotropy spectrum of [CLS], last 30% of training
  pe_table2.csv         main metric averaged over the evaluations of the last 30% of training
  claims.md             both papers' claims per task (paired differences to the base run) and
                        one verdict per claim, where the runs hold their cells (of one
                        protocol: report.md says why not otherwise)
  picks.csv             with --pick-best-over: the setting kept per cell, of how many
  runs.csv              every run used
  figures/*.png, .svg   the figures whose data the runs hold
  sweeps/NAME/          for a folder of sweep roots: each sweep's own report (same files)

examples:
  isotropy report runs/istar-grid
  isotropy report 'runs/rte-*' 'runs/mrpc-*' --output-dir report-glue
  isotropy report runs/entropy-grid --metric-from best
  isotropy report docs/results/runs --output-dir docs/results/report   # a folder of sweeps
  isotropy report runs/istar-tuning \\
      --pick-best-over per_device_train_batch_size,num_train_epochs,learning_rate

exit status: 0 report written, 1 a failure while writing, 2 bad input (nothing written).
"""


class _Parser(OneLineParser):
    """Errors are one line, ``isotropy report: error: ...``, exit status 2."""

    error_prefix = "isotropy report"


def build_parser() -> argparse.ArgumentParser:
    """The ``isotropy report`` argument parser."""
    p = _Parser(prog="isotropy report", description=__doc__, epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="run directories, sweep output roots or globs of them")
    p.add_argument("--output-dir", default="report", metavar="DIR",
                   help="where the report goes (default: %(default)s)")
    p.add_argument("--metric-from", choices=("final", "best"), default="final",
                   help="which evaluation of each run (results.json) the tables use "
                        "(default: %(default)s)")
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    p.add_argument("--pick-best-over", type=_settings, default=(), metavar="SETTING[,SETTING...]",
                   help="settings of a tuning grid (e.g. learning_rate,num_train_epochs): "
                        "within each cell keep only the runs of the value with the best mean "
                        "main metric over seeds (default: keep every setting apart)")
    return p


def _settings(text: str) -> tuple[str, ...]:
    """``--pick-best-over`` as a tuple of setting names, each a setting that tells runs
    apart."""
    from isotropy.reporting.report import COMPARED_SETTINGS

    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not names:
        raise argparse.ArgumentTypeError(
            f"no setting named in {text!r}: give the settings to choose the best run over, "
            f"comma-separated, such as learning_rate,num_train_epochs (one of "
            f"{', '.join(COMPARED_SETTINGS)})")
    unknown = [n for n in names if n not in COMPARED_SETTINGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown)}: not a setting that tells runs apart (one of "
            f"{', '.join(COMPARED_SETTINGS)})")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``isotropy report``; returns the exit status (see the epilog)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    from pathlib import Path

    from isotropy.io import output_dir_problem
    from isotropy.reporting.folder import folder_problem
    from isotropy.reporting.report import collect_runs, expand_inputs, sweeps_inside, write_report

    out = Path(args.output_dir)
    try:
        paths = expand_inputs(args.run_dirs)
        runs, skipped = collect_runs(paths, args.metric_from, args.pick_best_over)
        if not runs:
            first = f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else ""
            raise ValueError(f"no usable run among {len(skipped)} run directories{first}")
        problem = output_dir_problem(out, ["report.md", "claims.md"]) or folder_problem(out)
        if problem is not None:
            raise ValueError(f"--output-dir {out}: {problem}")
        reports = [(out, [str(p) for p in paths])]
        for name, root in sweeps_inside(args.run_dirs):
            where = out / "sweeps" / name
            if not collect_runs(expand_inputs([str(root)]), args.metric_from,
                                args.pick_best_over)[0]:
                stale = " (the report already there is left as it was)" if (
                    where / "report.md").exists() else ""
                print(f"{where}: no finished run in {root}, no report{stale}")
                continue
            problem = output_dir_problem(where, ["report.md", "claims.md"]) or \
                folder_problem(where)
            if problem is not None:
                raise ValueError(f"--output-dir {out}: {problem}")
            reports.append((where, [str(root)]))
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    where = out
    try:
        for where, inputs in reports:
            res = write_report(inputs, where, which=args.metric_from,
                               figures=not args.no_figures, pick_best_over=args.pick_best_over)
            print(f"{len(res['runs'])} runs in {len(res['cells'])} cells, "
                  f"{len(res['skipped'])} skipped; {len(res['files'])} files written to {where}")
            for why in res["refused"].values():
                print(f"  {why}")
            if res["claims_why_not"] is not None:
                print(f"  claims.md not written: {res['claims_why_not']}")
            for name, why in res["skipped_figures"]:
                print(f"  not drawn: {name}: {why}")
    except (OSError, ValueError, RuntimeError) as err:
        print(f"isotropy report: error: writing {where}: {one_line(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
