#!/usr/bin/env bash
# Copies the small files of every finished run (results.json present) from RUNS/<sweep>/ into
# docs/results/runs/<sweep>/ (config, results, metrics, measurements, dev predictions, and
# each sweep's sweep.json and results.csv; all but config.json gzip-compressed, as name.gz,
# which isotropy report reads), and deletes the finished runs' checkpoints and
# saved models under RUNS. Never copies checkpoints or models.
#
#   RUNS=/work/verdict-runs docs/results/sync.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
RUNS="${RUNS:-/work/verdict-runs}"
KEEP=(config.json results.json metrics.jsonl measurements.jsonl eval_predictions.csv)
for root in "$RUNS"/*/; do
    name="$(basename "$root")"
    [ -f "$root/sweep.json" ] || continue
    dest="$HERE/runs/$name"
    mkdir -p "$dest"
    cp "$root/sweep.json" "$dest/"
    [ -f "$root/results.csv" ] && cp "$root/results.csv" "$dest/"
    for run in "$root"*/; do
        [ -f "$run/results.json" ] || continue
        out="$dest/$(basename "$run")"
        mkdir -p "$out"
        for f in "${KEEP[@]}"; do
            [ -f "$run/$f" ] || continue
            if [ "$f" = config.json ]; then
                cp "$run/$f" "$out/"
            else  # stored compressed (isotropy report reads name.gz where name is absent)
                gzip -9nc "$run/$f" > "$out/$f.gz.tmp" && mv "$out/$f.gz.tmp" "$out/$f.gz"
                rm -f "$out/$f"
            fi
        done
        rm -rf "$run"/checkpoint-* "$run"/model
    done
done
echo "synced $(find "$HERE/runs" -name 'results.json*' | wc -l) finished runs into $HERE/runs"
