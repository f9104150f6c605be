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
# Relative paths in WT, RUNS and GLUE_DIR are the caller's. A failed sweep does not stop the
# later ones (but for phase A's learning rates, which the others need); the exit status is then 1.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WT="${WT:?set WT to the pinned worktree}"
WT="$(cd "$WT" && pwd)" || { echo "run.sh: WT: no folder $WT" >&2; exit 2; }
RUNS="${RUNS:-/work/verdict-runs}"
case "$RUNS" in /*) ;; *) RUNS="$PWD/$RUNS" ;; esac  # the caller's, not the worktree's
WORKERS="${WORKERS:-2}"
GLUE_DIR="${GLUE_DIR:-$HERE/../../../shared/glue_data}"
case "$GLUE_DIR" in /*) ;; *) GLUE_DIR="$PWD/$GLUE_DIR" ;; esac
export GLUE_DIR HF_HUB_OFFLINE=1
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
FAILED=()
for seed in 0 1 2; do
    sweep "$SPECS/istar.yaml" istar --seeds "$seed" || FAILED+=("istar seed $seed")
    sweep "$SPECS/entropy.yaml" entropy --seeds "$seed" || FAILED+=("entropy seed $seed")
done
# Phase C shares phase A's root (its grid's point at the task's phase-A zeta is A's run); its
# task follows the rule docs/results.md states (pick_zeta_spec.py): CoLA, or STS-B if I-STAR
# lambda = -1 never leaves CoLA's majority class on seeds 0-2.
if zeta_spec="$(python3 "$HERE/pick_zeta_spec.py" "$RUNS/istar" "$SPECS")"; then
    sweep "$zeta_spec" istar || FAILED+=("phase C")
else
    echo "== phase C not started"
    exit 1
fi
if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "== $(date -u +%FT%TZ) failed: $(printf '%s, ' "${FAILED[@]}" | sed 's/, $//')"
    exit 1
fi
echo "== $(date -u +%FT%TZ) done"
