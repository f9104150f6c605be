#!/usr/bin/env bash
# Runs step B5 of the review phase of docs/results.md: phase B's spec (specs/entropy.yaml) on
# seeds 3 and 4, into phase B's root, resumably: run_review.sh with the entropy spec.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_entropy_seeds.sh
SEEDS="3 4" exec "$(dirname "$0")/run_review.sh" entropy
