#!/usr/bin/env bash
# The cuDNN evidence run on a lent GPU (issue 4). Usage: gpu_evidence.sh PART OUTDIR
#   part 1: GPU tests, peaks, the evidence sweep, the fidelity check
#   part 2: the second (repeatability) sweep
set -uo pipefail
part=$1; out=$2
export PYTHONUNBUFFERED=1
sweep() {
  local start=$SECONDS
  python3 -m harness.cli run resnet50 --backend cudnn \
    --precision fp32,tf32,fp16,bf16,fp64 --layout NCHW,NHWC --workspace-limit 0,64MiB,unlimited \
    --budget-ms 15 --out "$1" > "$1.log" 2>&1
  echo "sweep wall time: $((SECONDS - start)) s" | tee -a "$1.log"
  grep -a -A3 "^wrote" "$1.log"
}
if [ "$part" = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
  python3 -m pytest -q -p no:cacheprovider -s tests/test_cudnn_gpu.py 2>&1 | tee "$out/gpu_tests.log" | tail -15
  python3 -m harness.cli peaks | tee "$out/peaks.log"
  cp ~/.cache/convbench/peaks-*.json "$out/peaks.json"
  sweep "$out/evidence_a.csv"
  python3 benchmarks/gpu_fidelity.py --out "$out/fidelity.csv" 2>&1 | tee "$out/fidelity.log" | tail -40
  gzip -f "$out/evidence_a.csv"
else
  python3 -m harness.cli peaks > /dev/null
  sweep "$out/evidence_b.csv"
  gzip -f "$out/evidence_b.csv"
fi
