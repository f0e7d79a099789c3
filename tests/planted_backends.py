"""Backends planted by tests that run convbench in a subprocess: a slow one, so a sweep can be
killed half-way on purpose, and the real `cpu` backend made slower, the regression that
scripts/aa_check.sh must catch (tests/run_planted.py registers it under the name "cpu"); one that
kills the process measuring it once, a Dask worker lost mid-run (tests/test_cluster.py)."""
from __future__ import annotations

import hashlib
import os
import signal
import time
from typing import Any, ClassVar

from harness.backends.base import Prepared
from harness.backends.cpu import CpuBackend
from harness.backends.cudnn.rnn import CudnnRnnBackend, RnnPrepared
from harness.backends.fake import FakeBackend, FakeExact


class SlowExact(FakeExact):
    """Correct, and 30 ms to prepare: a 60-point sweep takes seconds, long enough to kill."""
    backend = "slow"
    name = "exact"

    def prepare(self, point, data):
        time.sleep(0.03)
        return super().prepare(point, data)


class SlowBackend(FakeBackend):
    name = "slow"

    def algorithms(self):
        return [SlowExact()]


class Plans(FakeExact):
    """Expanding: stands for the two 'plans' of every problem, like graph-API engines."""
    backend = "plans"
    name = "all_plans"
    expands = True
    _speed = {"plan_fast": 300.0, "plan_slow": 30.0}

    def variants(self, point, data):
        return list(self._speed)

    def prepare(self, point, data):
        prepared = super().prepare(point, data)
        prepared.gflops = self._speed[point.algorithm]
        return prepared


class PlansBackend(FakeBackend):
    name = "plans"

    def algorithms(self):
        return [Plans()]


# Ten times slower: what two runs on the 2-core CI VM tell apart even when something else is
# running on its cores. Its rows scatter 5-34% between quiet runs of unchanged code (median 13%,
# evidence/logs/power-cpu-*.md: +100% on every row was a SLOWER suite in 17 of 20 pairs, +200% in
# 20 of 20), and up to ±98% with a test suite running beside it, where the suite's scatter floor
# is 5.5x and a planted 3x read as AMBIGUOUS. The check tests the gate end to end on a real
# rerun; benchmarks/power.py measures where its edge lies.
SLOWDOWN = 9.0


class _Forwarding(Prepared):
    """Another backend's Prepared, every member of the protocol passed through but what a
    subclass overrides (named one by one: a __getattr__ would lose to Prepared's defaults)."""

    def __init__(self, inner: Prepared):
        self._inner = inner
        self.workspace_bytes, self.device = inner.workspace_bytes, inner.device
        self.stream, self.extras = inner.stream, inner.extras
        self.family, self.error_factor, self.capture = (inner.family, inner.error_factor,
                                                        inner.capture)

    def launch(self) -> None:
        self._inner.launch()

    def poison(self) -> None:
        self._inner.poison()

    def output(self) -> Any:
        return self._inner.output()

    def release(self) -> None:
        self._inner.release()

    def extras_for_limit(self, limit):
        return self._inner.extras_for_limit(limit)

    def own_timing(self, options):
        return self._inner.own_timing(options)


class _SlowedLaunch(_Forwarding):
    """A prepared CPU point whose every launch busy-waits `slowdown` times its own duration
    afterwards: a real, noisy slowdown of the timed call (a sleep would free the core and be
    rounded to the scheduler's tick)."""

    def __init__(self, inner: Prepared, slowdown: float):
        super().__init__(inner)
        self._slowdown = slowdown

    def launch(self) -> None:
        start = time.perf_counter()
        self._inner.launch()
        until = time.perf_counter() + (time.perf_counter() - start) * self._slowdown
        while time.perf_counter() < until:
            pass


class _SlowedAlgorithm:
    """A real algorithm, unchanged (name, family, supports, directions) except its launches."""

    def __init__(self, inner: Any, slowdown: float):
        self._inner = inner
        self._slowdown = slowdown

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def prepare(self, point, data) -> _SlowedLaunch:
        return _SlowedLaunch(self._inner.prepare(point, data), self._slowdown)


