"""The scalars the trainer logs from its measurements (``eval_*`` / training-log names):
the flattened :class:`~isotropy.probing.eval_measures.EvalMeasures` record and a batch's
[CLS] anisotropy spectrum."""

from __future__ import annotations

from typing import Any

import torch

from isotropy.measures.cloud import safe_measure
from isotropy.measures.spectrum import anisotropy_spectrum

__all__ = ["cls_spectrum_logs", "scalar_metrics"]


def cls_spectrum_logs(cls: torch.Tensor, k: int = 3) -> dict[str, float]:
    r"""``cls_spectrum_{raw,centred}_{1..k}``: the top-``k`` anisotropy spectrum of a batch's
    [CLS] cloud (``(n, dim)``). Components beyond :math:`\min(n, d)` are 0 (a zero singular
    value); an undefined spectrum (all zeros, or one point when centred) is left out."""
    x = cls.detach()
    kk = min(k, x.shape[0], x.shape[1])
    out: dict[str, float] = {}
    for name, center in (("raw", False), ("centred", True)):
        value = safe_measure([], name, lambda c=center: anisotropy_spectrum(x, k=kk, center=c))
        if value is not None:
            scores = [*value.tolist(), *[0.0] * (k - kk)]
            out.update({f"cls_spectrum_{name}_{i + 1}": float(v) for i, v in enumerate(scores)})
    return out


def scalar_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The scalars of a :meth:`EvalMeasures.compute` record under the trainer's names (without
    the ``eval_`` prefix); undefined (``None``) values are left out."""
    layers = record.get("layers")
    if not layers:
        return {}
    last = layers[record["num_layers"]]
    out: dict[str, Any] = {
        "isoscore_last": last["token"]["isoscore"],
        "isoscore_union": record["union"]["isoscore"],
        "isoscore_star_last": last["token"]["isoscore_star"],
        "isoscore_star_union": record["union"]["isoscore_star"],
        "isoscore_star_cls_last": last["cls"]["isoscore_star"],
        "twonn_cls_last": last["cls"]["twonn"],
        "cosine_last": last["token"]["avg_cosine"],
    }
    for row in layers:
        i = row["layer"]
        out[f"isoscore_star_token_layer{i}"] = row["token"]["isoscore_star"]
        out[f"isoscore_star_cls_layer{i}"] = row["cls"]["isoscore_star"]
        out[f"twonn_cls_layer{i}"] = row["cls"]["twonn"]
    return {k: float(v) for k, v in out.items() if v is not None}
