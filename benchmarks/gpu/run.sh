#!/usr/bin/env bash
# The GPU suite and the benchmark at qwen2.5-0.5b and qwen2.5-1.5b shapes on one CUDA machine, and
# one JSON report of both (docs/gpu.md). Needs only python3 with torch (CUDA), transformers, peft
# and the packages docs/gpu.md lists; tether runs from src/ (PYTHONPATH), nothing is installed.
#
#   benchmarks/gpu/run.sh [STEP ...]     (from anywhere; the output folder is $REPORT_DIR)
#
# STEP: suite | peak | bench-0.5b | bench-1.5b | bench-SIZE-RUN | report | all (the default: suite,
# peak, every benchmark run, report). bench-0.5b and bench-1.5b run the five RUNS below at that
# shape; bench-SIZE-RUN one of them (bench-1.5b-grpo-hf, bench-0.5b-ppo-lean-lora16-ckpt). Every
# command is bounded by `timeout` ($STEP_TIMEOUT s, default 590): where a machine is lent 10 minutes
# per command, run one command's step per call (suite, peak, bench-SIZE-RUN, report). The raw
# outputs collect in $REPORT_DIR/raw and `report` assembles $REPORT_DIR/report.json from what is there.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
       PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
REPORT_DIR=${REPORT_DIR:-runs/gpu-report}
RAW="$REPORT_DIR/raw"
LIMIT=${STEP_TIMEOUT:-590}
ITERATIONS=${BENCH_ITERATIONS:-3}
mkdir -p "$RAW"

bounded() {  # NAME COMMAND...: run COMMAND under the time limit, stdout to NAME.out, stderr to NAME.log
    local name=$1; shift
    echo "== $name: $*" >&2
    timeout --kill-after=10 "$LIMIT" "$@" >"$RAW/$name.out" 2>"$RAW/$name.log"
    local rc=$?
    echo "$rc" >"$RAW/$name.rc"
    echo "   exit $rc ($( [ "$rc" = 124 ] && echo "timed out after $LIMIT s" || echo done))" >&2
}

suite() {
    bounded suite "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu -rA --durations=0 \
        --junitxml="$RAW/suite.xml"
}

peak() {
    bounded peak "$PY" benchmarks/gpu/report.py --measure-peak
}

MODELS=(qwen2.5-0.5b qwen2.5-1.5b)
RUNS=(ppo-lean ppo-hf grpo-lean grpo-hf ppo-lean-lora16-ckpt)

bench_one() {  # MODEL ALGORITHM-ENGINE[-lora16-ckpt]: one benchmark run, bf16 on the GPU
    local model=$1 run=$2 algorithm engine extra=()
    algorithm=${run%%-*}
    engine=${run#*-}; engine=${engine%%-*}
    [[ $run == *-lora16-ckpt ]] && extra=(--lora 16 --grad-ckpt)
    bounded "bench-$model-$run" "$PY" -m tether.cli bench --model "$model" --device cuda --algorithm "$algorithm" \
        --precision bf16 --iterations "$ITERATIONS" "${extra[@]}" "rollout.engine=$engine"
}

bench() {  # MODEL: every run of RUNS at MODEL
    local run
    for run in "${RUNS[@]}"; do bench_one "$1" "$run"; done
}

report() {
    "$PY" benchmarks/gpu/report.py "$RAW" >"$REPORT_DIR/report.json" && echo "wrote $REPORT_DIR/report.json" >&2
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(all)
for step in "${steps[@]}"; do
    case "$step" in
        suite) suite ;;
        peak) peak ;;
        report) report ;;
        bench-0.5b | bench-1.5b) bench "qwen2.5-${step#bench-}" ;;
        bench-0.5b-* | bench-1.5b-*)  # one run, e.g. bench-1.5b-grpo-hf or bench-0.5b-ppo-lean-lora16-ckpt
            rest=${step#bench-}; bench_one "qwen2.5-${rest%%-*}" "${rest#*-}" ;;
        all) suite; peak; for model in "${MODELS[@]}"; do bench "$model"; done; report ;;
        *) echo "unknown step '$step': expected suite, peak, bench-0.5b, bench-1.5b, bench-SIZE-RUN (RUN one of" \
                "${RUNS[*]}), report or all" >&2; exit 2 ;;
    esac
done
