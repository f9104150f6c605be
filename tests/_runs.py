"""Hand-made run directories: the files ``isotropy train`` writes, with known numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

N_LAYERS, HIDDEN = 3, 8


def make_run(root: Path, *, task: str = "rte", model: str = "minilm", reg: str = "none",
             lam: float = 1.0, zeta: float = 0.2, cos_lam: float = 1.0, beta: float = 1.0,
             select: bool = True, seed: int = 1, metric: float = 0.5, iso: float = 0.1,
             spectrum: list[tuple[int, list[float]]] | None = None, finished: bool = True,
             layer_shift: float = 0.0, istar_layers: str = "all",
             measured_zeta: float = 0.2, training: dict[str, Any] | None = None,
             fmt: Any = None, evals: list[tuple[int, float]] | None = None,
             global_step: int | None = None, em: float | None = None,
             accumulation: str | None = "exact", padding: bool | None = None,
             twonn: float | None = None, iso_last: float | None = None,
             majority: float | None = None, iso_first: float | None = None,
             eval_spectra: list[tuple[int, float | None, float | None]] | None = None) -> Path:
    """A run directory with the files ``isotropy train`` writes, with the given numbers.

    ``fmt``: config.json's ``measurement_format`` (absent if ``None``); ``evals``: the
    ``(step, main metric)`` evaluations logged in metrics.jsonl (default: one at step 100 with
    ``metric``); ``global_step``: results.json's ``train.global_step``; ``em``: SQuAD's EM;
    ``accumulation``/``padding``: ``entropy_accumulation``/``include_padding`` (absent if
    ``None``, as in runs written before those settings); ``twonn``: the final evaluation's
    ``eval_twonn_cls_last``, ``iso_last`` its ``eval_isoscore_star_last`` and ``majority`` its
    ``eval_majority_fraction``, ``iso_first`` its ``eval_isoscore_star_token_layer1`` (each
    absent if ``None``); ``eval_spectra``: ``(step, raw top-1, centred top-1)`` of the
    evaluation set's [CLS] spectrum, one measurement record each (default: one record at step
    100 without a spectrum)."""
    name = (f"{task}-{model}-{reg}_l{lam}_z{zeta}_c{cos_lam}_b{beta}_{select}_{istar_layers}"
            + "".join(f"_{k}{v}" for k, v in (training or {}).items())
            + ("" if fmt is None else f"_f{fmt}") + f"_{accumulation}_{padding}-seed{seed}")
    d = root / name
    d.mkdir(parents=True)
    config: dict[str, Any] = {} if fmt is None else {"measurement_format": fmt}
    config |= {"settings": {
        "isotropy": {"task": task, "model": model, "regularizer": [reg], "tuning": lam,
                     "zeta": zeta, "istar_layers": istar_layers, "cosreg_tuning": cos_lam,
                     "entropy_weight": beta, "in_cluster_weight": 0.0,
                     "select_features": select,
                     **({} if accumulation is None else {"entropy_accumulation": accumulation}),
                     **({} if padding is None else {"include_padding": padding})},
        "training": {"seed": seed, "output_dir": str(root / name), **(training or {})}}}
    (d / "config.json").write_text(json.dumps(config))
    acc = {"cola": "matthews_correlation", "squad": "f1"}.get(task, "accuracy")
    final = {f"eval_{acc}": metric, "eval_isoscore_star_union": iso, "eval_loss": 0.7}
    if em is not None:
        final["eval_exact_match"] = em
    if twonn is not None:
        final["eval_twonn_cls_last"] = twonn
    if iso_last is not None:
        final["eval_isoscore_star_last"] = iso_last
    if majority is not None:
        final["eval_majority_fraction"] = majority
    if iso_first is not None:
        final["eval_isoscore_star_token_layer1"] = iso_first
    logs: list[dict[str, Any]] = []
    for step, values in spectrum or []:
        rec = {"step": step, "loss": 0.5}
        for i, kind in enumerate(("raw", "centred")):
            for k in range(3):
                rec[f"cls_spectrum_{kind}_{k + 1}"] = values[3 * i + k]
        logs.append(rec)
    for step, value in evals if evals is not None else [(100, metric)]:
        logs.append({"step": step, "epoch": step / 100, **final, f"eval_{acc}": value})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logs))
    layers = [{"layer": i,
               "token": {"isoscore_star": 0.1 * i + layer_shift},
               "cls": {"twonn": None if i == 0 else 5.0 + i + layer_shift}}
              for i in range(N_LAYERS + 1)]
    mean = (np.arange(HIDDEN) * 0.1 + layer_shift).tolist()
    meas = {"step": 100, "zeta": measured_zeta, "num_layers": N_LAYERS, "layers": layers,
            "last": {"layer": N_LAYERS, "token_mean": mean, "token_std": [1.0] * HIDDEN}}
    records = [meas]
    if eval_spectra is not None:
        records = [{**meas, "step": step,
                    "last": {**meas["last"],
                             "cls_spectrum_raw": None if raw is None else [raw, 0.01, 0.005],
                             "cls_spectrum_centred": None if cen is None else [cen, 0.02]}}
                   for step, raw, cen in eval_spectra]
    (d / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        results: dict[str, Any] = {"task": task, "main_metric": acc, "regularizers": [reg],
                                   "final": final,
                                   "best": {**final, f"eval_{acc}": metric + 0.01}}
        if global_step is not None:
            results["train"] = {"global_step": global_step, "epoch": 1.0}
        (d / "results.json").write_text(json.dumps(results))
    return d
