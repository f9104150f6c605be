#!/usr/bin/env bash
# Runs B3's confirmation of docs/results.md (specs/dose-confirm.yaml, written by
# make_confirm_spec.py once B3's screen names a candidate, and named in docs/results.md before
# this starts), resumably, seed-major, on seeds 3-5: run_review.sh with that spec.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_confirm.sh
SEEDS="3 4 5" exec "$(dirname "$0")/run_review.sh" dose-confirm
