#!/usr/bin/env bash
# Runs the study behind docs/results.md, resumably: run it again to go on where it stopped.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run.sh
#
# WT: a checkout of isotropy with its own virtual environment (.venv) that nobody edits while
# this runs (git worktree add --detach WT COMMIT); every run records the commit it ran.
# RUNS: where the sweeps' output roots are (the spec files name /work/verdict-runs/...).
# Order: the learning rate of each task (phase A, seed 0 without a regularizer), then seed 0 of
# phase A and of phase B, then seed 1 of both, then seed 2: every stop leaves whole seeds.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WT="${WT:?set WT to the pinned worktree}"
RUNS="${RUNS:-/work/verdict-runs}"
WORKERS="${WORKERS:-2}"
export GLUE_DIR="${GLUE_DIR:-$HERE/../../../shared/glue_data}" HF_HUB_OFFLINE=1
ISO="$WT/.venv/bin/isotropy"
SPECS="$HERE/specs"

sweep() { echo "== $(date -u +%FT%TZ) isotropy sweep $*"; (cd "$WT" && "$ISO" sweep "$@" --workers "$WORKERS"); }

sweep "$SPECS/istar-lr.yaml" || exit 1
if [ ! -f "$SPECS/istar.yaml" ]; then
    "$ISO" report "$RUNS/istar-lr" --pick-best-over learning_rate --no-figures \
        --output-dir "$RUNS/istar-lr-report" || exit 1
    python3 "$HERE/make_istar_spec.py" "$RUNS/istar-lr-report/picks.csv" "$SPECS/istar.yaml" || exit 1
fi
for seed in 0 1 2; do
    sweep "$SPECS/istar.yaml" --seeds "$seed"
    sweep "$SPECS/entropy.yaml" --seeds "$seed"
done
if [ -f "$SPECS/zeta.yaml" ]; then
    sweep "$SPECS/zeta.yaml"
fi
echo "== $(date -u +%FT%TZ) done"
