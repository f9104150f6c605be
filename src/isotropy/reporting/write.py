"""``isotropy report``'s outputs: ``report.md``, the CSV tables and the figures, written
atomically into one directory (:func:`write_report`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotropy.io import write_csv_atomic, write_text_atomic
from isotropy.reporting.cells import Cell, collect_runs, group_cells, pick_best
from isotropy.reporting.claims import claims_report
from isotropy.reporting.discovery import expand_inputs
from isotropy.reporting.figures import make_figures
from isotropy.reporting.folder import earlier_outputs, finish, folder_problem, record, start
from isotropy.reporting.runs import SPECTRUM_KEYS, Run, _fmt, _num
from isotropy.reporting.tables import (
    _format_note,
    _md_table,
    _pe_table2_md,
    _table1_md,
    _with_setting,
    format_refusals,
    pe_table2_rows,
    setting_tags,
    table1_rows,
    table2_rows,
    table3_rows,
)

__all__ = [
    "write_report",
]


@dataclass
class _Report:
    """What one report is made of: the runs and cells, the tables' rows and the figures drawn."""

    runs: list[Run]
    skipped: list[tuple[str, str]]
    cells: list[Cell]
    which: str
    refused: dict[str, str]
    picks: list[dict[str, Any]]
    pick_best_over: Sequence[str]
    t1: list[dict[str, Any]] = field(default_factory=list)
    t2: list[dict[str, Any]] = field(default_factory=list)
    t3: list[dict[str, Any]] = field(default_factory=list)
    pt2: list[dict[str, Any]] = field(default_factory=list)
    figures: bool = True
    fig_files: list[Path] = field(default_factory=list)
    fig_skipped: list[tuple[str, str]] = field(default_factory=list)
    claims_why_not: str | None = None


def write_report(paths: Sequence[str | os.PathLike[str]], output_dir: str | os.PathLike[str],
                 which: str = "final", figures: bool = True,
                 pick_best_over: Sequence[str] = ()) -> dict[str, Any]:
    """Read the runs (:func:`expand_inputs`), write ``report.md``, ``table1.csv``,
    ``table2.csv``, ``table3.csv``, ``pe_table2.csv``, ``runs.csv`` (and ``picks.csv`` with
    ``pick_best_over``) and the figures (``figures/*.png`` and ``.svg``) into ``output_dir``,
    with ``claims.md`` where the runs hold the cells of a claim of either paper
    (:func:`~isotropy.reporting.claims.claims_markdown`).

    ``pick_best_over``: settings of a tuning grid (e.g. ``learning_rate``); within each cell
    only the runs of the value of best mean main metric are kept (:func:`pick_best`).
    Outputs of :data:`FORMAT_BOUND_OUTPUTS` are not made when the runs' measurement formats
    differ (:func:`format_refusals`).

    The files of an earlier report in ``output_dir`` that this one does not write again are
    removed, and the files written are recorded in its manifest
    (:mod:`isotropy.reporting.folder`).

    Returns ``{"runs", "skipped", "cells", "files", "skipped_figures", "refused", "picks",
    "claims_why_not"}`` (the last ``None`` when ``claims.md`` was written).
    ``ValueError`` when no run is usable or ``output_dir`` holds files that no report wrote
    (:func:`~isotropy.reporting.folder.folder_problem`; nothing is written then).
    """
    if which not in ("final", "best"):
        raise ValueError(f"which must be 'final' or 'best', got {which!r}")
    runs, skipped = collect_runs(expand_inputs(map(str, paths)), which, pick_best_over)
    if not runs:
        first = f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise ValueError(f"no usable run among {len(skipped)} run directories{first}")
    picks: list[dict[str, Any]] = []
    if pick_best_over:
        runs, picks = pick_best(runs, which)
    rep = _Report(runs, skipped, group_cells(runs), which, format_refusals(runs), picks,
                  pick_best_over, figures=figures)
    out = Path(output_dir)
    problem = folder_problem(out)
    if problem is not None:
        raise ValueError(problem)
    earlier = earlier_outputs(out)
    start(out, earlier)
    files = _write_tables(rep, out)
    record(out, earlier, files)  # each group listed once written: a cut leaves them known
    if figures:
        rep.fig_files, rep.fig_skipped = make_figures(rep.cells, out / "figures", which,
                                                      refused=rep.refused)
    files += rep.fig_files
    record(out, earlier, files)
    claims, claims_data, rep.claims_why_not = claims_report(
        rep.cells, which, spectrum=not rep.refused, picked=bool(pick_best_over))
    if claims:
        files.append(write_text_atomic(out / "claims.md", "\n".join([*CLAIMS_HEAD, *claims])
                                       + "\n"))
        files.append(write_text_atomic(out / "claims.json", json.dumps(
            claims_data, indent=1, ensure_ascii=False, allow_nan=False) + "\n"))
        record(out, earlier, files)
    md = [*_md_head(rep), *_md_tables(rep), *_md_claims(rep), *_md_figures(rep), *_md_tail(rep)]
    files.append(write_text_atomic(out / "report.md", "\n".join(md) + "\n"))
    finish(out, earlier, files)  # the earlier report's other files go, the new ones are listed
    return {"runs": runs, "skipped": skipped, "cells": rep.cells, "files": files,
            "skipped_figures": rep.fig_skipped, "refused": rep.refused, "picks": picks,
            "claims_why_not": rep.claims_why_not}


