#!/usr/bin/env bash
# Issue 39's scale-out target on one machine: a selection sweep on GPU 0 alone, then the same
# sweep with `--cluster local` over every visible GPU, each with an empty cache folder of its own;
# then benchmarks/scaleout_check.py (same ids, per-point time ratio, wall times) and `compare`.
#   evidence/studies/scaleout_selection.sh OUT CAP_S [RUN_ARGS...]
# RUN_ARGS default to the selection slice of stop 57: ResNet-50, cudnn + cudnn_graph + torch_gpu,
# fp16 + fp32, NHWC, unlimited workspace, --budget-ms 10. ONE_CAP_S (default CAP_S) caps the
# one-GPU sweep alone; MANY_FIRST=1 runs the cluster first, so that a scope too large for one call
# finishes there and the one-GPU sweep, cut, gives the estimate (its rows and points so far).
set -uo pipefail
out=${1:?usage: scaleout_selection.sh OUT CAP_S [RUN_ARGS...]}; cap=${2:?}; shift 2
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(resnet50 --backend cudnn,cudnn_graph,torch_gpu --precision fp16,fp32
                               --layout NHWC --workspace-limit unlimited --budget-ms 10)
mkdir -p "$out"
nvidia-smi -L | tee "$out/summary.txt"
# Each run also starts with empty JIT caches of its own (CUDA's, where cuDNN's runtime-compiled
# engines land, and CuPy's): stop 60's cluster run went first on a fresh machine and paid 103 s
# of stage time preparing eng70/71/78 plans, the one-GPU run after it 9.3 s for the same kind.
timed() {  # NAME CAP [FLAGS...]: the sweep, its log and wall time under OUT
    local name=$1 cap=$2 start=$SECONDS; shift 2
    rm -rf "/tmp/cache-$name" "/tmp/jit-$name" && mkdir -p "/tmp/cache-$name" "/tmp/jit-$name"
    CONVBENCH_CACHE_DIR="/tmp/cache-$name" CUDA_CACHE_PATH="/tmp/jit-$name/cuda" \
        CUPY_CACHE_DIR="/tmp/jit-$name/cupy" timeout "$cap" python3 -m harness.cli run "${args[@]}" \
        "$@" --out "$out/$name.parquet" > "$out/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
    grep -a -E "went|stages|shards per worker" "$out/$name.log" | tail -3
    # a run cut by the cap leaves only its journal, too large to come back from a lent machine
    # (stop 59: the one-GPU journal of 4,676 rows): its rows as a parquet, the journal dropped
    if [ ! -f "$out/$name.parquet" ] && [ -f "$out/$name.parquet.partial.jsonl" ]; then
        python3 -c "import sys; from pathlib import Path; from harness import store
store.write(store.read_journal(Path(sys.argv[1])), Path(sys.argv[2]))" \
            "$out/$name.parquet.partial.jsonl" "$out/$name.parquet" \
            && rm -f "$out/$name.parquet.partial.jsonl" "$out/.$name.parquet.lock"
    fi
}
if [ "${MANY_FIRST:-0}" = 1 ]; then
    timed many "$cap" --cluster local
    CUDA_VISIBLE_DEVICES=0 timed one "${ONE_CAP_S:-$cap}"
else
    CUDA_VISIBLE_DEVICES=0 timed one "${ONE_CAP_S:-$cap}"
    timed many "$cap" --cluster local
fi
python3 benchmarks/scaleout_check.py "$out/one.parquet" "$out/many.parquet" | tee -a "$out/summary.txt"
python3 -m harness.cli compare "$out/one.parquet" "$out/many.parquet" > "$out/compare.txt" 2>&1
echo "compare one many: exit $?" | tee -a "$out/summary.txt"
