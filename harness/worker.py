"""GPU points run in a worker process. An illegal address or launch failure poisons the CUDA
context for good (the executor makes such a point `crashed`, see backends.base.context_lost), and
a driver fault can kill the process, and a graph-API plan can hang: either way the point (of an
expanding algorithm, the one plan) is `crashed` with the reason, the worker is replaced, the
group's other plans are measured in the fresh one, and the sweep goes on."""
from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness import backends, setup_budget
from harness.measurement import HungKey, Measurement, Status, hung_key
from harness.plan_cache import CacheFile
from harness.sweep import Point

# A unit (one algorithm, or one plan of an expanding algorithm, over a point's workspace
# limits) that takes longer than this is declared hung: the worker is killed, the unit becomes a
# `crashed` row naming the cap, and the group's other plans are measured in a fresh process.
# Far above any unit that returns: the slowest plan that returned took 8.5 s, the next never did.
# Study (evidence/studies/stall_plans.py): evidence/logs/ holds its log,
# stall-efficientnet_b0-features.1.0.block.0.0-bwd_data-fp16-nvidia-h100-2026-11-23.log
UNIT_TIMEOUT_S = 120.0
# Once one plan of a point returned verified rows, the point's later plans get this shorter cap:
# they share its problem, so a plan still running after this is hung or too slow to be picked.
PLAN_TIMEOUT_S = 30.0
# A plan of an engine that already hung in this run (on this point or another of the same
# backend and direction) gets this cap: such an engine hung again on later points (the run
# below).
HUNG_ENGINE_TIMEOUT_S = 10.0
# On the point where one knob setting of an engine hung, its other settings are not tried (a
# `not_tried` row each): there they hung too. Run:
# evidence/logs/models-efficientnet_b0-nvidia-h100-2026-11-23-final-call.txt


def _lost_context(measurements: list[Measurement]) -> bool:
    return any(m.status == Status.CRASHED for m in measurements)


PREFETCH, MEASURE, ORDER = "prefetch", "measure", "order"
# How long a worker may take to name the order of a message's groups (one cuDNN heuristic call a
# point, after the library's start-up: well under a second); past it, the ranking is what hung.
ORDER_TIMEOUT_S = 30.0


def _worker_main(connection: Any, seed: int, registry: dict[str, str],
                 plan_cache: CacheFile | None = None) -> None:
    """Measures the groups of each message one after another, in the order it names first
    (PointExecutor.race_order), unit by unit, saying which unit it starts before it starts it,
    so the pool knows what hung or took the process down; a
    `prefetch` message draws a point's test data ahead of its group (WorkerPool.prefetch)."""
    from harness import backends, cpu_memory
    from harness import plan_cache as plan_labels
    from harness.executor import PointExecutor
    backends.register_all(registry)
    plan_labels.open_here(plan_cache)
    setup_budget.open_here(connection.send)
    executor = PointExecutor(seed)
    while True:
        message = connection.recv()
        if message is None:
            return
        kind, payload = message
        if kind == PREFETCH:
            _prefetch(executor, payload)
            continue
        groups, rank, over_budget = payload
        setup_budget.known_over(over_budget)
        order = (executor.race_order([group for group, *_ in groups]) if rank
                 else list(range(len(groups))))
        connection.send((ORDER, order))
        for group, skip, hung_here, verified in (groups[i] for i in order):
            if not _measure_group(connection, executor, group, skip, hung_here, verified):
                return  # the context is unusable: the pool goes on in a fresh process
            _return_cached_memory()
            cpu_memory.trim()


def _measure_group(connection: Any, executor: Any, group: list[Point], skip: frozenset[str],
                   hung_here: dict[str, str], verified: dict) -> bool:
    """One group's units, their rows sent as each finishes; False once the CUDA context is
    lost."""
    for unit in executor.units(group, skip, verified):
        connection.send(("start", (unit.variant, unit.engine)))
        if unit.engine in hung_here:
            connection.send(("rows", _not_tried(group, unit.variant, hung_here[unit.engine])))
            continue
        rows = unit.measure()
        connection.send(("rows", rows))
        if _lost_context(rows):
            return False
    connection.send(("done", None))
    return True

