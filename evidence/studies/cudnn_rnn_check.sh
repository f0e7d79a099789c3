#!/usr/bin/env bash
# One device call for cuDNN's RNN algorithms (issue 40): their GPU tests, `convbench run
# rnn_quick` on the GPU default (torch_gpu and cudnn_rnn at fp32, tf32, fp16, bf16) with its
# report, then the DeepBench training sweep (every GPU backend, the suite's fp32 unless PRECISION
# says) for at most CAP seconds (0: not at all).
#   evidence/studies/cudnn_rnn_check.sh OUT [CAP] [PRECISION]
set -uo pipefail
out=${1:?usage: cudnn_rnn_check.sh OUT [CAP] [PRECISION]}
cap=${2:-240}
precision=${3:-fp32}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m gpu -rA --durations=5 tests/test_cudnn_rnn.py \
    tests/test_torch_gpu_rnn.py > "$out/gpu-tests.txt" 2>&1
echo "cudnn_rnn gpu tests: exit $?" | tee -a "$out/summary.txt"
tail -3 "$out/gpu-tests.txt" | tee -a "$out/summary.txt"
start=$SECONDS
python3 -m harness.cli run rnn_quick --out "$out/rnn_quick.parquet" > "$out/rnn_quick.txt" 2>&1
echo "rnn_quick: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
python3 -m harness.cli report "$out/rnn_quick.parquet" --out "$out/rnn_quick-report" \
    > /dev/null 2>&1
[ "$cap" -gt 0 ] || exit 0
start=$SECONDS
timeout "$cap" python3 -m harness.cli run deepbench_rnn_training --precision "$precision" \
    --out "$out/deepbench_rnn_training.parquet" > "$out/deepbench.txt" 2>&1
echo "deepbench_rnn_training $precision: exit $? after $((SECONDS - start)) s" \
    | tee -a "$out/summary.txt"
