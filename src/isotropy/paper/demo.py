"""Fine-tune one model with each regularizer on the same data and compare the results.

:func:`run_comparison` trains one run per method with :func:`isotropy.training.run.run_training`
(same data subset, seed and optimiser settings; only the regularizer differs) and tabulates,
per method, the task's main metric, the evaluation set's IsoScore* of the last layer and of the
union of layers (:math:`\\zeta` and :math:`\\Sigma_S` from the training data), TwoNN of the
last layer's [CLS] cloud, and whether the classifier collapsed (every evaluation prediction
one class). Each run keeps its own run directory, so an interrupted comparison resumes and a
finished run is reused, not retrained.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotropy.io import write_csv_atomic, write_json_atomic, write_text_atomic
from isotropy.training.run import run_training
from isotropy.training.settings import args_from_dict

__all__ = [
    "DEMO_METHODS",
    "ComparisonResult",
    "comparison_row",
    "format_comparison_table",
    "run_comparison",
    "write_comparison",
]

# method name -> the settings of `isotropy train` that select it (I-STAR at the paper's setting
# for SST-2, lambda = -5, zeta = 0.2, so that the demo's claims.md can speak to C1; CosReg
# lambda = 1; persistent entropy beta = 1 with feature selection)
DEMO_METHODS: dict[str, dict[str, Any]] = {
    "none": {"regularizer": ["none"]},
    "istar (lambda=-5, zeta=0.2)": {"regularizer": ["istar"], "tuning": -5.0, "zeta": 0.2},
    "cosreg (lambda=1)": {"regularizer": ["cosreg"], "cosreg_tuning": 1.0},
    "entropy (beta=1)": {"regularizer": ["entropy"], "entropy_weight": 1.0,
                         "select_features": True},
}

COLUMNS = ("method", "metric", "value", "isoscore_star_last", "isoscore_star_union",
           "twonn_cls_last", "collapsed", "majority_fraction", "train_seconds", "run_dir")


@dataclass
class ComparisonResult:
    """One row per method (see :data:`COLUMNS`) and the shared settings."""

    rows: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)


def _slug(method: str) -> str:
    return method.split(" ")[0]


def _number(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def comparison_row(method: str, run_dir: Path, results: Mapping[str, Any]) -> dict[str, Any]:
    """The table row of one finished run from its ``results.json`` content.

    >>> row = comparison_row("none", Path("r"), {"main_metric": "accuracy", "final": {
    ...     "eval_accuracy": 0.8, "eval_isoscore_star_last": 0.1}, "prediction_summary":
    ...     {"collapsed": False, "majority_fraction": 0.6}, "train": {"train_runtime": 9.5}})
    >>> row["value"], row["isoscore_star_last"], row["twonn_cls_last"], row["collapsed"]
    (0.8, 0.1, None, False)
    """
    final = results.get("final", {})
    metric = str(results.get("main_metric", ""))
    summary = results.get("prediction_summary", {})
    return {
        "method": method, "metric": metric,
        "value": _number(final.get(f"eval_{metric}")),
        "isoscore_star_last": _number(final.get("eval_isoscore_star_last")),
        "isoscore_star_union": _number(final.get("eval_isoscore_star_union")),
        "twonn_cls_last": _number(final.get("eval_twonn_cls_last")),
        "collapsed": bool(summary.get("collapsed", False)),
        "majority_fraction": _number(summary.get("majority_fraction")),
        "train_seconds": _number(results.get("train", {}).get("train_runtime")),
        "run_dir": str(run_dir),
    }


def check_run_folders(output_dir: str | Path,
                      methods: Mapping[str, Mapping[str, Any]] = DEMO_METHODS, *,
                      overwrite: bool = False) -> None:
    """``ValueError`` (one line) when a method's run folder ``output_dir/<method>`` holds
    something that is not a run of ours
    (:meth:`~isotropy.rundir.RunDirectory.check_not_foreign`); changes nothing."""
    from isotropy.rundir import RunDirectory

    for method in methods:
        RunDirectory(Path(output_dir) / _slug(method)).check_not_foreign(overwrite=overwrite)


def run_comparison(
    output_dir: str | Path,
    *,
    base: Mapping[str, Any],
    methods: Mapping[str, Mapping[str, Any]] = DEMO_METHODS,
    echo: Callable[[str], None] = print,
) -> ComparisonResult:
    """Train ``base`` settings (``isotropy train`` flag names -> values) once per method,
    each in ``output_dir/<method>``; returns the table. Every run's settings and folder
    (:func:`check_run_folders`) are checked before the first one starts."""

    out = Path(output_dir)
    parsed = []
    for method, extra in methods.items():
        settings = {**base, **extra, "output_dir": str(out / _slug(method))}
        parsed.append((method, *args_from_dict(settings)))
    check_run_folders(out, methods)
    rows = []
    for i, (method, iso_args, train_args) in enumerate(parsed, 1):
        echo(f"-- run {i}/{len(parsed)}: {method}")
        t0 = time.perf_counter()
        result = run_training(iso_args, train_args, echo=echo)
        row = comparison_row(method, result.run_dir, result.results)
        note = "reused a finished run" if result.status == "finished" else (
            f"{time.perf_counter() - t0:.0f} s")
        echo(f"   {row['metric']} {_fmt(row['value'])}, IsoScore* union "
             f"{_fmt(row['isoscore_star_union'])} ({note})")
        rows.append(row)
    return ComparisonResult(rows, {"base": dict(base), "methods": {
        k: dict(v) for k, v in methods.items()}})


def _fmt(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_comparison_table(result: ComparisonResult) -> str:
    """A Markdown table; a collapsed classifier is flagged in its own column."""
    metric = result.rows[0]["metric"] if result.rows else "metric"
    lines = [
        f"| method | {metric} | IsoScore* last layer | IsoScore* union | TwoNN [CLS] last "
        "| collapsed classifier |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        flag = "no"
        if r["collapsed"]:
            flag = "**YES: every prediction is one class**"
        elif r["majority_fraction"] is not None and r["majority_fraction"] >= 0.95:
            flag = f"nearly ({r['majority_fraction']:.1%} one class)"
        lines.append(f"| {r['method']} | {_fmt(r['value'])} | {_fmt(r['isoscore_star_last'])} "
                     f"| {_fmt(r['isoscore_star_union'])} | {_fmt(r['twonn_cls_last'], 1)} "
                     f"| {flag} |")
    return "\n".join(lines)


def write_comparison(result: ComparisonResult, output_dir: str | Path,
                     notes: Sequence[str] = ()) -> dict[str, Path]:
    """``comparison.csv``, ``comparison.json`` and ``comparison.md`` (the table and notes),
    each written atomically."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = "# Fine-tuning comparison\n\n" + format_comparison_table(result) + "\n"
    if notes:
        md += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return {
        "csv": write_csv_atomic(out / "comparison.csv", result.rows, fieldnames=list(COLUMNS)),
        "json": write_json_atomic(out / "comparison.json",
                                  {"rows": result.rows, "settings": result.settings}),
        "md": write_text_atomic(out / "comparison.md", md),
    }
