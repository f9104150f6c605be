"""Print the phase C spec that the rule stated in ``docs/results.md`` picks, before any phase C run.

The rule: phase C runs on CoLA (``specs/zeta.yaml``) unless I-STAR lambda = -1 at CoLA's zeta
0.8 never leaves CoLA's majority class on seeds 0, 1 and 2 of phase A (majority fraction 1.0
at every evaluation); then it runs on STS-B (``specs/zeta-stsb.yaml``), since a grid of
constant predictors cannot rank zeta. Exits with status 2, printing why, while a seed's run
is missing.

Usage: python pick_zeta_spec.py ISTAR_RUNS_ROOT SPECS_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RUN = "cola-minilm-istar_l-1_z0.8-seed{seed}"
SEEDS = (0, 1, 2)


def never_leaves_majority(run_dir: Path) -> bool:
    """True when every evaluation in ``metrics.jsonl`` has a majority fraction of 1.0."""
    fractions = [
        row["eval_majority_fraction"]
        for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if "eval_majority_fraction" in row
    ]
    if not fractions:
        raise SystemExit(f"{run_dir}/metrics.jsonl has no evaluation with eval_majority_fraction")
    return all(f == 1.0 for f in fractions)


def main(runs_root: str, specs_dir: str) -> None:
    runs = [Path(runs_root) / RUN.format(seed=s) for s in SEEDS]
    missing = [r for r in runs if not (r / "results.json").is_file()]
    if missing:
        print(
            f"phase C waits for the finished runs {', '.join(str(r) for r in missing)}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    collapsed = [never_leaves_majority(r) for r in runs]
    name = "zeta-stsb.yaml" if all(collapsed) else "zeta.yaml"
    print(
        f"CoLA lambda = -1 never leaves the majority class on seeds {SEEDS}: "
        f"{collapsed}; phase C spec: {name}",
        file=sys.stderr,
    )
    print(Path(specs_dir) / name)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
