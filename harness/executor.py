"""The one place a point is executed: supports -> prepare -> verify against the float64 reference
-> time -> Measurement. The runner (in-process CPU points), the crash-isolated worker process
(harness.worker) and the cluster path (harness.cluster) all call PointExecutor; none of them
measures on its own.

Every group yields one Measurement per point. What a backend raises becomes a `failed` row, an
`unsupported` one where it refuses (also at its first call), or a
`crashed` one where the error says the CUDA context is lost (backends.base.context_lost); an
output outside the tolerance is `wrong` and is never timed. Points that differ only in their
workspace limit are measured once: the algorithm and its kernels are the same, and the limit only
decides whether each row is `ok` or `workspace_exceeded`.
"""
from __future__ import annotations

import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from harness import (backends, cpu_memory, memory, oracles, precision, reference,
                     setup_budget, threads, verdict, verified_once)
from harness.backends.base import (Algorithm, AlgorithmFailed, Prepared, Unsupported,
                                   WorkspaceExceeded, context_lost, fits)
from harness.measurement import Measurement, Status
from harness.point_timing import PointTimer, timing_extras, timing_notes
from harness.reference import ProblemData
from harness.race import Race, measuring_order, tightest_fitting
from harness.sweep import Point
from harness.timer import Timing


@dataclass(frozen=True)
class Unit:
    """A part of a group measured in one go: `variant` names the expanding algorithm's concrete
    variant it is (None for a plain algorithm, or rows that say why there are no variants), and
    `engine` the implementation it is a setting of (Algorithm.engine_of)."""
    variant: str | None
    measure: Callable[[], list[Measurement]]
    engine: str | None = None


def _rows_of(rows: Iterable[Measurement]) -> Unit:
    """A unit whose rows are already known (they say why nothing was measured)."""
    known = list(rows)
    return Unit(None, lambda: known)


def _loosest(points: list[Point]) -> Point:
    """The point a group is measured as: its loosest workspace limit, and the precision its
    algorithm computes them all in where they ask for several (Algorithm.computes_as)."""
    limits = [p.workspace_limit for p in points]
    loosest = None if any(limit is None for limit in limits) else max(limits)
    own = next((p for p in points if computed_precision(p) == p.precision), points[0])
    return replace(own, workspace_limit=loosest)


def computed_precision(point: Point) -> str:
    """The precision the point's algorithm computes it in (Algorithm.computes_as): points that
    differ in nothing else are one computation, measured once (runner.groups)."""
    return algorithm_for(point).computes_as(point.precision)


# Points whose GPU races are kept (a point's groups come in a row; more: its other precisions)
RACES_KEPT = 8


