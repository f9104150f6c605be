"""The persistent-entropy paper's Figs. 1 and 2 from cells (see
:mod:`isotropy.reporting.figures`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from isotropy.reporting.cells import Cell
from isotropy.reporting.plotting import (
    _MARKERS,
    _distinct,
    _new_figure,
    _Skip,
    method_colour,
    metric_label,
)
from isotropy.reporting.runs import LAST_FRACTION

__all__ = [
    "pe_fig2_data",
]


def _pe_fig1(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    series = []
    for c in group:
        if c.method.regularizers not in (("none",), ("entropy",)):
            continue
        logs = [r.spectrum_logs for r in c.runs if r.spectrum_logs]
        if not logs:
            continue
        steps = sorted(set.intersection(*({r["step"] for r in lg} for lg in logs)))
        if steps:
            series.append((c.method, method_colour(c.method), logs, steps))
    if not series:
        raise _Skip("no base or entropy run logged cls_spectrum_* values in metrics.jsonl")
    colours = _distinct([colour for _, colour, _, _ in series], [m for m, _, _, _ in series])
    series = [(m.label, colour, logs, steps)
              for (m, _, logs, steps), colour in zip(series, colours, strict=True)]
    fig, axes = _new_figure(1, 2, sharey=True)
    styles = ("-", "--", ":")
    for j, kind in enumerate(("raw", "centred")):
        ax = axes[0, j]
        for label, colour, logs, steps in series:
            for k in range(3):
                name = f"cls_spectrum_{kind}_{k + 1}"
                vals = np.array([[next(r[name] for r in lg if r["step"] == s) for s in steps]
                                 for lg in logs])
                std = vals.std(axis=0, ddof=1) if len(vals) > 1 else None  # no bars
                ax.errorbar(steps, vals.mean(axis=0), yerr=std, color=colour,
                            linestyle=styles[k], errorevery=max(1, len(steps) // 10),
                            capsize=2, label=f"{label}, σ{k + 1}" if j == 0 else None)
        ax.set(title=f"{kind} spectrum", xlabel="training step (optimizer steps)")
    axes[0, 0].set_ylabel("σ_k² / Σ σ_i² (fraction of variance)")
    fig.suptitle(f"Top-3 anisotropy spectrum of [CLS] over training ({key[0]}, {key[1]})")
    fig.legend(loc="outside lower center", ncols=3, fontsize=7)
    return fig


def pe_fig2_data(group: Sequence[Cell]) -> list[dict[str, Any]]:
    """Fig. 2's numbers for one task x model: per base or entropy cell whose runs logged
    evaluations, ``{"cell", "steps", "mean", "std", "n"}`` over the steps every seed evaluated
    at (:func:`~isotropy.reporting.report.eval_history`); ``std`` is the sample std over
    seeds, ``None`` for one seed."""
    out = []
    for c in group:
        if c.method.regularizers not in (("none",), ("entropy",)):
            continue
        hists = [dict(r.evaluations) for r in c.runs if r.evaluations]
        if not hists:
            continue
        steps = sorted(set.intersection(*(set(h) for h in hists)))
        if not steps:
            continue
        vals = np.array([[h[t] for t in steps] for h in hists])
        out.append({"cell": c, "steps": steps, "mean": vals.mean(axis=0),
                    "std": vals.std(axis=0, ddof=1) if len(hists) > 1 else None,
                    "n": len(hists)})
    return out


def _pe_fig2(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    data = pe_fig2_data(group)
    if not data:
        raise _Skip("no base or entropy run logged evaluations of its main metric in "
                    "metrics.jsonl")
    colours = _distinct([method_colour(d["cell"].method) for d in data],
                        [d["cell"].method for d in data])
    fig, axes = _new_figure()
    ax = axes[0, 0]
    for i, (d, colour) in enumerate(zip(data, colours, strict=True)):
        band = "" if d["std"] is None else " ± 1 std band"
        ax.plot(d["steps"], d["mean"], _MARKERS[i % len(_MARKERS)] + "-", color=colour,
                label=f"{d['cell'].method.label} (mean{band}, n={d['n']})")
        if d["std"] is not None:
            ax.fill_between(d["steps"], d["mean"] - d["std"], d["mean"] + d["std"],
                            color=colour, alpha=0.15, linewidth=0)
    totals = [t for d in data for r in d["cell"].runs if (t := r.total_steps)]
    if totals:
        start = (1.0 - LAST_FRACTION) * max(totals)
        ax.axvspan(start, max(totals), color="#999999", alpha=0.12, linewidth=0,
                   label=f"last {LAST_FRACTION:.0%} of training (Table 2)")
    metric = data[0]["cell"].main_metric
    ax.set(title=f"{metric} over training ({key[0]}, {key[1]})",
           xlabel="training step (optimizer steps)",
           ylabel=metric_label(metric, key[0], "each"))
    ax.legend(fontsize=8)
    return fig
