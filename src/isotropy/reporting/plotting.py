"""What every figure of ``isotropy report`` shares: size and resolution, the colour of each
method (fixed per task x model, colour-blind safe), axis labels with units, error bars over
seeds, saving PNG and SVG atomically, and the grouping of cells per task x model."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotropy.io import atomic_path
from isotropy.reporting.cells import Cell
from isotropy.reporting.runs import Method, mean_std

__all__ = [
    "BASE_COLOUR",
    "COSREG_COLOUR",
    "DPI",
    "ENTROPY_COLOURS",
    "FIGSIZE",
    "OKABE_ITO",
    "lambda_colour",
    "method_colour",
    "metric_label",
]

FIGSIZE = (8.0, 5.0)
DPI = 100
# Okabe & Ito (2008), colour-blind safe; black last
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7", "#F0E442",
             "#000000")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


class _Skip(Exception):
    """The data of a figure is absent."""


BASE_COLOUR, COSREG_COLOUR = "#000000", "#009E73"
ENTROPY_COLOURS = {True: "#0072B2", False: "#E69F00"}  # with / without feature selection
# for further variants (another CosReg λ, entropy β, combinations): unused by the above
_SPARE = ("#CC79A7", "#56B4E9", "#F0E442", "#D55E00", "#999999", "#882255", "#44AA99",
          "#117733", "#332288", "#AA4499")


def lambda_colour(lam: float, lambdas: Sequence[float]) -> str:
    """The colour of I-STAR λ among ``lambdas`` on the colour-blind-safe diverging map PuOr:
    λ < 0 (less isotropy) in oranges, λ > 0 (more isotropy) in purples, darker for larger |λ|
    (by rank among the λ of the same sign); λ = 0 grey.

    >>> lambda_colour(-1, [-3, -1, 1]) != lambda_colour(-3, [-3, -1, 1])
    True
    """
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    if lam == 0:
        return "#999999"
    same = sorted({abs(v) for v in lambdas if (v < 0) == (lam < 0) and v != 0} | {abs(lam)})
    t = same.index(abs(lam)) / (len(same) - 1) if len(same) > 1 else 0.5
    pos = 0.22 - 0.22 * t if lam < 0 else 0.78 + 0.22 * t  # the map's pale middle left out
    return str(to_hex(colormaps["PuOr"](pos)))


def method_colour(method: Method, lambdas: Sequence[float] = ()) -> str:
    """The colour of ``method`` in every figure: base black, CosReg green, entropy with
    feature selection blue and with all bars orange, I-STAR alone by its λ
    (:func:`lambda_colour` among ``lambdas``); anything else the first spare colour
    (:func:`_distinct` keeps colours within one figure apart).

    >>> from isotropy.reporting.report import method_of
    >>> method_colour(method_of({"regularizer": ["none"]}))
    '#000000'
    >>> method_colour(method_of({"regularizer": ["entropy"], "entropy_weight": 1,
    ...                          "select_features": False}))
    '#E69F00'
    """
    regs = method.regularizers
    if regs == ("none",):
        return BASE_COLOUR
    if regs == ("cosreg",):
        return COSREG_COLOUR
    if regs == ("entropy",) and not method.get("in_cluster_weight"):
        return ENTROPY_COLOURS[bool(method.get("select_features"))]
    if regs == ("istar",):
        lam = float(method.get("istar_lambda"))
        return lambda_colour(lam, [*lambdas, lam])
    return _SPARE[0]


def _distinct(colours: Sequence[str], methods: Sequence[Method] | None = None) -> list[str]:
    """``colours`` (one figure's series, of ``methods`` if given) with every repeat replaced by
    an unused spare colour. The papers' settings keep their colour first (CosReg λ = 1,
    entropy β = 1), so that e.g. entropy β = 1 looks the same whether or not β = 0.5 is drawn
    beside it. Past the spare colours, a repeat keeps its colour (markers still differ)."""
    def canonical(m: Method) -> bool:
        return (m.regularizers == ("cosreg",) and m.get("cosreg_lambda") == 1.0) or (
            m.regularizers == ("entropy",) and m.get("entropy_beta") == 1.0)

    order = sorted(range(len(colours)),
                   key=lambda i: methods is None or not canonical(methods[i]))
    spare = [c for c in _SPARE if c not in colours]
    taken: set[str] = set()
    out = list(colours)
    for i in order:
        if out[i] in taken and spare:
            out[i] = spare.pop(0)
        taken.add(out[i])
    return out


_UNITS = {"matthews_correlation": "correlation, -1 to 1", "pearson": "correlation, -1 to 1",
          "spearman": "correlation, -1 to 1"}


def metric_label(metric: str, task: str, which: str) -> str:
    """Axis label of a task metric with its unit: SQuAD's EM and F1 are percentages,
    correlations lie in [-1, 1], accuracy and GLUE F1 are fractions.

    >>> metric_label("exact_match", "squad", "final")
    'exact_match (final evaluation, percent)'
    """
    unit = "percent" if task == "squad" else _UNITS.get(metric, "fraction")
    return f"{metric} ({which} evaluation, {unit})"


def _new_figure(nrows: int = 1, ncols: int = 1, **kw: Any) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _save(fig: Any, stem: Path) -> list[Path]:
    out = []
    for ext, meta in ((".png", {"Software": None}), (".svg", {"Date": None})):
        path = stem.with_name(stem.name + ext)  # not with_suffix: a model named Qwen2.5-0.5B
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=DPI, metadata=meta)
        out.append(path)
    return out


def _ms(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample std (``None`` for one value: no error bar)."""
    return mean_std(values)


