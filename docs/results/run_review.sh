#!/usr/bin/env bash
# Runs one step of the review phase of docs/results.md, resumably, in one sweep over the seeds in
# seed-major order (every run of a seed before the next seed's; a worker that finishes a seed's
# last run starts the next seed's first instead of waiting): run it again to go on where it
# stopped. The sweep replaces this script's process: to stop it, kill that process (a sweep of
# a commit with its SIGTERM handling records its running points as interrupted; they resume
# from their last checkpoint).
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_review.sh [SPEC]
#
# SPEC: review (specs/review.yaml: B1 padding, B2 learning rate; the default), dose
# (specs/dose.yaml: B3, run after review; run_dose.sh), dose-confirm (specs/dose-confirm.yaml,
# written by make_confirm_spec.py: B3's confirmation on its seeds 3-5; run_confirm.sh),
# readout (specs/readout.yaml: B4; run_readout.sh) or entropy (specs/entropy.yaml, phase B:
# B5 runs its seeds 3 and 4 with SEEDS="3 4"; run_entropy_seeds.sh) or mpnet (specs/mpnet.yaml:
# B6's MPNet half; run_mpnet.sh) or confirm-cpu (specs/confirm-cpu.yaml: the confirmatory
# step's CPU I-STAR part) or confirm-entropy-cpu (specs/confirm-entropy-cpu.yaml: its CPU
# entropy part; both through run_confirm_cpu.sh). WT, RUNS, WORKERS: as in
# run.sh; SEEDS: the seeds, in order (default: the spec's own). The runs go under $RUNS/SPEC.
# Relative paths in WT, RUNS and GLUE_DIR are the caller's.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SPEC="${1:-review}"
[ -f "$HERE/specs/$SPEC.yaml" ] || { echo "run_review.sh: no spec $HERE/specs/$SPEC.yaml" >&2; exit 2; }
WT="${WT:?set WT to the pinned worktree}"
RUNS="${RUNS:-/work/verdict-runs}"
case "$RUNS" in /*) ;; *) RUNS="$PWD/$RUNS" ;; esac  # the caller's, not the worktree's
WORKERS="${WORKERS:-2}"
SEEDS="${SEEDS:-}"
GLUE_DIR="${GLUE_DIR:-$HERE/../../../shared/glue_data}"
case "$GLUE_DIR" in /*) ;; *) GLUE_DIR="$PWD/$GLUE_DIR" ;; esac
export GLUE_DIR HF_HUB_OFFLINE=1
echo "== $(date -u +%FT%TZ) isotropy sweep $SPEC.yaml ${SEEDS:+--seeds $SEEDS}"
cd "$WT" 2>/dev/null || { echo "run_review.sh: WT: no folder $WT" >&2; exit 2; }
ISO="$PWD/.venv/bin/isotropy"
# shellcheck disable=SC2086  # SEEDS: one argument per seed
exec "$ISO" sweep "$HERE/specs/$SPEC.yaml" --output-root "$RUNS/$SPEC" ${SEEDS:+--seeds $SEEDS} \
    --workers "$WORKERS"