# The share of the cores a prefetch draws test data on: the sibling process is timing the GPU
# meanwhile, and its threads must never wait for a core (shared/design/measurement.md).
PREFETCH_CORE_SHARE = 0.5


def _prefetch(executor: Any, payload: tuple[list[Point], list[Point]]) -> None:
    """The group's test data drawn into the executor's cache while the sibling timing process
    measures (runner.Measurer), after the points ahead started their setup (harness/ahead.py).
    A failure here is left for the group itself to meet and report."""
    from harness import draws
    from harness.threads import available_cores
    try:
        with draws.at_most(max(1, int(available_cores() * PREFETCH_CORE_SHARE))):
            executor.prefetch(*payload)
    except Exception:  # the group's own measurement meets it again and makes it a row
        pass


# Cached, unused GPU memory a worker keeps for its next group; beyond it the pool's free blocks
# go back to the driver, so the sibling process timing the same point (harness.process_split)
# finds the memory free.
KEEP_CACHED_BYTES = 2 << 30


def _return_cached_memory() -> None:
    cupy = sys.modules.get("cupy")     # only where a backend already brought CUDA up
    if cupy is None:
        return
    pool = cupy.get_default_memory_pool()
    if pool.free_bytes() > KEEP_CACHED_BYTES:
        pool.free_all_blocks()


class _Rows(list):
    """A group's rows so far, each batch also handed to the caller's callback as it comes."""

    def __init__(self, on_rows: Callable[[list[Measurement]], None] | None):
        super().__init__()
        self._on_rows = on_rows

    def add(self, batch: list[Measurement]) -> None:
        self.extend(batch)
        if self._on_rows is not None and batch:
            self._on_rows(batch)


@dataclass
class _Stopped:
    """Where a worker stopped before finishing its group: the variant it was on (None: a plain
    algorithm, or before any variant started), its engine, unless its rows already say so why,
    and whether it hung (ran past its cap)."""
    variant: str | None
    engine: str | None
    reason: str | None
    hung: bool = False
    over_budget: tuple | None = None    # the watched setup step that ran past its budget


def _hung_key(group: list[Point], engine: str) -> HungKey:
    first = group[0]
    return hung_key(first.backend, first.direction, first.op, first.precision, first.output,
                    engine)


@dataclass(frozen=True)
class Request:
    """One group for a worker: the variants to leave out, the verdicts an earlier timing process
    settled (harness/verified_once.py), and who takes each unit's rows as they arrive."""
    group: list[Point]
    skip: frozenset[str] = frozenset()
    verified: dict | None = None
    on_rows: Callable[[list[Measurement]], None] | None = None
    on_done: Callable[[], None] | None = None      # once the group's rows are all in


class _Group:
    """A request under way: its rows so far and what a fresh process must leave out."""

    def __init__(self, request: Request):
        self.group = request.group
        self.rows = _Rows(request.on_rows)
        self.on_done = request.on_done
        self.verified = request.verified or {}
        # plans measured before (by the run being resumed, by another process): the point has
        # returned, so its plans get the plan cap from the start
        self.returned_before = bool(request.skip)
        self.skip = set(request.skip)
        self.hung_here: dict[str, str] = {}    # engine -> its knob setting that hung here

    def finished(self) -> None:
        if self.on_done is not None:
            self.on_done()