class SlowCpuBackend(CpuBackend):
    """The real `cpu` backend with every launch `slowdown` slower. Registered under the name
    "cpu", its points keep the ids of a real baseline's; CPU points run in the process that
    registered it (only GPU points go to worker processes), so `slowdown` set there holds."""
    slowdown = SLOWDOWN

    def algorithms(self) -> list:
        return [_SlowedAlgorithm(a, self.slowdown) for a in super().algorithms()]


class DiesOnce(FakeExact):
    """Correct, except that the first time any process prepares it, that process is killed
    (SIGKILL, as a lost node or the OOM killer would): under --cluster, a Dask worker lost in
    the middle of a shard. The marker file, named by the test, makes it happen once."""
    backend = "dies_once"
    name = "exact"
    marker_variable = "CONVBENCH_TEST_DIE_MARKER"

    def prepare(self, point, data):
        marker = os.environ.get(self.marker_variable)
        if marker:
            try:
                with open(marker, "x"):
                    pass
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().prepare(point, data)


class DiesOnceBackend(FakeBackend):
    name = "dies_once"

    def algorithms(self):
        return [DiesOnce()]


class _GpuExact(FakeExact):
    backend = "fake_gpu"


class _GpuDies(FakeExact):
    """Kills the process measuring it, every time: a driver fault that takes the process down."""
    backend = "fake_gpu"
    name = "dies"

    def prepare(self, point, data):
        os.kill(os.getpid(), signal.SIGKILL)


class FakeGpuBackend(FakeBackend):
    """The fake backend posing as a GPU one: its points take the GPU path (a crash-isolated
    worker process, one GPU per Dask worker) with no GPU or CUDA anywhere."""
    name = "fake_gpu"
    device = "cuda"

    def algorithms(self):
        return [_GpuExact(), _GpuDies()]


# Problems whose setup this process was asked to start ahead of them (Algorithm.ahead)
_STARTED_AHEAD: set[str] = set()


class _StartedAhead(FakeExact):
    """Its row's `rnn_build_ms` is 1 where the measuring process was asked to start the point's
    setup ahead of it, and absent where it was not."""
    backend = "ahead_gpu"

    def ahead(self, point):
        _STARTED_AHEAD.add(point.problem.name)

    def prepare(self, point, data):
        prepared = super().prepare(point, data)
        if point.problem.name in _STARTED_AHEAD:
            prepared.extras["rnn_build_ms"] = 1.0
        return prepared


class AheadGpuBackend(FakeBackend):
    """Routed like a GPU backend; says which of its points the process was told were coming."""
    name = "ahead_gpu"
    device = "cuda"

    def algorithms(self):
        return [_StartedAhead()]


class _ProcessTimedPrepared(_Forwarding):
    """A fake point on a 'cuda' backend whose every sample is the measuring process's pid in
    microseconds: which worker process took which sample can be read back from the row."""

    def own_timing(self, options) -> Any:
        from harness.timer import Timing
        return Timing(tuple(os.getpid() * 1e-3 for _ in range(options.min_samples)), "simulated")


class ProcessTimed(FakeExact):
    backend = "process_gpu"

    def prepare(self, point, data):
        return _ProcessTimedPrepared(super().prepare(point, data))


class ProcessGpuBackend(FakeBackend):
    """Routed like a GPU backend (worker processes, harness.process_split), simulated inside."""
    name = "process_gpu"
    device = "cuda"

    def algorithms(self):
        return [ProcessTimed()]


class _Speed(FakeExact):
    """A plain algorithm of a 'cuda' backend at a given speed (simulated, no GPU anywhere):
    each is a group of its own, as the legacy cuDNN algorithms are."""
    backend = "racing_gpu"


class _Fast(_Speed):
    name, gflops = "fast", 300.0


class _Slow(_Speed):
    name, gflops = "slow", 30.0


