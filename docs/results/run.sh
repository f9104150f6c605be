#!/usr/bin/env bash
# Runs the study behind docs/results.md, resumably: run it again to go on where it stopped.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run.sh
#
# WT: a checkout of isotropy with its own virtual environment (.venv) that nobody edits while
# this runs (git worktree add --detach WT COMMIT); every run records the commit it ran.
# RUNS: where the sweeps' output roots go (RUNS/istar-lr, RUNS/istar, RUNS/entropy).
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

# sweep SPEC ROOT [OPTIONS]: the spec's points under $RUNS/ROOT (the spec files name
# /work/verdict-runs/ROOT; --output-root puts them under $RUNS wherever that is).
sweep() {
    local spec="$1" root="$RUNS/$2"
    shift 2
    echo "== $(date -u +%FT%TZ) isotropy sweep $spec --output-root $root $*"
    (cd "$WT" && "$ISO" sweep "$spec" --output-root "$root" "$@" --workers "$WORKERS")
}

sweep "$SPECS/istar-lr.yaml" istar-lr || exit 1
if [ ! -f "$SPECS/istar.yaml" ]; then
    "$ISO" report "$RUNS/istar-lr" --pick-best-over learning_rate --no-figures \
        --output-dir "$RUNS/istar-lr-report" || exit 1
    python3 "$HERE/make_istar_spec.py" "$RUNS/istar-lr-report/picks.csv" "$SPECS/istar.yaml" || exit 1
fi
for seed in 0 1 2; do
    sweep "$SPECS/istar.yaml" istar --seeds "$seed"
    sweep "$SPECS/entropy.yaml" entropy --seeds "$seed"
done
# Phase C shares phase A's root (its grid's point at the task's phase-A zeta is A's run); its
# task follows the rule docs/results.md states (pick_zeta_spec.py): CoLA, or STS-B if I-STAR
# lambda = -1 never leaves CoLA's majority class on seeds 0-2.
if zeta_spec="$(python3 "$HERE/pick_zeta_spec.py" "$RUNS/istar" "$SPECS")"; then
    sweep "$zeta_spec" istar
else
    echo "== phase C not started"
    exit 1
fi
echo "== $(date -u +%FT%TZ) done"
