#!/usr/bin/env bash
# One device call: `convbench run` (quick) and `convbench run rnn_quick` at the commit before the
# 5-sample stream check (an export in .before/: git archive 3a8e922 harness suites pyproject.toml)
# and at this tree, on one machine (quick before first: it also warms the driver's caches).
#   OUT=DIR evidence/studies/timer_check_before_after.sh
set -u
root=$PWD; out=$OUT/ab; mkdir -p $out
run() { # NAME DIR CAP ARGS...
  name=$1 dir=$2 cap=$3; shift 3
  s=$SECONDS
  (cd "$dir" && PYTHONPATH="$root/.site:$root/$dir" timeout "$cap" python3 -m harness.cli run "$@" --out "$out/$name.parquet" > "$out/$name.log" 2>&1)
  echo "$name: exit $? after $((SECONDS-s)) s" | tee -a $out/summary.txt
  grep -E "where the|all all" "$out/$name.log" | cut -c1-250
}
run quick-before .before 120
run quick-after . 120
run rnn-after . 230 rnn_quick
run rnn-before .before 260 rnn_quick
tar czf $OUT/all.tgz -C $OUT ab
