#!/usr/bin/env bash
# Around a GPU window: the CPU runs' archives (docs/results/runs/, which no GPU command reads)
# out of the working tree and back, so that a call carries the code and the GPU runs only
# (a tracked file absent from the working tree does not travel; tests/test_repository_size.py
# holds the rest to its budget).
#
#   benchmarks/gpu/set_aside.sh out    # before the first call (and before make_stage.py)
#   benchmarks/gpu/set_aside.sh back   # after the window: the archives as committed
#
# `out` deletes only files git tracks there, exactly as committed, so `back` (git checkout)
# restores every byte; `out` refuses, changing nothing, while the folder holds anything else
# (a change not committed, a file git does not track: commit or move it first), and `back`
# while a set-aside file has been written again (it would be overwritten). In between,
# git takes the files as unchanged (skip-worktree): `git add -A` or `git commit -a` never
# records them as deleted. CPU tests that read the runs need them back.
set -euo pipefail
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
RUNS=docs/results/runs
cd "$ROOT"
case "${1:-}" in
out)
    if [ -n "$(git status --porcelain --ignored --untracked-files=all -- "$RUNS")" ]; then
        echo "set_aside.sh: $RUNS holds files that are not committed as they are; nothing was" \
            "removed (commit or move them first):" >&2
        git status --short --ignored --untracked-files=all -- "$RUNS" >&2
        exit 1
    fi
    git ls-files -z -- "$RUNS" | xargs -0 -r git update-index --skip-worktree --
    n=0
    while IFS= read -r -d '' f; do
        rm -f -- "$f"
        n=$((n + 1))
    done < <(git ls-files -z -- "$RUNS")
    find "$RUNS" -depth -type d -empty -delete 2>/dev/null || true
    echo "set aside $n committed files of $RUNS; 'benchmarks/gpu/set_aside.sh back' restores them"
    ;;
back)
    # a set-aside file written again meanwhile (docs/results/sync.sh in the window) would be
    # overwritten by the committed one: refuse, changing nothing
    rewritten=()
    while IFS= read -r -d '' f; do
        d="$(dirname -- "$f")"
        while [ "$d" != "." ]; do  # a file (or link) where one of its folders was
            if [ -e "$d" ] || [ -L "$d" ]; then
                [ -d "$d" ] && [ ! -L "$d" ] || rewritten+=("$d")
            fi
            [ "$d" = "$RUNS" ] && break
            d="$(dirname -- "$d")"
        done
        if [ -e "$f" ] || [ -L "$f" ]; then
            [ -f "$f" ] && [ ! -L "$f" ] \
                && [ "$(git hash-object -- "$f")" = "$(git rev-parse ":$f")" ] \
                || rewritten+=("$f")
        fi
    done < <(git ls-files -z -- "$RUNS")
    if [ "${#rewritten[@]}" -gt 0 ]; then
        echo "set_aside.sh: these set-aside files were written again since 'out'; nothing was" \
            "restored (move them elsewhere, then run 'back' again):" >&2
        printf '  %s\n' "${rewritten[@]}" | sort -u >&2
        exit 1
    fi
    git ls-files -z -- "$RUNS" | xargs -0 -r git update-index --no-skip-worktree --
    git checkout -- "$RUNS"
    echo "restored $RUNS as committed"
    ;;
*)
    echo "usage: benchmarks/gpu/set_aside.sh out|back" >&2
    exit 2
    ;;
esac
