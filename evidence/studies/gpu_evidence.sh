#!/usr/bin/env bash
# Evidence runs on a lent GPU, one part per device call so each fits its limit.
#   gpu_evidence.sh tests OUT            GPU tests of every GPU backend, then the fidelity check
#   gpu_evidence.sh legacy OUT NAME      every legacy cuDNN algorithm, 5 precisions, 2 layouts,
#                                        workspace limits 0 / 64 MiB / unlimited (ResNet-50)
#   gpu_evidence.sh selection OUT NAME PRECISIONS [LAYOUTS]
#                                        cudnn + cudnn_graph + torch_gpu, unlimited workspace
#   gpu_evidence.sh power OUT NAME RUNS  benchmarks/power.py: RUNS reruns of a legacy cuDNN slice
#                                        of ResNet-50, A/A and planted slowdowns
#   gpu_evidence.sh scaleout OUT NAME [local]
#                                        issue 14's sweep (cudnn + cudnn_graph, fp16/fp32 NHWC) on
#                                        GPU 0 alone, or with `local` over every GPU (--cluster local)
#   gpu_evidence.sh fused OUT NAME [SUITE]  forward ops conv, conv_bias_relu, conv_bias_add_relu on
#                                        cudnn_graph (fused plans + unfused) and torch_gpu, fp16
#                                        NHWC (SUITE default resnet50; video3d for 3-D)
#   gpu_evidence.sh quantized OUT NAME [SUITE]  fp16, fp8_e4m3 and int8 (NHWC, ops conv and
#                                        conv_bias_relu) on cudnn, cudnn_graph and torch_gpu (or $BACKENDS)
#   gpu_evidence.sh outputs OUT NAME [SUITE]  fp8_e4m3 and int8 forward into every result type
#                                        they offer (--output-type), ops conv and conv_bias_relu,
#                                        NHWC, on cudnn_graph and legacy cudnn (or $BACKENDS)
#   gpu_evidence.sh model OUT NAME SOURCE  `run --model SOURCE` (cudnn + cudnn_graph + torch_gpu,
#                                        fp16/bf16 NHWC, batch 32), then its table, fp16 plan, report
# Results go to OUT/NAME.parquet (a killed sweep leaves its gzipped journal); logs beside them.
# SECONDS_LEFT caps a sweep's time; EXTRA_FLAGS are added to every sweep (e.g. --gpu-processes 1);
# SWEEP_ONLY=1 stops `model` after the sweep (at most 8 files come back from a lent machine);
# RESUME_FROM=DIR resumes `model` from DIR/NAME.suite.toml and DIR/NAME.parquet (a finished run,
# e.g. one precision of two) and/or DIR/NAME.parquet.partial.jsonl.gz, the other sweeps likewise.
set -uo pipefail
part=$1; out=$2
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -m harness.cli peaks > "$out/peaks.log" 2>&1
cp ~/.cache/convbench/peaks-*.json "$out/peaks.json" 2>/dev/null

resume_from() {  # NAME: put $RESUME_FROM's results of NAME back in /tmp (a finished run's
                 # NAME.parquet, a killed run's gzipped journal, or both); sets resume
  local from=$RESUME_FROM/$1.parquet
  [ -f "$from" ] && cp "$from" /tmp/ && resume=--resume && echo "resuming from $1.parquet"
  [ -f "$from.partial.jsonl.gz" ] && zcat "$from.partial.jsonl.gz" > "/tmp/$1.parquet.partial.jsonl" \
    && resume=--resume && echo "resuming from $(wc -l < "/tmp/$1.parquet.partial.jsonl") journal lines"
  return 0
}

sweep() {  # NAME ARGS...
  local name=$1; shift
  local start=$SECONDS resume=""
  [ -n "${RESUME_FROM:-}" ] && resume_from "$name"
  timeout "${SECONDS_LEFT:-540}" python3 -m harness.cli run "${SUITE:-resnet50}" "$@" ${EXTRA_FLAGS:-} $resume \
    --out "/tmp/$name.parquet" > "$out/$name.log" 2>&1
  echo "exit $? sweep wall time: $((SECONDS - start)) s" | tee -a "$out/$name.log"
  grep -a -E "^note|^wrote" "$out/$name.log"
  [ -f "/tmp/$name.parquet" ] && cp "/tmp/$name.parquet" "$out/"
  for f in /tmp/$name*.jsonl; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
}