CLAIMS_HEAD = ["# The papers' claims on these runs", "",
               "Generated by `isotropy report`; the rules are in the docstring of "
               "`isotropy.reporting.claims`.", ""]


def _write_tables(rep: _Report, out: Path) -> list[Path]:
    """The tables' rows (kept on ``rep``) and their CSV files, with ``runs.csv``."""
    cells, which = rep.cells, rep.which
    rep.t1, rep.t2 = table1_rows(cells, which), table2_rows(cells, which)
    rep.t3 = [] if "table3" in rep.refused else table3_rows(cells)
    rep.pt2 = pe_table2_rows(cells)
    files: list[Path] = []
    files.append(write_csv_atomic(out / "table1.csv", rep.t1, list(rep.t1[0])))
    t2_fields = ["task", "model", "setting", "metric", "lambda", "zeta", "mean", "std",
                 "n_seeds", "n_istar_cells"]
    files.append(write_csv_atomic(out / "table2.csv", rep.t2, t2_fields))
    t3_fields = ["task", "model", "setting", "method", "n_seeds", "n_no_logs"] + [
        f"{k.removeprefix('cls_spectrum_')}_{s}" for k in SPECTRUM_KEYS for s in ("mean", "std")]
    files.append(write_csv_atomic(out / "table3.csv", rep.t3, t3_fields))
    pt2_fields = ["task", "model", "setting", "method", "metric", "mean", "std", "n_seeds",
                  "seeds", "n_evals", "few_evals", "n_no_evals"]
    files.append(write_csv_atomic(out / "pe_table2.csv", rep.pt2, pt2_fields))
    if rep.pick_best_over:
        files.append(write_csv_atomic(out / "picks.csv", rep.picks, list(rep.picks[0])))
    run_rows = [{"path": str(r.path), "task": r.task, "model": r.model,
                 "setting": r.setting, "method": r.method.label, "seed": r.seed,
                 "metric": r.main_metric, "value": r.value(r.main_metric, which),
                 "measurement_format": r.measurement_format,
                 **({"picked": r.tuned} if rep.pick_best_over else {})} for r in rep.runs]
    files.append(write_csv_atomic(out / "runs.csv", run_rows))
    return files


def _md_head(rep: _Report) -> list[str]:
    """``report.md``'s title, the settings note, the measurement-format line, the refusals
    and the picks."""
    cells = rep.cells
    md = [f"# Report of {len(rep.runs)} runs in {len(cells)} cells",
          "",
          f"Values are the `{rep.which}` evaluation of each run (`results.json`), mean ± sample "
          "standard deviation (ddof=1) over seeds; n = number of seeds.",
          *(["\nSome runs of one task and model differ in settings that define the experiment; "
             "they are kept apart, with the setting in brackets (figure files tagged "
             + "; ".join(f"`{tag}`: `{s}`" for s, tag in setting_tags(cells).items()) + ")."]
            if any(c.setting for c in cells) else []),
          "", *_format_note(rep.runs)]
    if rep.refused:
        md += ["", *(f"- {why}" for why in rep.refused.values())]
    if rep.pick_best_over:
        over = ", ".join(f"`{k}`" for k in rep.pick_best_over)
        md += ["", f"## Settings picked over {over}", "",
               f"Within each cell, the runs that differ only in {over} were compared and the "
               "setting of best mean main metric over seeds kept (greater is better, less for "
               "a loss); every table and figure below uses only the kept runs.", "",
               _md_table(["task", "model", "method", "picked", "metric", "mean", "n",
                          "candidates"],
                         [[p["task"], _with_setting(p["model"], p), p["method"], p["picked"],
                           p["metric"], f"{p['mean']:.4f}", p["n_seeds"], p["n_candidates"]]
                          for p in rep.picks])]
    return md


