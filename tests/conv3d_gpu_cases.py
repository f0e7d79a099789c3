"""Small 3-D problems that the GPU backends' tests (test_cudnn_gpu, test_cudnn_graph_gpu,
test_torch_gpu) run in every direction, fp32 and fp16, NCHW and NHWC: at least one verified `ok`
row for each setting and no `wrong` or `crashed` row. Kept small, and swept once per backend
(every problem in one sweep, which each problem's test reads), so all three files' 3-D tests
take seconds on an H100."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, LAYOUTS, AlgorithmChoice, Sweep

PRECISIONS_3D = ("fp32", "fp16")
PROBLEMS_3D = (
    # 3x3x3, pad 1 on every side, batch 1
    ConvProblem(1, 8, 6, 6, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                in_d=4, kernel_d=3, pad_front=1, pad_back=1, name="cube3"),
    # stride 2 and dilation 2 on every axis, pad 2 (symmetric after canonicalisation), batch 2
    ConvProblem(2, 4, 9, 9, 8, 3, 3, stride_h=2, stride_w=2, pad_top=2, pad_left=2,
                pad_bottom=2, pad_right=2, dilation_h=2, dilation_w=2, in_d=7, kernel_d=3,
                stride_d=2, pad_front=2, pad_back=2, dilation_d=2, name="strided_dilated3"),
    # depthwise (groups = channels = 8), 3x3x3 pad 1, batch 2
    ConvProblem(2, 8, 5, 5, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                groups=8, in_d=4, kernel_d=3, pad_front=1, pad_back=1, name="depthwise3"),
)
assert all(p.is_3d and p.symmetric_padding for p in PROBLEMS_3D)


def run_3d(run_fast: Callable[[Sweep], list], backend: str) -> list:
    """The rows of every problem in PROBLEMS_3D on `backend`, in every direction, precision and
    layout (`run_fast`: conftest's session fixture)."""
    return run_fast(Sweep("gpu-3d-test", PROBLEMS_3D, backends=(AlgorithmChoice(backend),),
                          directions=DIRECTIONS, precisions=PRECISIONS_3D, layouts=LAYOUTS))


def check_3d(rows: list, problem: ConvProblem) -> None:
    """Of `rows` (run_3d's), `problem`'s: every (direction, precision, layout) has an ok row
    within its tolerance; no row is wrong or crashed. Prints each setting's statuses for the
    log."""
    results = [m for m in rows if m.point.problem == problem]
    by_setting: dict[tuple, list] = {}
    for m in results:
        by_setting.setdefault((m.point.direction, m.point.precision, m.point.layout), []).append(m)
    for setting, here in sorted(by_setting.items()):
        print(f"{setting}: {dict(Counter(m.status for m in here))}; not ok: "
              f"{sorted({(m.status, (m.reason or '')[:100]) for m in here if not m.ok})[:4]}")
    assert set(by_setting) == {(d, p, lay) for d in DIRECTIONS for p in PRECISIONS_3D
                               for lay in LAYOUTS}
    for setting, here in by_setting.items():
        assert any(m.ok for m in here), (setting, [(m.point.algorithm, m.reason) for m in here])
    for m in results:
        if m.ok:
            # the tolerance is the asked precision's; a graph plan asked for fp32 may deliver
            # tf32 and is labelled so (as in the 2-D tests)
            within = (m.rel_error <= m.tolerance
                      or m.effective_precision == "tf32" != m.point.precision)
            assert within and m.median_ms > 0, (m.point.point_id, m.rel_error, m.tolerance,
                                                m.effective_precision, m.median_ms)
    bad = [(m.point.point_id, m.status, m.reason) for m in results
           if m.status in ("wrong", "crashed")]
    assert not bad, bad
