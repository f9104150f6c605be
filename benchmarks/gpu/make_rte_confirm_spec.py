"""Write ``benchmarks/gpu/runs-confirm-rte.yaml``, RTE's confirmatory runs on a GPU, from the
learning-rate runs of ``runs-rte-lr.yaml`` that came back (``docs/gpu-runs-rte-lr/<n>/
runs-*.tar.xz``), by the rule that spec fixed before its runs: the rate of the highest mean
held-out accuracy over seeds 0-2 (a tie: the smaller rate). The spec is
``runs-confirm.yaml``'s five cells on RTE at that rate (the paper's best BERT (λ, ζ) for RTE,
λ = -1, ζ = 0.8, as phase A's ``istar.yaml`` has it), trained on RTE's whole train split and
scored on its dev split, fresh seeds 5-9.

Refuses (exit 1) while a run of the grid is missing or unfinished, when a run's settings are
not the grid's, and to replace a spec already written with another (the runs are those named
before they started). A run that came back more than once is read from its first copy (the
lowest call number), as ``docs/results/gpu_phase.py`` reads the GPU phase.

Usage: python benchmarks/gpu/make_rte_confirm_spec.py [ARCHIVES_DIR] [OUT_YAML]
"""

from __future__ import annotations

import json
import math
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RATES = (1e-5, 3e-5, 5e-5)  # runs-rte-lr.yaml's grid
SEEDS = (0, 1, 2)
PAPER = (-1.0, 0.8)  # the I-STAR paper's best BERT (lambda, zeta) on RTE


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    s = config["settings"]
    return {**s["isotropy"], **s["training"]}


def grid_settings() -> dict[str, Any]:
    """The settings every run of ``runs-rte-lr.yaml`` records, as ``config.json`` has them:
    its base but the model (a path on the GPU machine) and the reporting switches."""
    from isotropy.training.settings import args_from_dict

    spec = yaml.safe_load((HERE / "runs-rte-lr.yaml").read_text())
    base = {k: v for k, v in spec["base"].items() if k != "model"}
    iso, train = args_from_dict({**base, "model": "minilm", "learning_rate": RATES[0],
                                 "seed": SEEDS[0]})
    out = {}
    for key in base:
        if key in ("report_to", "save_strategy"):
            continue  # how the run was kept, not what it trained
        value = getattr(iso, key) if hasattr(iso, key) else getattr(train, key)
        out[key] = json.loads(json.dumps(getattr(value, "value", value)))
    return out


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9)
    return got == want


def held_out_accuracy(archives: Path) -> dict[tuple[float, int], float]:
    """The final held-out accuracy of each (rate, seed) of the grid, first copy first;
    ``ValueError`` for a run whose settings are not the grid's."""
    found: dict[tuple[float, int], tuple[int, float]] = {}
    numbered = sorted((p for p in archives.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name)) if archives.is_dir() else []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in numbered:
            n = int(folder.name)
            for archive in sorted(folder.glob("runs-*.tar.xz")):
                with tarfile.open(archive) as tar:
                    tar.extractall(Path(tmp) / folder.name, filter="data")
            runs = Path(tmp) / folder.name / "runs"
            for run in sorted(runs.iterdir()) if runs.is_dir() else []:
                results = run / "results.json"
                if not results.is_file():
                    continue  # unfinished
                s = _settings(json.loads((run / "config.json").read_text()))
                rate = float(s["learning_rate"])
                wrong = {k: (s.get(k), v) for k, v in grid_settings().items()
                         if not _same(s.get(k), v)}
                if not any(math.isclose(rate, r) for r in RATES):
                    wrong["learning_rate"] = (rate, RATES)
                if s.get("seed") not in SEEDS:
                    wrong["seed"] = (s.get("seed"), SEEDS)
                if wrong:
                    raise ValueError(f"{run.name}: not a run of runs-rte-lr.yaml's grid "
                                     f"(got, wanted): {wrong}")
                rate = min(RATES, key=lambda r: abs(r - rate))
                key = (rate, int(s["seed"]))
                value = json.loads(results.read_text())["final"]["eval_accuracy"]
                if key not in found:  # numbered ascending: the first copy stays
                    found[key] = (n, float(value))
    return {k: v for k, (_, v) in found.items()}