def _md_tables(rep: _Report) -> list[str]:
    """``report.md``'s four tables."""
    md = ["", "## Table 1: main metric per task, model and method", "", _table1_md(rep.t1), "",
          "## Table 2: best I-STAR λ and ζ per task and model (I-STAR on all layers)", ""]
    if rep.t2:
        md.append(_md_table(
            ["task", "model", "metric", "λ", "ζ", "mean ± std", "n", "I-STAR cells"],
            [[r["task"], _with_setting(r["model"], r),
              r["metric"], _num(r["lambda"]), _num(r["zeta"]),
              _fmt(r["mean"], r["std"]), r["n_seeds"], r["n_istar_cells"]] for r in rep.t2]))
    else:
        md.append("No runs of I-STAR on all layers.")
    md += ["", "## Table 3: top-3 anisotropy spectrum of [CLS], last 30% of training", ""]
    if "table3" in rep.refused:
        md.append(rep.refused["table3"] + ".")
    elif rep.t3:
        md.append(_md_table(
            ["task", "model", "method", "n", *(k.removeprefix("cls_spectrum_")
                                                 for k in SPECTRUM_KEYS)],
            [[r["task"], r["model"], _with_setting(r["method"], r),
              f"{r['n_seeds']}" + (f" ({r['n_no_logs']} run(s) with no log in the window, "
                                   "left out)" if r["n_no_logs"] else ""),
              *(_fmt(r[f"{k.removeprefix('cls_spectrum_')}_mean"],
                     r[f"{k.removeprefix('cls_spectrum_')}_std"], 3) for k in SPECTRUM_KEYS)]
             for r in rep.t3]))
    else:
        md.append("No run logged `cls_spectrum_*` training values in the last 30% of its "
                  "training.")
    md += ["", "## Persistent-entropy Table 2: main metric over the last 30% of training", "",
           "Per run, the main metric averaged over the evaluations of `metrics.jsonl` at steps "
           "≥ 0.7 × the run's training steps (`results.json` `train.global_step`); then mean ± "
           "sample std over seeds. The last column gives the number of evaluations averaged "
           "per run, in seed order.", ""]
    if rep.pt2:
        md.append(_pe_table2_md(rep.pt2))
        few = [r for r in rep.pt2 if r["few_evals"]]
        if few:
            md += ["", f"Note: in {len(few)} of {len(rep.pt2)} cells a run had fewer than 2 "
                   "evaluations in the last 30% of training, so its value is one evaluation, "
                   "not an average (evaluate more often, e.g. `--eval_strategy steps`)."]
    else:
        md.append("No run has evaluations of its main metric in `metrics.jsonl` in the last "
                  "30% of training.")
    return md


def _md_claims(rep: _Report) -> list[str]:
    """``report.md``'s pointer to ``claims.md``, or why there is none."""
    md = ["", "## The papers' claims", ""]
    if rep.claims_why_not is None:
        md.append("Each claim of both papers, per task with seed-paired differences to the base "
                  "run, and one verdict per claim: [`claims.md`](claims.md).")
    else:
        md.append(f"Not measured: {rep.claims_why_not}.")
    return md


def _md_figures(rep: _Report) -> list[str]:
    """``report.md``'s figures and the figures not drawn, with the reasons."""
    if not rep.figures:
        return []
    md = ["", "## Figures", ""]
    for f in rep.fig_files:
        if f.suffix == ".png":
            md.append(f"![{f.stem}](figures/{f.name})")
            md.append("")
    if rep.fig_skipped or rep.refused:
        md += ["Figures not drawn:", ""]
        md += [f"- {rep.refused[name]}" for name in rep.refused if name != "table3"]
        md += [f"- {name}: {why}" for name, why in rep.fig_skipped]
    return md


def _md_tail(rep: _Report) -> list[str]:
    """``report.md``'s runs read in part and skipped run directories."""
    for r in rep.runs:  # read both files of every run, so that every cut is noted
        _ = r.metrics_records, r.measurement_records
    read_in_part = [(r.path, note) for r in rep.runs for note in r.read_notes]
    md: list[str] = []
    if read_in_part:
        md += ["", "## Runs read in part", ""]
        md += [f"- `{p}`: {note}" for p, note in read_in_part]
    md += ["", "## Skipped run directories", ""]
    md += [f"- `{p}`: {why}" for p, why in rep.skipped] if rep.skipped else ["None."]
    return md