class _Hungry(_Speed):
    """Fastest of all, and needs 64 MiB of workspace."""
    name, gflops, workspace = "hungry", 600.0, 64 << 20


class RacingGpuBackend(FakeBackend):
    """Plain algorithms routed like a GPU backend's: their groups race (harness/race.py)."""
    name = "racing_gpu"
    device = "cuda"

    def algorithms(self):
        return [_Hungry(), _Fast(), _Slow()]


class _Ranked(_Speed):
    """A plain algorithm its library ranks (Algorithm.race_rank): `rank`, or a ranking that
    fails (`rank` an exception class) or hangs (`rank` "hangs")."""
    backend = "ranked_gpu"
    rank: ClassVar[Any] = None

    def race_rank(self, point):
        if self.rank == "hangs":
            time.sleep(60)
        if isinstance(self.rank, type):
            raise self.rank("planted: the library could not rank")
        return self.rank


class _RankedSlow(_Ranked):
    name, gflops, rank = "slow", 30.0, 1


class _RankedFast(_Ranked):
    name, gflops, rank = "fast", 300.0, 0


class _RankFails(_Ranked):
    name, gflops, rank = "rank_fails", 300.0, RuntimeError


class _RankHangs(_Ranked):
    name, gflops, rank = "rank_hangs", 300.0, "hangs"


class RankedGpuBackend(FakeBackend):
    """Plain 'cuda' algorithms with a library ranking: the worker measures a point's groups in
    its order (PointExecutor.race_order)."""
    name = "ranked_gpu"
    device = "cuda"

    def algorithms(self):
        return [_RankedSlow(), _RankedFast(), _RankFails(), _RankHangs()]


class _FailsAtLaunch(_Forwarding):
    """A fake point whose every launch raises what `error()` makes."""

    def __init__(self, inner: Prepared, error):
        super().__init__(inner)
        self._error = error

    def launch(self) -> None:
        raise self._error()


def _execution_failed() -> Exception:
    """What the cudnn backend raises when a kernel faulted: status 5000, the context is gone."""
    from harness.backends.cudnn.legacy import CudnnFailed
    return CudnnFailed("CUDNN_STATUS_EXECUTION_FAILED (5000) from the convolution call: planted",
                       5000)


def _quotes_a_fault() -> Exception:
    """A failure whose text merely quotes the names of context-losing errors."""
    from harness.backends.base import AlgorithmFailed
    return AlgorithmFailed("planted: the library's log mentions cudaErrorIllegalAddress and "
                           "CUDNN_STATUS_EXECUTION_FAILED, but this call only failed")


class _ContextLost(FakeExact):
    backend = "faulty_gpu"
    name = "context_lost"

    def prepare(self, point, data):
        return _FailsAtLaunch(super().prepare(point, data), _execution_failed)


class _QuotesAFault(FakeExact):
    backend = "faulty_gpu"
    name = "quotes_a_fault"

    def prepare(self, point, data):
        return _FailsAtLaunch(super().prepare(point, data), _quotes_a_fault)


def _refused_when_called() -> Exception:
    """What cudnn_rnn raises where cuDNN refuses at the call itself (a persistent RNN algorithm
    with sequences of several lengths), not at a query in prepare."""
    from harness.backends.base import Unsupported
    return Unsupported("CUDNN_STATUS_NOT_SUPPORTED (3000) from cudnnRNNForward: planted")


class _RefusedWhenCalled(FakeExact):
    backend = "faulty_gpu"
    name = "refused_when_called"

    def prepare(self, point, data):
        return _FailsAtLaunch(super().prepare(point, data), _refused_when_called)


class _Hangs(FakeExact):
    backend = "faulty_gpu"
    name = "hangs"

    def prepare(self, point, data):
        time.sleep(3600)


class _FaultOnSecondPlan(FakeExact):
    """Expanding: its first and third plans measure fine, its second has the fault a subclass
    plants in `faulty`."""
    backend = "faulty_gpu"
    expands = True

    def variants(self, point, data):
        return ["plan_ok", "plan_faulty", "plan_after"]

    def prepare(self, point, data):
        prepared = super().prepare(point, data)
        return self.faulty(prepared) if point.algorithm == "plan_faulty" else prepared


