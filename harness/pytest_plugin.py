"""pytest plugin `convbench` (entry point in pyproject.toml): convolution timings as
pytest-benchmark benchmarks, so --benchmark-autosave, --benchmark-compare and
--benchmark-compare-fail=median:5% work on them.

    def test_res2a_fwd(convbench):
        convbench('mb32ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b"',
                  backend="cudnn", algorithm="implicit_precomp_gemm", precision="fp16")

The fixture measures the point through the harness (harness.runner.run_point: verification first,
then CUDA-event or CPU timing) and hands the harness's raw samples to pytest-benchmark instead of
letting it time a Python call, which on a GPU would measure launch overhead. A point that cannot
run here (unsupported, over its workspace limit, backend unavailable) skips the test with the
reason; a wrong result, a library failure or a crash fails it. Backend and algorithm names are
case-insensitive, and a name no backend knows fails the test on every machine, GPU or not: a
typo must not hide behind the skip a CPU runner gives every GPU test. Environment and status go
into the benchmark's extra_info.

pytest-benchmark has no public way to accept external times, so the samples go in through its
public `pedantic()` with a replay clock in place of its timer: each round "starts" at 0 and "ends"
at the next harness sample, and pytest-benchmark's own Stats are built from exactly those numbers.
`_feed` checks that afterwards and raises if a pytest-benchmark release ever changes that path.
"""
from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any

import pytest

from harness.measurement import Status  # light: the problem and sweep records only

if TYPE_CHECKING:
    from harness.measurement import Measurement
    from harness.problem import ConvProblem
    from harness.sweep import Point, TimingOptions

SKIP_STATUSES = (Status.UNSUPPORTED, Status.WORKSPACE_EXCEEDED)   # cannot run here: not a failure
MIN_SAMPLES = 10     # default floor: a median over fewer is a weak thing to gate a merge on
_ENV_KEY = pytest.StashKey[dict]()


@pytest.fixture
def convbench(request: pytest.FixtureRequest) -> ConvBench:
    """Measure one convolution point; see ConvBench.__call__."""
    try:
        benchmark = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:
        pytest.fail("the convbench fixture needs pytest-benchmark: pip install 'convbench[test]'",
                    pytrace=False)
    return ConvBench(benchmark, request.config)


class ConvBench:
    """The object the `convbench` fixture hands a test; call it once per test."""

    def __init__(self, benchmark: Any, config: pytest.Config):
        self.benchmark = benchmark
        self._config = config

    def __call__(self, problem: ConvProblem | str, *, backend: str, algorithm: str,
                 direction: str = "fwd", precision: str = "fp32", layout: str = "NCHW",
                 workspace_limit: int | None = None, timing: TimingOptions | None = None,
                 seed: int = 0) -> Measurement:
        """Verify and time `problem` (a ConvProblem or a benchdnn descriptor) with one algorithm;
        the samples become this test's benchmark. Returns the harness Measurement."""
        point = make_point(problem, backend=backend, algorithm=algorithm, direction=direction,
                           precision=precision, layout=layout, workspace_limit=workspace_limit,
                           timing=timing)
        _skip_if_unavailable(point.backend, self.benchmark)
        measurement = importlib.import_module("harness.runner").run_point(point, seed=seed)
        self.benchmark.extra_info.update(extra_info(measurement, _session_env(self._config)))
        if self.benchmark.group is None:   # algorithms of one problem side by side in the table
            self.benchmark.group = (f"{point.problem.label} {point.direction} {point.precision} "
                                    f"{point.layout}")
        _settle_status(measurement, self.benchmark)
        _feed(self.benchmark, [s / 1e3 for s in measurement.samples_ms])
        return measurement


def make_point(problem: ConvProblem | str, *, backend: str, algorithm: str,
               direction: str = "fwd", precision: str = "fp32", layout: str = "NCHW",
               workspace_limit: int | None = None,
               timing: TimingOptions | None = None) -> Point:
    """A harness Point from test arguments, each checked against the names the harness knows."""
    from harness.problem import ConvProblem
    from harness.problem_text import parse_benchdnn
    from harness.sweep import DIRECTIONS, LAYOUTS, PRECISIONS, Point, TimingOptions
    for name, value, allowed in (("direction", direction, DIRECTIONS),
                                 ("precision", precision, PRECISIONS),
                                 ("layout", layout, LAYOUTS)):
        if value not in allowed:
            raise ValueError(f"convbench: {name}={value!r} must be one of {', '.join(allowed)}")
    if isinstance(problem, str):
        problem = parse_benchdnn(problem)
    if not isinstance(problem, ConvProblem):
        raise TypeError(f"convbench: problem must be a ConvProblem or a benchdnn descriptor, "
                        f"not {type(problem).__name__}")
    backend, algorithm = resolve_names(backend, algorithm)
    return Point(problem, direction, precision, layout, backend, algorithm, workspace_limit,
                 timing or TimingOptions(min_samples=MIN_SAMPLES))


