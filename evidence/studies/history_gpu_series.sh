#!/usr/bin/env bash
# Issue 41's history target on a GPU: 20 real reruns of a cuDNN slice of ResNet-50 (three layers
# at batch 32, fp16 NHWC), every cuDNN call 15% slower from run 12 on (a spin kernel after it,
# tests/run_planted.py --gpu-slowdown; calls too short for a spin kernel to add only 15% are
# left alone); runs 1-11 take the same code path with nothing planted. One results file, appended run
# by run; replay it with `python benchmarks/history_series.py OUT/series.parquet`.
#   evidence/studies/history_gpu_series.sh OUT [RUNS] [STEP_AT]
set -uo pipefail
out=${1:?usage: history_gpu_series.sh OUT [RUNS] [STEP_AT]}
runs=${2:-20}
step_at=${3:-12}
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
    slowdown=0
    [ "$i" -ge "$step_at" ] && slowdown=0.15
    start=$(date +%s.%N)
    python3 tests/run_planted.py --gpu-slowdown "$slowdown" run resnet50 --backend cudnn \
        --layer resnet_50:conv1,resnet_50:res2a_branch2b,resnet_50:res4a_branch2b \
        --precision fp16 --layout NHWC --gpu-processes 1 --append --out "$out/series.parquet" \
        > "$out/run.txt" 2>&1
    code=$?
    { echo "==== run $i, slowdown $slowdown"; cat "$out/run.txt"; } >> "$out/runs.log"
    rm -f "$out/run.txt"
    echo "run $i slowdown $slowdown: exit $code after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" \
        | tee -a "$out/summary.txt"
done
