#!/usr/bin/env bash
# Evidence runs on a lent GPU (issues 4 and 5), one part per device call so each fits its limit.
#   gpu_evidence.sh tests OUT            GPU tests of every GPU backend, then the fidelity check
#   gpu_evidence.sh legacy OUT NAME      issue 4: every legacy cuDNN algorithm, 5 precisions,
#                                        2 layouts, workspace limits 0 / 64 MiB / unlimited
#   gpu_evidence.sh selection OUT NAME PRECISIONS
#                                        issue 5: cudnn + cudnn_graph + torch_gpu, unlimited
# Results go to OUT/NAME.csv.gz (the device has no pyarrow; convert with convbench's store), a
# killed sweep leaves its gzipped journal; logs beside them. SECONDS_LEFT caps a sweep's time.
set -uo pipefail
part=$1; out=$2
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -m harness.cli peaks | tee "$out/peaks.log"
cp ~/.cache/convbench/peaks-*.json "$out/peaks.json" 2>/dev/null

sweep() {  # NAME ARGS...
  local name=$1; shift
  local start=$SECONDS
  timeout "${SECONDS_LEFT:-540}" python3 -m harness.cli run resnet50 "$@" --out "/tmp/$name.csv" \
    > "$out/$name.log" 2>&1
  echo "exit $? sweep wall time: $((SECONDS - start)) s" | tee -a "$out/$name.log"
  grep -a -A3 "^wrote" "$out/$name.log"
  for f in "/tmp/$name.csv" /tmp/$name*.jsonl; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
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
    sweep "$3" --backend cudnn,cudnn_graph,torch_gpu --precision "$4" --layout NCHW,NHWC \
      --workspace-limit unlimited --budget-ms 10 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
