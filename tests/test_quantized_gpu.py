"""fp8 and int8 on the graph API (issue 17), on a real GPU (marked `gpu`; skipped elsewhere)."""
from __future__ import annotations

from collections import Counter

import pytest

from harness import backends, precision, runner
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, AlgorithmChoice, Sweep, TimingOptions

pytestmark = pytest.mark.gpu
FAST = TimingOptions(budget_ms=5, min_samples=3, max_samples=50)
# channels multiples of 16: what cuDNN's fp8 and int8 kernels want of NHWC tensors
SMALL = ConvProblem(4, 32, 14, 14, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    name="small3x3")


@pytest.fixture(autouse=True, scope="module")
def _needs_frontend():
    reason = backends.get("cudnn_graph").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


def _rows(ops=("conv",), directions=DIRECTIONS, backends_=("cudnn_graph",),
          outputs=(precision.AUTO_OUTPUT,)) -> list:
    sweep = Sweep("quantized-test", (SMALL,), timing=FAST, precisions=precision.QUANTIZED,
                  layouts=("NHWC",), directions=directions, ops=ops, outputs=outputs,
                  backends=tuple(AlgorithmChoice(b) for b in backends_))
    rows = []
    runner.run_points(runner.plan(sweep).points, rows.append)
    return rows


def _summary(rows) -> dict:
    by = {}
    for m in rows:
        key = (m.point.precision, m.point.direction, m.point.op, m.point.algorithm == "unfused",
               m.point.output or precision.AUTO_OUTPUT)
        by.setdefault(key, []).append(m)
    for key, ms in sorted(by.items()):
        ok = [m for m in ms if m.ok]
        print(key, dict(Counter(m.status.value for m in ms)),
              f"fastest ok {min((m.median_ms for m in ok), default=None)}",
              f"max rel err {max((m.rel_error for m in ok), default=None)}",
              f"tol {ok[0].tolerance if ok else None}",
              "" if ok else f"reason: {Counter(m.reason[:160] for m in ms).most_common(1)}")
    return by


def test_fp8_and_int8_plans_verify_against_the_oracle_and_nothing_is_wrong():
    """Every quantized setting either has a verified plan or only cuDNN's refusals; fp8 e4m3 and
    int8 forward, the feasibility table's cases, must verify; no row is wrong or crashed."""
    by = _summary(_rows())
    for name in ("fp8_e4m3", "int8"):
        assert any(m.ok for m in by[(name, "fwd", "conv", False, "auto")]), name
    for (name, direction, _, _, _), ms in by.items():
        if precision.output_precision(name, direction) is None:
            assert all(m.status == "unsupported" and "forward-only" in m.reason for m in ms)
        for m in ms:
            assert m.status.value not in ("wrong", "crashed"), (m.point.point_id, m.reason)
            if m.ok:
                assert m.effective_precision == name and m.rel_error <= m.tolerance


def test_fused_bias_relu_at_fp8_and_int8():
    by = _summary(_rows(ops=("conv_bias_relu",), directions=("fwd",)))
    for ms in by.values():
        for m in ms:
            assert m.status.value not in ("wrong", "crashed"), (m.point.point_id, m.reason)
    assert any(m.ok for m in by[("fp8_e4m3", "fwd", "conv_bias_relu", False, "auto")])


def test_pytorch_says_it_has_no_peer():
    rows = _rows(directions=("fwd",), backends_=("torch_gpu",))
    assert rows and all(m.status.value == "unsupported" for m in rows)
    assert all("no PyTorch" in m.reason for m in rows), {m.reason for m in rows}


def test_every_offered_output_type_verifies_on_the_graph_api_and_legacy_int8():
    """The output axis (issue 17): fp8 forward into bf16, fp32 and its own fp8 (scaled by a
    power of two), int8 into int8 (scaled) on the graph API, fused and plain; int8 into int8 on
    the legacy API (INT8_CONFIG, alpha = the scale). Each setting has a verified row within its
    own tolerance and none is wrong or crashed; the unfused path refuses 8-bit results."""
    outputs = ("bf16", "fp32", "fp8_e4m3", "fp8_e5m2", "int8")
    rows = _rows(ops=("conv", "conv_bias_relu"), directions=("fwd",), outputs=outputs,
                 backends_=("cudnn_graph", "cudnn"))
    by = _summary(rows)
    for m in rows:
        assert m.status.value not in ("wrong", "crashed"), (m.point.point_id, m.reason)
        if m.ok:
            assert m.rel_error <= m.tolerance and m.effective_precision == m.point.precision
    settings = [("fp8_e4m3", o) for o in ("bf16", "fp32", "fp8_e4m3")] + [("int8", "int8")]
    for name, output in settings:
        for op in ("conv", "conv_bias_relu"):
            engines = [m for m in by[(name, "fwd", op, False, output)]
                       if m.point.backend == "cudnn_graph"]
            assert any(m.ok for m in engines), (name, output, op)
    legacy = [m for m in rows if m.point.backend == "cudnn" and m.point.precision == "int8"
              and m.point.output == "int8" and m.point.op == "conv"]
    assert any(m.ok for m in legacy), {m.reason for m in legacy}
    unfused = [m for m in rows if m.point.algorithm == "unfused" and m.point.output
               in ("fp8_e4m3", "int8")]
    assert unfused and all(m.status.value == "unsupported" for m in unfused)
