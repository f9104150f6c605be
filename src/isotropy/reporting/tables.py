"""Cells -> the papers' tables (rows for CSV, text for Markdown)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from isotropy.reporting.cells import Cell
from isotropy.reporting.runs import (
    FORMAT_BOUND_OUTPUTS,
    LAST_FRACTION,
    MEASUREMENT_FORMATS,
    SPECTRUM_KEYS,
    TABLE1_METRICS,
    Run,
    _fmt,
    mean_std,
    tail_evaluations,
)

__all__ = [
    "format_refusals",
    "pe_table2_rows",
    "setting_tags",
    "spectrum_tail_means",
    "table1_metrics",
    "table1_rows",
    "table2_rows",
    "table3_rows",
]

# --------------------------------------------------------------------------- tables


def table1_metrics(cell: Cell) -> list[str]:
    """The metrics Table 1 reports for ``cell``: its main metric, then the others the I-STAR
    paper's Table 1 gives for the task (:data:`TABLE1_METRICS`: SQuAD F1 and EM)."""
    return list(dict.fromkeys([cell.main_metric, *TABLE1_METRICS.get(cell.task, ())]))


def table1_rows(cells: Sequence[Cell], which: str = "final") -> list[dict[str, Any]]:
    """Table 1: mean and sample std over seeds per cell and reported metric
    (:func:`table1_metrics`; one row each, the main metric first; a metric no run of the cell
    recorded is left out)."""
    rows = []
    for c in cells:
        for metric in table1_metrics(c):
            st = c.stat(metric, which)
            if st is None:
                assert metric != c.main_metric  # load_run checked it
                continue
            seeds = [r.seed for r in c.runs if r.value(metric, which) is not None]
            rows.append({"task": c.task, "model": c.model, "setting": c.setting,
                         "method": c.method.label, "metric": metric, "mean": st[0],
                         "std": st[1], "n_seeds": st[2], "seeds": " ".join(map(str, seeds))})
    return rows


def table2_rows(cells: Sequence[Cell], which: str = "final") -> list[dict[str, Any]]:
    """Table 2: per task x model, the global I-STAR cell (regularizer istar alone, on all
    layers) of highest mean main metric (the first in λ, ζ order on a tie)."""
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
        if c.method.regularizers == ("istar",) and c.method.get("istar_layers") == "all":
            groups.setdefault((c.task, c.model, c.setting), []).append(c)
    rows = []
    for (task, model, setting), group in groups.items():
        stats = [c.stat(c.main_metric, which) for c in group]
        i = max(range(len(group)), key=lambda j: (stats[j][0], -j))  # type: ignore[index]
        c, st = group[i], stats[i]
        assert st is not None
        rows.append({"task": task, "model": model, "setting": setting,
                     "metric": c.main_metric,
                     "lambda": c.method.get("istar_lambda"), "zeta": c.method.get("istar_zeta"),
                     "mean": st[0], "std": st[1], "n_seeds": st[2],
                     "n_istar_cells": len(group)})
    return rows


def spectrum_tail_means(logs: Sequence[Mapping[str, float]], total_steps: float | None = None,
                        fraction: float = LAST_FRACTION) -> dict[str, float] | None:
    r"""Mean of each ``cls_spectrum_*`` value over the logs of the last ``fraction`` of training:
    steps :math:`t \ge (1-f)\,T`, :math:`T` the run's ``total_steps`` (the window of
    :func:`~isotropy.reporting.runs.tail_evaluations`), else the last logged step. A training
    log holds the mean over the steps since the previous log, so the window's first log also
    covers a few steps before :math:`(1-f)\,T`.

    >>> logs = [{"step": s, **{k: s for k in SPECTRUM_KEYS}} for s in (110, 120, 130, 170)]
    >>> spectrum_tail_means(logs, 174)["cls_spectrum_raw_1"]  # steps >= 121.8: 130 and 170
    150.0
    >>> spectrum_tail_means(logs)["cls_spectrum_raw_1"]  # steps >= 119: 120, 130 and 170
    140.0
    """
    if not logs or (total_steps is not None and total_steps <= 0):
        return None
    t_max = max(r["step"] for r in logs) if total_steps is None else total_steps
    tail = [r for r in logs if r["step"] >= (1.0 - fraction) * t_max]
    if not tail:
        return None
    return {k: float(np.mean([r[k] for r in tail])) for k in SPECTRUM_KEYS}


