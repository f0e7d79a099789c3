#!/usr/bin/env bash
# Issue 39's legacy target (<= 170 s) against issue 38's runoff: the legacy ResNet-50 sweep (the
# flags of legacy_before_after.sh; 12,600 rows, two timing processes) at this tree with the
# runoff (the default) and with --no-runoff, one after the other on one machine.
#   evidence/studies/legacy_runoff_cost.sh OUT [CAP_S]
set -uo pipefail
out=${1:?usage: legacy_runoff_cost.sh OUT [CAP_S]}
cap=${2:-260}
mkdir -p "$out"
flags=(resnet50 --backend cudnn --precision fp32,tf32,fp16,bf16,fp64 --layout NCHW,NHWC
       --workspace-limit 0,64MiB,unlimited --budget-ms 15 --gpu-processes 2)
for variant in runoff no-runoff; do
    extra=(); [ "$variant" = no-runoff ] && extra=(--no-runoff)
    start=$SECONDS
    timeout "$cap" python3 -m harness.cli run "${flags[@]}" "${extra[@]}" \
        --out "$out/legacy-$variant.parquet" > "$out/legacy-$variant.log" 2>&1
    echo "legacy $variant: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
    tail -4 "$out/legacy-$variant.log" | cut -c1-400
done
