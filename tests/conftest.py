"""Shared test helpers. GPU tests are marked `gpu` and skipped, with the reason, where cuDNN or a
GPU is missing; they are never silently passed."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from harness import backends, runner
from harness.measurement import Measurement
from harness.sweep import Point, Sweep, TimingOptions

# The fake backend is for tests only: registered here, never in harness/backends/__init__.py.
# Worker processes receive backends.registry(), so GPU-path tests see it too.
backends.register("fake", "harness.backends.fake:FakeBackend")

# What the GPU tests time with: they check statuses, accuracy and row facts, never how precise a
# time is, so each row needs a few samples, not the regression floor runner.plan would raise
# them to (12-19), and one worker process, not two (each pays the row's fixed cost again).
FAST = TimingOptions(budget_ms=5, min_samples=3, max_samples=5, gpu_processes=1)


@pytest.fixture(scope="session")
def cpu_peaks_files(tmp_path_factory) -> list:
    """This CPU's peaks (harness/cpu_peaks.py), measured once for the session: every run with
    CPU points stores them, and measuring them in each test's own cache folder would cost each
    `convbench run` half a second."""
    from harness import env
    from harness.backends.cpu import peaks
    folder = tmp_path_factory.mktemp("cpu_peaks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONVBENCH_CACHE_DIR", str(folder))
        peaks.measure(env.fingerprint())
    return sorted(folder.glob("cpu-peaks-*.json"))


@pytest.fixture(autouse=True)
def own_hang_cache(tmp_path_factory, monkeypatch, cpu_peaks_files):
    """Each test's runs remember hung engines in a folder of their own (harness/hang_cache.py),
    never in the user's ~/.cache, where one test's planted hang would change the next test's
    caps. The session's CPU peaks are copied in."""
    folder = tmp_path_factory.mktemp("hang_cache")
    for path in cpu_peaks_files:
        (folder / path.name).write_bytes(path.read_bytes())
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(folder))


def gpu_unavailable_reason() -> str | None:
    return backends.get("cudnn").unavailable_reason()


@pytest.fixture
def require_gpu():
    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {reason}"))


class FastRuns:
    """Measures sweeps for the GPU tests through one runner.Measurer for the whole session, so
    its worker process (CuPy, cuDNN and PyTorch brought up, kernels compiled) is started once,
    not once per sweep; a worker that crashes or hangs is replaced by the Measurer as in a run."""

    timing = FAST

    def __init__(self) -> None:
        self._measurer = runner.Measurer()

    def __call__(self, sweep: Sweep, **timing_changes) -> list[Measurement]:
        """Every row of `sweep` as runner.plan expands it, each point timed with FAST (with
        `timing_changes`, e.g. mode="cold") in place of the timing plan gave it."""
        timing = replace(FAST, **timing_changes)
        return self.measure(replace(p, timing=timing) for p in runner.plan(sweep).points)

    def measure(self, points: Iterable[Point]) -> list[Measurement]:
        """The rows of `points`, timed as the points say."""
        rows: list[Measurement] = []
        self._measurer.run(points, rows.append)
        return rows

    def close(self) -> None:
        self._measurer.close()


@pytest.fixture(scope="session")
def run_fast():
    runs = FastRuns()
    yield runs
    runs.close()
