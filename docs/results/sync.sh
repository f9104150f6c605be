#!/usr/bin/env bash
# Packs the small files of every finished run (results.json present) under RUNS/<sweep>/ (config,
# results, metrics, measurements, dev predictions, and the sweep's sweep.json and results.csv),
# keeping the runs the archives already hold, and deletes the finished runs' checkpoints and
# saved models under RUNS (their checkpoint-<step>/ and model/ folders; a link, or a folder of
# another name such as checkpoint-4.bak, stays). Never copies checkpoints or models.
#
# Where: docs/results/runs/<sweep>.tar.xz once every point the sweep knows is done (sweep.json's
# "points", its latest invocation's, and "other_points", earlier ones'): isotropy report reads
# it as the folder runs/<sweep>/, so the committed report regenerates from whole steps only.
# Until then the finished runs the main archive lacks go to docs/results/runs/.pending/<sweep>/
# (a hidden folder, which isotropy report passes over; restore.sh, review_verdicts.py and
# confirm_phase.py read it): one <run>.tar.xz per run, read as the folder <run>/, written once
# (a run's archive is not rewritten when the next run finishes, so the repository's history
# grows by each run once), beside the sweep's sweep.json and results.csv; they move into the
# main archive when the sweep is complete. A sweep with a failed point stays there until the
# point is run again. (An older .pending/<sweep>.tar.xz, all of a sweep's runs in one, is read
# and replaced by these.)
#
# A run synced again replaces its earlier copy whole. An archive is written the same way every
# time (names sorted, owner 0, time 0, files 644 and folders 755; xz -9e in one thread), and
# only when what it holds changes. A folder beside its archive (unpacked in place) is removed
# where it is a copy of what the archive now holds; a file it holds that the archive does not
# (with those bytes) is left, with a line on stderr. A folder under RUNS/<sweep>/ is a run only
# with the record of one (config.json's settings, its output_dir named like the folder): any
# other is neither packed nor touched.
#
#   RUNS=/work/verdict-runs docs/results/sync.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
RUNS="${RUNS:-/work/verdict-runs}"
KEEP=(config.json results.json metrics.jsonl measurements.jsonl eval_predictions.csv)
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
pack() {  # the folder $1/$2 as an uncompressed tar stream, the same bytes each time
    find "$1/$2" -type f -exec chmod 644 {} + -o -type d -exec chmod 755 {} +
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
        -C "$1" -cf - "$2"
}
write() {  # pack $1/$2 into archive $3 unless it holds exactly that already
    if ! { [ -f "$3" ] && pack "$1" "$2" | cmp -s - <(xz -dc "$3"); }; then
        mkdir -p "$(dirname "$3")"
        local tmp
        tmp="$(mktemp "$(dirname "$3")/.$(basename "$3").XXXXXX")"
        pack "$1" "$2" | xz -9e -T1 >| "$tmp"
        chmod 644 "$tmp" && mv -T "$tmp" "$3"
    fi
}
complete() {  # whether every point the sweep knows is done (its latest invocation's, others');
    # prints the failed points of a sweep that has ended with some
    python3 -c 'import json, sys
state = json.load(open(sys.argv[1], encoding="utf-8"))
points = (state.get("points") or []) + (state.get("other_points") or [])
failed = [p.get("name") for p in points if p.get("state") == "failed"]
if failed and all(p.get("state") in ("done", "failed") for p in points):
    print(", ".join(map(str, failed)))
sys.exit(0 if all(p.get("state") == "done" for p in points) else 1)' "$1"
}
ours() {  # whether folder $1 is a run of isotropy's: config.json records its settings and
    # an output_dir named like the folder
    python3 -c 'import json, os, sys
try:
    with open(os.path.join(sys.argv[1], "config.json"), encoding="utf-8") as f:
        settings = json.load(f)["settings"]
    out = settings["training"]["output_dir"]
    ok = isinstance(settings["isotropy"], dict) and isinstance(out, str) \
        and os.path.basename(os.path.normpath(out)) == os.path.basename(os.path.normpath(sys.argv[1]))
except (OSError, ValueError, KeyError, TypeError):
    ok = False
sys.exit(0 if ok else 1)' "$1"
}
unpacked() {  # remove folder $1's files that $2/ or $3/ holds with the same bytes, then its
    # empty folders; anything else stays, named on stderr
    local f rel kept=0
    while IFS= read -r -d '' f; do
        rel="${f#"$1"/}"
        if { [ -f "$2/$rel" ] && cmp -s "$f" "$2/$rel"; } || { [ -f "$3/$rel" ] && cmp -s "$f" "$3/$rel"; }; then
            rm -f -- "$f"
        else
            kept=1
        fi
    done < <(find "$1" -type f -print0)
    find "$1" -depth -type d -empty -delete
    if [ "$kept" = 1 ]; then
        echo "sync.sh: $1 holds files its archive does not: left as it is" >&2
    fi
}
mkdir -p "$HERE/runs"
for root in "$RUNS"/*/; do
    name="$(basename "$root")"
    [ -f "$root/sweep.json" ] || continue
    archive="$HERE/runs/$name.tar.xz" pending="$HERE/runs/.pending/$name.tar.xz"
    waiting="$HERE/runs/.pending/$name"  # one archive per run, and the sweep's state
    main="$STAGE/main" wait="$STAGE/pending"
    rm -rf "$main" "$wait" && mkdir -p "$main/$name" "$wait/$name"
    [ -f "$archive" ] && xz -dc "$archive" | tar -xf - -C "$main"
    [ -f "$pending" ] && xz -dc "$pending" | tar -xf - -C "$wait"  # the older form
    ours_here=" "  # the run archives of .pending/<sweep>/ that are this script's
    for one in "$waiting"/*.tar.xz; do
        [ -f "$one" ] && [ ! -L "$one" ] || continue
        b="$(basename "$one" .tar.xz)" scratch="$STAGE/one"
        rm -rf "$scratch" && mkdir -p "$scratch"
        xz -dc "$one" | tar -xf - -C "$scratch"
        if [ "$(ls -A "$scratch")" = "$b" ] && [ -d "$scratch/$b" ] && [ ! -L "$scratch/$b" ]; then
            rm -rf "${wait:?}/$name/$b" && mv -T "$scratch/$b" "$wait/$name/$b"  # the newer copy, whole
            ours_here="$ours_here$b "
        else
            echo "sync.sh: $one is not one run's archive (<run>/...): left as it is" >&2
        fi
    done
    for f in sweep.json results.csv; do  # the sweep's state kept with them (RUNS' replaces it)
        [ -f "$waiting/$f" ] && cp "$waiting/$f" "$wait/$name/"
    done
    if failed="$(complete "$root/sweep.json")"; then
        cp -r "$wait/$name/." "$main/$name/"  # the pending runs join the others
        rm -rf "${wait:?}/$name" && mkdir -p "$wait/$name"
        into="$main"
    else
        into="$wait"
        [ -n "$failed" ] && echo "sync.sh: $name has ended with failed points ($failed): its" \
            "runs stay in runs/.pending until they are run again" >&2
    fi
    cp "$root/sweep.json" "$into/$name/"
    [ -f "$root/results.csv" ] && cp "$root/results.csv" "$into/$name/"
    for run in "$root"*/; do
        [ -f "$run/results.json" ] || continue
        if ! ours "$run"; then
            echo "sync.sh: $run is not a run of ours (no config.json recording it): left out" >&2
            continue
        fi
        base="$(basename "$run")"
        out="$into/$name/$base"
        if [ "$into" = "$wait" ] && [ -d "$main/$name/$base" ]; then
            out="$main/$name/$base"  # a run the main archive holds stays there
        fi
        rm -rf "$out" && mkdir -p "$out"
        for f in "${KEEP[@]}"; do
            [ -f "$run/$f" ] && cp "$run/$f" "$out/"
        done
        for f in "$run"/checkpoint-* "$run"/model; do  # the run's own: checkpoint-<step>
            # and model/ folders, not a link or a folder of another name (checkpoint-4.bak)
            n="$(basename "$f")"
            if [[ "$n" =~ ^(checkpoint-(0|[1-9][0-9]*)|model)$ ]] && [ -d "$f" ] && [ ! -L "$f" ]; then
                rm -rf -- "$f"
            fi
        done
    done
    [ -f "$main/$name/sweep.json" ] && write "$main" "$name" "$archive"
    if [ -n "$(ls -A "$wait/$name")" ]; then
        mkdir -p "$waiting"
        for run in "$wait/$name"/*/; do
            [ -d "$run" ] && write "$wait/$name" "$(basename "$run")" "$waiting/$(basename "$run").tar.xz"
        done
        for f in sweep.json results.csv; do
            if [ -f "$wait/$name/$f" ] && ! cmp -s "$wait/$name/$f" "$waiting/$f"; then
                cp "$wait/$name/$f" "$waiting/.$f.tmp" && chmod 644 "$waiting/.$f.tmp"
                mv -T "$waiting/.$f.tmp" "$waiting/$f"
            fi
        done
    fi
    for one in "$waiting"/*.tar.xz "$waiting"/sweep.json "$waiting"/results.csv; do
        # what this script wrote there that the sweep no longer waits with (joined the others)
        [ -f "$one" ] || continue
        b="$(basename "$one" .tar.xz)"
        case "$b" in
        sweep.json | results.csv) ;;
        *) case "$ours_here" in *" $b "*) ;; *) continue ;; esac ;;
        esac
        [ -e "$wait/$name/$b" ] || rm -f -- "$one"
    done
    rm -f "$pending"  # the older form, now held as above
    if [ -d "$HERE/runs/$name" ] && [ ! -L "$HERE/runs/$name" ]; then  # unpacked beside its archive
        unpacked "$HERE/runs/$name" "$main/$name" "$wait/$name"
    fi
    for beside in "$waiting"/*/; do  # a run unpacked beside its archive
        if [ -d "$beside" ] && [ ! -L "${beside%/}" ]; then
            unpacked "${beside%/}" "$main/$name/$(basename "$beside")" "$wait/$name/$(basename "$beside")"
        fi
    done
    rmdir "$waiting" 2>/dev/null || true
done
rmdir "$HERE/runs/.pending" 2>/dev/null || true
count() { for a in "$@"; do [ -f "$a" ] && xz -dc "$a" | tar -tf -; done \
    | grep -c '/results\.json$' || true; }
echo "synced $(count "$HERE"/runs/*.tar.xz) finished runs into $HERE/runs," \
    "$(count "$HERE"/runs/.pending/*/*.tar.xz) more of sweeps still running into runs/.pending"
