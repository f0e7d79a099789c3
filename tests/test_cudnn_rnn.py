"""cuDNN's four RNN algorithms on a real GPU (issue 40; marked `gpu`, skipped elsewhere with the
reason): every algorithm, precision and direction either runs and is verified against the
float64 oracle or is `unsupported` with the status and call by which cuDNN refused it; a planted
gate-order fault is caught."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from rnn_gpu_cases import CASES, DIRECTIONS  # tests/ is on sys.path

from harness import backends, runner
from harness.sweep import AlgorithmChoice, Sweep

pytestmark = pytest.mark.gpu
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp64")
ALGORITHMS = {"standard", "persist_static", "persist_dynamic", "persist_static_small_h"}


@pytest.fixture(autouse=True, scope="module")
def _needs_cudnn_rnn():
    reason = backends.get("cudnn_rnn").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


@pytest.fixture(scope="module")
def rows(run_fast) -> list:
    sweep = Sweep("cudnn-rnn", CASES, directions=DIRECTIONS, precisions=PRECISIONS,
                  backends=(AlgorithmChoice("cudnn_rnn"),))
    return run_fast(sweep)


def test_every_row_is_verified_or_refused_by_cudnn_with_its_reason(rows):
    assert {m.point.algorithm for m in rows} == ALGORITHMS
    assert len(rows) == len(CASES) * len(DIRECTIONS) * len(PRECISIONS) * len(ALGORITHMS)
    print(Counter((m.point.algorithm, m.point.precision, m.status.value) for m in rows))
    bad = [(m.point.problem.name, m.point.direction, m.point.precision, m.point.algorithm,
            m.status.value, m.reason[:200]) for m in rows
           if not (m.ok or m.status.value == "unsupported")]
    for line in bad:
        print(*line)
    assert bad == []
    refused = [m for m in rows if m.status.value == "unsupported"]
    print(Counter((m.point.problem.name, m.point.algorithm, m.reason[:150]) for m in refused))
    assert all("CUDNN_STATUS_NOT_SUPPORTED" in m.reason and " from cudnn" in m.reason
               for m in refused), {m.reason[:160] for m in refused}


def test_standard_runs_every_point_in_the_precision_asked(rows):
    """STANDARD takes every shape and precision (shared/reference/rnn.md 1.1); with FMA math
    fp32 is true fp32, unlike PyTorch's cuDNN path (tf32)."""
    standard = [m for m in rows if m.point.algorithm == "standard"]
    assert [m.point.point_id for m in standard if not m.ok] == []
    assert {m.effective_precision for m in standard if m.point.precision == "fp32"} == {"fp32"}


def test_a_persistent_algorithm_runs_the_mnist_lstm_at_fp16(rows):
    persistent = [m for m in rows if m.point.problem.name == "mnist_row_lstm" and m.ok
                  and m.point.precision == "fp16" and m.point.algorithm != "standard"]
    assert {m.point.direction for m in persistent} == set(DIRECTIONS)


def test_rows_say_what_the_run_kept_for_backward_and_built(rows):
    trained = [m for m in rows if m.ok and m.point.direction != "fwd"]
    assert all(m.extras.get("rnn_reserve_bytes", 0) > 0 for m in trained)
    # PERSIST_DYNAMIC's build is done once a layer and precision: its first row says what it took
    dynamic = [m for m in rows if m.ok and m.point.algorithm == "persist_dynamic"]
    built = Counter((m.point.problem.name, m.point.precision) for m in dynamic
                    if m.extras.get("rnn_build_ms", 0) > 0)
    assert built and set(built.values()) == {1}, built


def test_backward_data_repeats_its_result_call_after_call(rows):
    """BackwardData overwrites the reserve space it reads: each call restores it first, so the
    run-twice check finds the same bits (without the restore a second call erred by 100% and
    more: evidence/studies/rnn_repeat_probe.py)."""
    data = [m for m in rows if m.ok and m.point.direction == "bwd_data"]
    assert data and all(m.extras["rnn_calls"].startswith("restore the reserve space")
                        for m in data)
    assert [m.point.point_id for m in data if not m.deterministic] == []


def test_a_planted_gate_order_fault_is_caught(run_fast):
    # A Measurer of its own (run_points): workers get the backend registry when they start
    backends.register("cudnn_rnn_swapped", "planted_backends:GatesSwappedRnnBackend")
    sweep = Sweep("cudnn-rnn-swapped", CASES[:3], directions=DIRECTIONS, precisions=("fp32",),
                  backends=(AlgorithmChoice("cudnn_rnn_swapped", ("standard",)),))
    measured: list = []
    runner.run_points((replace(p, timing=run_fast.timing) for p in runner.plan(sweep).points),
                      measured.append)
    assert len(measured) == 3 * len(DIRECTIONS)
    assert [m.point.point_id for m in measured if m.status.value != "wrong"] == []


@pytest.mark.parametrize("processes", [2, 1])
def test_dynamic_builds_started_ahead_run_verified_and_overlap_the_point_before(run_fast,
                                                                                 processes):
    """A timing process builds the next layers' PERSIST_DYNAMIC kernels on its background
    thread while it or its sibling times the layers before (harness/ahead.py): their rows are
    verified like any, and a later layer's prepare waits for less than half of its build."""
    from harness.rnn.problem import RnnProblem
    hidden = 256 * (processes + 1)     # layers of their own: a process keeps built descriptors
    layers = [RnnProblem("gru", 256, hidden, 50, 16 * (i + 1), name=f"gru_n{16 * (i + 1)}")
              for i in range(3)]
    sweep = Sweep("ahead", layers, directions=("train_step",), precisions=("fp16",),
                  backends=(AlgorithmChoice("cudnn_rnn"), AlgorithmChoice("torch_gpu",
                                                                          ("nn_rnn",))))
    rows = run_fast(sweep, gpu_processes=processes)
    dynamic = [m for m in rows if m.point.algorithm == "persist_dynamic"]
    for m in dynamic:
        print(m.point.problem.name, m.status.value, m.extras.get("rnn_build_ms"),
              m.extras.get("stage_prepare_ms"), m.extras.get("process_samples"))
    assert len(dynamic) == 3 and all(m.ok for m in dynamic), [m.reason for m in dynamic]
    assert any(m.extras["stage_prepare_ms"] < 0.5 * m.extras["rnn_build_ms"]
               for m in dynamic[1:])
