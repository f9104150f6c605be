#!/usr/bin/env bash
# Runs step B3 of the review phase of docs/results.md (specs/dose.yaml: lambda in {-0.1, -0.03}),
# resumably, seed by seed, once run_review.sh has finished: run it again to go on where it
# stopped.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_dose.sh
#
# WT, RUNS, WORKERS: as in run.sh. The runs go under $RUNS/dose.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WT="${WT:?set WT to the pinned worktree}"
RUNS="${RUNS:-/work/verdict-runs}"
WORKERS="${WORKERS:-2}"
export GLUE_DIR="${GLUE_DIR:-$HERE/../../../shared/glue_data}" HF_HUB_OFFLINE=1
ISO="$WT/.venv/bin/isotropy"
for seed in 0 1 2; do
    echo "== $(date -u +%FT%TZ) isotropy sweep dose.yaml --seeds $seed"
    (cd "$WT" && "$ISO" sweep "$HERE/specs/dose.yaml" --output-root "$RUNS/dose" \
        --seeds "$seed" --workers "$WORKERS") || exit 1
done
echo "== $(date -u +%FT%TZ) done"
