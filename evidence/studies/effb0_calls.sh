#!/usr/bin/env bash
# Issue 39, stop 63 (H200): torchvision efficientnet_b0, fp16 + bf16, cudnn + cudnn_graph + torch_gpu, as
# it ran over three lent-machine calls: call 1 `bash effb0_calls.sh run e1 540 --out results/effb0.parquet`;
# calls 2-3 `bash effb0_calls.sh go BUDGET_S` (carrying .cbin: results.tgz and cbcache.tgz from the
# call before): finish the first run (--resume), then a second run with the caches it left
# (convbench plan sets and hung engines, CUDA and CuPy JIT caches), cut at BUDGET_S in all.
set -u
run() {  # NAME CAP [FLAGS...]
    local name=$1 cap=$2; shift 2
    export CONVBENCH_CACHE_DIR=$PWD/.cbcache/convbench CUDA_CACHE_PATH=$PWD/.cbcache/cuda CUPY_CACHE_DIR=$PWD/.cbcache/cupy
    mkdir -p .cbcache results
    S=$SECONDS
    timeout $cap python3 -m harness.cli run --model torchvision:efficientnet_b0 --backend cudnn,cudnn_graph,torch_gpu --precision fp16,bf16 --layout NHWC --batch 32 "$@" > $OUT/$name.log 2>&1
    echo "$name: exit $? after $((SECONDS-S)) s" | tee -a $OUT/$name.log
    grep -a -E "went|stages|race|rows" $OUT/$name.log | tail -6
    ls -la results; du -sh .cbcache/* 
}
go() {  # BUDGET_S
    local budget=$1 T0=$SECONDS
    tar xzf .cbin/results.tgz; tar xzf .cbin/cbcache.tgz; ls -la results
    if [ ! -f results/effb0.parquet ]; then
      run e2 $((budget - 60)) --out results/effb0.parquet --resume
    fi
    left=$((budget - (SECONDS - T0))); echo "second run gets $left s"
    if [ $left -lt 30 ]; then echo "no time left for the second run"
    elif [ -f results/effb0-second.parquet.partial.jsonl ]; then
      run s2 $left --out results/effb0-second.parquet --resume
    elif [ ! -f results/effb0-second.parquet ]; then
      run s1 $left --out results/effb0-second.parquet
    fi
    tar czf $OUT/results.tgz results; tar czf $OUT/cbcache.tgz .cbcache; ls -la $OUT
}
"$@"