class _LostOnSecondPlan(_FaultOnSecondPlan):
    """The second plan loses the CUDA context."""
    name = "plans"

    def faulty(self, prepared):
        return _FailsAtLaunch(prepared, _execution_failed)


class _HangsOnSecondPlan(_FaultOnSecondPlan):
    """The second plan never returns, as an efficientnet_b0 depthwise bwd_data graph plan did
    on an H100 (evidence/studies/stall_plans.py)."""
    name = "hanging_plans"

    def faulty(self, prepared):
        time.sleep(3600)


class _HangingEngine(FakeExact):
    """Expanding, with graph-API-like names: every knob setting of engine eng2 never returns, as
    14 settings of three engines did on one efficientnet_b0 point on an H100."""
    backend = "faulty_gpu"
    name = "hanging_engine"
    expands = True

    def variants(self, point, data):
        return ["eng1_k1=0", "eng2_k1=0", "eng2_k1=1", "eng3"]

    def engine_of(self, variant):
        return variant.split("_")[0]

    def prepare(self, point, data):
        if point.algorithm.startswith("eng2_"):
            time.sleep(3600)
        return super().prepare(point, data)


class _SlowSetup(FakeExact):
    """A setup step under the point's build budget (harness/setup_budget.py), as
    cudnnBuildRNNDynamic runs: it never returns for 8 or more output channels, whatever the batch
    (not in its key), and takes 4 s for 6."""
    backend = "faulty_gpu"
    name = "slow_setup"

    def prepare(self, point, data):
        from harness import setup_budget
        p = point.problem
        with setup_budget.watched(("faulty_gpu", self.name, p.in_channels, p.out_channels),
                                  f"the planted build ({p.out_channels} channels)",
                                  point.timing.build_budget_s):
            if p.out_channels >= 6:
                time.sleep(3600 if p.out_channels >= 8 else 4.0)
        return super().prepare(point, data)


class _DiesOnSecondPlan(_FaultOnSecondPlan):
    """The second plan takes the whole process down, as a driver fault can."""
    name = "dying_plans"

    def faulty(self, prepared):
        os._exit(9)


class FaultyGpuBackend(FakeBackend):
    """Routed like a GPU backend (worker processes); its faults are typed errors, as the real
    backends raise them, with no GPU anywhere."""
    name = "faulty_gpu"
    device = "cuda"

    def algorithms(self):
        return [_ContextLost(), _QuotesAFault(), _RefusedWhenCalled(), _Hangs(),
                _LostOnSecondPlan(), _HangsOnSecondPlan(), _DiesOnSecondPlan(), _HangingEngine(),
                _SlowSetup()]


# Thread counts each launch of a ThreadsSeenBackend point found: (BLAS threads, torch threads).
THREADS_SEEN: list[tuple[int, int | None]] = []


def _threads_now() -> tuple[int, int | None]:
    import sys
    from threadpoolctl import threadpool_info
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    torch = sys.modules.get("torch")
    return (min(blas) if blas else -1), (torch.get_num_threads() if torch else None)


class _RecordsThreads(_Forwarding):
    def launch(self) -> None:
        THREADS_SEEN.append(_threads_now())
        self._inner.launch()


class _RecordsThreadsAlgorithm(_SlowedAlgorithm):
    def prepare(self, point, data) -> _RecordsThreads:
        return _RecordsThreads(self._inner.prepare(point, data))


class ThreadsSeenBackend(CpuBackend):
    """The real `cpu` backend, each launch noting the thread counts it ran with."""
    name = "threads_seen"

    def algorithms(self) -> list:
        return [_RecordsThreadsAlgorithm(a, 0.0) for a in super().algorithms()]


