"""Memory checked before allocating: a point whose buffers cannot fit is an `unsupported` row
saying how many bytes it needs; a sweep where no point fits is refused, naming the layers."""
from __future__ import annotations

import pytest

from harness import executor, memory
from harness.problem import ConvProblem, ProblemError
from harness.sweep import Point

GB = 10**9
SMALL = ConvProblem(2, 4, 8, 8, 4, 3, 3, name="small")
HUGE = ConvProblem(2, 4, 10**12, 8, 4, 3, 3, name="huge")


def _point(problem: ConvProblem, backend: str = "fake", algorithm: str = "exact",
           precision: str = "fp32", direction: str = "fwd") -> Point:
    return Point(problem, direction, precision, "NCHW", backend, algorithm)


def test_host_bytes_cover_the_float64_data_and_reference():
    p = SMALL
    data = 8 * (2 * 4 * 8 * 8 + 4 * 4 * 3 * 3 + 2 * 4 * 6 * 6)      # x, w, dy in float64
    needed = memory.bytes_needed(_point(p))
    assert needed > 2 * data          # data plus at least the reference's own copy
    assert needed < 20 * data         # an upper estimate, not a wild one
    assert memory.bytes_needed(_point(p, precision="fp64")) > needed   # backend buffers grow


def test_quantized_device_buffers_are_counted_at_their_widest_type():
    """An int8 or fp8 point holds fp32 results: its device copy is not 1 byte per element."""
    fp16 = memory.footprint(_point(SMALL, precision="fp16"), "cuda").device
    for name in ("int8", "fp8_e4m3"):
        assert memory.footprint(_point(SMALL, precision=name), "cuda").device > fp16


def test_gpu_points_keep_only_the_test_data_on_the_host():
    cpu = memory.footprint(_point(SMALL), "cpu")
    gpu = memory.footprint(_point(SMALL), "cuda")
    assert cpu.device == 0 and gpu.host < cpu.host < gpu.device + gpu.host


def test_refusal_names_needed_and_available_bytes():
    point = _point(HUGE)
    reason = memory.refusal(point, "cpu", host_free=20_300_000_000)
    assert reason is not None
    assert reason.startswith("needs ") and reason.endswith("of host memory for its buffers, "
                                                           "20.3 GB available")
    assert memory.refusal(_point(SMALL), "cpu", host_free=20 * GB) is None


def test_gpu_refusal_uses_the_free_device_memory():
    point = _point(ConvProblem(64, 256, 224, 224, 256, 3, 3, pad_top=1, pad_left=1,
                               pad_bottom=1, pad_right=1))
    need = memory.footprint(point, "cuda")
    reason = memory.refusal(point, "cuda", host_free=need.host, device_free=need.device - 1)
    assert reason is not None and "of GPU memory" in reason
    assert memory.refusal(point, "cuda", host_free=need.host, device_free=need.device) is None


def test_host_bytes_available_is_a_positive_count_or_unknown():
    available = memory.host_bytes_available()
    assert available is None or available > 0


@pytest.mark.parametrize("count, text", [(0, "0 B"), (999, "999 B"), (1000, "1 kB"),
                                         (20_300_000_000, "20.3 GB"), (4_100_000_000_000, "4.1 TB"),
                                         (999_600, "1 MB")])
def test_format_bytes(count, text):
    assert memory.format_bytes(count) == text


def test_executor_turns_a_point_too_big_for_memory_into_an_unsupported_row(monkeypatch):
    monkeypatch.setattr(memory, "host_bytes_available", lambda: 8 * GB)
    measurer = executor.PointExecutor()
    huge, small = (measurer.measure([_point(p)])[0] for p in (HUGE, SMALL))
    assert huge.status == "unsupported" and "of host memory" in huge.reason
    assert "8 GB available" in huge.reason
    assert small.status == "ok"
    assert not measurer._data or HUGE not in {key[0] for key in measurer._data}


def test_the_algorithms_own_refusal_comes_first(monkeypatch):
    monkeypatch.setattr(memory, "host_bytes_available", lambda: 8 * GB)
    row = executor.PointExecutor().measure([_point(HUGE, precision="fp16")])[0]
    assert row.status == "unsupported" and "fp32 and fp64 only" in row.reason


def test_impossible_layers_are_those_no_point_of_which_fits():
    points = [_point(p, direction=d) for p in (SMALL, HUGE) for d in ("fwd", "bwd_data")]
    assert memory.impossible_layers(points, host_free=8 * GB) == ["huge"]
    assert memory.impossible_layers(points, host_free=10**30) == []
    memory.require_some_fit(points, host_free=8 * GB)        # one layer fits: the run goes on


def test_a_sweep_where_nothing_fits_is_a_problem_error_naming_the_layer():
    points = [_point(HUGE, direction=d) for d in ("fwd", "bwd_filter")]
    with pytest.raises(ProblemError, match="no point fits in memory: layer 'huge' needs at "
                                           "least .* of host memory.*, 8 GB available"):
        memory.require_some_fit(points, host_free=8 * GB)
    memory.require_some_fit([], host_free=8 * GB)            # nothing to run is not this error
