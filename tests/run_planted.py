"""`convbench` with the real `cpu` backend made slower on purpose: the planted regression
scripts/aa_check.sh must catch. Test-only: the product has no knob for this.

Usage: python tests/run_planted.py [--slowdown FRACTION] CONVBENCH-ARGUMENTS...
       python tests/run_planted.py --gpu-slowdown FRACTION CONVBENCH-ARGUMENTS...
  --slowdown       extra busy-wait per launch as a fraction of the launch (default
                   planted_backends.SLOWDOWN); 0 plants nothing, to show the check can fail.
  --gpu-slowdown   the `cudnn` backend instead: a spin kernel after each call, this fraction
                   of the call's GPU time (0: the same code path, nothing planted).
"""
from __future__ import annotations

import os
import sys

import planted_backends  # this file's folder is on sys.path when it is run as a script

from harness import backends
from harness.cli import main


def _split(argv: list[str]) -> tuple[float, list[str]]:
    if argv[:1] == ["--slowdown"] and len(argv) > 1:
        return float(argv[1]), argv[2:]
    return planted_backends.SLOWDOWN, argv


if __name__ == "__main__":
    if sys.argv[1:2] == ["--gpu-slowdown"] and len(sys.argv) > 2:
        os.environ[planted_backends.GPU_SLOWDOWN_ENV] = sys.argv[2]
        backends.register("cudnn", "planted_backends:SlowCudnnBackend")
        sys.exit(main(sys.argv[3:]))
    slowdown, arguments = _split(sys.argv[1:])
    planted_backends.SlowCpuBackend.slowdown = slowdown
    backends.register("cpu", "planted_backends:SlowCpuBackend")
    sys.exit(main(arguments))