class SlowerExact(FakeExact):
    """The fake backend's `exact`, 25% slower (a regression planted in one `convbench ab`
    environment by tests/planted_env_worker.py); `exact_slow` keeps its speed."""
    gflops = FakeExact.gflops / 1.25


class SlowerExactBackend(FakeBackend):
    name = "fake"

    def algorithms(self):
        return [SlowerExact(), *FakeBackend().algorithms()[1:]]


def planted_share(point_id: str, every: int) -> bool:
    """Whether a planted regression of `every`-th points hits this one: a stable pick by the
    point's id, the same in every process (Python's hash() is salted per process)."""
    return int(hashlib.sha1(point_id.encode()).hexdigest(), 16) % every == 0


class _SlowedSome(_SlowedAlgorithm):
    def __init__(self, inner: Any, slowdown: float, every: int):
        super().__init__(inner, slowdown)
        self._every = every

    def prepare(self, point, data):
        if planted_share(point.point_id, self._every):
            return super().prepare(point, data)
        return self._inner.prepare(point, data)


class SomeSlowCpuBackend(CpuBackend):
    """The real `cpu` backend with the launches of every `every`-th point (planted_share)
    `slowdown` slower: a regression of part of a suite, for `convbench ab`'s power
    (benchmarks/ab_power.py, through tests/planted_env_worker.py)."""
    slowdown = 0.25
    every = 4

    def algorithms(self) -> list:
        return [_SlowedSome(a, self.slowdown, self.every) for a in super().algorithms()]


# Preparations made in this process, by algorithm: the placed_gpu backend's reads depend on it.
PREPARED: dict[str, int] = {}


class _PlacedPrepared(_Forwarding):
    """Every sample the same: `ms` (no noise), so a row's median is decided by its placements."""

    def __init__(self, inner: Prepared, ms: float, wrong: bool):
        super().__init__(inner)
        self._ms, self._wrong = ms, wrong

    def output(self) -> Any:
        out = self._inner.output()
        return out * 1.01 if self._wrong and out is not None else out

    def own_timing(self, options) -> Any:
        from harness.timer import Timing
        return Timing((self._ms,) * options.min_samples, "simulated")


class _Placed(FakeExact):
    """A 'cuda' algorithm whose time depends on the preparation, as a ~10 us kernel's does on
    where its buffers land (harness/runoff.py): `reads` gives the time of each process's 1st,
    2nd, ... preparation (the last repeats); `wrong_from` the first preparation that computes
    a wrong result (None: never)."""
    backend = "placed_gpu"
    reads: tuple[float, ...] = (1.0,)
    wrong_from: int | None = None

    def prepare(self, point, data):
        reads, wrong_from = self._placement(point.algorithm)
        n = PREPARED[point.algorithm] = PREPARED.get(point.algorithm, 0) + 1
        ms = reads[min(n, len(reads)) - 1]
        return _PlacedPrepared(super().prepare(point, data), ms,
                               wrong_from is not None and n >= wrong_from)

    def _placement(self, algorithm: str) -> tuple[tuple[float, ...], int | None]:
        return self.reads, self.wrong_from


class _SlowFirst(_Placed):
    name, reads = "slow_first", (1.06, 1.0)     # its first placement was a slow one


class _Steady(_Placed):
    name, reads = "steady", (1.0,)


class _Far(_Placed):
    name, reads = "far", (2.0,)                 # 2x the fastest: never a finalist


class _WrongWhenMoved(_Placed):
    name, reads, wrong_from = "wrong_when_moved", (1.02,), 2


class _PlacedPlans(_Placed):
    """Expanding, as the graph API's plans are: its plans are placed like the algorithms."""
    name, expands = "plans", True
    PLANS = {"plan_slow_first": (1.06, 1.0), "plan_steady": (1.0,)}

    def variants(self, point, data):
        return list(self.PLANS)

    def _placement(self, algorithm):
        return self.PLANS[algorithm], None


class PlacedGpuBackend(FakeBackend):
    name = "placed_gpu"
    device = "cuda"

    def algorithms(self):
        return [_SlowFirst(), _Steady(), _Far(), _WrongWhenMoved(), _PlacedPlans()]


