#!/usr/bin/env bash
# One device call (issue 38's quick target, <= 60 s): `convbench run` (quick, GPU default) twice
# on one machine, every output line stamped with the seconds since the command began, then a
# third run with every process profiled (profile_workers/sitecustomize.py), summarised.
#   evidence/studies/quick_timeline.sh OUT [EXTRA RUN ARGS...]
set -uo pipefail
out=${1:?usage: quick_timeline.sh OUT [ARGS...]}; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1
stamp() { python3 -c '
import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    sys.stdout.write(f"{time.monotonic() - t0:7.2f} {line}")
    sys.stdout.flush()'; }
for n in 1 2; do
    { /usr/bin/time -f "wall %e s" python3 -m harness.cli run --out "$out/quick-$n.parquet" "$@" 2>&1; } \
        | stamp > "$out/quick-$n.txt"
    tail -3 "$out/quick-$n.txt"
done
here=$(cd "$(dirname "$0")" && pwd)
CONVBENCH_PROFILE_DIR=/tmp/qprof PYTHONPATH="$here/profile_workers:$PYTHONPATH" \
    python3 -m harness.cli run --out /tmp/quick-profiled.parquet "$@" > /tmp/quick-profiled.txt 2>&1
python3 "$here/profile_summary.py" /tmp/qprof 40 > "$out/quick-profile.txt" 2>&1
tail -3 /tmp/quick-profiled.txt | tee -a "$out/quick-profile.txt"