class PointExecutor:
    """Measures points in this process, caching test data and references between neighbours."""

    def __init__(self, seed: int = 0, cache_size: int = 4):
        cpu_memory.keep_freed_memory()     # before any point allocates: harness/cpu_memory.py
        self.seed = seed
        self._data: OrderedDict[tuple, ProblemData] = OrderedDict()
        self._references: OrderedDict[tuple, Any] = OrderedDict()
        self._scales: OrderedDict[tuple, reference.TermScales] = OrderedDict()
        self._cache_size = cache_size
        self._timer = PointTimer()
        self._verified: dict[str, verified_once.Verified] = {}   # the group's, from process 1
        self._races: OrderedDict[str, Race] = OrderedDict()     # by point, all but algorithm

    def measure_one(self, point: Point) -> Measurement:
        """One point on its own, including a concrete variant of an expanding algorithm (a
        graph-API plan by name), for scripts that study single points (benchmarks/)."""
        algo = algorithm_for(point)
        if algo.expands and algo.name != point.algorithm:
            self._verified = {}            # verified here, as units() would for its group
            return self._measure_supported([point], point, algo)[0]
        return self.measure([point])[0]

    def measure(self, group: list[Point]) -> list[Measurement]:
        return [row for unit in self.units(group) for row in unit.measure()]

    def race_order(self, groups: list[list[Point]]) -> list[int]:
        """The order to measure a point's candidate groups in (race.measuring_order)."""
        points = [_loosest(group) for group in groups]
        return measuring_order([(algorithm_for(point), point) for point in points])

    def prefetch(self, group: list[Point], ahead: Iterable[Point] = ()) -> None:
        """Start the setup the points `ahead` can do without test data (Algorithm.ahead), then
        draw the group's test data into the cache (harness.worker's prefetch; no group: none)."""
        for point in ahead:
            algorithm_for(point).ahead(point)
        if group:
            self.cached_data(_loosest(group))

    def units(self, group: list[Point], skip: frozenset[str] = frozenset(),
              verified: dict[str, verified_once.Verified] | None = None) -> Iterator[Unit]:
        """The group's rows in units measured one after another: one unit for a plain algorithm;
        for an expanding one (e.g. every graph-API execution plan) one per concrete variant it
        names for this problem, each measured like an algorithm of its own, its rows remembering
        the planned point they came from (so --resume can skip it). Variants named in `skip` are
        left out: the worker process (harness.worker) measures the rest of a group in a fresh
        process after one variant hung or took the process down. `verified`: the verdicts an
        earlier timing process settled (harness/verified_once.py)."""
        self._verified = verified or {}
        point = _loosest(group)
        backend = backends.get(point.backend)
        algo = algorithm_for(point)
        # Buffers that cannot fit are known before allocating: a row, not a MemoryError.
        reason = algo.refusal(point) or memory.refusal(point, backend.device)
        if reason:
            yield _rows_of(Measurement(p, Status.UNSUPPORTED, reason, algo.family) for p in group)
        elif algo.expands and point.algorithm != algo.name:  # one variant, named (harness/runoff)
            yield Unit(point.algorithm, lambda: self._measure_supported(group, point, algo),
                       algo.engine_of(point.algorithm))
        elif not algo.expands:
            yield Unit(None, lambda: self._measure_supported(group, point, algo,
                                                             self._race_for(point, algo)))
        else:
            yield from self._variant_units(group, point, algo, skip)

    def _variant_units(self, group: list[Point], point: Point, algo: Algorithm,
                       skip: frozenset[str]) -> Iterator[Unit]:
        try:
            data = self.cached_data(point)      # test data: no stage's (worker.prefetch)
            listing = time.perf_counter()
            variants = algo.variants(point, data)
        except Unsupported as err:
            yield _rows_of(Measurement(p, Status.UNSUPPORTED, str(err), algo.family)
                           for p in group)
            return
        except Exception as err:  # a backend's error is data: the row says what
            yield _rows_of(_failed(p, algo, err) for p in group)
            return
        if not variants:
            yield _rows_of(Measurement(p, Status.UNSUPPORTED, "the backend offered no variant",
                                       algo.family) for p in group)
        race, offered = self._race_for(point, algo), len(variants)  # race: across the units
        chosen = [v for v in variants[:point.timing.plan_limit] if v not in skip]  # None: all
        # each row's share of the listing (its test data and plans), so a run's stages add up
        listed = {"stage_list_ms": (time.perf_counter() - listing) * 1e3
                  / max(1, len(chosen) * len(group))}
        for variant in chosen:
            yield Unit(variant, partial(self._measure_variant, group, point, algo, variant,
                                        race, {"plans_offered": offered, **listed}),
                       algo.engine_of(variant))

    def _measure_variant(self, group: list[Point], point: Point, algo: Algorithm,
                         variant: str, race: Race | None,
                         extras: dict[str, Any]) -> list[Measurement]:
        members = [replace(p, algorithm=variant) for p in group]
        measured = self._measure_supported(members, replace(point, algorithm=variant), algo,
                                           race)
        return [replace(m, planned_point_id=planned.point_id, extras={**m.extras, **extras})
                for m, planned in zip(measured, group)]

    def _measure_supported(self, group: list[Point], point: Point, algo: Algorithm,
                           race: Race | None = None) -> list[Measurement]:
        data = self.cached_data(point)
        started = time.perf_counter()
        try:
            prepared = algo.prepare(point, data)
        except Unsupported as err:
            return [Measurement(p, Status.UNSUPPORTED, str(err), algo.family) for p in group]
        except WorkspaceExceeded as err:
            return [_over_limit(p, algo, err.needed) for p in group]
        except Exception as err:  # a backend's error is data: the row says what
            return [_failed(p, algo, err) for p in group]
        stages = {"stage_prepare_ms": (time.perf_counter() - started) * 1e3}
        try:
            # after prepare: a backend imports its library there (threads.limited sets PyTorch's
            # pool only once it is imported)
            with threads.limited(point.threads):
                return self._verify_and_time(group, point, algo, prepared, data, started,
                                             stages, race)
        finally:
            prepared.release()

    def _verify_and_time(self, group, point, algo, prepared, data, started,
                         stages: dict[str, float], race: Race | None) -> list[Measurement]:
        verifying = time.perf_counter()
        settled, bound = verified_once.known(group, self._verified), None
        try:
            if settled is not None:     # a later timing process: the first settled the verdict
                first_call_ms, output = verified_once.run_once(prepared)
                if verified_once.checksum(output) != next(iter(settled.values())).checksum:
                    settled = None      # other bits than the first process's: verify in full
            if settled is None:
                first_call_ms, output, deterministic, bound = verified_once.run_twice(prepared)
        except Exception as err:  # backend failure while running: a failed row
            return [_failed(p, algo, err) for p in group]
        setup_ms = (time.perf_counter() - started) * 1e3
        family = algo.family if prepared.family is None else prepared.family
        facts = dict(family=family, workspace_bytes=prepared.workspace_bytes, setup_ms=setup_ms)
        if settled is not None:
            common = {asked: {**dict(v.verdict), **facts} for asked, v in settled.items()}
            judged, checked = {}, {verified_once.VERIFIED_IN: verified_once.EARLIER_PROCESS}
        else:
            judged = self._judged(group, point, algo, prepared, data, output)
            common = {asked: dict(rel_error=j.rel_error, max_abs_error=j.max_abs_error,
                                  tolerance=j.tolerance, effective_precision=j.delivered,
                                  deterministic=deterministic, **facts)
                      for asked, j in judged.items()}
            checked = ({verified_once.CHECKSUM: verified_once.checksum(output)}
                       if verified_once.wanted(point, backends.get(point.backend).device)
                       else {})
        stages["stage_verify_ms"] = (time.perf_counter() - verifying) * 1e3
        # the race's key: what the measured point delivered (the group's other precisions are
        # judged by looser standards), else what any did
        delivered = common[point.precision]["effective_precision"] or next(
            (c["effective_precision"] for c in common.values() if c["effective_precision"]),
            None)
        wrong = {p.point_id: Measurement(p, Status.WRONG, _why_wrong(p, judged[p.precision]),
                                         **common[p.precision], extras=_shares(stages, group))
                 for p in group if common[p.precision]["effective_precision"] is None}
        if delivered is None:
            return list(wrong.values())
        tightest = tightest_fitting(group, prepared.workspace_bytes)
        options = point.timing if race is None else race.timing(point.timing, delivered,
                                                                 tightest)
        timing_started = time.perf_counter()
        try:
            timing = self._timer.time(prepared, options, bound,
                                      cores=threads.cores_for(point.threads))
        except Exception as err:  # backend failure while timing: a failed row
            return [wrong.get(p.point_id) or _failed(p, algo, err) for p in group]
        stages["stage_time_ms"] = (time.perf_counter() - timing_started) * 1e3
        raced, race_note = (({}, "") if race is None
                            else race.row_notes(delivered, timing, tightest))
        if race is not None:
            race.finished(point.algorithm, delivered, timing, prepared.workspace_bytes)
        return [wrong.get(p.point_id) or self._row(
                    p, prepared, timing, first_call_ms, common[p.precision],
                    {**_shares(stages, group), **raced, **_measured_with(p, point), **checked},
                    race_note)
                for p in group]

    def _judged(self, group, point, algo, prepared, data, output) -> dict[str, verdict.Judged]:
        """One verdict per precision asked: a group may hold precisions the algorithm computes
        alike (Algorithm.computes_as), and each row is judged by its own precision's standard."""
        xp = reference.array_module(output)
        expected = self._cached_reference(point, data, xp)
        factor = algo.error_factor if prepared.error_factor is None else prepared.error_factor
        scales = partial(self._cached_scales, point, data, expected, xp)
        return {asked: verdict.judge(output, expected, scales, _standard(p, factor, expected), xp)
                for asked, p in {p.precision: p for p in group}.items()}

    def _row(self, p: Point, prepared: Prepared, timing: Timing, first_call_ms: float,
             common: dict, stages: dict[str, Any] | None = None,
             race_note: str = "") -> Measurement:
        # The backend's columns, then how the point was timed, then the limit's own: a new dict
        # per row, so rows of one group never share (and the backend's dict is never written).
        extras = {**prepared.extras, **timing_extras(timing), "first_call_ms": first_call_ms,
                  **prepared.extras_for_limit(p.workspace_limit), **(stages or {})}
        if timing.cpu_use is not None:
            extras["cpu_threads"] = (threads.available_cores() if p.threads == threads.ALL
                                     else p.threads)     # what threads.limited set
        needed = prepared.workspace_bytes
        if not fits(needed, p.workspace_limit):
            return Measurement(p, Status.WORKSPACE_EXCEEDED,
                               f"needs {needed} bytes of workspace, limit is {p.workspace_limit}",
                               extras=extras, **{**common, "effective_precision": None})
        notes = []
        if common["effective_precision"] != p.precision:
            notes.append(f"asked for {p.precision}, delivers {common['effective_precision']} "
                         f"accuracy (relative L2 error {common['rel_error']:.3g})")
        notes.extend(timing_notes(timing))
        notes += [race_note] if race_note else []
        reason = "; ".join(notes)
        return Measurement(p, Status.OK, reason, samples_ms=timing.samples_ms,
                           stop_reason=timing.stop_reason, host_ms=timing.host_ms,
                           extras=extras, **common)

    def _race_for(self, point: Point, algo: Algorithm) -> Race | None:
        """The race the point's candidate joins (harness/race.py; None with --no-race): the
        plans of an expanding algorithm race each other; on a GPU a backend's algorithms of one
        point race across their groups too, which come one after another (CPU rows are measured
        in rounds that would race one another, and keep their full floor)."""
        if not point.timing.race:
            return None
        if backends.get(point.backend).device != "cuda":
            return Race() if algo.expands else None
        key = replace(point, algorithm="*", workspace_limit=None).point_id
        return _cached(self._races, key, RACES_KEPT, Race)

    def cached_data(self, point: Point) -> ProblemData:
        """The point's test data, drawn once for its neighbours (and ahead of its group where
        the worker was asked to prefetch it)."""
        return _cached(self._data, (point.problem, point.precision, point.op), self._cache_size,
                       lambda: oracles.of(point.problem).make_data(
                           point.problem, point.precision, self.seed, point.op))

    def _cached_reference(self, point: Point, data: ProblemData, xp: Any) -> Any:
        return _cached(self._references, _reference_key(point, xp), self._cache_size,
                       lambda: oracles.of(point.problem).reference(
                           point.problem, point.direction, data, xp, point.op))

    def _cached_scales(self, point: Point, data: ProblemData, expected: Any,
                       xp: Any) -> reference.TermScales:
        """The point's term scales, computed once (a second float64 reference) for every
        algorithm whose output needs them (verdict.judge); `expected` is the point's reference."""
        return _cached(self._scales, _reference_key(point, xp), self._cache_size,
                       lambda: oracles.of(point.problem).term_scales(
                           point.problem, point.direction, data, expected, xp, point.op))


