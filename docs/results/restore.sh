#!/usr/bin/env bash
# Puts the committed runs back under $RUNS on a new machine, so that the sweeps resume where
# they stopped (the inverse of sync.sh): per packed sweep docs/results/runs/<sweep>.tar.xz (and
# runs/.pending/<sweep>/, the finished runs of a sweep still running, one <run>.tar.xz each,
# read first: its sweep.json is the newer), its sweep.json and results.csv, and each finished run's files (a
# run directory with a results.json counts as done). What $RUNS already holds is left as it
# is: it may be newer (an interrupted run's checkpoint); a sweep.json (with its results.csv) is
# replaced only by one updated later (a sweep that went on elsewhere). Prints, per sweep, the
# commits its runs were made at: pin the sweep's worktree at that commit.
#
#   RUNS=/work/verdict-runs docs/results/restore.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
RUNS="${RUNS:-/work/verdict-runs}"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
newer() {  # whether sweep state $1 was updated after $2 (or $2 is absent)
    [ ! -e "$2" ] || python3 -c 'import json, sys
a, b = (json.load(open(p, encoding="utf-8")).get("updated") or "" for p in sys.argv[1:])
sys.exit(0 if a > b else 1)' "$1" "$2"
}
for archive in "$HERE"/runs/.pending/*/ "$HERE"/runs/.pending/*.tar.xz "$HERE"/runs/*.tar.xz; do
    if [ -d "$archive" ]; then  # a sweep still running: its state and one archive per run
        name="$(basename "$archive")"
        rm -rf "${STAGE:?}/$name" && mkdir -p "$STAGE/$name"
        for f in sweep.json results.csv; do
            [ -f "$archive/$f" ] && cp "$archive/$f" "$STAGE/$name/"
        done
        for one in "$archive"*.tar.xz; do
            [ -f "$one" ] && xz -dc "$one" | tar -xf - -C "$STAGE/$name"
        done
    else
        [ -f "$archive" ] || continue
        name="$(basename "$archive" .tar.xz)"
        rm -rf "${STAGE:?}/$name"
        xz -dc "$archive" | tar -xf - -C "$STAGE"
    fi
    src="$STAGE/$name"
    [ -f "$src/sweep.json" ] || continue
    dest="$RUNS/$name"
    mkdir -p "$dest"
    if [ -f "$src/sweep.json" ] && newer "$src/sweep.json" "$dest/sweep.json"; then
        cp "$src/sweep.json" "$dest/"  # the archive's state is the newer: a sweep gone on since
        [ -f "$src/results.csv" ] && cp "$src/results.csv" "$dest/"
    fi
    restored=0
    for run in "$src"/*/; do
        [ -f "$run/config.json" ] || continue
        out="$dest/$(basename "$run")"
        if [ -e "$out" ] || [ -L "$out" ]; then continue; fi
        # whole, or not at all: copied into a folder of its own (mktemp's), then renamed
        part="$(mktemp -d "$dest/.restoring.XXXXXX")"
        cp -r "$run/." "$part/" && chmod 755 "$part" && mv -T "$part" "$out"
        restored=$((restored + 1))
    done
    commits="$(sed -n 's/.*"git_commit": "\([0-9a-f]\{7\}\)[0-9a-f]*".*/\1/p' "$src"/*/config.json \
        2>/dev/null | sort -u | tr '\n' ' ' || true)"  # none: a sweep with no finished run
    from="$name"; case "$archive" in */.pending/*) from="$name (still running)";; esac
    echo "$from: $restored run(s) restored into $dest; made at commit(s): ${commits:-unknown}"
done
