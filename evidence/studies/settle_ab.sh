#!/usr/bin/env bash
# Stop 64 (CPU): what timer.CPU_SETTLE_MS (250 ms of warm-up launches before every CPU timing)
# costs and buys. The quick suite's CPU points with direct, im2col and Winograd F4, three
# interleaved pairs: this tree against a worktree of it with the settle at 0.
#   git worktree add /tmp/wt-settle HEAD && sed -i 's/^CPU_SETTLE_MS = 250.0/CPU_SETTLE_MS = 0.0/' \
#       /tmp/wt-settle/harness/timer.py && bash evidence/studies/settle_ab.sh /tmp/settle_ab
out=${1:?usage: settle_ab.sh OUT}; rm -rf "$out"; mkdir -p "$out"
root=$PWD
for i in 1 2 3; do
  for v in s250 s0; do
    dir=$root; [ $v = s0 ] && dir=/tmp/wt-settle
    (cd $dir && PYTHONPATH=$dir "$root/.venv/bin/python" -m harness.cli run quick --backend cpu \
        --algorithm direct,im2col,winograd_f4x4_3x3 --out "$out/$v-$i.parquet" > "$out/$v-$i.log" 2>&1)
    echo "$v $i: $(grep -o 'where the [0-9.]* s went' "$out/$v-$i.log") $(grep -o 'time [0-9.]* s' "$out/$v-$i.log")"
  done
done
