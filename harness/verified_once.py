"""Verify once, time twice (issue 39). With two timing processes (harness/process_split.py)
each verified every row against the float64 reference on its own: the second run of the
run-twice check, the reference (183 ms a problem on an H100) and the error norms, paid twice
for rows whose verdict the first process had already settled. Now the first process records a
fingerprint of each ok row's output bits (`output_checksum`), and a later process that computes
the same bits takes the first's verdict and only times; its row says so (`verified_in`). Where
the bits differ (PyTorch's autotuner picked another algorithm there, or the output is not
deterministic: the first process's run-twice check says which) the later process verifies in
full, as before. The crash isolation and the per-process samples `compare` relies on stay.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harness import call_bound
from harness.backends.base import Prepared
from harness.call_bound import CallBound
from harness.measurement import Measurement
from harness.reference import array_module

CHECKSUM = "output_checksum"
VERIFIED_IN = "verified_in"
EARLIER_PROCESS = "an earlier timing process (same output bits)"
# What a later process takes from the first one's row: its verdict on the output.
VERDICT_FIELDS = ("rel_error", "max_abs_error", "tolerance", "effective_precision",
                  "deterministic")
_WORDS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


@dataclass(frozen=True)
class Verified:
    checksum: str
    verdict: tuple[tuple[str, Any], ...]     # VERDICT_FIELDS as the first process found them


def checksum(output: Any) -> str:
    """A fingerprint of the output's bits, computed where it lives (no copy off the GPU): each
    word mixed with its position by SplitMix64's finalizer, the results summed modulo 2^64, with
    the shape and type. A plain or position-weighted sum is not enough: a sign bit adds 2^63, so
    negating an even number of values left it alone, and values rounded from bf16 end in 40-odd
    zero bits, so swapped blocks of 2^19 of them did too (a review's counterexamples, now
    tests). Mixed, any change moves the sum like a random 64-bit value."""
    xp = array_module(output)
    flat = xp.ascontiguousarray(output).reshape(-1)
    x = flat.view(_WORDS[flat.dtype.itemsize]).astype(xp.uint64)
    x ^= xp.arange(x.size, dtype=xp.uint64) * xp.uint64(0x9E3779B97F4A7C15)
    x ^= x >> xp.uint64(30)
    x *= xp.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> xp.uint64(27)
    x *= xp.uint64(0x94D049BB133111EB)
    x ^= x >> xp.uint64(31)
    return f"{flat.dtype}{tuple(output.shape)}:{int(x.sum()):x}"


def wanted(point: Any, device: str) -> bool:
    """Whether the first process fingerprints the point's output: a GPU point that more than
    one process times (CPU rounds verify in one process, where the verdict is cached anyway)."""
    return device == "cuda" and point.timing.gpu_processes > 1


def from_rows(rows: list[Measurement]) -> dict[str, Verified]:
    """The first process's ok rows whose bits repeat and carry a fingerprint, by point id."""
    return {m.point.point_id: Verified(m.extras[CHECKSUM],
                                       tuple((f, getattr(m, f)) for f in VERDICT_FIELDS))
            for m in rows if m.ok and m.deterministic and m.extras.get(CHECKSUM)
            and m.effective_precision is not None}


def known(points: list[Any], verified: dict[str, Verified]) -> dict[str, Verified] | None:
    """The verdict for each precision a group asks, where the first process settled one for
    every precision, all for one output; else None (the group is verified in full). A verdict
    belongs to the output, not the workspace limit: a row over a tighter limit in the first
    process does not make the group's output unsettled."""
    by_precision: dict[str, Verified] = {}
    for p in points:
        if p.point_id in verified:
            by_precision.setdefault(p.precision, verified[p.point_id])
    if set(by_precision) != {p.precision for p in points} or \
            len({v.checksum for v in by_precision.values()}) != 1:
        return None
    return by_precision


def run_once(prepared: Prepared) -> tuple[float, Any]:
    """One poisoned run: its cost and the output."""
    prepared.poison()
    start = time.perf_counter()
    prepared.launch()
    output = prepared.output()
    return (time.perf_counter() - start) * 1e3, output


def run_twice(prepared: Prepared) -> tuple[float, Any, bool, CallBound | None]:
    """Two poisoned runs: the first call's cost, the output, whether the bits repeat, and on a
    GPU how long the second (warm) call kept it busy at the least (harness/call_bound.py)."""
    first_call_ms, first = run_once(prepared)
    first = first.copy()
    if prepared.device == "cuda" and prepared.stream is not None:
        second, bound = _run_once_bounded(prepared)
    else:
        (_, second), bound = run_once(prepared), None
    return first_call_ms, first, bool(array_module(first).array_equal(first, second)), bound


def _run_once_bounded(prepared: Prepared) -> tuple[Any, CallBound]:
    """run_once between two events on the point's stream, the host's issuing time read too."""
    import cupy
    prepared.poison()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    # the host's clock around both records: the GPU can wait for the host from the first
    # record's enqueue to the second's, wherever the process is descheduled in between
    issuing = time.perf_counter()
    start.record(prepared.stream)
    launching = time.perf_counter()
    prepared.launch()
    launch_ms = (time.perf_counter() - launching) * 1e3
    end.record(prepared.stream)
    host_ms = (time.perf_counter() - issuing) * 1e3
    end.synchronize()
    events = call_bound.from_events(cupy.cuda.get_elapsed_time(start, end), host_ms, launch_ms)
    kernels = (None if prepared.device_ms_at_least is None
               else call_bound.from_kernels(prepared.device_ms_at_least, host_ms, launch_ms))
    return prepared.output(), call_bound.combined(events, kernels)
