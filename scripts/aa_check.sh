#!/usr/bin/env bash
# A/A check on the CPU: measure the `quick` suite twice on this machine and compare the two runs.
# Nothing changed between them, so `convbench compare` must exit 0 (no SLOWER row). A failure
# means the verdicts cry wolf on plain run-to-run noise, or the run -> store -> compare -> exit
# code plumbing broke.
#
# Usage: scripts/aa_check.sh [extra `convbench run` flags, passed to both runs]
#   The quick suite stops at 3-5 samples a point, too few for any row to reach significance
#   (the smallest p of 3 vs 3 samples is 0.05), so this checks the plumbing and that noise is
#   never called a regression; the statistics themselves are tested in tests/test_compare.py.
# Set CONVBENCH to the command to use (default: `convbench` on PATH, else `python -m harness.cli`).
set -euo pipefail

if [[ -n "${CONVBENCH:-}" ]]; then
    read -r -a convbench <<< "$CONVBENCH"
elif command -v convbench > /dev/null; then
    convbench=(convbench)
else
    convbench=(python -m harness.cli)
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"${convbench[@]}" run quick --out "$TMP/a.parquet" "$@"
"${convbench[@]}" run quick --out "$TMP/b.parquet" "$@"

status=0
"${convbench[@]}" compare "$TMP/a.parquet" "$TMP/b.parquet" || status=$?
if [[ $status -ne 0 ]]; then
    echo "aa_check: FAILED: convbench compare of two identical runs exited $status (expected 0)" >&2
    exit 1
fi
echo "aa_check: ok: two runs of the quick suite compare clean"
