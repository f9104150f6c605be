"""The I-STAR paper's Figs. 3-8 from cells (see :mod:`isotropy.reporting.figures`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from isotropy.reporting.cells import Cell
from isotropy.reporting.plotting import (
    _MARKERS,
    BASE_COLOUR,
    _comparison_cells,
    _distinct,
    _err,
    _istar,
    _lambdas,
    _measured_zeta,
    _ms,
    _new_figure,
    _sequential,
    _Skip,
    lambda_colour,
    metric_label,
)
from isotropy.reporting.runs import mean_std

__all__ = [
    "fig8_data",
]


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
