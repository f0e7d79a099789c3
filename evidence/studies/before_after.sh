#!/usr/bin/env bash
# One sweep at an earlier commit (an export in .before/) and at this tree on one machine, one
# after the other, each with an empty cache folder of its own (plan lists, hung engines: neither
# run profits from the other's); then `compare` and `table --profile` of both.
#   rm -rf .before && mkdir .before && git archive BEFORE harness suites pyproject.toml | tar -x -C .before
#   ORDER=after-first evidence/studies/before_after.sh OUT CAP_S RUN_ARGS...
# BEFORE=DIR takes the earlier tree from DIR instead (an absolute path; e.g. this tree with the
# files that differ overlaid, where a whole export would not travel to a lent machine).
# A fresh machine's first run pays the driver's kernel compiles (stop 52: ~30 s): ORDER=after-first
# (the default) gives that handicap to this tree.
set -uo pipefail
out=${1:?usage: before_after.sh OUT CAP_S RUN_ARGS...}; cap=${2:?}; shift 2
root=$PWD
mkdir -p "$out"
timed() {  # NAME DIR: the sweep from DIR, its log and wall time under OUT
    local name=$1 dir=$2 start=$SECONDS; shift 2
    rm -rf "/tmp/cache-$name" && mkdir -p "/tmp/cache-$name"
    (cd "$dir" && CONVBENCH_CACHE_DIR="/tmp/cache-$name" PYTHONPATH="$root/.site:$PWD" \
        timeout "$cap" python3 -m harness.cli run "$@" --out "$out/$name.parquet") \
        > "$out/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
    grep -a -E "^note|went|stages|raced out" "$out/$name.log" | tail -4
    for f in "$out"/$name.parquet.partial.jsonl; do [ -f "$f" ] && gzip -f "$f"; done
}
if [ "${ORDER:-after-first}" = after-first ]; then
    timed after . "$@"; timed before "${BEFORE:-.before}" "$@"
else
    timed before "${BEFORE:-.before}" "$@"; timed after . "$@"
fi
python3 -m harness.cli compare "$out/before.parquet" "$out/after.parquet" > "$out/compare.txt" 2>&1
echo "compare before after: exit $?" | tee -a "$out/summary.txt"
for name in before after; do
    python3 -m harness.cli table "$out/$name.parquet" --profile > "$out/$name-profile.txt" 2>&1
done
