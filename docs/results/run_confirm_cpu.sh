#!/usr/bin/env bash
# Runs the CPU part of the confirmatory step (specs/confirm-cpu.yaml: MRPC and STS-B, seeds 5-9,
# the authors' padding protocol) resumably, seed-major: run_review.sh with that spec. Refuses
# unless docs/results.md holds the confirmatory plan and the spec is committed unchanged, in
# this checkout and in the pinned worktree WT that runs it, so that what runs is what the plan
# and the spec fixed before the runs started (sweep.json records the worktree's commit).
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_confirm_cpu.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SPEC="specs/confirm-cpu.yaml"
grep -q '^## Confirmatory plan (2026-11-28)$' "$HERE/../results.md" \
    || { echo "run_confirm_cpu.sh: docs/results.md holds no confirmatory plan" >&2; exit 2; }
for tree in "$HERE/../.." "${WT:?set WT to the pinned worktree}"; do
    if ! { git -C "$tree" ls-files --error-unmatch "docs/results/$SPEC" >/dev/null 2>&1 \
            && git -C "$tree" diff --quiet HEAD -- "docs/results/$SPEC"; }; then
        echo "run_confirm_cpu.sh: commit docs/results/$SPEC, unchanged, in $tree before its runs start" >&2
        exit 2
    fi
done
cmp -s "$HERE/$SPEC" "$WT/docs/results/$SPEC" \
    || { echo "run_confirm_cpu.sh: $WT's $SPEC differs from this checkout's" >&2; exit 2; }
unset SEEDS  # the spec's own seeds
exec "$HERE/run_review.sh" confirm-cpu
