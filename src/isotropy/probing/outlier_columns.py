"""The outlier-dimension columns of a cloud's row (:mod:`isotropy.measures.outliers`), shared
by ``isotropy measure``, the evaluation records and ``isotropy analyze``.

Counts are ints; dimension lists are strings of indices, largest statistic first (``"223
347"``; empty when none). ``rogue_share_k`` is the share of the average cosine similarity held
by the ``k`` dimensions contributing most (Timkey & van Schijndel's top 1 and top 3);
``isoscore_without_top{k}`` the IsoScore with the ``k`` dimensions of largest variance removed,
``isoscore_standardised_top3`` with the top 3 rescaled to the others' mean variance.
"""

from __future__ import annotations

from typing import Any

import torch

from isotropy.measures.cloud import safe_measure
from isotropy.measures.covariance import CovarianceStats
from isotropy.measures.outliers import (
    OutlierStats,
    isoscore_without,
    rogue_dimensions,
    variance_outliers_from_stats,
)

__all__ = ["OUTLIER_KEYS", "layernorm_summary", "outlier_columns", "outlier_columns_of_rows"]

OUTLIER_KEYS = (
    "outliers_variance", "outlier_dims_variance",
    "outliers_activation", "outlier_dims_activation",
    "massive_activations", "massive_dims",
    "rogue_dims", "rogue_share_1", "rogue_share_3",
    "isoscore_without_top1", "isoscore_without_top3", "isoscore_standardised_top3",
)


def _dims(t: torch.Tensor) -> str:
    return " ".join(str(int(i)) for i in t)


def outlier_columns(where: str, cov: CovarianceStats, out: OutlierStats, why: str | None,
                    errors: list[str]) -> dict[str, Any]:
    """The :data:`OUTLIER_KEYS` of one cloud from its statistics; ``why`` (a reason the
    variance-based measures are undefined, e.g. zero variance) makes those ``None``, as any
    measure that raises does (the reason goes to ``errors``)."""
    row: dict[str, Any] = {}
    var = safe_measure(errors, f"{where} outliers_variance",
                       lambda: variance_outliers_from_stats(cov), why)
    row["outliers_variance"] = None if var is None else var.count
    row["outlier_dims_variance"] = None if var is None else _dims(var.dims)
    act = safe_measure(errors, f"{where} outliers_activation",
                       lambda: out.activation_outliers(), None if out.count else "no row")
    row["outliers_activation"] = None if act is None else act.count
    row["outlier_dims_activation"] = None if act is None else _dims(act.dims)
    massive = out.massive_activations() if out.count else None
    row["massive_activations"] = None if massive is None else int(massive.scores.sum())
    row["massive_dims"] = None if massive is None else _dims(massive.dims)
    k = min(3, out.dim)
    rogue = safe_measure(errors, f"{where} rogue_dims", lambda: rogue_dimensions(out, k=k))
    row["rogue_dims"] = None if rogue is None else _dims(rogue.dims)
    row["rogue_share_1"] = None if rogue is None else float(rogue.scores[0])
    row["rogue_share_3"] = None if rogue is None or k < 3 else float(rogue.scores.sum())
    for name, kk, how in (("isoscore_without_top1", 1, "remove"),
                          ("isoscore_without_top3", 3, "remove"),
                          ("isoscore_standardised_top3", 3, "standardise")):
        row[name] = safe_measure(errors, f"{where} {name}",
                                 lambda kk=kk, how=how: float(isoscore_without(cov, k=kk, how=how)),
                                 why or (None if out.dim - kk >= 2 else "too few dimensions"))
    return row


def outlier_columns_of_rows(where: str, x: torch.Tensor, why: str | None,
                            errors: list[str]) -> dict[str, Any]:
    """:func:`outlier_columns` of a cloud given as its rows ``(n, dim)``."""
    if x.shape[0] == 0:
        errors.append(f"{where} outliers: no row")
        return dict.fromkeys(OUTLIER_KEYS)
    return outlier_columns(where, CovarianceStats.from_batch(x),
                           OutlierStats.empty(x.shape[1]).update(x), why, errors)


def layernorm_summary(model: torch.nn.Module) -> dict[str, Any]:
    """The output LayerNorm's outlier dimensions (Kovaleva et al.; Puccetti et al.:
    :mod:`isotropy.measures.layernorm_outliers`) for a run's configuration: for the scales
    and the biases, the dimensions flagged in each layer (3σ) and the model's outlier
    dimensions (flagged in at least 4 layers); ``{"unavailable": reason}`` for a model
    without BERT-style output LayerNorms."""
    from isotropy.measures.layernorm_outliers import layernorm_flags, layernorm_outliers
    from isotropy.models.layernorms import output_layernorm_weights

    try:
        weights = output_layernorm_weights(model)
    except ValueError as err:
        return {"unavailable": str(err)}
    out: dict[str, Any] = {"rule": "|w - layer mean| > 3 std (ddof=1) in >= 4 layers",
                           "layers": "transformer layers 1..L (output LayerNorm)"}
    for kind, w in weights.items():
        flags = layernorm_flags(w)
        out[kind] = {"flagged_per_layer": [_dims(torch.nonzero(f).flatten()) for f in flags],
                     "outlier_dims": _dims(layernorm_outliers(w).dims)}
    return out
