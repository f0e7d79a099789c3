"""The runoff: a GPU point's finalists prepared and timed once more in every timing process
(issue 38).

Why: on an H100 a ~10 us kernel's time depends on the preparation it is timed on (where its
buffers land in memory), by up to 8%, while each preparation's samples agree to 1%
(evidence/logs/finalist-scatter-nvidia-h100-2026-11-27.txt). PyTorch's pick and an own plan
that run the very same kernels (res5b_branch2a fwd bf16 NHWC: one nvjet 64x104 kernel each)
read 1.08x apart in one process and 1.01x in the next. Decided on one preparation per timing
process, a point's answer (its fastest algorithm, and how that stands against PyTorch's pick)
is decided by where the buffers happened to land.

Two placements decide it: with two or more timing processes each finalist is already prepared
once in each, and the runoff is not run (wanted). On the legacy ResNet-50 sweep (two processes,
1,680 point-limits, one H100) with and without the runoff, each run's pick was within 0.6% of
the other run's best, timed in the other run, at every point-limit, and the runoff added 17% to
the wall time (evidence/logs/resnet50-legacy-{runoff,no-runoff}-dd3613e-*, diary stop 52).

So, with one timing process (the GPU default), once all of a point's GPU candidates are measured,
those within RUNOFF_MARGIN of its fastest (each backend's fastest RUNOFF_PER_BACKEND) are each
prepared afresh in every timing process, in a shuffled order, verified by their output bits
(harness/verified_once.py; in full where the bits differ) and timed again. Their rows keep those
samples as further replicates (`process_samples`, and `runoff_preparations` counts them), so each
finalist's median spans the same number of placements and `convbench compare`'s per-replicate rule
sees their spread. A fresh preparation that computes a wrong result or takes its process down makes
the row so: a placement users can meet is as real as the first.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from harness import process_split
from harness.executor import computed_precision
from harness.measurement import STAGE_COLUMNS, Measurement, Status
from harness.stopping import RACED_OUT, REPLAYED
from harness.sweep import UNLIMITED, Point, TimingOptions

# A candidate further than this behind its point's fastest cannot be moved past it by where its
# buffers land (8% at the worst measured; a finalist's own second preparation decides it).
RUNOFF_MARGIN = 0.08
# Finalists per backend at a point: its fastest two within the margin, so PyTorch's pick (its
# backend's one row) is always among them when it is that close, however many graph plans are.
RUNOFF_PER_BACKEND = 2
RUNOFF_PREPARATIONS = "runoff_preparations"
# Preparations (placements of its buffers) a GPU finalist's median must span: each timing
# process gives one, and the runoff one more in each where they give fewer.
PLACEMENTS = 2
# What a fresh preparation can find that the first did not, and that the row then says.
_FOUND_ON_FRESH = (Status.WRONG, Status.CRASHED)


def measured_as(point: Point) -> Point:
    """The computation a point's row comes from: every field but the limit, and the precision as
    its algorithm computes it (runner.groups measures such points once; points that differ in
    anything else, threads or op say, never share one)."""
    return replace(point, workspace_limit=UNLIMITED, precision=computed_precision(point))


def wanted(point: Point) -> bool:
    """Whether a GPU point's finalists are run off: asked for (--no-runoff says not), and its
    timing processes alone give them fewer than PLACEMENTS preparations."""
    return point.timing.runoff and process_split.replicates(point, "cuda") < PLACEMENTS


def layer_key(point: Point) -> tuple:
    """The rows the runner holds back until their runoff: one layer's GPU groups, which its
    order puts one after another (the graph API's tf32 points moved up beside its fp32 ones,
    runner._beside_their_group, so one precision's candidates can span directions)."""
    return (point.problem, point.timing.mode, point.threads)


def finalists(rows: Sequence[Measurement]) -> list[Point]:
    """The computations to prepare again: at each point of one layer (direction, layout, limit,
    asked precision, and again by delivered precision), the timed rows within RUNOFF_MARGIN of
    its fastest (each backend's fastest RUNOFF_PER_BACKEND), where at least two are that
    close."""
    chosen: dict[str, Point] = {}
    for contenders in _points(rows).values():
        near = _near(sorted(contenders, key=lambda m: m.median_ms))
        if len(near) > 1:
            chosen.update((key.point_id, key) for key in map(measured_as, near))
    return list(chosen.values())


def _points(rows: Sequence[Measurement]) -> dict[tuple, list[Measurement]]:
    """The timed rows the race left in, by point: asked precision, and again delivered."""
    found: dict[tuple, list[Measurement]] = {}
    for m in rows:
        if m.ok and m.samples_ms and m.stop_reason != RACED_OUT:
            p = m.point
            point = (p.direction, p.layout, p.op, p.output, p.workspace_limit)
            for key in ((*point, "asked", p.precision),
                        (*point, "delivered", m.effective_precision)):
                found.setdefault(key, []).append(m)
    return found


def _near(fastest_first: list[Measurement]) -> list[Point]:
    bar = fastest_first[0].median_ms * (1 + RUNOFF_MARGIN)
    taken: dict[str, int] = {}
    near = []
    for m in fastest_first:
        backend = m.point.backend
        if m.median_ms <= bar and taken.get(backend, 0) < RUNOFF_PER_BACKEND:
            taken[backend] = taken.get(backend, 0) + 1
            near.append(m.point)
    return near


def timing(point: Point, processes: int, replayed: bool) -> TimingOptions:
    """How a fresh preparation is timed: with a timing process's share of the row's samples
    (each preparation weighs alike in the row's median), never raced, as a later replicate,
    which does not ask the libraries for their picks again (the policy columns are the first
    measurement's), and by replay alone where the row was (`replayed`: a library that captures
    itself ran its eager kernels when replayed; the process keeps its pick)."""
    return replace(process_split.share(point.timing, processes), race=False, replicate=1,
                   replay_checked=replayed)


def order(points: list[Point], seed: int, replicate: int) -> list[Point]:
    """The finalists in the order one timing process prepares them: shuffled, so no finalist
    always follows the same one, and reproducible from the run's seed."""
    shuffled = list(points)
    random.Random(hash((seed, replicate, len(points))) & 0xFFFFFFFF).shuffle(shuffled)
    return shuffled


def amended(rows: Sequence[Measurement],
            again: dict[str, list[Measurement]]) -> list[Measurement]:
    """`rows` with each finalist's fresh preparations (`again`: measured_as point id -> rows)
    added as replicates, and their cost shared among the rows they serve."""
    keys = [measured_as(m.point).point_id if again else None for m in rows]
    served = Counter(keys)
    return [_amend(_with_cost(m, again.get(k, []), served[k]), again.get(k, []))
            for m, k in zip(rows, keys)]


def _with_cost(row: Measurement, again: list[Measurement], rows: int) -> Measurement:
    """The row's stage times with its share of the fresh preparations' (harness/analysis/
    stages.py: a run's time, row by row)."""
    if not again:
        return row
    extras = dict(row.extras)
    for stage in STAGE_COLUMNS:
        spent = sum(m.extras.get(stage) or 0.0 for m in again) / rows
        if spent:
            extras[stage] = (extras.get(stage) or 0.0) + spent
    return replace(row, extras=extras)


def _amend(row: Measurement, again: list[Measurement]) -> Measurement:
    if not again or not row.ok:
        return row
    found = [m for m in again if m.status in _FOUND_ON_FRESH]
    if found:
        return replace(row, status=found[0].status, samples_ms=(),
                       reason=f"on a fresh preparation (runoff): {found[0].reason}")
    same = [m for m in again if m.ok and m.samples_ms and _same_pick(row, m)]
    if not same:
        return row
    counts = row.extras.get("process_samples") or str(len(row.samples_ms))
    added = " ".join(str(len(m.samples_ms)) for m in same)
    extras = {**row.extras, "process_samples": f"{counts} {added}",
              RUNOFF_PREPARATIONS: len(same)}
    return replace(row, samples_ms=row.samples_ms + tuple(s for m in same for s in m.samples_ms),
                   extras=extras)


def _same_pick(row: Measurement, again: Measurement) -> bool:
    """PyTorch's autotuner picks again in a fresh process: only a preparation that ran the
    row's kernels times the row's pick (process_split keeps one pick's samples per row)."""
    return row.extras.get("torch_kernels") == again.extras.get("torch_kernels")


def run(rows: Sequence[Measurement], measure: Callable[[int, Point], list[Measurement]],
        processes: int, seed: int) -> list[Measurement]:
    """`rows` of one layer, after the runoff: `measure(replicate, point)` prepares and times
    one finalist, its timing set here, in timing process `replicate`."""
    points = finalists(rows)
    if not points:
        return list(rows)
    replayed = _replayed(rows)
    again: dict[str, list[Measurement]] = {}
    for replicate in range(processes):
        for point in order(points, seed, replicate):
            timed = replace(point, timing=timing(point, processes, point.point_id in replayed))
            again.setdefault(point.point_id, []).extend(measure(replicate, timed))
    return amended(rows, again)


def _replayed(rows: Sequence[Measurement]) -> set[str]:
    """The computations (measured_as point ids) whose every ok row was timed by graph replay."""
    timers: dict[str, set] = {}
    for m in rows:
        if m.ok:
            timers.setdefault(measured_as(m.point).point_id, set()).add(
                m.extras.get("gpu_timer"))
    return {key for key, seen in timers.items() if seen == {REPLAYED}}


class HeldLayer:
    """One layer's GPU groups and their rows, held back until the layer's runoff."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.key: tuple | None = None
        self.groups: list[list[Point]] = []
        self.rows: list[Measurement] = []

    def add(self, group: list[Point], rows: list[Measurement]) -> None:
        self.key = layer_key(group[0])
        self.groups.append(group)
        self.rows.extend(rows)