def _err(stds: Sequence[float | None]) -> list[float] | None:
    """``xerr``/``yerr`` of :meth:`~matplotlib.axes.Axes.errorbar`: ``None`` (no bars) when
    no point has a std, else the stds with NaN, which draws no bar, where a point has one
    seed. A zero-length bar would pretend to a spread of zero."""
    if all(s is None for s in stds):
        return None
    return [math.nan if s is None else float(s) for s in stds]


def _groups(cells: Sequence[Cell]) -> dict[tuple[str, str, str], list[Cell]]:
    out: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
        out.setdefault((c.task, c.model, c.setting), []).append(c)
    return out


def _istar(group: Sequence[Cell]) -> list[Cell]:
    """The I-STAR-only cells of ``group`` with the global penalty (all layers)."""
    return [c for c in group if c.method.regularizers == ("istar",)
            and c.method.get("istar_layers") == "all"]


def _best_zeta_per_lambda(group: Sequence[Cell], which: str) -> dict[float, Cell]:
    best: dict[float, Cell] = {}
    for c in _istar(group):
        lam = c.method.get("istar_lambda")
        st, old = c.stat(c.main_metric, which), best.get(lam)
        if old is None or st[0] > old.stat(old.main_metric, which)[0]:  # type: ignore[index]
            best[lam] = c
    return dict(sorted(best.items()))


def _lambdas(group: Sequence[Cell]) -> list[float]:
    return sorted({float(c.method.get("istar_lambda")) for c in group
                   if c.method.regularizers == ("istar",)})


def _comparison_cells(group: Sequence[Cell], which: str,
                      lambdas: Sequence[float] | None = None) -> list[tuple[str, Cell, str]]:
    """Base, CosReg and each I-STAR λ (all of them, or ``lambdas``) at its best ζ, with their
    legend labels and colours."""
    chosen = [(c.method.label, c) for c in group
              if c.method.regularizers in (("none",), ("cosreg",))]
    chosen += [(f"I-STAR λ={lam:g} (ζ={c.method.get('istar_zeta'):g})", c)
               for lam, c in _best_zeta_per_lambda(group, which).items()
               if lambdas is None or lam in lambdas]
    all_lams = _lambdas(group)
    colours = _distinct([method_colour(c.method, all_lams) for _, c in chosen],
                        [c.method for _, c in chosen])
    return [(label, c, colour) for (label, c), colour in zip(chosen, colours, strict=True)]


def _measured_zeta(cells: Sequence[Cell]) -> str:
    """``"ζ=0.2"``: the one ζ the runs' evaluation IsoScore* was measured with (from
    ``measurements.jsonl``); ``_Skip`` when they differ (IsoScore* of different ζ do not
    compare)."""
    zetas = sorted({float(z) for c in cells for r in c.runs
                    if isinstance(z := (r.last_measurement or {}).get("zeta"), (int, float))})
    if len(zetas) > 1:
        listed = ", ".join(f"{z:g}" for z in zetas)
        raise _Skip(f"the runs measured IsoScore* with different ζ ({listed}), which do not "
                    "compare: train them with one --measure_zeta")
    return f"ζ={zetas[0]:g}" if zetas else "ζ not recorded"


def _sequential(n: int) -> list[str]:
    """``n`` colours in order on the colour-blind-safe sequential map cividis."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    # 0 to 0.7: the map's last, pale yellow third reads badly on white
    return [str(to_hex(colormaps["cividis"](0.7 * i / max(n - 1, 1)))) for i in range(n)]