# The GPU regression planted for a `history` series on a GPU (benchmarks/history_series.py):
# every cuDNN call followed by GPU work of this fraction of its own time. Read from the
# environment, since GPU points are measured in spawned worker processes.
GPU_SLOWDOWN_ENV = "CONVBENCH_PLANTED_GPU_SLOWDOWN"


class _SpunLaunch(_Forwarding):
    """A prepared GPU point whose every call is followed, on its stream, by a spin kernel that
    makes the call `slowdown` slower (its own GPU time and the spin kernel's fixed cost, both
    measured here): a real slowdown that the graph and stream timers both see. A call too short
    for that (the spin kernel alone costs more than `slowdown` of it) is left as it is."""

    def __init__(self, inner: Prepared, slowdown: float):
        super().__init__(inner)
        self._spin_ms = 0.0
        if slowdown > 0:
            alone = self._per_call_ms()
            self._spin_ms = 1e-6             # the spin kernel's fixed cost: a call with one
            fixed = self._per_call_ms() - alone
            wanted = slowdown * alone - fixed
            self._spin_ms = wanted if wanted > 0 else 0.0

    def _per_call_ms(self, calls: int = 20) -> float:
        import cupy
        for _ in range(3):
            self.launch()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(self._inner.stream)
        for _ in range(calls):
            self.launch()
        end.record(self._inner.stream)
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / calls

    def launch(self) -> None:
        from harness.timer import _spin
        self._inner.launch()
        if self._spin_ms > 0:
            _spin(self._inner.stream, self._spin_ms)


class _SpunAlgorithm(_SlowedAlgorithm):
    def prepare(self, point, data) -> _SpunLaunch:
        return _SpunLaunch(self._inner.prepare(point, data), self._slowdown)


def _cudnn_backend() -> type:
    from harness.backends.cudnn.legacy import CudnnBackend

    class SlowCudnnBackend(CudnnBackend):
        """The real `cudnn` backend, every call `CONVBENCH_PLANTED_GPU_SLOWDOWN` slower."""

        def algorithms(self) -> list:
            slowdown = float(os.environ.get(GPU_SLOWDOWN_ENV) or 0.0)
            return [_SpunAlgorithm(a, slowdown) for a in super().algorithms()]
    return SlowCudnnBackend


def __getattr__(name: str) -> Any:
    # lazy: importing this module must not import CuPy or cuDNN where there is no GPU
    if name == "SlowCudnnBackend":
        return _cudnn_backend()
    raise AttributeError(name)



class _GatesSwapped(RnnPrepared):
    """cudnn_rnn with its first two gate blocks of W (LSTM i and f, GRU r and z) trading places
    in the weight space: a wrong gate order, the bug a weight-layout assumption makes."""

    def _blocks(self, layer, d):
        blocks = super()._blocks(layer, d)
        first, second = (next(i for i, b in enumerate(blocks) if b[0] == "W" and b[1] == g)
                         for g in (0, 1))
        blocks[first], blocks[second] = ((blocks[first][0], 1, *blocks[first][2:]),
                                         (blocks[second][0], 0, *blocks[second][2:]))
        return blocks


class GatesSwappedRnnBackend(CudnnRnnBackend):
    name = "cudnn_rnn_swapped"
    prepared = _GatesSwapped


class _ReportsPlanCache(FakeExact):
    """Says which plan-label file its worker process was handed (harness/plan_cache.open_here),
    as an unsupported row's reason."""
    backend = "cache_probe_gpu"
    name = "reports_plan_cache"

    def prepare(self, point, data):
        from harness import plan_cache
        from harness.backends.base import Unsupported
        here = plan_cache.PlanCache().where
        raise Unsupported(f"plan cache: {here}")


class PlanCacheProbeBackend(FakeBackend):
    name = "cache_probe_gpu"
    device = "cuda"

    def algorithms(self):
        return [_ReportsPlanCache()]
