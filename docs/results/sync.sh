#!/usr/bin/env bash
# Packs the small files of every finished run (results.json present) under RUNS/<sweep>/ into
# docs/results/runs/<sweep>.tar.xz (config, results, metrics, measurements, dev predictions,
# and the sweep's sweep.json and results.csv; isotropy report reads the archive as the folder
# runs/<sweep>/), keeping the runs the archive already holds, and deletes the finished runs'
# checkpoints and saved models under RUNS. Never copies checkpoints or models. A run synced
# again replaces its earlier copy whole. The archive is written the same way every time (names
# sorted, owner 0, time 0, files 644 and folders 755; xz -9e in one thread), and only when what
# it holds changes. A sweep committed as a folder of gzip-compressed files (the earlier
# layout) is packed in its place; a folder beside an archive is removed (the archive holds it).
#
#   RUNS=/work/verdict-runs docs/results/sync.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
RUNS="${RUNS:-/work/verdict-runs}"
KEEP=(config.json results.json metrics.jsonl measurements.jsonl eval_predictions.csv)
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
pack() {  # the sweep folder $STAGE/$1 as an uncompressed tar stream, the same bytes each time
    find "$STAGE/$1" -type f -exec chmod 644 {} + -o -type d -exec chmod 755 {} +
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
        -C "$STAGE" -cf - "$1"
}
mkdir -p "$HERE/runs"
for root in "$RUNS"/*/; do
    name="$(basename "$root")"
    [ -f "$root/sweep.json" ] || continue
    archive="$HERE/runs/$name.tar.xz" old="$HERE/runs/$name"
    rm -rf "${STAGE:?}/$name"
    if [ -f "$archive" ]; then
        xz -dc "$archive" | tar -xf - -C "$STAGE"
    elif [ -d "$old" ]; then  # the earlier layout: a folder with name.gz files
        cp -r "$old" "$STAGE/$name"
        find "$STAGE/$name" -name '*.gz' -exec gzip -d {} +
    fi
    mkdir -p "$STAGE/$name"
    cp "$root/sweep.json" "$STAGE/$name/"
    [ -f "$root/results.csv" ] && cp "$root/results.csv" "$STAGE/$name/"
    for run in "$root"*/; do
        [ -f "$run/results.json" ] || continue
        out="$STAGE/$name/$(basename "$run")"
        rm -rf "$out" && mkdir -p "$out"
        for f in "${KEEP[@]}"; do
            [ -f "$run/$f" ] && cp "$run/$f" "$out/"
        done
        rm -rf "$run"/checkpoint-* "$run"/model
    done
    if ! { [ -f "$archive" ] && pack "$name" | cmp -s - <(xz -dc "$archive"); }; then
        pack "$name" | xz -9e -T1 > "$archive.tmp"  # something new (else left as it is)
        mv "$archive.tmp" "$archive"
    fi
    rm -rf "$old"
done
echo "synced $(for a in "$HERE"/runs/*.tar.xz; do [ -f "$a" ] && xz -dc "$a" | tar -tf -; done \
    | grep -c '/results\.json$') finished runs into $HERE/runs"
