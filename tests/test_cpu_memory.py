"""The host allocator while CPU points are timed (harness/cpu_memory.py): freed memory stays
with the process, so a launch that allocates does not pay page faults for it every time."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import cpu_memory, env

ROOT = Path(__file__).resolve().parents[1]

# In a fresh process, with the settings applied first or not: page faults of 8 rounds of
# allocating, touching and freeing 48 MiB (above glibc's largest dynamic mmap threshold, so by
# default each round maps fresh pages) on the main thread, then 200 MiB on a new thread (whose
# own arena would map anything over 64 MiB afresh).
_FAULTS = """
import resource, sys, threading
import numpy as np
from harness import cpu_memory

applied = cpu_memory.keep_freed_memory() if sys.argv[1] == "kept" else cpu_memory.DEFAULT

def faults(mib):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        block = np.ones(mib << 18, np.float32)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

def on_thread(mib):
    counted = []
    thread = threading.Thread(target=lambda: (faults(mib), counted.append(faults(mib))))
    thread.start()
    thread.join()
    return counted[0]

faults(48)                     # the first rounds may map new pages either way
print(faults(48), on_thread(200), applied, sep="\t")
"""


def _faults(mode: str) -> tuple[int, int, str]:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip().split("\t")
    return int(out[0]), int(out[1]), out[2]


def test_freed_memory_is_reused_without_page_faults() -> None:
    default, default_thread, _ = _faults("default")
    kept, kept_thread, applied = _faults("kept")
    if applied.startswith("unchanged"):
        pytest.skip(f"no glibc allocator to set here: {applied}")
    # at least a fault per 2 MiB (transparent huge pages) each round by default: 4,288 and 808
    # on the 2-core Xeon VM; none once freed memory stays (2026-11-25)
    assert default >= 8 * 48 // 2 and kept * 20 < default, (default, kept)
    assert default_thread >= 8 * 200 // 2 and kept_thread * 20 < default_thread, (
        default_thread, kept_thread)


_SUITE = """layers = ['mb1ic2ih6oc2oh6kh3ph1n"l"']
[[sweep.backends]]
name = 'cpu'
algorithms = ['direct']
"""


@pytest.mark.parametrize("outcome", ["applied", "unchanged (mallopt refused)"])
def test_rows_record_what_was_applied(outcome: str, tmp_path, monkeypatch) -> None:
    """A run applies the settings before it takes the environment, so every row records what
    was applied: the settings, or why nothing changed."""
    from harness import store
    from harness.cli import main
    monkeypatch.setattr(cpu_memory, "_applied", [])
    monkeypatch.setattr(cpu_memory, "_apply", lambda: outcome)
    suite = tmp_path / "s.toml"
    suite.write_text(_SUITE)
    assert main(["run", str(suite), "--out", str(tmp_path / "r.parquet")]) == 0
    assert set(store.load(tmp_path / "r.parquet").env_malloc) == {outcome}


def test_one_point_applies_it_too(monkeypatch) -> None:
    """runner.run_point (the pytest plugin's path) applies the settings and trims after."""
    from harness import runner
    from harness.problem import ConvProblem
    from harness.sweep import Point
    applied, trimmed = [], []
    monkeypatch.setattr(cpu_memory, "_applied", applied)
    monkeypatch.setattr(cpu_memory, "_apply", lambda: "set")
    monkeypatch.setattr(cpu_memory, "trim", lambda: trimmed.append(True))
    assert env.fingerprint()["malloc"] == cpu_memory.DEFAULT
    point = Point(ConvProblem(1, 2, 5, 5, 2, 3, 3), "fwd", "fp32", "NCHW", "cpu", "direct")
    runner.run_point(point)
    assert applied == ["set"] and trimmed and env.fingerprint()["malloc"] == "set"


# In a fresh process: resident memory after freeing 400 MiB, and after trim().
_TRIM = """
import numpy as np
from harness import cpu_memory

def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20

applied = cpu_memory.keep_freed_memory()
block = np.ones(100 << 20, np.float32)
del block
held = resident()
cpu_memory.trim()
print(held, resident(), applied, sep="\t")
"""


def test_trim_gives_the_kept_memory_back() -> None:
    """The kept heap is given back between groups of points, so a later point is not refused
    for memory the process only holds (harness/memory.py reads the machine's free memory)."""
    out = subprocess.run([sys.executable, "-c", _TRIM], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip().split("\t")
    held, after, applied = int(out[0]), int(out[1]), out[2]
    if applied.startswith("unchanged"):
        pytest.skip(f"no glibc allocator to set here: {applied}")
    assert held >= 400 and after < held - 300, (held, after)


def test_compare_tells_cpu_rows_kept_differently_apart() -> None:
    """CPU rows measured with and without the settings are not compared silently (oneDNN's
    times moved up to 5x); rows from before it was recorded count as the default; GPU rows
    (no load average) are not looked at."""
    import pandas as pd
    from harness.compare import environment_mismatches

    def rows(load, malloc):
        return pd.DataFrame({"load_avg": [load], "env_malloc": pd.Series([malloc], dtype="string")})

    kept = cpu_memory._DESCRIPTION
    found = environment_mismatches(rows(1.0, pd.NA), rows(1.0, kept))
    assert [(m.field, m.base, m.new) for m in found] == [("malloc", (cpu_memory.DEFAULT,), (kept,))]
    assert environment_mismatches(rows(1.0, kept), rows(0.5, kept)) == []
    assert environment_mismatches(rows(float("nan"), pd.NA), rows(float("nan"), kept)) == []
