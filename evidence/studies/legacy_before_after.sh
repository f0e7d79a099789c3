#!/usr/bin/env bash
# Issue 39's first target on one warm machine: the legacy ResNet-50 sweep (every cuDNN legacy
# algorithm, five precisions, two layouts, three workspace limits: 12,600 rows; two timing
# processes) at an earlier commit (an export in .before/: c2f7762, where the issue was filed,
# on 2026-11-27) and at this tree, one after the other; then `compare` and `table --profile`.
#   git archive BEFORE harness suites pyproject.toml | tar -x -C .before   # here, once
# The first run on a fresh machine pays the driver's kernel compiles (stop 52: ~30 s), so
# ORDER=after-first gives that handicap to this tree instead.
#   evidence/studies/legacy_before_after.sh OUT [BEFORE_CAP_S] [AFTER_CAP_S]
set -uo pipefail
out=${1:?usage: legacy_before_after.sh OUT [BEFORE_CAP_S] [AFTER_CAP_S]}
before_cap=${2:-340}
after_cap=${3:-220}
order=${ORDER:-before-first}
root=$PWD
flags=(resnet50 --backend cudnn --precision fp32,tf32,fp16,bf16,fp64 --layout NCHW,NHWC
       --workspace-limit 0,64MiB,unlimited --budget-ms 15 --gpu-processes 2)
timed() {  # NAME CAP DIR: run the sweep from DIR, its log and wall time under OUT
    local name=$1 cap=$2 dir=$3 start=$SECONDS
    (cd "$dir" && PYTHONPATH="$root/.site:$root/$dir" timeout "$cap" \
        python3 -m harness.cli run "${flags[@]}" --out "$out/$name.parquet") > "$out/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}
if [ "$order" = after-first ]; then
    timed after "$after_cap" .
    timed before "$before_cap" .before
else
    timed before "$before_cap" .before
    timed after "$after_cap" .
fi
python3 -m harness.cli compare "$out/before.parquet" "$out/after.parquet" > "$out/compare.txt" 2>&1
echo "compare before after: exit $?" | tee -a "$out/summary.txt"
python3 -m harness.cli table "$out/after.parquet" --profile > "$out/after-profile.txt" 2>&1