def pick(accuracy: dict[tuple[float, int], float]) -> tuple[float, dict[float, float]]:
    """The rule: the rate of the highest mean over the seeds, a tie to the smaller rate.

    >>> acc = {(r, s): v for r, v in ((1e-5, 0.6), (3e-5, 0.7), (5e-5, 0.7)) for s in SEEDS}
    >>> pick(acc)[0]
    3e-05
    """
    missing = [f"lr {r:g} seed {s}" for r in RATES for s in SEEDS if (r, s) not in accuracy]
    if missing:
        raise LookupError(", ".join(missing))
    means = {r: sum(accuracy[r, s] for s in SEEDS) / len(SEEDS) for r in RATES}
    best = max(round(m, 12) for m in means.values())
    return min(r for r, m in means.items() if round(m, 12) == best), means


def spec_text(rate: float, means: dict[float, float]) -> str:
    """``runs-confirm.yaml`` with RTE's five cells at ``rate`` in place of its points."""
    confirm = yaml.safe_load((HERE / "runs-confirm.yaml").read_text())
    lam, zeta = PAPER
    cell = f"task: rte, learning_rate: {rate:.1e}, "
    points = [cell + "regularizer: none",
              cell + f"regularizer: istar, tuning: {lam:g}, zeta: {zeta:g}, include_padding: true",
              cell + "regularizer: cosreg, cosreg_tuning: 1, include_padding: true",
              cell + f"regularizer: istar, tuning: 1, zeta: {zeta:g}, include_padding: true",
              cell + f"regularizer: istar, tuning: -0.3, zeta: {zeta:g}, include_padding: true"]
    chosen = ", ".join(f"{r:g}: {m:.4f}" for r, m in means.items())
    head = [
        "# RTE's confirmatory runs on a GPU (benchmarks/gpu/run.sh --spec",
        "# benchmarks/gpu/runs-confirm-rte.yaml), written by make_rte_confirm_spec.py from the",
        "# runs of runs-rte-lr.yaml by the rule that spec fixed before its runs (the rate of the",
        "# highest mean held-out accuracy over seeds 0-2, a tie to the smaller). Mean held-out",
        f"# accuracy per rate: {chosen}; RTE's rate: {rate:g}.",
        "# runs-confirm.yaml's five cells and fixed settings, on RTE's whole train split, scored",
        "# on its dev split, fresh seeds 5-9; beside the GPU phase's I-STAR primary test (its four",
        "# tasks), never in it. @MODEL@ is replaced by run.sh with the unpacked model's path.",
    ]
    base = yaml.safe_dump({"output_root": confirm["output_root"], "base": confirm["base"]},
                          sort_keys=False, default_flow_style=False)
    return ("\n".join(head) + "\n" + base + "points:\n"
            + "".join(f"  - {{{p}}}\n" for p in points)
            + f"seeds: {json.dumps(confirm['seeds'])}\norder: {confirm['order']}\n")


def main(argv: list[str]) -> int:
    archives = Path(argv[1]) if len(argv) > 1 else ROOT / "docs" / "gpu-runs-rte-lr"
    out = Path(argv[2]) if len(argv) > 2 else HERE / "runs-confirm-rte.yaml"
    try:
        rate, means = pick(held_out_accuracy(archives))
    except LookupError as gone:
        print(f"make_rte_confirm_spec.py: the learning-rate runs are not complete (missing: "
              f"{gone})", file=sys.stderr)
        return 1
    except ValueError as bad:
        print(f"make_rte_confirm_spec.py: {bad}", file=sys.stderr)
        return 1
    text = spec_text(rate, means)
    if out.is_file() and out.read_text(encoding="utf-8") != text:
        print(f"make_rte_confirm_spec.py: {out} exists and names other runs. Not replaced.",
              file=sys.stderr)
        return 1
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    for r, m in means.items():
        print(f"lr {r:g}: mean held-out accuracy {m:.4f}" + ("  <- RTE's rate" if r == rate
                                                              else ""))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
