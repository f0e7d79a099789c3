#!/usr/bin/env bash
# Evidence runs on a lent GPU, one part per device call so each fits its limit.
#   gpu_evidence.sh tests OUT            GPU tests of every GPU backend, then the fidelity check
#   gpu_evidence.sh legacy OUT NAME      every legacy cuDNN algorithm, 5 precisions, 2 layouts,
#                                        workspace limits 0 / 64 MiB / unlimited (ResNet-50)
#   gpu_evidence.sh selection OUT NAME PRECISIONS [LAYOUTS]
#                                        cudnn + cudnn_graph + torch_gpu, unlimited workspace
#   gpu_evidence.sh power OUT NAME RUNS  benchmarks/power.py: RUNS reruns of a legacy cuDNN slice
#                                        of ResNet-50, A/A and planted slowdowns
# Results go to OUT/NAME.parquet (a killed sweep leaves its gzipped journal); logs beside them.
# SECONDS_LEFT caps a sweep's time; EXTRA_FLAGS are added to every sweep (e.g. --gpu-processes 1).
set -uo pipefail
part=$1; out=$2
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -m harness.cli peaks > "$out/peaks.log" 2>&1
cp ~/.cache/convbench/peaks-*.json "$out/peaks.json" 2>/dev/null

sweep() {  # NAME ARGS...
  local name=$1; shift
  local start=$SECONDS
  timeout "${SECONDS_LEFT:-540}" python3 -m harness.cli run resnet50 "$@" ${EXTRA_FLAGS:-} --out "/tmp/$name.parquet" \
    > "$out/$name.log" 2>&1
  echo "exit $? sweep wall time: $((SECONDS - start)) s" | tee -a "$out/$name.log"
  grep -a -E "^note|^wrote" "$out/$name.log"
  [ -f "/tmp/$name.parquet" ] && cp "/tmp/$name.parquet" "$out/"
  for f in /tmp/$name*.jsonl; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
}

case "$part" in
  tests)
    python3 -m pytest -q -p no:cacheprovider -s tests/test_cudnn_gpu.py tests/test_cudnn_graph_gpu.py \
      tests/test_torch_gpu.py 2>&1 | tee "$out/gpu_tests.log" | grep -E "passed|failed|error|spin|Error" | tail -15
    timeout 240 python3 benchmarks/gpu_fidelity.py --out "$out/fidelity.csv" 2>&1 \
      | grep -v Warning | tee "$out/fidelity.log" | tail -16 ;;
  legacy)
    sweep "$3" --backend cudnn --precision fp32,tf32,fp16,bf16,fp64 --layout NCHW,NHWC \
      --workspace-limit 0,64MiB,unlimited --budget-ms 15 ;;
  selection)
    sweep "$3" --backend cudnn,cudnn_graph,torch_gpu --precision "$4" --layout "${5:-NCHW,NHWC}" \
      --workspace-limit unlimited --budget-ms 10 ;;
  power)
    timeout "${SECONDS_LEFT:-560}" python3 benchmarks/power.py --suite resnet50 --runs "$4" \
      --out "$out/$3.md" -- --backend cudnn --precision fp16,fp32 --layout NHWC \
      --direction fwd,bwd_data --budget-ms 5 2>&1 | tee "$out/$3.log" | tail -40 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