class WorkerPool:
    """One worker process at a time, restarted whenever it dies or hangs."""

    def __init__(self, seed: int = 0, unit_timeout_s: float | None = None,
                 plan_timeout_s: float | None = None, hung_engine_timeout_s: float | None = None,
                 hung_engines: set[HungKey] | None = None, plan_cache: CacheFile | None = None,
                 over_budget: dict | None = None):
        self.seed = seed
        self.plan_cache = plan_cache        # the run's plan-label file (harness/plan_cache)
        self.unit_timeout_s = UNIT_TIMEOUT_S if unit_timeout_s is None else unit_timeout_s
        self.plan_timeout_s = PLAN_TIMEOUT_S if plan_timeout_s is None else plan_timeout_s
        self.hung_engine_timeout_s = (HUNG_ENGINE_TIMEOUT_S if hung_engine_timeout_s is None
                                      else hung_engine_timeout_s)
        # shared by the pools of one run (runner.Measurer): a hang seen in one process counts
        self.hung_engines: set[HungKey] = set() if hung_engines is None else hung_engines
        # and of setup steps that ran past their budget: key -> the point (setup_budget.py)
        self.over_budget: dict = {} if over_budget is None else over_budget
        self._context = mp.get_context("spawn")
        self._process = None
        self._connection = None

    def _ensure_started(self) -> None:
        if self._process is None or not self._process.is_alive():
            self._start()

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(
            target=_worker_main, args=(child, self.seed, backends.registry(), self.plan_cache),
            daemon=True)
        self._process.start()
        child.close()
        self._connection = parent

    def measure(self, group: list[Point], skip: frozenset[str] = frozenset(),
                on_rows: Callable[[list[Measurement]], None] | None = None,
                verified: dict | None = None) -> list[Measurement]:
        """Every row of `group` (variants in `skip` left out), each unit's rows also handed to
        `on_rows` as they arrive; `verified`: the verdicts an earlier timing process settled
        (harness/verified_once.py)."""
        return self.measure_groups([Request(group, skip, verified, on_rows)])[0]

    def measure_groups(self, requests: list[Request]) -> list[list[Measurement]]:
        """Every row of each request's group, the groups sent to the worker in one message (a
        point's candidates: the worker goes from one to the next without waiting for this
        process). A plan that hangs or takes the process down costs that plan's rows (a plain
        algorithm's: its group's), never the rows measured before it or the plans and groups
        after it: those are measured in a fresh process."""
        states = [_Group(r) for r in requests]
        pending, rank = states, True
        while pending:
            self._ensure_started()
            pending, rank = self._stream(pending, rank)
        return [list(state.rows) for state in states]

    def prefetch(self, group: list[Point], ahead: list[Point] | None = None) -> None:
        """Ask the (idle) worker to draw `group`'s test data now, and to start the setup of the
        points `ahead` that needs none (PointExecutor.prefetch), not when they come."""
        self._ensure_started()
        try:
            self._connection.send((PREFETCH, (group, ahead or [])))
        except (BrokenPipeError, OSError):
            self._kill()    # measure_groups starts a fresh one

    def _stream(self, pending: list[_Group], rank: bool) -> tuple[list[_Group], bool]:
        """Sends the pending groups in one message, the worker to measure them in their
        library's order (`rank`) or as sent, and collects their rows; the groups still to
        measure in a fresh process if the worker stopped (hung, died, lost its context), and
        whether to rank them. A worker that stopped while ranking gets the same groups again,
        unranked: what stopped it then meets the group it belongs to."""
        try:
            self._connection.send((MEASURE, ([(s.group, frozenset(s.skip), dict(s.hung_here),
                                               s.verified) for s in pending], rank,
                                             dict(self.over_budget))))
        except (BrokenPipeError, OSError):
            pass    # the worker is gone: collecting the first group meets the closed pipe and
                    # makes it that group's crash, as a death mid-group would (never a retry loop)
        ordered = self._in_worker_order(pending)
        if ordered is None and rank:
            self._kill()
            return pending, False
        pending = pending if ordered is None else ordered
        for at, state in enumerate(pending):
            stopped = self._collect(state)
            if stopped is None:
                state.finished()
                continue
            self._kill()
            if stopped.over_budget is not None:
                self._note_over_budget(state, stopped)
            hung_engine = stopped.engine if stopped.hung else None
            if hung_engine is not None:
                self.hung_engines.add(_hung_key(state.group, hung_engine))
                state.hung_here.setdefault(hung_engine, stopped.variant)
            if stopped.reason is not None:
                state.rows.add(_crashed(state.group, stopped.reason, stopped.variant,
                                        hung_engine))
            if stopped.variant is None:
                state.finished()
                return pending[at + 1:], rank   # nothing to skip past: its crash ends the group
            state.skip.add(stopped.variant)
            return pending[at:], rank
        return [], rank

    def _note_over_budget(self, state: _Group, stopped: _Stopped) -> None:
        """Remember the step's key for the run (setup_budget.py); the unit's rows: not tried."""
        key, what, budget_s = stopped.over_budget
        first = state.group[0]
        self.over_budget[key] = f"{first.problem.label} {first.direction}"
        state.rows.add(_crashed(state.group, setup_budget.over_reason(what, budget_s),
                                stopped.variant, status=Status.NOT_TRIED))

    def _in_worker_order(self, pending: list[_Group]) -> list[_Group] | None:
        """The groups in the order the worker measures them, which it names before the first
        (_worker_main); None where it died or hung first (it is then stopped: the first group
        meets the closed pipe)."""
        try:
            if self._connection.poll(ORDER_TIMEOUT_S):
                kind, order = self._connection.recv()
                if kind == ORDER:
                    return [pending[i] for i in order]
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        self._process.kill()    # the process stays known: _collect reads its exit code
        return None

    def _collect(self, state: _Group) -> _Stopped | None:
        """Appends the worker's rows for the group as its units finish (the knob settings of the
        engines in `hung_here` as not tried), and each finished variant to `skip`; None once the
        group is done."""
        variant = engine = None
        group, rows, clock = state.group, state.rows, setup_budget.Clock()
        try:
            while True:
                cap, why = self._cap(group, variant, engine, state.returned_before
                                     or any(m.ok and m.of_variant for m in rows))
                wait, over = clock.wait(cap)
                if not self._connection.poll(wait):
                    if over:
                        return _Stopped(variant, engine, None, over_budget=clock.step)
                    return _Stopped(variant, engine,
                                    f"no result within {cap:.0f} s{why}: worker killed", hung=True)
                kind, payload = self._connection.recv()
                if clock.heard(kind, payload):
                    continue
                if kind == "done":
                    return None
                if kind == "start":
                    variant, engine = payload
                    continue
                rows.add(payload)
                if _lost_context(payload):
                    return _Stopped(variant, engine, None)
                if variant is not None:
                    state.skip.add(variant)
                variant = engine = None   # between units: a stop now is the group's, not a plan's
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(timeout=10)    # the pipe closes before the exit code is known
            return _Stopped(variant, engine, f"worker process died (exit code "
                                             f"{self._process.exitcode})")

    def _cap(self, group: list[Point], variant: str | None, engine: str | None,
             point_returned: bool) -> tuple[float, str]:
        """How long the unit under way may take, and why when it is a shorter cap than
        the unit cap."""
        caps = [(self.unit_timeout_s, "")]
        if variant is not None and point_returned:
            caps.append((self.plan_timeout_s, " (another plan of this point returned)"))
        if engine is not None and _hung_key(group, engine) in self.hung_engines:
            caps.append((self.hung_engine_timeout_s,
                         f" (engine {engine} hung before on this GPU)"))
        return min(caps, key=lambda cap: cap[0])

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=10)
        self._process = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(timeout=30)
            except (BrokenPipeError, OSError):
                pass
        self._kill()


def _crashed(group: list[Point], reason: str, variant: str | None = None,
             hung_engine: str | None = None, status: Status = Status.CRASHED) -> list[Measurement]:
    """Crash rows (or `status`) for the group's points, or for one variant of them (naming its
    engine when it hung)."""
    if variant is None:
        return [Measurement(p, status, reason) for p in group]
    extras = {"hung_engine": hung_engine} if hung_engine else {}
    return _variant_rows(group, variant, status, f"{variant}: {reason}", extras)


def _not_tried(group: list[Point], variant: str, hung: str) -> list[Measurement]:
    return _variant_rows(group, variant, Status.NOT_TRIED,
                         f"{variant}: not tried: {hung} of the same engine hung on this point")


def _variant_rows(group: list[Point], variant: str, status: Status, reason: str,
                  extras: dict[str, str] | None = None) -> list[Measurement]:
    """Rows of one variant of the group's points that remember their planned point, as the
    variant's measured rows would."""
    return [Measurement(replace(p, algorithm=variant), status, reason, extras=extras or {},
                        planned_point_id=p.point_id) for p in group]