def _cached(cache: OrderedDict, key: tuple, size: int, compute: Callable[[], Any]) -> Any:
    if key not in cache:
        cache[key] = compute()
        while len(cache) > size:
            cache.popitem(last=False)
    return cache[key]


def _reference_key(point: Point, xp: Any) -> tuple:
    return (point.problem, point.precision, point.direction, point.op, xp.__name__)


def _standard(point: Point, factor: float, expected: Any) -> verdict.Standard:
    return verdict.Standard(point.precision, point.problem.reduction_length(point.direction),
                            factor, point.direction, point.output, _scaled_rms(point, expected),
                            point.problem.kinked(point.direction), point.problem.chain)


def _measured_with(row: Point, measured: Point) -> dict[str, str]:
    """A row computed by another precision's run (Algorithm.computes_as) names that one."""
    return {} if row.precision == measured.precision else {"measured_with": measured.precision}


def _why_wrong(point: Point, judged: verdict.Judged) -> str:
    scaled = (f", {judged.conditioned:.3g} times the plain one for data whose terms cancel"
              if judged.conditioned > 1 else "")
    return (f"relative L2 error {judged.rel_error:.3g} exceeds the {point.precision} tolerance "
            f"{judged.tolerance:.3g}{scaled} (max abs error {judged.max_abs_error:.3g})")


