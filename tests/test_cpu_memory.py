"""The host allocator while CPU points are timed (harness/cpu_memory.py): freed memory stays
with the process, so a launch that allocates does not pay page faults for it every time."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import cpu_memory, env

ROOT = Path(__file__).resolve().parents[1]

# In a fresh process: page faults of 8 rounds of allocating, touching and freeing 48 MiB (above
# glibc's largest dynamic mmap threshold, so by default each round maps fresh pages), before and
# after keep_freed_memory.
_FAULTS = """
import resource, sys
import numpy as np
from harness import cpu_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        block = np.ones(12 << 20, np.float32)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()
default = faults()
applied = cpu_memory.keep_freed_memory()
faults()                                  # the first round after it may still map new pages
print(default, faults(), applied, sep="\\t")
"""


def test_freed_memory_is_reused_without_page_faults() -> None:
    out = subprocess.run([sys.executable, "-c", _FAULTS], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip().split("\t")
    default, kept, applied = int(out[0]), int(out[1]), out[2]
    if applied.startswith("unchanged"):
        pytest.skip(f"no glibc allocator to set here: {applied}")
    # at least a fault per 2 MiB (transparent huge pages) each round by default: 4,288 in all on
    # the 2-core Xeon VM; none once freed memory stays (2026-11-25)
    assert default >= 8 * (48 << 20) // (2 << 20), (default, kept)
    assert kept * 20 < default, (default, kept)


def test_a_cpu_point_sets_it_and_the_environment_says_so(monkeypatch) -> None:
    """Measuring a CPU point applies the settings (a GPU-only run leaves the allocator as it
    was: the groups of GPU points never reach it); every row's environment names the policy
    CPU points are measured under."""
    from harness import runner
    from harness.problem import ConvProblem
    from harness.sweep import Point
    applied = []
    monkeypatch.setattr(cpu_memory, "_applied", applied)
    monkeypatch.setattr(cpu_memory, "_apply", lambda: "set")
    described = cpu_memory.policy()
    assert env.fingerprint()["malloc"] == described
    if sys.platform.startswith("linux") and cpu_memory._mallopt() is not None:
        assert described.startswith("glibc heap")
    runner.run_points([], lambda row: None)
    assert applied == []
    point = Point(ConvProblem(1, 2, 5, 5, 2, 3, 3), "fwd", "fp32", "NCHW", "cpu", "direct")
    runner.run_points([point], lambda row: None)
    assert applied == ["set"] and cpu_memory.policy() == "set"
