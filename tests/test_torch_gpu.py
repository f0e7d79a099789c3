"""PyTorch's cuDNN autotuner (torch_gpu) on a real GPU (marked `gpu`; skipped elsewhere)."""
from __future__ import annotations

import pytest
from conv3d_gpu_cases import PROBLEMS_3D, check_3d, run_3d  # tests/ is on sys.path

from harness import backends
from harness.precision import FLOATING
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, LAYOUTS, AlgorithmChoice, Sweep

pytestmark = pytest.mark.gpu
SMALL = ConvProblem(2, 16, 12, 12, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    name="small3x3")


@pytest.fixture(autouse=True, scope="module")
def _needs_torch_gpu():
    reason = backends.get("torch_gpu").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


def _sweep(problem, **axes) -> Sweep:
    return Sweep("torch-gpu-test", (problem,), backends=(AlgorithmChoice("torch_gpu"),), **axes)


def test_every_direction_precision_layout_is_ok_and_verified(run_fast):
    # the floating precisions: the quantized ones have no PyTorch peer (test_quantized_gpu)
    results = run_fast(_sweep(SMALL, directions=DIRECTIONS, precisions=FLOATING, layouts=LAYOUTS))
    assert len(results) == len(DIRECTIONS) * len(FLOATING) * len(LAYOUTS)
    for m in results:
        print(f"{m.point.direction:10s} {m.point.precision} {m.point.layout}: {m.status} "
              f"{m.median_ms and round(m.median_ms * 1e3, 1)} us, host "
              f"{m.host_ms and round(m.host_ms * 1e3, 1)} us, "
              f"setup {m.setup_ms and round(m.setup_ms)}"
              f" ms, rel {m.rel_error and float(m.rel_error):.2g}, ws {m.workspace_bytes} "
              f"{m.reason}")
    bad = [(m.point.point_id, m.status, m.reason) for m in results if not m.ok]
    assert not bad, bad
    for m in results:
        assert m.rel_error <= m.tolerance and m.median_ms > 0 and m.host_ms > 0
        assert m.family == "library" and m.workspace_bytes >= 0
        # replayed, unless capture changed PyTorch's kernels (then eager order, and why)
        assert m.extras["gpu_timer"] == "cuda_graph" or "capture changed" in m.extras.get(
            "capture_error", ""), (m.extras["gpu_timer"], m.extras.get("capture_error"))
        # TF32 is allowed only when asked for, so fp32 stays fp32.
        assert m.effective_precision == m.point.precision, (m.point.point_id, m.rel_error)
    # ... which is the exception (one row of a ResNet-50 sweep on an H100), not the rule: a
    # check that sent every row to the stream would pass the loop above
    fallen_back = [m for m in results if m.extras["gpu_timer"] != "cuda_graph"]
    assert len(fallen_back) <= len(results) // 4, [m.extras["capture_error"] for m in fallen_back]


def test_asymmetric_padding_is_unsupported_with_reason(run_fast):
    problem = ConvProblem(2, 8, 9, 9, 8, 3, 3, pad_top=0, pad_left=1, pad_bottom=2, pad_right=1)
    results = run_fast(_sweep(problem))
    assert [m.status for m in results] == ["unsupported"]
    assert "asymmetric padding" in results[0].reason


@pytest.fixture(scope="module")
def rows_3d(run_fast) -> list:
    return run_3d(run_fast, "torch_gpu")


@pytest.mark.parametrize("problem", PROBLEMS_3D, ids=lambda p: p.name)
def test_3d_every_setting_is_ok_and_verified(rows_3d, problem):
    """conv3d and its gradients: every direction, fp32 / fp16, contiguous / channels_last_3d."""
    check_3d(rows_3d, problem)
