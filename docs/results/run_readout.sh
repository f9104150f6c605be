#!/usr/bin/env bash
# Runs step B4 of the review phase of docs/results.md (specs/readout.yaml: the mean readout),
# resumably, seed-major: run_review.sh with the readout spec. WT must be a worktree at a commit
# with --classifier_pooling.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_readout.sh
exec "$(dirname "$0")/run_review.sh" readout
