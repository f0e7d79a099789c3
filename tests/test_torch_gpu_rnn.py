"""PyTorch's recurrent layers on a real GPU (issue 40; marked `gpu`, skipped elsewhere with the
reason): nn.LSTM / GRU / RNN through cuDNN, the same with cuDNN off, and the plain loop, in every
direction, verified against the float64 oracle."""
from __future__ import annotations

from collections import Counter

import pytest
from rnn_gpu_cases import CASES, DIRECTIONS  # tests/ is on sys.path

from harness import backends
from harness.call_bound import PROFILED_KERNELS
from harness.rnn.problem import RnnProblem
from harness.stopping import PROBE_RACE_FACTOR, RACE_MARGIN, RACED_OUT
from harness.sweep import AlgorithmChoice, Sweep

pytestmark = pytest.mark.gpu
PRECISIONS = ("fp32", "fp16")      # bf16 runs fp16's paths (evidence/runs/rnn_quick-gpu-*)


@pytest.fixture(autouse=True, scope="module")
def _needs_torch_gpu():
    reason = backends.get("torch_gpu").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


@pytest.fixture(scope="module")
def rows(run_fast) -> list:
    sweep = Sweep("torch-gpu-rnn", CASES, directions=DIRECTIONS,
                  precisions=PRECISIONS,
                  backends=(AlgorithmChoice("torch_gpu"),))
    return run_fast(sweep)


def test_every_recurrent_row_is_verified_ok(rows):
    algorithms = {"nn_rnn", "nn_rnn_native", "plain_loop"}
    assert {m.point.algorithm for m in rows} == algorithms
    assert len(rows) == len(CASES) * len(DIRECTIONS) * len(PRECISIONS) * len(algorithms)
    print(Counter((m.point.algorithm, m.point.precision, m.effective_precision) for m in rows))
    bad = [(m.point.problem.name, m.point.direction, m.point.precision, m.point.algorithm,
            m.status.value, m.reason[:200]) for m in rows if not m.ok]
    assert bad == []
    # fp32 may deliver tf32 (PyTorch's cuDNN RNN): the row says so; nothing delivers less
    assert all(m.effective_precision in (m.point.precision, "tf32") for m in rows)


def test_each_row_names_its_kernels_and_switching_cudnn_off_changes_them(rows):
    """Every row records the kernels one call ran; at each point PyTorch's cuDNN path and its
    path with cuDNN off ran different kernels, so the two rows measure two implementations."""
    kernels = {}
    for m in rows:
        assert m.extras.get("torch_kernels"), (m.point.point_id, "no kernels recorded")
        key = (m.point.problem.name, m.point.direction, m.point.precision)
        kernels.setdefault(key, {})[m.point.algorithm] = m.extras["torch_kernels"]
    print(Counter(k["nn_rnn"][:150] for k in kernels.values()).most_common(6))
    same = [key for key, k in kernels.items() if k["nn_rnn"] == k["nn_rnn_native"]]
    assert same == []


def test_cudnn_beats_the_plain_loop_on_the_mnist_lstm_training_step(rows):
    """The classic comparison's direction of effect, nothing more (times are the row's; the
    size of the gap is the sweep's evidence, not a test's)."""
    def step(algorithm):
        return sum(m.median_ms for m in rows if m.point.problem.name == "mnist_row_lstm"
                   and m.point.precision == "fp16" and m.point.algorithm == algorithm
                   and m.point.direction != "fwd")
    assert step("nn_rnn") < step("plain_loop"), (step("nn_rnn"), step("plain_loop"))


def test_a_candidate_far_behind_is_raced_out_on_its_profiled_call(run_fast):
    """On a GRU of 200 steps PyTorch's cuDNN-off path and the plain loop lose to nn.GRU by far
    more than the probe's factor, and their profiled call already says so: they are raced out
    before any timer runs, their one sample the span their kernels kept the GPU busy
    (harness/call_bound.py). Timed in full (no race), no replayed sample of theirs is under
    the span the bound relied on; the span leaves out the gaps between kernels that a replay
    keeps (on an H200 0.84x the replayed median for the cuDNN-off path here)."""
    gru = RnnProblem("gru", 256, 256, 200, 32, name="gru_t200")
    sweep = Sweep("gru-long", (gru,), directions=("train_step",), precisions=("fp16",),
                  backends=(AlgorithmChoice("torch_gpu"),))
    raced = {m.point.algorithm: m for m in run_fast(sweep)}
    full = {m.point.algorithm: m for m in run_fast(sweep, race=False)}
    for name in ("nn_rnn_native", "plain_loop"):
        m, timed = raced[name], full[name]
        print(name, m.samples_ms, m.reason, timed.min_ms, timed.median_ms)
        assert m.ok and m.stop_reason == RACED_OUT, m.reason
        assert m.extras["gpu_timer"] == PROFILED_KERNELS
        assert "raced out on its profiled call" in m.reason or "verified call" in m.reason
        assert m.extras["raced_out_by"] > (1 + RACE_MARGIN) * PROBE_RACE_FACTOR
        assert timed.ok and timed.extras["gpu_timer"] == "cuda_graph"
        assert m.samples_ms[0] <= timed.min_ms
        assert m.samples_ms[0] >= 0.7 * timed.median_ms
    assert raced["nn_rnn"].stop_reason != RACED_OUT
