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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from isotropy.io import atomic_path
from isotropy.reporting.cells import Cell
from isotropy.reporting.runs import LAST_FRACTION, Method, mean_std
from isotropy.reporting.tables import setting_tags

__all__ = ["DPI", "FIGSIZE", "OKABE_ITO", "fig8_data", "lambda_colour", "make_figures",
           "method_colour", "metric_label", "pe_fig2_data"]

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
        path = stem.with_suffix(ext)
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


def _fig3(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    cells = [c for c in _istar(group) if c.values("isoscore_star_union", which)]
    if len({c.method.get("istar_lambda") for c in cells}) < 2:
        raise _Skip("needs I-STAR runs of at least two λ with eval_isoscore_star_union")
    measured = _measured_zeta(cells + [c for c in group if c.method.regularizers == ("none",)])
    fig, axes = _new_figure()
    ax = axes[0, 0]
    zetas = sorted({c.method.get("istar_zeta") for c in cells})
    for i, (zeta, colour) in enumerate(zip(zetas, _sequential(len(zetas)), strict=True)):
        sub = sorted((c for c in cells if c.method.get("istar_zeta") == zeta),
                     key=lambda c: c.method.get("istar_lambda"))
        xs = [_ms(c.values("isoscore_star_union", which)) for c in sub]
        ys = [_ms(c.values(c.main_metric, which)) for c in sub]
        ax.errorbar([x[0] for x in xs], [y[0] for y in ys], xerr=_err([x[1] for x in xs]),
                    yerr=_err([y[1] for y in ys]), fmt=_MARKERS[i % len(_MARKERS)] + "-",
                    color=colour, capsize=3, label=f"ζ={zeta:g}")
        for c, x, y in zip(sub, xs, ys, strict=True):
            ax.annotate(f"λ={c.method.get('istar_lambda'):g}", (x[0], y[0]),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)
    base = next((c for c in group if c.method.regularizers == ("none",)
                 and c.values("isoscore_star_union", which)), None)
    if base is not None:
        (bx, bsx), (by, bsy) = (_ms(base.values("isoscore_star_union", which)),
                                _ms(base.values(base.main_metric, which)))
        ax.errorbar([bx], [by], xerr=_err([bsx]), yerr=_err([bsy]), fmt="*", markersize=12,
                    color=BASE_COLOUR, capsize=3, label="no regularizer")
    metric = cells[0].main_metric
    ax.set(title=f"IsoScore* vs {metric} across I-STAR λ ({key[0]}, {key[1]})",
           xlabel=f"IsoScore* of the evaluation set (union of layers, {measured}; unitless, 0-1)",
           ylabel=metric_label(metric, key[0], which))
    ax.legend(title="I-STAR ζ (training); mean ± std over seeds", fontsize=8)
    return fig


def _per_layer(key: tuple[str, str], group: Sequence[Cell], which: str,
               get: Callable[[dict[str, Any]], Any], title: str, ylabel: str,
               uses_zeta: bool = False) -> Any:
    compared = _comparison_cells(group, which)
    if uses_zeta:
        ylabel = ylabel.format(zeta=_measured_zeta([c for _, c, _ in compared]))
    series = []
    for label, c, colour in compared:
        per_layer: dict[int, list[float]] = {}
        for r in c.runs:
            rec = r.last_measurement
            for layer in (rec or {}).get("layers") or []:
                try:
                    v = get(layer)
                except (KeyError, TypeError):
                    v = None
                if isinstance(v, (int, float)) and np.isfinite(v):
                    per_layer.setdefault(int(layer["layer"]), []).append(float(v))
        if per_layer:
            series.append((label, colour, sorted(per_layer.items())))
    if not series:
        raise _Skip("no run has this measure in its last measurements.jsonl record")
    fig, axes = _new_figure()
    ax = axes[0, 0]
    for i, (label, colour, pts) in enumerate(series):
        stats = [_ms(v) for _, v in pts]
        ax.errorbar([layer for layer, _ in pts], [s[0] for s in stats],
                    yerr=_err([s[1] for s in stats]), fmt=_MARKERS[i % len(_MARKERS)] + "-",
                    color=colour, capsize=3, label=label)
    ax.set(title=f"{title} ({key[0]}, {key[1]})", xlabel="layer (0 = embeddings)",
           ylabel=ylabel)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines
    return fig


def _fig5(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    return _per_layer(key, group, which, lambda layer: layer["cls"]["twonn"],
                      "TwoNN intrinsic dimension of [CLS] per layer",
                      "TwoNN intrinsic dimension (dimensions)")


def _fig6(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    return _per_layer(key, group, which, lambda layer: layer["token"]["isoscore_star"],
                      "IsoScore* of the token cloud per layer",
                      "IsoScore* ({zeta}; unitless, 0-1)", uses_zeta=True)


def _fig4(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    panels = []
    for label, c, colour in _comparison_cells(group, which, lambdas=(1.0, -1.0)):
        means = [np.asarray(m, dtype=float) for r in c.runs
                 if (m := ((r.last_measurement or {}).get("last") or {}).get("token_mean"))]
        if means and len({m.shape for m in means}) == 1:
            panels.append((label, colour, np.stack(means)))
    if not panels:
        raise _Skip("no base, CosReg or I-STAR λ=±1 run has last.token_mean in "
                    "measurements.jsonl")
    fig, axes = _new_figure(len(panels), 1, sharex=True, sharey=True)
    for i, (label, colour, m) in enumerate(panels):
        ax = axes[i, 0]
        mean = m.mean(axis=0)
        dims = np.arange(mean.size)
        ax.bar(dims, mean, width=1.0, color=colour, label=f"{label} (n={len(m)})")
        if len(m) > 1:  # one seed: no error bars
            ax.errorbar(dims, mean, yerr=m.std(axis=0, ddof=1), fmt="none", ecolor="#000000",
                        elinewidth=0.5)
        ax.legend(loc="upper right", fontsize=8)
    axes[0, 0].set_title(f"Mean activation per dimension, last layer ({key[0]}, {key[1]})")
    axes[-1, 0].set_xlabel("hidden dimension (index)")
    fig.supylabel("mean activation over tokens (hidden-state units)")
    return fig


def _fig7(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    cells = _istar(group)
    if len({c.method.get("istar_zeta") for c in cells}) < 2:
        raise _Skip("needs I-STAR runs of at least two ζ")
    fig, axes = _new_figure()
    ax = axes[0, 0]
    lams = _lambdas(group)
    for i, lam in enumerate(sorted({c.method.get("istar_lambda") for c in cells})):
        sub = sorted((c for c in cells if c.method.get("istar_lambda") == lam),
                     key=lambda c: c.method.get("istar_zeta"))
        ys = [_ms(c.values(c.main_metric, which)) for c in sub]
        ax.errorbar([c.method.get("istar_zeta") for c in sub], [y[0] for y in ys],
                    yerr=_err([y[1] for y in ys]), fmt=_MARKERS[i % len(_MARKERS)] + "-",
                    color=lambda_colour(lam, lams), capsize=3, label=f"λ={lam:g}")
    best = max(cells, key=lambda c: c.stat(c.main_metric, which)[0])  # type: ignore[index]
    ax.axvline(best.method.get("istar_zeta"), color="#555555", linestyle="--",
               label=f"best: ζ={best.method.get('istar_zeta'):g} "
                     f"(λ={best.method.get('istar_lambda'):g})")
    metric = cells[0].main_metric
    ax.set(title=f"{metric} vs shrinkage ζ ({key[0]}, {key[1]})",
           xlabel="shrinkage weight ζ (unitless, 0-1)",
           ylabel=metric_label(metric, key[0], which))
    ax.legend(title="I-STAR λ; mean ± std over seeds", fontsize=8)
    return fig


def _single_layer(layers: Any, num_layers: int | None) -> int | None:
    """The hidden-state index of a one-layer ``istar_layers`` value (``"3"``, ``"-1"`` or
    ``"last"``; negative ones and ``last`` need ``num_layers``), else ``None``."""
    text = str(layers)
    if text == "last":
        return num_layers
    try:
        index = int(text)
    except ValueError:
        return None  # "all" or a list of layers
    if index < 0:
        return None if num_layers is None else num_layers + 1 + index
    return index


def _num_layers(c: Cell) -> int | None:
    for r in c.runs:
        n = (r.last_measurement or {}).get("num_layers")
        if isinstance(n, int):
            return n
    return None


def fig8_data(group: Sequence[Cell], which: str = "final") -> list[dict[str, Any]]:
    """Fig. 8's numbers for one task x model: per (λ, ζ) of the one-layer I-STAR cells,
    ``{"lambda", "zeta", "layers": [(layer, mean, std, n), ...], "global": (mean, std, n) or
    None, "base": (mean, std, n) or None}`` of the main metric over seeds; std is the sample
    std, ``None`` for one seed. ``layer`` is the hidden-state index (``-1`` and ``last`` are
    resolved with the run's ``num_layers``); ``global`` is I-STAR on all layers with the same
    λ and ζ; ``base`` is the unregularized cell."""
    def stat(c: Cell | None) -> tuple[float, float | None, int] | None:
        return None if c is None else c.stat(c.main_metric, which)

    def lam_zeta(c: Cell) -> tuple[Any, Any]:
        return c.method.get("istar_lambda"), c.method.get("istar_zeta")

    one_layer = [(layer, c) for c in group if c.method.regularizers == ("istar",)
                 and (layer := _single_layer(c.method.get("istar_layers"), _num_layers(c)))
                 is not None]
    base = next((c for c in group if c.method.regularizers == ("none",)), None)
    out = []
    for lz in sorted({lam_zeta(c) for _, c in one_layer}):
        per_layer: dict[int, list[float]] = {}
        for layer, c in sorted(one_layer, key=lambda t: t[0]):
            if lam_zeta(c) == lz:  # "-1", "last" and "6" of a 6-layer model pool their seeds
                per_layer.setdefault(layer, []).extend(c.values(c.main_metric, which))
        glob = next((c for c in _istar(group) if lam_zeta(c) == lz), None)
        layers = [(layer, *mean_std(v), len(v)) for layer, v in per_layer.items() if v]
        if layers:
            out.append({"lambda": lz[0], "zeta": lz[1], "layers": layers,
                        "global": stat(glob), "base": stat(base)})
    return out


def _fig8(key: tuple[str, str], group: Sequence[Cell], which: str) -> Any:
    data = fig8_data(group, which)
    if not data:
        raise _Skip("needs I-STAR runs on a single layer (--istar_layers N)")
    fig, axes = _new_figure()
    ax = axes[0, 0]
    metric = group[0].main_metric
    lams = _lambdas(group)
    colours = _distinct([lambda_colour(d["lambda"], lams) for d in data])  # one λ, two ζ
    for i, (d, colour) in enumerate(zip(data, colours, strict=True)):
        tag = f"λ={d['lambda']:g}, ζ={d['zeta']:g}"
        ns = sorted({t[3] for t in d["layers"]})
        n = f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}-{ns[-1]}"
        ax.errorbar([t[0] for t in d["layers"]], [t[1] for t in d["layers"]],
                    yerr=_err([t[2] for t in d["layers"]]), fmt=_MARKERS[i % len(_MARKERS)] + "-",
                    color=colour, capsize=3, label=f"one layer, {tag} (mean ± std, {n})")
        if d["global"] is None:
            ax.plot([], [], " ", label=f"(no all-layers run at {tag})")
            continue
        m, sd, n_glob = d["global"]
        band = "" if sd is None else " ± 1 std band"
        ax.axhline(m, color=colour, linestyle="--",
                   label=f"all layers, {tag} (mean{band}, n={n_glob})")
        if sd is not None:
            ax.axhspan(m - sd, m + sd, color=colour, alpha=0.12, linewidth=0)
    base = data[0]["base"]
    if base is not None:
        ax.axhline(base[0], color=BASE_COLOUR, linestyle=":",
                   label=f"no regularizer (mean, n={base[2]})")
    layers = sorted({t[0] for d in data for t in d["layers"]})
    ax.set_xticks(layers)
    ax.set(title=f"I-STAR on one layer vs on all layers ({key[0]}, {key[1]})",
           xlabel="regularized layer (hidden-state index: 0 = embeddings, 1 = first "
                  "transformer layer)",
           ylabel=metric_label(metric, key[0], which))
    ax.legend(fontsize=8)
    return fig


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