def pe_table2_rows(cells: Sequence[Cell],
                   fraction: float = LAST_FRACTION) -> list[dict[str, Any]]:
    r"""Persistent-entropy paper, Table 2: per run, the main metric averaged over its
    evaluations in the last ``fraction`` of training (steps :math:`t \ge 0.7\,T`, :math:`T`
    the run's training steps, :attr:`Run.total_steps`); then mean and sample std of those
    averages over seeds, per cell.

    ``n_evals`` lists the evaluations used per run (in seed order); ``few_evals`` is true when
    a run used fewer than 2 (its average is one evaluation); ``n_no_evals`` counts the runs
    with none in the window (left out). Cells none of whose runs has one are left out."""
    rows = []
    for c in cells:
        used: list[tuple[int, float, int]] = []  # (seed, average, number of evaluations)
        missing = 0
        for r in c.runs:
            total = r.total_steps
            tail = tail_evaluations(r.evaluations, total, fraction) if total else []
            if tail:
                used.append((r.seed, float(np.mean(tail)), len(tail)))
            else:
                missing += 1
        if not used:
            continue
        m, s = mean_std([u[1] for u in used])
        rows.append({"task": c.task, "model": c.model, "setting": c.setting,
                     "method": c.method.label, "metric": c.main_metric, "mean": m, "std": s,
                     "n_seeds": len(used), "seeds": " ".join(str(u[0]) for u in used),
                     "n_evals": " ".join(str(u[2]) for u in used),
                     "few_evals": any(u[2] < 2 for u in used), "n_no_evals": missing})
    return rows


def format_refusals(runs: Sequence[Run]) -> dict[str, str]:
    """The outputs of :data:`FORMAT_BOUND_OUTPUTS` that ``runs`` cannot make, with the one-line
    reason: all of them when the runs' measurement formats differ, none otherwise."""
    formats = sorted({r.measurement_format for r in runs})
    if len(formats) < 2:
        return {}
    which = " and ".join(f"format {f} ({MEASUREMENT_FORMATS[f]})" for f in formats)
    return {name: f"{what} not drawn: runs of measurement {which} cannot be pooled; report "
                  "them separately"
            for name, what in FORMAT_BOUND_OUTPUTS.items()}


def _format_note(runs: Sequence[Run]) -> list[str]:
    """``report.md``'s line on the runs' measurement format."""
    formats = sorted({r.measurement_format for r in runs})
    if len(formats) > 1:
        counts = ", ".join(f"{sum(r.measurement_format == f for r in runs)} of format {f}"
                           for f in formats)
        return [f"Measurement formats differ ({counts}): outputs built from per-layer "
                "IsoScore* or the training [CLS] spectrum are not made (listed below); Table 1, "
                "Table 2, the persistent-entropy Table 2 and Figs. 3, 4, 5, 7, 8 (union "
                "IsoScore* and task metrics, which mean the same in every format) pool them."]
    if formats == [1]:
        return ["Measurement format 1 (all runs): per-layer IsoScore* (Fig. 6, "
                "`eval_isoscore_star_{cls,token}_layer*`, `eval_isoscore_star_last`) was shrunk "
                "toward the union-of-layers Σ_S, not each layer's own, and the training [CLS] "
                "spectrum (Table 3, persistent-entropy Fig. 1) was taken per micro-batch, not "
                "over the gradient-accumulation cycle; these values are not comparable with "
                "runs of format 2."]
    return [f"Measurement format {formats[0]} (all runs): "
            f"{MEASUREMENT_FORMATS[formats[0]]}."]


