#!/usr/bin/env bash
# Regression check on the CPU, in two steps that must both hold (issue 13: a check that can fail):
#  1. A/A: measure the `quick` suite twice at its default sample count (the floor every run
#     keeps, README "Regression checks"); nothing changed between the runs, so
#     `convbench compare` must exit 0. A failure means the verdicts cry wolf on run-to-run noise.
#  2. Planted slowdown: a third, real run with every CPU launch made slower by a busy-wait
#     (tests/run_planted.py: a test-only backend registered under the name "cpu", so the point
#     ids match) must make `convbench compare` exit 1. If it exits 0 the gate cannot fire, and
#     the check fails.
#
# Usage: scripts/aa_check.sh [--planted-slowdown FRACTION] [extra `convbench run` flags]
#   --planted-slowdown   the planted delay per launch as a fraction of it (default 9.0: ten
#                        times slower, tests/planted_backends.py says why);
#                        0 plants nothing, and the script must then fail: the check can fail.
#   Other flags go to all three runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# This checkout's harness for every step, whatever an editable install elsewhere points at:
# the planted run imports it from here too, and the three runs must measure the same code.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

planted=()
if [[ "${1:-}" == "--planted-slowdown" ]]; then
    planted=(--slowdown "$2")
    shift 2
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

python -m harness.cli run quick --out "$TMP/a.parquet" "$@"
python -m harness.cli run quick --out "$TMP/b.parquet" "$@"
python tests/run_planted.py "${planted[@]}" run quick --out "$TMP/slow.parquet" "$@"

# expect_compare CODE WHAT BASE NEW: the check fails, saying WHAT, unless compare exits CODE.
# Both steps always run, so a failing check says everything that failed.
failed=0
expect_compare() {
    local status=0
    python -m harness.cli compare "$3" "$4" || status=$?
    if [[ $status -ne $1 ]]; then
        echo "aa_check: FAILED: $2: convbench compare exited $status (expected $1)" >&2
        failed=1
    fi
}
expect_compare 0 "two runs of the same code compare as changed" "$TMP/a.parquet" "$TMP/b.parquet"
expect_compare 1 "planted slowdown was not caught" "$TMP/a.parquet" "$TMP/slow.parquet"
if [[ $failed -ne 0 ]]; then
    exit 1
fi
echo "aa_check: ok: two runs of the quick suite compare clean and the planted slowdown is SLOWER"
