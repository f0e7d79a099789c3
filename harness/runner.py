"""Plan a sweep into points, order and group them, and hand the groups to be measured.

Every point yields exactly one Measurement (harness.executor measures it). A GPU error that kills
or poisons the process becomes `crashed`: GPU points run in a worker process that is restarted
(harness.worker). The cluster path (harness.cluster) takes the same groups as its shards.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import groupby

from harness import backends, cpu_memory, families, runoff, threads, verified_once
from harness.batches import ahead_of, batches, is_on_gpu, with_next
from harness.executor import PointExecutor, computed_precision
from harness.measurement import HungKey, Measurement
from harness.plan_cache import CacheFile
from harness.stats import samples_floor
from harness.stopping import RACED_OUT
from harness.sweep import RECURRENT_ONLY, Point, Sweep, TimingOptions
from harness.threads import ALL as ALL_THREADS


class PlanError(ValueError):
    """The sweep names a backend or algorithm that does not exist or cannot run here."""


@dataclass(frozen=True)
class Plan:
    points: tuple[Point, ...]
    notes: tuple[str, ...]        # e.g. optional backends dropped, with the reason


def plan(sweep: Sweep) -> Plan:
    """Validate backend and algorithm names and expand the sweep into points."""
    notes: list[str] = []
    kept = []
    for choice in sweep.backends:
        try:
            backend = backends.get(choice.backend)
        except KeyError as err:
            raise PlanError(str(err.args[0])) from None
        reason = backend.unavailable_reason()
        if reason and choice.optional:
            notes.append(f"skipping optional backend {choice.backend!r}: {reason}")
            continue
        if reason:
            raise PlanError(f"backend {choice.backend!r} is unavailable: {reason}")
        known = [a.name for a in backend.algorithms()]
        for name in choice.algorithms:
            if name not in known:
                raise PlanError(f"backend {choice.backend!r} has no algorithm {name!r}; "
                                f"known: {', '.join(known)}")
        kept.append(choice)
    trimmed = replace(sweep, backends=tuple(kept))
    points = list(dict.fromkeys(_threads_for_device(p) for p in trimmed.points(_algorithm_names)
                                if _exists(p)))
    if not points and kept:
        _refuse_other_families(sweep, kept)
    if set(sweep.layouts) - {"NCHW"} and any(p.kind == families.RNN for p in sweep.problems):
        notes.append(f"recurrent layers run in layout {families.RNN_LAYOUT} (sequence, batch, "
                     f"features) whatever the layouts asked: those apply to convolutions")
    if any(p.threads != ALL_THREADS for p in points) and threads.missing_library():
        raise PlanError(threads.missing_library())
    timing, raised = with_samples_floor(sweep.timing, len(points))
    points = [replace(p, timing=timing) for p in points]
    notes += [raised] if raised else []
    return Plan(tuple(_beside_their_group(sorted(points, key=_locality(sweep)))), tuple(notes))


def _refuse_other_families(sweep: Sweep, kept: list) -> None:
    """PlanError where no algorithm asked computes any of the suite's problem families (a
    convolution algorithm named for recurrent layers, say), or only directions recurrent layers
    have were asked of convolutions: nothing could ever be measured."""
    kinds = {p.kind for p in sweep.problems}

    def words(found: set[str]) -> str:
        return " and ".join(families.WORDS[k] for k in sorted(found))
    if set(sweep.directions) <= set(RECURRENT_ONLY) and families.RNN not in kinds:
        raise PlanError(f"nothing to measure: {', '.join(sweep.directions)} "
                        f"{'is a direction' if len(sweep.directions) == 1 else 'are directions'}"
                        f" of recurrent layers and suite {sweep.name!r} holds {words(kinds)} "
                        f"layers only (docs/recurrent.md)")
    algorithms = [a for choice in kept for a in backends.get(choice.backend).algorithms()
                  if not choice.algorithms or a.name in choice.algorithms]
    computed = {k for a in algorithms for k in a.problem_kinds}
    if not kinds & computed:
        names = ", ".join(f"{a.backend}:{a.name}" for a in algorithms)
        verb = "computes" if len(algorithms) == 1 else "compute"
        raise PlanError(f"nothing to measure: suite {sweep.name!r} holds {words(kinds)} layers "
                        f"and {names} {verb} {words(computed)} layers only (docs/recurrent.md)")


def _beside_their_group(points: list[Point]) -> list[Point]:
    """`points` with each moved up beside the first point of its group (`groups`: the graph
    API's tf32 points beside the fp32 ones it measures with them), every other order kept."""
    keys = [runoff.measured_as(p) for p in points]
    first: dict[Point, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    order = sorted(range(len(points)), key=lambda i: first[keys[i]])
    return [points[i] for i in order]


def with_samples_floor(timing: TimingOptions, rows: int) -> tuple[TimingOptions, str | None]:
    """`timing` with at least stats.samples_floor(rows) samples a point, and a note when that
    raised the suite's min_samples. Below the floor `convbench compare` of two runs could never
    call a lone regressed row SLOWER, so a CI gate on them could not fail. The planned points
    stand in for the rows: unsupported points make fewer rows and expanding algorithms more,
    which the floor's logarithmic growth makes cheap to get wrong (stats.samples_floor)."""
    floor = samples_floor(rows)
    if rows == 0 or timing.min_samples >= floor:
        return timing, None
    raised = replace(timing, min_samples=floor, max_samples=max(timing.max_samples, floor))
    return raised, (f"min_samples raised from {timing.min_samples} to {floor} for {rows} points: "
                    f"the fewest with which `convbench compare` can call one regressed row "
                    f"SLOWER (docs/regression-checks.md)")


def _locality(sweep: Sweep) -> Callable[[Point], tuple]:
    """Order points so that those sharing test data, references and device buffers run one after
    another (problem, then precision and layout, then direction), GPU backends together; each
    CPU backend in a phase of its own (its library's threads spinning after a call slowed
    another library's next call up to 2x: PyTorch's oneDNN threads beside NumPy's BLAS ones).
    The sort is stable, so points differing only in workspace limit stay adjacent."""
    problem_index = {p: i for i, p in enumerate(sweep.problems)}
    cpu_backends = [c.backend for c in sweep.backends if backends.get(c.backend).device != "cuda"]

    def phase(backend: str) -> int:
        return cpu_backends.index(backend) + 1 if backend in cpu_backends else 0
    return lambda p: (phase(p.backend), problem_index[p.problem], p.precision, p.layout,
                      p.direction)


def _threads_for_device(point: Point) -> Point:
    """GPU points run at the libraries' own thread count whatever --threads asks: it would change
    nothing they time (the duplicates this makes are dropped)."""
    if point.threads != ALL_THREADS and backends.get(point.backend).device == "cuda":
        return replace(point, threads=ALL_THREADS)
    return point


def _algorithm_names(backend: str) -> list[str]:
    return [a.name for a in backends.get(backend).algorithms()]


def _exists(point: Point) -> bool:
    return backends.get(point.backend).algorithm(point.algorithm).exists_for(point)


# ---- sweeps -------------------------------------------------------------------------------------
def groups(points: Iterable[Point]) -> Iterator[list[Point]]:
    """Consecutive points that differ only in their workspace limit, or in a precision their
    algorithm computes alike (the graph API's fp32 and tf32: Algorithm.computes_as)."""
    for _, members in groupby(points, key=runoff.measured_as):
        yield list(members)


def run_point(point: Point, seed: int = 0) -> Measurement:
    """Measure a single point in this process (used by the pytest plugin and tests)."""
    try:
        return PointExecutor(seed).measure([point])[0]
    finally:
        cpu_memory.trim()


def shards(points: Iterable[Point]) -> list[list[Point]]:
    """The cluster's units of work: consecutive points (in plan order) of one problem at one
    precision, which share test data (and, op by op, references), so each worker builds them once.
    Largest first, so the last shard to start is a small one and the workers finish together;
    estimated work is the point count times the problem's FLOPs."""
    runs = [list(members) for _, members in groupby(points, key=_test_data)]
    return sorted(runs, key=lambda shard: len(shard) * shard[0].problem.flops, reverse=True)


def _test_data(point: Point) -> tuple:
    return (point.problem, computed_precision(point))


class Measurer:
    """Measures groups of points: CPU points in this process, GPU points in crash-isolated
    worker processes (harness.worker) so a CUDA error that poisons the context cannot end the
    sweep, each point's samples shared among `gpu_processes` of them (harness.process_split),
    and a layer's GPU rows held back until its finalists ran off (harness/runoff.py). Held
    across calls, it keeps test data and the GPU worker processes warm."""

    def __init__(self, seed: int = 0, hung_engines: Iterable[HungKey] = (),
                 plan_cache: CacheFile | None = None):
        self._local = PointExecutor(seed)
        self._remotes: list = []
        self._seed = seed
        self._plan_cache = plan_cache
        # the worker pools' shared memory of hung engines (a resumed run's start from the rows)
        self._hung_engines: set = set(hung_engines)
        self._over_budget: dict = {}    # and of setup steps over their budget (setup_budget.py)

    def run(self, points: Iterable[Point], on_result: Callable[[Measurement], None],
            on_group_done: Callable[[list[str]], None] | None = None,
            measured_variants: Mapping[str, Iterable[str]] | None = None) -> None:
        """Measure `points` group by group, calling `on_result` as rows become final (one GPU
        process: as each plan of an expanding algorithm finishes, so a kill loses at most the
        plan under way) and `on_group_done` with the group's point ids once its rows are all
        out. A resumed run names in `measured_variants` (planned point id -> variants) the plans
        a killed run already measured: they are left out."""
        def done(group: list[Point]) -> None:
            cpu_memory.trim()
            if on_group_done is not None:
                on_group_done([p.point_id for p in group])
        def skipped(group: list[Point]) -> frozenset[str]:
            return frozenset(variant for p in group
                             for variant in (measured_variants or {}).get(p.point_id, ()))
        held = runoff.HeldLayer()
        for batch, following in with_next(batches(groups(points))):
            first = batch[0][0]
            on_gpu = is_on_gpu(first)
            if held.groups and (not on_gpu or runoff.layer_key(first) != held.key):
                self._settle(held, on_result, done)
            skips = [skipped(g) for g in batch]
            if not on_gpu:
                self._measure_cpu(batch, skips, on_result, done)
                continue
            ahead = ahead_of(following)
            if not runoff.wanted(first):
                self._measure_gpu(batch, skips, on_result, ahead, done)
                continue
            for group, rows in zip(batch, self._measure_gpu(batch, skips, None, ahead)):
                held.add(group, rows)
        self._settle(held, on_result, done)

    def _measure_cpu(self, batch: list[list[Point]], skips: list[frozenset[str]],
                     emit: Callable[[Measurement], None],
                     done: Callable[[list[Point]], None]) -> None:
        """CPU groups that share test data, in `cpu_rounds` rounds over all of them (each round
        prepares every point afresh): the rounds' medians are the run's own replicates
        (TimingOptions.cpu_rounds), as far apart as the batch's other groups take (back to back
        where a batch is one group). A kill loses the batch under way."""
        from harness import process_split
        k = process_split.replicates(batch[0][0], "cpu")
        rounds: list[list[list[Measurement]]] = [[] for _ in batch]
        for replicate in range(k):
            for measured, group, skip in zip(rounds, batch, skips):
                shared = process_split.shared_group(group, k, replicate)
                measured.append([row for unit in self._local.units(shared, skip)
                                 for row in unit.measure()])
                cpu_memory.trim()
        for measured, group in zip(rounds, batch):
            _emit_all(process_split.merge(group, measured) if k > 1 else measured[0], emit)
            done(group)

    def _measure_gpu(self, batch: list[list[Point]], skips: list[frozenset[str]],
                     emit: Callable[[Measurement], None] | None,
                     ahead: tuple[list[Point], list[Point]] | None,
                     done: Callable[[list[Point]], None] | None = None
                     ) -> list[list[Measurement]]:
        """A point's candidate groups (harness/batches.py), each group's merged rows handed to
        `emit` (None: only returned, for the runoff, which may still change them), then `done`.
        The groups go to each timing process in one message; while one process measures, the
        other draws test data: this batch's for the second, the next batch's for the first,
        which also starts the next points' setup (`ahead`: batches.ahead_of; alone, it does)."""
        from harness import process_split
        from harness.worker import Request
        k = process_split.replicates(batch[0][0], "cuda")
        pools = self._pools(k)
        if len(pools) == 1:     # nothing to merge with: each plan's rows are final as they come
            if ahead is not None:   # no idle sibling: the one process starts them, then measures
                pools[0].prefetch([], ahead[1])
            def streamed(group: list[Point]) -> Callable[[list[Measurement]], None] | None:
                return None if emit is None else (
                    lambda rows: _emit_all(process_split.merge(group, [rows]), emit))
            def finished(group: list[Point]) -> Callable[[], None] | None:
                return None if done is None else (lambda: done(group))
            measured = pools[0].measure_groups(
                [Request(g, skip, on_rows=streamed(g), on_done=finished(g))
                 for g, skip in zip(batch, skips)])
            return [process_split.merge(g, [rows]) for g, rows in zip(batch, measured)]
        per_group: list[list[list[Measurement]]] = [[] for _ in batch]
        # One process after another, never at once: they share the GPU being timed.
        for replicate, pool in enumerate(pools):
            sibling = pools[(replicate + 1) % k]
            wanted = [i for i, measured in enumerate(per_group)
                      if not measured or any(_could_be_best(m) for m in measured[-1])]
            if not wanted:
                break   # nothing a later process measures can make these rows ok, or the best
            if replicate + 1 < k:
                sibling.prefetch(batch[wanted[0]])
            elif ahead is not None:
                sibling.prefetch(*ahead)
            requests = [Request(process_split.shared_group(batch[i], k, replicate),
                                skips[i] | _settled_variants(per_group[i]),
                                verified_once.from_rows(per_group[i][0]) if per_group[i]
                                else {}) for i in wanted]
            for i, rows in zip(wanted, pool.measure_groups(requests)):
                per_group[i].append(rows)
        merged = [process_split.merge(g, measured) for g, measured in zip(batch, per_group)]
        for group, rows in zip(batch, merged):
            _emit_all(rows, emit or (lambda row: None))
            if done is not None:
                done(group)
        return merged

    def _settle(self, held: runoff.HeldLayer, emit: Callable[[Measurement], None],
                done: Callable[[list[Point]], None]) -> None:
        """A layer's held GPU rows after their runoff (harness/runoff.py), out, and the held
        groups done."""
        from harness import process_split
        if not held.groups:
            return
        k = process_split.replicates(held.groups[0][0], "cuda")
        pools = self._pools(k)
        verified = verified_once.from_rows(held.rows)

        def again(replicate: int, point: Point) -> list[Measurement]:
            return pools[replicate].measure([point], verified=verified)
        _emit_all(runoff.run(held.rows, again, k, self._seed), emit)
        for group in held.groups:
            done(group)
        held.clear()

    def _pools(self, count: int) -> list:
        from harness.worker import WorkerPool
        while len(self._remotes) < count:
            self._remotes.append(WorkerPool(self._seed, hung_engines=self._hung_engines,
                                            plan_cache=self._plan_cache,
                                            over_budget=self._over_budget))
        return self._remotes[:count]

    def close(self) -> None:
        for pool in self._remotes:
            pool.close()
        self._remotes = []


def _emit_all(rows: Iterable[Measurement], emit: Callable[[Measurement], None]) -> None:
    for row in rows:
        emit(row)


def _could_be_best(m: Measurement) -> bool:
    """An ok row the race left in: a later process's samples can still change its standing."""
    return m.ok and m.stop_reason != RACED_OUT


def _settled_variants(measured: list[list[Measurement]]) -> frozenset[str]:
    """Plans an earlier process gave no ok row: a merged row is as bad as the worst any process
    saw (process_split.merge), so measuring them again cannot change it. It would cost their
    setup and checks again, and a plan that hung or crashed would wait out the same cap. And
    plans an earlier process raced out (harness/race.py): they cannot be the point's best."""
    variants = {m.point.algorithm for rows in measured for m in rows if m.of_variant}
    ok = {m.point.algorithm for rows in measured for m in rows
          if m.of_variant and _could_be_best(m)}
    return frozenset(variants - ok)


def run_points(points: Iterable[Point], on_result: Callable[[Measurement], None],
               seed: int = 0, on_group_done: Callable[[list[str]], None] | None = None,
               measured_variants: Mapping[str, Iterable[str]] | None = None,
               hung_engines: Iterable[HungKey] = (), plan_cache: CacheFile | None = None) -> None:
    """Measure every point in this process (GPU points in a worker process), calling
    `on_result` as each finishes (Measurer.run; a resumed run passes the plans and the hung
    engines its journal holds; `plan_cache`: the workers' plan-label file, harness/plan_cache)."""
    measurer = Measurer(seed, hung_engines, plan_cache)
    try:
        measurer.run(points, on_result, on_group_done, measured_variants)
    finally:
        measurer.close()
