#!/usr/bin/env bash
# Runs step B3 of the review phase of docs/results.md (specs/dose.yaml: lambda in {-0.1, -0.03}),
# resumably, seed-major, once run_review.sh has finished: run_review.sh with the dose spec.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_dose.sh
exec "$(dirname "$0")/run_review.sh" dose
