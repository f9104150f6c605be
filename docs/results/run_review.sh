#!/usr/bin/env bash
# Runs the review phase of docs/results.md (specs/review.yaml: B1 padding, B2 learning rate),
# resumably, seed by seed: run it again to go on where it stopped.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_review.sh
#
# WT, RUNS, WORKERS: as in run.sh. The runs go under $RUNS/review.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WT="${WT:?set WT to the pinned worktree}"
RUNS="${RUNS:-/work/verdict-runs}"
WORKERS="${WORKERS:-2}"
export GLUE_DIR="${GLUE_DIR:-$HERE/../../../shared/glue_data}" HF_HUB_OFFLINE=1
ISO="$WT/.venv/bin/isotropy"
for seed in 0 1 2; do
    echo "== $(date -u +%FT%TZ) isotropy sweep review.yaml --seeds $seed"
    (cd "$WT" && "$ISO" sweep "$HERE/specs/review.yaml" --output-root "$RUNS/review" \
        --seeds "$seed" --workers "$WORKERS") || exit 1
done
echo "== $(date -u +%FT%TZ) done"
