"""fp8 and int8 on the graph API (issue 17), on a real GPU (marked `gpu`; skipped elsewhere)."""
from __future__ import annotations

from collections import Counter

import pytest

from harness import backends, precision
from harness.problem import ConvProblem
from harness.sweep import AlgorithmChoice, Sweep

pytestmark = pytest.mark.gpu
# channels multiples of 16: what cuDNN's fp8 and int8 kernels want of NHWC tensors
SMALL = ConvProblem(4, 32, 14, 14, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    name="small3x3")


@pytest.fixture(autouse=True, scope="module")
def _needs_frontend():
    reason = backends.get("cudnn_graph").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


# the result types the forward tests ask for besides each precision's own
OUTPUTS = ("bf16", "fp32", "fp8_e4m3", "fp8_e5m2", "int8")
# Each setting's first plans in the heuristics' order, not all of them: fp8 and int8 plans are
# compiled at run time, 0.4 s each (median) on an H100, and the 7-12 plans a setting offered (knob
# variants of one engine, eng4 on cuDNN 9.19) made this file 136 s of the GPU tests' 284 s
# (evidence/logs/gpu-test-rows-*.csv.gz). Every setting, precision, output type and direction
# is kept.
PLAN_LIMIT = 3


def _sweep(ops=("conv",), directions=("fwd",), backends_=("cudnn_graph",),
           outputs=(precision.AUTO_OUTPUT,)) -> Sweep:
    return Sweep("quantized-test", (SMALL,), precisions=precision.QUANTIZED, layouts=("NHWC",),
                 directions=directions, ops=ops, outputs=outputs,
                 backends=tuple(AlgorithmChoice(b) for b in backends_))


@pytest.fixture(scope="module")
def fwd_rows(run_fast) -> list:
    """Forward, plain and fused with bias and ReLU, at every quantized precision into its own
    result type and each offered other one, on the graph API (engines and the unfused sequence)
    and legacy cuDNN: one sweep for the three forward tests (each reads its part)."""
    outputs = (precision.AUTO_OUTPUT, *OUTPUTS)
    return run_fast(_sweep(ops=("conv", "conv_bias_relu"), outputs=outputs,
                           backends_=("cudnn_graph", "cudnn")), plan_limit=PLAN_LIMIT)


@pytest.fixture(scope="module")
def bwd_rows(run_fast) -> list:
    """Both backward directions on the graph API, each precision into its own result type."""
    return run_fast(_sweep(directions=("bwd_data", "bwd_filter")), plan_limit=PLAN_LIMIT)


def _graph_rows(rows, op: str) -> list:
    """The graph API's rows of `op` into each precision's own result type: what a sweep of the
    graph API alone, with no output asked, measures."""
    return [m for m in rows if m.point.backend == "cudnn_graph" and m.point.op == op
            and m.point.output is None]


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


def test_fp8_and_int8_plans_verify_against_the_oracle_and_nothing_is_wrong(fwd_rows, bwd_rows):
    """Every quantized setting either has a verified plan or only cuDNN's refusals; fp8 e4m3 and
    int8 forward, the feasibility table's cases, must verify; no row is wrong or crashed."""
    by = _summary(_graph_rows(fwd_rows, "conv") + bwd_rows)
    engines = [m for m in fwd_rows + bwd_rows if m.point.backend == "cudnn_graph" and m.ok
               and m.point.algorithm != "unfused"]
    per_point = Counter(m.planned_id for m in engines)
    assert max(per_point.values()) <= PLAN_LIMIT
    assert any(m.extras["plans_offered"] > PLAN_LIMIT for m in engines)   # the limit cut some
    assert {d for _, d, _, _, _ in by} == {"fwd", "bwd_data", "bwd_filter"}
    for name in ("fp8_e4m3", "int8"):
        assert any(m.ok for m in by[(name, "fwd", "conv", False, "auto")]), name
    for (name, direction, _, _, _), ms in by.items():
        if precision.output_precision(name, direction) is None:
            assert all(m.status == "unsupported" and "forward-only" in m.reason for m in ms)
        for m in ms:
            assert m.status.value not in ("wrong", "crashed"), (m.point.point_id, m.reason)
            if m.ok:
                assert m.effective_precision == name and m.rel_error <= m.tolerance


def test_fused_bias_relu_at_fp8_and_int8(fwd_rows):
    by = _summary(_graph_rows(fwd_rows, "conv_bias_relu"))
    for ms in by.values():
        for m in ms:
            assert m.status.value not in ("wrong", "crashed"), (m.point.point_id, m.reason)
    assert any(m.ok for m in by[("fp8_e4m3", "fwd", "conv_bias_relu", False, "auto")])


def test_pytorch_says_it_has_no_peer(run_fast):
    rows = run_fast(_sweep(backends_=("torch_gpu",)))
    assert rows and all(m.status.value == "unsupported" for m in rows)
    assert all("no PyTorch" in m.reason for m in rows), {m.reason for m in rows}


def test_every_offered_output_type_verifies_on_the_graph_api_and_legacy_int8(fwd_rows):
    """The output axis (issue 17): fp8 forward into bf16, fp32 and its own fp8 (scaled by a
    power of two), int8 into int8 (scaled) on the graph API, fused and plain; int8 into int8 on
    the legacy API (INT8_CONFIG, alpha = the scale). Each setting has a verified row within its
    own tolerance and none is wrong or crashed; the unfused path refuses 8-bit results."""
    rows = fwd_rows
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