def resolve_names(backend: str, algorithm: str) -> tuple[str, str]:
    """The registered spelling of `backend` and `algorithm`, matched case-insensitively;
    ValueError for a name the backend does not have. A backend's algorithm list is static (no
    GPU is touched to build it), so the check runs on a CPU runner too. A backend with an
    expanding algorithm (cudnn_graph's engines) also takes the names of its concrete variants,
    known only on the GPU: a name of a variant's form (its algorithm names the implementation it
    is one setting of, e.g. `eng70_k2=12`) is passed on as written, in lower case."""
    from harness import backends
    names = {name.lower(): name for name in backends.names()}
    if backend.lower() not in names:
        raise ValueError(f"convbench: backend={backend!r} is unknown; known: "
                         f"{', '.join(backends.names())}")
    backend = names[backend.lower()]
    algorithms = backends.get(backend).algorithms()
    known = {a.name.lower(): a.name for a in algorithms}
    if algorithm.lower() in known:
        return backend, known[algorithm.lower()]
    if any(a.expands and a.engine_of(algorithm.lower()) for a in algorithms):
        return backend, algorithm.lower()
    variants = " or a plan name such as eng0" if any(a.expands for a in algorithms) else ""
    raise ValueError(f"convbench: algorithm={algorithm!r} is not one of backend {backend!r}'s: "
                     f"{', '.join(a.name for a in algorithms)}{variants}")


def extra_info(m: Measurement, env: dict[str, Any]) -> dict[str, Any]:
    """What the benchmark's JSON should say besides the times: the point, the verdict of the
    correctness check, how timing stopped, and the machine (GPU, driver, CUDA, cuDNN)."""
    from harness.problem_text import to_benchdnn
    from harness.stats import relative_noise
    p = m.point
    info: dict[str, Any] = {
        "status": m.status, "reason": m.reason, "point_id": p.point_id,
        "descriptor": to_benchdnn(p.problem), "backend": p.backend, "algorithm": p.algorithm,
        "direction": p.direction, "precision": p.precision, "layout": p.layout,
        "family": m.family, "n_samples": len(m.samples_ms), "stop_reason": m.stop_reason,
        "noise": relative_noise(m.samples_ms) if len(m.samples_ms) > 1 else None,
        "gflops": m.gflops, "workspace_bytes": m.workspace_bytes, "rel_error": m.rel_error,
        "tolerance": m.tolerance, "effective_precision": m.effective_precision,
        "deterministic": m.deterministic, "setup_ms": m.setup_ms, "host_ms": m.host_ms,
        **m.extras, "env": env,
    }
    return {k: _json_ready(v) for k, v in info.items()}


# ---- pytest-benchmark hooks (optional: pytest-benchmark may not be installed) -------------------
@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config,
                                         machine_info: dict[str, Any]) -> None:
    """Saved runs carry the fields `convbench compare` refuses to mix, so pytest-benchmark's own
    machine check warns on --benchmark-compare across GPUs, drivers or library versions."""
    from harness.env import COMPARABILITY_FIELDS
    env = _session_env(config)
    machine_info["convbench"] = {name: env.get(name) for name in COMPARABILITY_FIELDS}


# ---- helpers ------------------------------------------------------------------------------------
class _ReplayClock:
    """Stands in for pytest-benchmark's timer: round i reads 0 at its start and samples[i] at its
    end, so pytest-benchmark records exactly the harness's samples."""
    __name__ = "convbench_replay"   # what pytest-benchmark writes as options.timer

    def __init__(self, samples_s: list[float]):
        self.samples_s = samples_s
        self.calls = 0

    def __call__(self) -> float:
        round_index, is_end = divmod(self.calls, 2)
        self.calls += 1
        return self.samples_s[round_index] if is_end else 0.0


def _feed(benchmark: Any, samples_s: list[float]) -> None:
    if not samples_s:
        raise RuntimeError("harness.runner.run_point returned status ok without samples")
    clock = _ReplayClock(samples_s)
    benchmark._timer = clock          # read by pedantic() when it builds each round's runner
    benchmark.pedantic(_nothing, rounds=len(samples_s), iterations=1, warmup_rounds=0)
    if benchmark.enabled and list(benchmark.stats.stats.data) != samples_s:
        raise RuntimeError("pytest-benchmark did not record the harness samples as given; this "
                           "pytest-benchmark release is not supported by convbench's plugin")


def _nothing() -> None:
    """The 'benchmarked' call: the work already ran, timed by the harness."""


def _settle_status(m: Measurement, benchmark: Any) -> None:
    """Skip where the point cannot run here; fail on a wrong result, a failure or a crash."""
    if m.ok:
        return
    what = f"{m.point.backend}/{m.point.algorithm} {m.point.direction} {m.point.precision}"
    if m.status in SKIP_STATUSES:
        benchmark.skipped = True      # no "fixture was not used" warning for a skip
        pytest.skip(f"convbench: {what} {m.status}: {m.reason}")
    benchmark.has_error = True        # keeps the broken point out of saved benchmark files
    benchmark.skipped = True
    pytest.fail(f"convbench: {what} {m.status}: {m.reason}", pytrace=False)


def _skip_if_unavailable(backend: str, benchmark: Any) -> None:
    from harness import backends
    reason = backends.get(backend).unavailable_reason()
    if reason:
        benchmark.skipped = True
        pytest.skip(f"convbench: backend {backend!r} is unavailable here: {reason}")


def _session_env(config: pytest.Config) -> dict[str, Any]:
    """The environment fingerprint, probed once per session."""
    if _ENV_KEY not in config.stash:
        from harness import cpu_memory
        from harness.env import fingerprint
        cpu_memory.keep_freed_memory()     # as runner.run_point will: the rows record it
        config.stash[_ENV_KEY] = {k: _json_ready(v) for k, v in fingerprint().items()}
    return config.stash[_ENV_KEY]


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if hasattr(value, "item"):            # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
