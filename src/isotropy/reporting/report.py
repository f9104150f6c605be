r"""Tables and figures of the papers from finished ``isotropy train`` run directories.

The steps live in :mod:`~isotropy.reporting.runs` (a run directory),
:mod:`~isotropy.reporting.cells` (runs -> cells), :mod:`~isotropy.reporting.tables` and
:mod:`~isotropy.reporting.figures` (cells -> outputs), :mod:`~isotropy.reporting.claims`
(cells -> each paper's claims, with verdicts) and :mod:`~isotropy.reporting.write`
(the report directory); this module gathers their public names.

:func:`collect_runs` reads run directories (a directory holding ``config.json`` is a run; any
other directory is a sweep root whose sub-directories are runs) and keeps the finished, readable
ones; every other one is listed with the reason it was skipped. Runs are grouped into *cells*
(task x model x method, the method being the regularizers with their parameters), seeds
aggregated: a cell's value is the mean :math:`\bar x = \frac1n\sum_i x_i` and the sample
standard deviation :math:`s = \sqrt{\frac{1}{n-1}\sum_i (x_i-\bar x)^2}` over its seeds
(undefined, left empty, for one seed).

:func:`write_report` writes ``report.md`` and the CSV tables (Table 1: main metric per cell,
SQuAD's F1 and EM; Table 2: the best global I-STAR :math:`\lambda, \zeta` per task and model;
Table 3: the top-3 anisotropy spectrum of [CLS] over the last 30% of training; the
persistent-entropy paper's Table 2: the main metric averaged over the evaluations in the last
30% of training), the figures (:mod:`isotropy.reporting.figures`) and ``claims.md``
(:func:`claims_markdown`: both papers' claims, per task and per claim).

Every run has a *measurement format* (:func:`measurement_format`, :data:`MEASUREMENT_FORMATS`):
outputs built from per-layer IsoScore* or from the training spectrum
(:data:`FORMAT_BOUND_OUTPUTS`) are not made when the runs' formats differ.
"""

from isotropy.reporting.cells import Cell, collect_runs, group_cells, lower_is_better, pick_best
from isotropy.reporting.claims import claim_verdict, claims_markdown
from isotropy.reporting.discovery import expand_inputs, sweeps_inside
from isotropy.reporting.runs import (
    COMPARED_SETTINGS,
    FORMAT_BOUND_OUTPUTS,
    LAST_FRACTION,
    MEASUREMENT_FORMATS,
    SPECTRUM_KEYS,
    Method,
    Run,
    eval_history,
    load_run,
    mean_std,
    measurement_format,
    method_of,
    read_jsonl_whole,
    tail_evaluations,
)
from isotropy.reporting.tables import (
    format_refusals,
    pe_table2_rows,
    setting_tags,
    table1_rows,
    table2_rows,
    table3_rows,
)
from isotropy.reporting.write import write_report

__all__ = [
    "COMPARED_SETTINGS",
    "FORMAT_BOUND_OUTPUTS",
    "LAST_FRACTION",
    "MEASUREMENT_FORMATS",
    "SPECTRUM_KEYS",
    "Cell",
    "Method",
    "Run",
    "claim_verdict",
    "claims_markdown",
    "collect_runs",
    "eval_history",
    "expand_inputs",
    "format_refusals",
    "group_cells",
    "load_run",
    "lower_is_better",
    "mean_std",
    "measurement_format",
    "method_of",
    "pe_table2_rows",
    "pick_best",
    "sweeps_inside",
    "read_jsonl_whole",
    "setting_tags",
    "table1_rows",
    "table2_rows",
    "table3_rows",
    "tail_evaluations",
    "write_report",
]