case "$part" in
  tests)
    python3 -m pytest -q -p no:cacheprovider -s tests/test_cudnn_gpu.py tests/test_cudnn_graph_gpu.py \
      tests/test_torch_gpu.py tests/test_quantized_gpu.py 2>&1 | tee "$out/gpu_tests.log" | grep -E "passed|failed|error|spin|Error" | tail -15
    timeout 240 python3 benchmarks/gpu_fidelity.py --out "$out/fidelity.csv" 2>&1 \
      | grep -v Warning | tee "$out/fidelity.log" | tail -16 ;;
  legacy)
    sweep "$3" --backend cudnn --precision fp32,tf32,fp16,bf16,fp64 --layout NCHW,NHWC \
      --workspace-limit 0,64MiB,unlimited --budget-ms 15 ;;
  selection)
    sweep "$3" --backend cudnn,cudnn_graph,torch_gpu --precision "$4" --layout "${5:-NCHW,NHWC}" \
      --workspace-limit unlimited --budget-ms 10 ;;
  fused)
    SUITE=${4:-resnet50} sweep "$3" --backend cudnn_graph,torch_gpu --precision fp16 --layout NHWC \
      --direction fwd --op conv,conv_bias_relu,conv_bias_add_relu --budget-ms 10 ;;
  quantized)
    SUITE=${4:-resnet50} sweep "$3" --backend "${BACKENDS:-cudnn,cudnn_graph,torch_gpu}" --precision fp16,fp8_e4m3,int8 \
      --layout NHWC --op conv,conv_bias_relu --budget-ms 10 ;;
  outputs)
    SUITE=${4:-resnet50} sweep "$3" --backend "${BACKENDS:-cudnn,cudnn_graph}" --precision fp8_e4m3,int8 \
      --output-type auto,bf16,fp32,fp8_e4m3,int8 --direction fwd --layout NHWC \
      --op conv,conv_bias_relu --budget-ms 10 ;;
  scaleout)
    if [ "${4:-}" = local ]; then
      sweep "$3" --backend cudnn,cudnn_graph --precision fp16,fp32 --layout NHWC --cluster local
    else
      CUDA_VISIBLE_DEVICES=0 sweep "$3" --backend cudnn,cudnn_graph --precision fp16,fp32 --layout NHWC
    fi ;;
  power)
    timeout "${SECONDS_LEFT:-560}" python3 benchmarks/power.py --suite resnet50 --runs "$4" \
      --out "$out/$3.md" -- --backend cudnn --precision fp16,fp32 --layout NHWC \
      --direction fwd,bwd_data --budget-ms 5 2>&1 | tee "$out/$3.log" | tail -40 ;;
  model)
    start=$SECONDS
    resume=""
    if [ -n "${RESUME_FROM:-}" ]; then     # a folder holding NAME.suite.toml and the gzipped journal
      cp "$RESUME_FROM/$3.suite.toml" /tmp/ && resume_from "$3"
    fi
    timeout "${SECONDS_LEFT:-540}" python3 -m harness.cli run --model "$4" --backend cudnn,cudnn_graph,torch_gpu \
      --precision fp16,bf16 --layout NHWC --batch 32 --budget-ms 10 ${EXTRA_FLAGS:-} $resume \
      --out "/tmp/$3.parquet" > "$out/$3.log" 2>&1
    echo "exit $? sweep wall time: $((SECONDS - start)) s" | tee -a "$out/$3.log"
    head -3 "$out/$3.log"
    for f in /tmp/$3.parquet /tmp/$3.suite.toml; do [ -f "$f" ] && cp "$f" "$out/"; done
    for f in /tmp/$3*.jsonl; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
    [ -n "${SWEEP_ONLY:-}" ] && exit 0     # table, plan and report can be made from the file later
    python3 -m harness.cli table "/tmp/$3.parquet" > "$out/$3-table.txt" 2>&1
    tail -4 "$out/$3-table.txt"
    python3 -m harness.cli plan "/tmp/$3.parquet" --suite "/tmp/$3.suite.toml" --precision fp16 \
      -o "$out/$3-plan-fp16.json" 2>&1 | tail -2
    python3 -m harness.cli report "/tmp/$3.parquet" --out "$out/report-$3" 2>&1 | tail -2 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
