#!/usr/bin/env bash
# Runs B3's confirmation of docs/results.md (specs/dose-confirm.yaml, written by
# make_confirm_spec.py once B3's screen names a candidate; its seeds 3-5), resumably,
# seed-major: run_review.sh with that spec. Refuses unless the spec is committed unchanged and
# docs/results.md names each of its candidates ("lambda = ... on ..."), so that what runs is
# what was named before the runs started.
#
#   WT=/path/to/pinned/worktree RUNS=/work/verdict-runs docs/results/run_confirm.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SPEC="$HERE/specs/dose-confirm.yaml"
[ -f "$SPEC" ] || { echo "run_confirm.sh: no $SPEC (python make_confirm_spec.py writes it)" >&2; exit 2; }
if ! { git -C "$HERE" ls-files --error-unmatch "$SPEC" >/dev/null 2>&1 \
        && git -C "$HERE" diff --quiet HEAD -- "$SPEC"; }; then
    echo "run_confirm.sh: commit $SPEC, unchanged, before its runs start" >&2; exit 2
fi
while IFS= read -r named; do
    grep -qF -- "$named" "$HERE/../results.md" \
        || { echo "run_confirm.sh: docs/results.md does not name '$named'" >&2; exit 2; }
done < <(sed -n 's/^#   \(lambda = .* on .*\)$/\1/p' "$SPEC")
unset SEEDS  # the spec's own seeds
exec "$HERE/run_review.sh" dose-confirm
