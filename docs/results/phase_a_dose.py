"""Print phase A's dose, measured: per task, the real tokens' IsoScore* (union of layers, the
final evaluation; the clouds measured never hold padding rows) and the metric of the base run,
of the paper's (lambda, zeta) as phase A ran it (no padding in the I-STAR cloud) and of the
same (lambda, zeta) under the authors' padding protocol (B1), each the mean over seeds 0-2 of
the committed runs.

Usage: python phase_a_dose.py [RUNS_DIR]   (default: docs/results/runs beside this file)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import review_verdicts as rv  # noqa: E402

CELLS = (("no regularizer", lambda t: rv.base(t, "istar")),
         ("paper's (λ, ζ), no padding (phase A)", lambda t: rv.istar(t, "istar")),
         ("paper's (λ, ζ), padding (B1)", lambda t: rv.istar(t, "review", pad=True)))


def dose(runs: Path) -> dict[str, list[tuple[float, float]]]:
    """{task: [(mean IsoScore* of the union, mean metric) per cell of CELLS]} over seeds 0-2."""
    out = {}
    for task in rv.PAPER:
        row = []
        for _, cell in CELLS:
            got = [rv.metric(runs, task, cell(task), seed) for seed in rv.SEEDS]
            iso = [run.value("isoscore_star_union") for _, run in got]
            if any(v is None for v in iso):
                raise ValueError(f"{task}: a run of {cell(task)} has no eval_isoscore_star_union")
            row.append((sum(iso) / len(iso), sum(m for m, _ in got) / len(got)))
        out[task] = row
    return out


def main(argv: list[str]) -> int:
    runs = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "runs"
    print("| task (paper's λ, ζ) | " + " | ".join(f"{name}: IsoScore*, metric"
                                               for name, _ in CELLS) + " |")
    print("|---|" + "---|" * len(CELLS))
    for task, row in dose(runs).items():
        lam, zeta = rv.PAPER[task]
        print(f"| {rv.LABEL[task]} ({lam:g}, {zeta:g}) | "
              + " | ".join(f"{iso:.3f}, {m:.4f}" for iso, m in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
