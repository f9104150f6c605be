r"""The papers' figures from grouped runs (:class:`~isotropy.reporting.report.Cell`).

Every figure is :data:`FIGSIZE` inches at :data:`DPI` (PNG and SVG, one file per task x model),
titled, with labelled axes (units included: SQuAD's EM/F1 in percent, correlations in [-1, 1],
other metrics as fractions), a legend, colour-blind-safe colours, and the mean over seeds with
the sample standard deviation over seeds as error bars (none for one seed). A figure whose data
the runs do not hold is skipped with the reason.

* ``fig3``: IsoScore* of the evaluation set (union of the layers' token clouds) vs the main
  metric, one point per I-STAR λ, one series per training ζ (I-STAR Fig. 3). IsoScore* must
  have been measured with one ζ in every run (``--measure_zeta``; Figs. 3 and 6 are skipped
  otherwise).
* ``fig4``: mean activation per dimension of the last layer's token cloud, base vs CosReg vs
  I-STAR λ=+1 and λ=-1 (Fig. 4).
* ``fig5`` / ``fig6``: TwoNN of [CLS] / IsoScore* of the token cloud per layer, from the last
  ``measurements.jsonl`` record (Figs. 5, 6).
* ``fig7``: main metric vs ζ, one line per λ, the best ζ marked by a dashed line (Fig. 7).
* ``fig8``: main metric of I-STAR applied to one layer (``--istar_layers N``, ``-1`` or
  ``last``), against that layer, one line per (λ, ζ), with I-STAR on all layers at the same λ
  and ζ as a dashed line with a band of ± one std, and the unregularized base as a dotted line
  (Fig. 8). Runs on a list of layers appear in Table 1 only.
* ``pe_fig1``: top-3 raw and centred anisotropy spectrum of [CLS] over training steps, base vs
  entropy with and without feature selection (persistent-entropy paper, Fig. 1).
* ``pe_fig2``: the main metric of every evaluation over training steps, base vs entropy with
  and without feature selection, the mean over seeds with a band of ± one sample std (none for
  one seed); the last 30% of training (persistent-entropy Table 2's window) shaded
  (persistent-entropy paper, Fig. 2).

Figs. 6 and ``pe_fig1`` are not drawn from runs of different measurement formats
(:func:`isotropy.reporting.report.format_refusals`; ``make_figures(refused=...)``).

For Figs. 4-6 an I-STAR λ is shown at its best ζ (highest mean main metric). A method keeps its
colour in every figure of a task x model (:func:`method_colour`): base black, CosReg green,
entropy with feature selection blue and with all bars orange (Okabe-Ito), I-STAR by its λ on
the diverging map PuOr (:func:`lambda_colour`: λ < 0 orange, λ > 0 purple, darker for larger
|λ|) in Figs. 4-8; Fig. 3's ζ series use the sequential map cividis. Two series of one figure
do not share a colour while the spare colours last.

The figures live in :mod:`~isotropy.reporting.istar_figures` and
:mod:`~isotropy.reporting.entropy_figures` on the shared parts of
:mod:`~isotropy.reporting.plotting`; this module lists them (:data:`FIGURES`) and draws them
(:func:`make_figures`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from isotropy.reporting.cells import Cell
from isotropy.reporting.entropy_figures import _pe_fig1, _pe_fig2, pe_fig2_data
from isotropy.reporting.istar_figures import _fig3, _fig4, _fig5, _fig6, _fig7, _fig8, fig8_data
from isotropy.reporting.plotting import (
    DPI,
    ENTROPY_COLOURS,
    FIGSIZE,
    OKABE_ITO,
    _groups,
    _save,
    _Skip,
    lambda_colour,
    method_colour,
    metric_label,
)
from isotropy.reporting.tables import setting_tags

__all__ = [
    "DPI",
    "ENTROPY_COLOURS",
    "FIGSIZE",
    "FIGURES",
    "OKABE_ITO",
    "fig8_data",
    "lambda_colour",
    "make_figures",
    "method_colour",
    "metric_label",
    "pe_fig2_data",
]

FIGURES: dict[str, tuple[str, Callable[..., Any]]] = {
    "fig3": ("I-STAR Fig. 3, IsoScore* vs task metric across λ", _fig3),
    "fig4": ("I-STAR Fig. 4, mean activation per dimension", _fig4),
    "fig5": ("I-STAR Fig. 5, TwoNN of [CLS] per layer", _fig5),
    "fig6": ("I-STAR Fig. 6, IsoScore* per layer", _fig6),
    "fig7": ("I-STAR Fig. 7, metric vs ζ", _fig7),
    "fig8": ("I-STAR Fig. 8, I-STAR on one layer vs all layers", _fig8),
    "pe_fig1": ("persistent-entropy Fig. 1, [CLS] spectrum over training", _pe_fig1),
    "pe_fig2": ("persistent-entropy Fig. 2, task metric over training", _pe_fig2),
}


def make_figures(cells: Sequence[Cell], out_dir: str | Path, which: str = "final",
                 refused: Mapping[str, str] | None = None
                 ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Draw every figure of every task x model (x setting, when runs differ in other
    settings: tagged ``s1``, ``s2``, ... by :func:`setting_tags`) into ``out_dir``
    (``NAME_TASK_MODEL[_sN].png`` and ``.svg``), except those named in ``refused`` (name ->
    reason, given once by the caller); returns the files and the skipped figures as
    ``(name, reason)``."""
    out = Path(out_dir)
    files: list[Path] = []
    skipped: list[tuple[str, str]] = []
    settings = setting_tags(cells)
    for (task, model, setting), group in _groups(cells).items():
        shown = f"{model}, {settings[setting]}" if setting else model
        slug = f"_{settings[setting]}" if setting else ""
        for name, (title, draw) in FIGURES.items():
            if refused and name in refused:
                continue
            stem = f"{name}_{task}_{model}{slug}"
            try:
                fig = draw((task, shown), group, which)
            except _Skip as why:
                skipped.append((f"{stem} ({title})", str(why)))
                continue
            files += _save(fig, out / stem)
    return files, skipped
