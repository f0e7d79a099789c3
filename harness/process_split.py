"""Time each GPU point in several worker processes (each CPU point in several rounds) and merge
what they measured into one row.

Why: on an H100 a cuDNN point's time can depend on the process it is measured in (where its
buffers and workspace land in memory), not only on sampling noise: one read 11% slower in each
of 8 fresh processes than in a longer lived one, each tight to 0.5%
(evidence/notes/constants.md#process_split). Two runs of
a sweep then put a few points in different states and a comparison of the stored runs calls
them regressions, however many samples each has. Sharing a point's samples among processes that
each verify and time it on their own puts that spread inside the row, where `convbench compare`
sees it (a row whose processes disagree is not called SLOWER by a jump of that size).

The merged row keeps the samples in process order and says how many came from each
(`process_samples`, e.g. "10 10"); every process verifies the output against the float64
reference, and the row takes the worst status any process saw. One exception: where PyTorch's
autotuner picked different kernels in different processes, the row keeps process 1's samples
alone (one pick's time, never a mixture) and says so (`torch_pick_stable`). And a candidate the
first process raced out (harness/race.py) is not timed by the later ones: its row keeps that
process's few samples, with one share in `process_samples`.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from harness.measurement import STAGE_COLUMNS, STATUSES, Measurement, Status
from harness.stopping import RACED_OUT
from harness.sweep import Point, TimingOptions

# Worst first: a row is as bad as the worst any process saw (a wrong output in one process is a
# wrong row, whatever the other measured).
_SEVERITY = (Status.CRASHED, Status.NOT_TRIED, Status.WRONG, Status.FAILED,
             Status.WORKSPACE_EXCEEDED, Status.UNSUPPORTED, Status.OK)
assert set(_SEVERITY) == set(STATUSES)


def share(timing: TimingOptions, k: int, replicate: int = 0) -> TimingOptions:
    """The timing replicate `replicate` of `k` (GPU worker processes, CPU rounds) applies: its
    part of the samples and of the budget, so the merged row has at least the samples asked
    for."""
    if k <= 1:
        return timing
    return replace(timing, min_samples=math.ceil(timing.min_samples / k),
                   max_samples=math.ceil(timing.max_samples / k),
                   budget_ms=timing.budget_ms / k, replicate=replicate)


def replicates(point: Point, device: str) -> int:
    """How many replicates measure `point`: worker processes on a GPU, rounds on a CPU."""
    return point.timing.gpu_processes if device == "cuda" else point.timing.cpu_rounds


def shared_group(group: Sequence[Point], k: int, replicate: int = 0) -> list[Point]:
    """`group` as replicate `replicate` of `k` measures it."""
    return [replace(p, timing=share(p.timing, k, replicate)) for p in group]


def merge(group: Sequence[Point], per_process: Sequence[Sequence[Measurement]]
          ) -> list[Measurement]:
    """One Measurement per row, in the first process's order (rows only a later process made, as
    an expanding algorithm can, follow), each on its point as planned (not the shared timing).
    A planned point that crashed as a whole in any process is that crash's rows alone: its other
    rows were measured by fewer processes than asked. One plan's crash is that plan's row."""
    planned = {p.point_id: p for p in group}
    # A planned point's own crash row (not one plan's) means its plans were not all measured.
    crashed = {m.point.point_id for ms in per_process for m in ms if m.status == Status.CRASHED}
    by_id: dict[str, list[Measurement]] = {}
    for measurements in per_process:
        for m in measurements:
            if m.planned_id not in crashed or m.status == Status.CRASHED:
                by_id.setdefault(m.point.point_id, []).append(m)
    rows = [_merge_one(ms, len(per_process)) for ms in by_id.values()]
    return [replace(m, point=replace(m.point, timing=planned[m.planned_id].timing))
            for m in rows]


def _merge_one(measurements: list[Measurement], processes: int) -> Measurement:
    worst = min(measurements, key=lambda m: _SEVERITY.index(m.status))
    if not worst.ok:
        if len({m.status for m in measurements}) == 1 or processes == 1:
            return worst
        seen = ", ".join(m.status for m in measurements)
        return replace(worst, reason=f"{worst.reason} (its replicates saw: {seen})")
    if len(measurements) < processes and not _raced_out(measurements):
        return replace(worst, status=Status.FAILED, samples_ms=(),
                       reason=f"measured in {len(measurements)} of {processes} worker processes "
                              "only: the others offered no such variant")
    return _merge_ok(measurements)


def _raced_out(measurements: list[Measurement]) -> bool:
    """Raced out where it was measured: later processes leave such a row alone (it cannot be
    its point's best; harness/race.py), so fewer processes measured it than the others."""
    return all(m.stop_reason == RACED_OUT for m in measurements)


def _merge_ok(measurements: list[Measurement]) -> Measurement:
    # The least accurate process speaks for the row's accuracy (error, delivered precision and
    # the reason that names it); the first for what does not vary (family, workspace, setup).
    # The row's time comes from the processes that ran one pick (all, unless PyTorch's differed).
    least_accurate = max(measurements, key=lambda m: m.rel_error or 0.0)
    first = measurements[0]
    timed, pick, pick_note = _merged_torch_pick(measurements)
    samples = tuple(s for m in timed for s in m.samples_ms)
    extras = {**first.extras, **_merged(timed, _CONTENTION_MERGE), **pick,
              **_merged(measurements, _STAGES_MERGE), **_merged(timed, _RACE_MERGE),
              "process_samples": " ".join(str(len(m.samples_ms)) for m in timed)}
    stops = list(dict.fromkeys(m.stop_reason for m in timed if m.stop_reason))
    shared = [m.reason for m in timed
              if m.extras.get("contended") and m.reason != least_accurate.reason]
    return replace(
        first, samples_ms=samples, extras=extras, stop_reason="; ".join(stops),
        reason="; ".join(r for r in (least_accurate.reason, *shared, pick_note) if r),
        rel_error=least_accurate.rel_error,
        max_abs_error=least_accurate.max_abs_error,
        effective_precision=least_accurate.effective_precision,
        deterministic=_all(m.deterministic for m in measurements),
        host_ms=_median_high(m.host_ms for m in timed))


def _merged_torch_pick(measurements: list[Measurement]
                       ) -> tuple[list[Measurement], dict, str]:
    """(the processes whose samples the row keeps, the torch_pick columns, a note for the
    reason). Each worker process runs PyTorch's autotuner on its own (torch_kernels: what its
    pick ran); where they picked differently, pooling their samples would time a mixture of
    two algorithms, so the row times process 1's pick and names every process's."""
    kernels = [m.extras.get("torch_kernels") for m in measurements]
    if len(kernels) < 2 or None in kernels:
        return measurements, {}, ""         # not recorded, or nothing to compare
    if len(set(kernels)) == 1:
        return measurements, {"torch_pick_stable": True}, ""
    medians = [f"{m.median_ms:.4g}" if m.samples_ms else "n/a" for m in measurements]
    ran = ", ".join(f"process {i} ran {k} ({ms} ms)"
                    for i, (k, ms) in enumerate(zip(kernels, medians), start=1))
    return measurements[:1], {
        "torch_pick_stable": False, "torch_picks": " || ".join(kernels),
        "torch_pick_ms": " ".join(medians),
    }, f"PyTorch's pick is unstable here: {ran}; the row's time is process 1's pick"


# How a CPU row's replicates combine (harness/contention.py): the row shared the cores if any
# round did; its retakes add up; the worst round speaks for waits, load, steal and CPU/wall.
_CONTENTION_MERGE = {"contended": any, "samples_retaken": sum, "cpu_wait": max,
                     "load_avg": max, "cpu_steal": max, "cpu_time_ratio": min,
                     "host_probe_ms": max, "host_speedup": min}
# A plan raced out in any process (harness/stopping.py): by how much it lost in the worst; a
# later process that took the first's verdict (harness/verified_once.py) says so in the row.
_RACE_MERGE = {"raced_out_by": max, "verified_in": lambda found: found[0]}
# A row's stage times are what all its processes or rounds spent: the row's cost to the run.
_STAGES_MERGE = dict.fromkeys(STAGE_COLUMNS, sum)


def _merged(measurements: list[Measurement], rules: dict) -> dict:
    """The extras named in `rules` (name -> how to combine), over the measurements that have
    them."""
    merged = {}
    for name, combine in rules.items():
        values = [m.extras[name] for m in measurements if m.extras.get(name) is not None]
        if values:
            merged[name] = combine(values)
    return merged


def _all(values) -> bool | None:
    known = [v for v in values if v is not None]
    return all(known) if known else None


def _median_high(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median_high(known) if known else None


def process_groups(samples: Sequence[float], counts: str | None) -> list[list[float]]:
    """A stored row's samples split by the replicate that took them (`process_samples`: GPU
    worker processes, CPU rounds); one group when the row does not say (rows from before the
    split, pooled runs)."""
    sizes = [int(c) for c in (counts or "").split() if c.isdigit()]
    if len(sizes) < 2 or sum(sizes) != len(samples):
        return [list(samples)]
    groups, start = [], 0
    for size in sizes:
        groups.append(list(samples[start:start + size]))
        start += size
    return groups