def algorithm_for(point: Point) -> Algorithm:
    """The algorithm that runs `point`: the one it names or, where it names a concrete variant,
    its backend's expanding algorithm (KeyError naming the known ones otherwise)."""
    backend = backends.get(point.backend)
    expanding = [a for a in backend.algorithms() if a.expands]
    if expanding and point.algorithm not in {a.name for a in backend.algorithms()}:
        return expanding[0]
    return backend.algorithm(point.algorithm)


def _shares(stages: dict[str, float], group: list[Point]) -> dict[str, float]:
    """A row's part of its group's stage times: its rows (workspace limits of one call) share
    the cost, so a run's totals count the call once."""
    return {name: ms / len(group) for name, ms in stages.items()}


def _scaled_rms(point: Point, expected: Any) -> float | None:
    """The RMS of the exact result as an 8-bit result holds it (times its scale), which an
    int8 result's rounding is relative to; None for a wide result."""
    if not precision.is_narrow(point.result_precision):
        return None
    xp = reference.array_module(expected)
    return float(xp.sqrt(xp.mean(xp.square(expected)))) * point.result_scale or None


def _failed(point: Point, algo: Algorithm, err: BaseException) -> Measurement:
    if isinstance(err, Unsupported):     # refused at its first call (cuDNN's persistent RNNs)
        return Measurement(point, Status.UNSUPPORTED, str(err), algo.family)
    if isinstance(err, setup_budget.OverBudget):    # its setup step ran over earlier in the run
        return Measurement(point, Status.NOT_TRIED, str(err), algo.family)
    if isinstance(err, AlgorithmFailed):
        reason = str(err)
    else:
        where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
        reason = f"{type(err).__name__}: {err}{at}"
    if context_lost(err):
        # Every later CUDA call in this process would fail too: the worker marks the rest of
        # its group crashed with this reason and hands the GPU to a fresh process.
        return Measurement(point, Status.CRASHED, f"CUDA context lost: {reason}", algo.family)
    return Measurement(point, Status.FAILED, reason, algo.family)


def _over_limit(point: Point, algo: Algorithm, needed: int) -> Measurement:
    return Measurement(point, Status.WORKSPACE_EXCEEDED,
                       f"needs {needed} bytes of workspace, limit is {point.workspace_limit}",
                       algo.family, workspace_bytes=needed)
