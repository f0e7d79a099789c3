#!/usr/bin/env bash
# One device call: every GPU test in one pytest process (issue 38's target: <= 300 s on one H100;
# the 15 slowest durations and the total go to gpu-tests.txt), the README's pytest-plugin example
# as written, and the default `convbench run`.
#   evidence/studies/gpu_check.sh OUT
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m gpu --durations=15 tests/ > "$out/gpu-tests.txt" 2>&1
echo "gpu tests: exit $?" | tee -a "$out/summary.txt"
# The README's plugin example, verbatim, in a user's own test folder.
mkdir -p /tmp/perf && cat > /tmp/perf/test_convs.py <<'PY'
def test_res2a_fwd(convbench):      # the `convbench` fixture from convbench's pytest plugin
    convbench('mb32ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b"',
              backend="cudnn", algorithm="implicit_precomp_gemm", precision="fp16")


def test_res2a_fwd_fp16(convbench):  # examples/README.md's spelling: cuDNN's enum name
    convbench('mb32ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b"',
              backend="cudnn", algorithm="IMPLICIT_PRECOMP_GEMM", precision="fp16", layout="NHWC")
PY
python3 -m pytest -p harness.pytest_plugin -p no:cacheprovider -q -rA /tmp/perf \
    --benchmark-json "$out/plugin-benchmark.json" -o testpaths= > "$out/plugin-example.txt" 2>&1
echo "plugin example: exit $?" | tee -a "$out/summary.txt"
python3 -m harness.cli run --out "$out/quick.parquet" > "$out/quick-run.txt" 2>&1
echo "convbench run (default): exit $?" | tee -a "$out/summary.txt"