def table3_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Table 3 (persistent-entropy paper): top-3 raw and centred anisotropy spectrum of [CLS],
    averaged over the logs of the last 30% of each seed's training steps
    (:func:`spectrum_tail_means`), then mean and sample std over seeds. ``n_no_logs``: the
    runs that logged a spectrum, but none in that window (left out); cells with no run left
    are left out."""
    rows = []
    for c in cells:
        per_seed = [m for r in c.runs
                    if (m := spectrum_tail_means(r.spectrum_logs, r.total_steps)) is not None]
        if not per_seed:
            continue
        no_logs = sum(1 for r in c.runs if r.spectrum_logs) - len(per_seed)
        row: dict[str, Any] = {"task": c.task, "model": c.model, "setting": c.setting,
                               "method": c.method.label, "n_seeds": len(per_seed),
                               "n_no_logs": no_logs}
        for k in SPECTRUM_KEYS:
            m, s = mean_std([p[k] for p in per_seed])
            short = k.removeprefix("cls_spectrum_")
            row[f"{short}_mean"], row[f"{short}_std"] = m, s
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- markdown


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def esc(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(esc, header)) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def _with_setting(text: str, row: Mapping[str, Any]) -> str:
    """``text`` with the row's setting in brackets, when it has one."""
    return text + (f" [{row['setting']}]" if row["setting"] else "")


def _table1_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """One pivot per model: methods as rows, tasks (metrics) as columns, cells mean ± std (n);
    a task of several metrics (SQuAD F1 / EM) shows them in one cell, ``–`` for one no run
    recorded."""
    parts = []
    for model in dict.fromkeys(r["model"] for r in rows):
        sub = [r for r in rows if r["model"] == model]
        metrics: dict[str, list[str]] = {}
        for r in sub:
            ms = metrics.setdefault(r["task"], [])
            if r["metric"] not in ms:
                ms.append(r["metric"])
        for task, ms in metrics.items():  # SQuAD's EM shown as "–" where no run recorded it
            ms += [m for m in TABLE1_METRICS.get(task, ()) if m not in ms]
        methods = list(dict.fromkeys(_with_setting(r["method"], r) for r in sub))
        found = {(_with_setting(r["method"], r), r["task"], r["metric"]): r for r in sub}
        header = [f"{t} ({' / '.join(ms)})" for t, ms in metrics.items()]
        parts.append(f"Model `{model}`:\n\n" + _md_table(
            ["method", *header],
            [[m, *(_table1_cell([found.get((m, t, k)) for k in ms]) for t, ms in metrics.items())]
             for m in methods]))
    return "\n\n".join(parts)


def _table1_cell(got: Sequence[Mapping[str, Any] | None]) -> str:
    """``mean ± std / mean ± std (n=...)`` of one method and task, ``–`` for an absent metric."""
    if not any(got):
        return "–"
    ns = list(dict.fromkeys(r["n_seeds"] for r in got if r))
    return (" / ".join("–" if r is None else _fmt(r["mean"], r["std"]) for r in got)
            + f" (n={'/'.join(map(str, ns))})")


def _pe_table2_md(rows: Sequence[Mapping[str, Any]]) -> str:
    """The persistent-entropy Table 2 as one table, a mark on rows with a run of fewer than 2
    evaluations in the window."""
    return _md_table(
        ["task", "model", "method", "metric", "mean ± std", "n", "evaluations per run"],
        [[r["task"], r["model"], _with_setting(r["method"], r), r["metric"],
          _fmt(r["mean"], r["std"]), r["n_seeds"],
          r["n_evals"] + (" (a run has fewer than 2)" if r["few_evals"] else "")
          + (f"; {r['n_no_evals']} run(s) with none, left out" if r["n_no_evals"] else "")]
         for r in rows])


def setting_tags(cells: Sequence[Cell]) -> dict[str, str]:
    """A short tag per setting of ``cells`` (``s1``, ``s2``, ... in sorted order) for figure
    file names and titles; ``report.md`` lists what each stands for."""
    return {s: f"s{i}" for i, s in enumerate(sorted({c.setting for c in cells if c.setting}), 1)}
