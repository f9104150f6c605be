"""The papers' grids as sweep specs (``isotropy sweep --preset NAME``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from isotropy.sweeps.spec import SweepSpec, _suggest, spec_from_dict
from isotropy.training.settings import canonical_settings

__all__ = [
    "override",
    "preset_spec",
]

# --------------------------------------------------------------------------- presets

# I-STAR paper (Rudman & Eickhoff, ICLR 2024). Section 4.1 and Table 2: lambda in
# {-5, -3, -1, 1, 3, 5} x zeta in {0.2, 0.4, 0.6, 0.8}; Fig. 3 adds lambda = 0.5 ("0.50").
_ISTAR_LAMBDAS = [-5.0, -3.0, -1.0, 0.5, 1.0, 3.0, 5.0]
_ISTAR_ZETAS = [0.2, 0.4, 0.6, 0.8]
# Appendix D, Fig. 7: zeta in {0, 0.2, ..., 1} on RTE with "all hyperparameters found in
# Table 2" fixed, i.e. lambda = -1 (Table 2's RTE value for ALBERT, BERT and DistilBERT); the
# ends 0 and 1 are the zetas the grid above lacks.
_FIG7_LAMBDA = -1.0
_FIG7_ZETAS = [0.0, 1.0]
# Section 4.1: "For each model and each task, we hyperparameter tune for batch size (8, 16, 32),
# training epochs (3,4,5), and learning rate (1e-5, 3e-5, 5e-5)".
_TUNING_BATCH = [8, 16, 32]
_TUNING_EPOCHS = [3, 4, 5]
_TUNING_LR = [1e-5, 3e-5, 5e-5]
# Section 4.1: every reported metric is a mean over five random seeds.
_FIVE_SEEDS = [1, 2, 3, 4, 5]

SWEEP_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "istar-grid": (
        "I-STAR paper (Rudman & Eickhoff, ICLR 2024), every point of its Table 1-2 and "
        "Figs. 3-7: base; CosReg lambda in {1, -1} (Table 1; Fig. 4); I-STAR lambda in "
        "{-5,-3,-1,0.5,1,3,5} x zeta in {0.2,0.4,0.6,0.8} (Table 2; Fig. 3) and lambda=-1 x "
        "zeta in {0, 1} (Fig. 7); 5 seeds, with the istar training preset; task and model "
        "are base settings (--set task=mrpc)",
        {
            "output_root": "runs/istar-grid",
            "base": {"preset": "istar", "task": "rte", "model": "minilm"},
            "methods": [
                {"name": "base", "regularizer": "none"},
                # Section 4: lambda = 1 as Gao et al.; Fig. 4 also shows lambda = -1
                {"name": "cosreg", "regularizer": "cosreg", "cosreg_tuning": [1.0, -1.0]},
                {"name": "istar", "regularizer": "istar", "tuning": _ISTAR_LAMBDAS,
                 "zeta": _ISTAR_ZETAS},
                {"name": "istar-zeta-ends", "regularizer": "istar", "tuning": _FIG7_LAMBDA,
                 "zeta": _FIG7_ZETAS},
            ],
            "seeds": _FIVE_SEEDS,
        },
    ),
    "istar-tuning": (
        "I-STAR paper's hyper-parameter search (Section 4.1): batch {8,16,32} x epochs "
        "{3,4,5} x learning rate {1e-5,3e-5,5e-5} per task and model, without a regularizer "
        "(the paper tunes these per model and task, then lambda and zeta for I-STAR: "
        "istar-grid); 5 seeds (--seeds 1 for a cheaper pass), with the istar training preset",
        {
            "output_root": "runs/istar-tuning",
            "base": {"preset": "istar", "task": "rte", "model": "minilm"},
            "grid": {"per_device_train_batch_size": _TUNING_BATCH,
                     "num_train_epochs": _TUNING_EPOCHS, "learning_rate": _TUNING_LR},
            "methods": [{"name": "base", "regularizer": "none"}],
            "seeds": _FIVE_SEEDS,
        },
    ),
    "entropy-grid": (
        "persistent-entropy paper: base vs entropy (beta=1) with and without prominent-feature "
        "selection, 5 seeds, with the entropy training preset (per-task lr, 10 epochs, "
        "64 [CLS] points as 8 x 8); task and model are base settings",
        {
            "output_root": "runs/entropy-grid",
            "base": {"preset": "entropy", "task": "mrpc", "model": "minilm"},
            "methods": [
                {"name": "base", "regularizer": "none"},
                {"name": "entropy", "regularizer": "entropy", "entropy_weight": 1.0,
                 "select_features": True},
                {"name": "entropy-allbars", "regularizer": "entropy", "entropy_weight": 1.0,
                 "select_features": False},
            ],
            "seeds": _FIVE_SEEDS,
        },
    ),
}


def preset_spec(name: str) -> SweepSpec:
    """The spec of a preset grid (:data:`SWEEP_PRESETS`)."""
    if name not in SWEEP_PRESETS:
        raise ValueError(f"unknown sweep preset {name!r}{_suggest(name, list(SWEEP_PRESETS))}; "
                         f"choose from {', '.join(SWEEP_PRESETS)}")
    return spec_from_dict(json.loads(json.dumps(SWEEP_PRESETS[name][1])), source=f"preset {name}")


def override(spec: SweepSpec, *, base: Mapping[str, Any] | None = None,
             grid: Mapping[str, list[Any]] | None = None, seeds: list[int] | None = None,
             output_root: str | None = None, order: str | None = None,
             exclude: Sequence[str] = ()) -> SweepSpec:
    """The spec with command-line values: ``base`` and ``grid`` entries added (replacing
    those of the same setting), ``seeds``, ``output_root`` and ``order`` replaced, ``exclude``
    names added; the result is checked again like a spec file."""
    data = spec.as_dict()
    base = canonical_settings(base or {}, "--set")
    grid = canonical_settings(grid or {}, "--grid")
    data["base"] = {**data.get("base", {}), **base}
    if grid:
        data["grid"] = {**data.get("grid", {}), **grid}
        for k in grid:
            data["base"].pop(k, None)
    for k in (base or {}):
        if k in data.get("grid", {}) and k not in (grid or {}):
            del data["grid"][k]
    if seeds is not None:
        data["seeds"] = seeds
        data["base"].pop("seed", None)
    if output_root is not None:
        data["output_root"] = output_root
    if order is not None:
        data["order"] = order
    if exclude:
        data["exclude"] = [*data.get("exclude", []), *exclude]
    if data.get("output_root") is None:
        data.pop("output_root", None)
    return spec_from_dict(data, source=spec.source)
