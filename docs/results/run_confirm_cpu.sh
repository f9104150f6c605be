#!/usr/bin/env bash
# Runs one CPU spec of the confirmatory step resumably, seed-major: run_review.sh with that
# spec. SPEC: confirm-cpu (the default; specs/confirm-cpu.yaml: I-STAR, MRPC and STS-B, seeds
# 5-9, the authors' padding protocol) or confirm-entropy-cpu (specs/confirm-entropy-cpu.yaml:
# persistent entropy on the paper's 10 epochs, CoLA and MRPC, seeds 5-9). Refuses unless
# docs/results.md holds the confirmatory plan and the spec is committed unchanged, in this
# checkout and in the pinned worktree WT that runs it, so that what runs is what the plan and
# the spec fixed before the runs started (each run's config.json records the worktree's commit).
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_confirm_cpu.sh [SPEC]
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
NAME="${1:-confirm-cpu}"
case "$NAME" in
    confirm-cpu|confirm-entropy-cpu) ;;
    *) echo "run_confirm_cpu.sh: SPEC is confirm-cpu or confirm-entropy-cpu, not '$NAME'" >&2; exit 2 ;;
esac
SPEC="specs/$NAME.yaml"
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
exec "$HERE/run_review.sh" "$NAME"
