"""The condition-aware check (harness/verdict.py): data whose terms cancel widens the tolerance
by as much as they cancel, so an honest float32 sum passes and a wrong result still fails; an
exact result of 0 has its own rule; the costly term scales are computed only where they can
change the verdict."""
from __future__ import annotations

import numpy as np
import pytest

from harness import backends, executor, precision, reference, verdict
from harness.measurement import Status
from harness.problem import ConvProblem
from harness.rnn.problem import RnnProblem
from harness.sweep import Point, TimingOptions

TERMS = 64
# dw of one element summing TERMS products x_i * dy_i (a 1x1 kernel over a 1 x TERMS image).
ONE_WEIGHT = ConvProblem(1, 1, 1, TERMS, 1, 1, 1)
# The exact dw is this fraction of the terms' absolute sum: about 1/700 of what random data has.
CANCELLED = 1e-3


def _cancelling_data() -> reference.ProblemData:
    """fp32 data whose dw terms cancel to CANCELLED of their absolute sum: dy's last element
    is chosen so the products sum to about that (its own product moves the absolute sum a
    little; rounding dy to fp32 moves the sum by ~1e-7 of the terms, far under what is left)."""
    rng = np.random.default_rng(7)
    x = precision.round_to(rng.standard_normal(ONE_WEIGHT.input_shape), "fp32")
    dy = precision.round_to(rng.standard_normal(ONE_WEIGHT.output_shape), "fp32")
    products = (x * dy).ravel()
    target = CANCELLED * np.abs(products).sum()
    dy.reshape(-1)[-1] = (target - products[:-1].sum()) / x.reshape(-1)[-1]
    dy = precision.round_to(dy, "fp32")
    w = np.ones(ONE_WEIGHT.weight_shape)
    return reference.ProblemData(x=x, w=w, dy=dy)


def _sequential_fp32_sum(data: reference.ProblemData) -> np.ndarray:
    """An honest float32 dw: the products summed one after another, rounded at each step."""
    products = (data.x * data.dy).ravel().astype(np.float32)
    return np.cumsum(products, dtype=np.float32)[-1:].reshape(ONE_WEIGHT.weight_shape)


def _judge(output: np.ndarray, data: reference.ProblemData, name: str = "fp32",
           problem: ConvProblem = ONE_WEIGHT, direction: str = "bwd_filter",
           error_factor: float = 1.0) -> verdict.Judged:
    return verdict.check(problem, direction, data, output, name, error_factor)


def test_the_data_cancels_as_constructed() -> None:
    data = _cancelling_data()
    exact = reference.reference(ONE_WEIGHT, "bwd_filter", data)
    assert abs(exact).sum() / abs(data.x * data.dy).sum() == pytest.approx(CANCELLED, rel=0.1)


def test_an_honest_fp32_sum_of_cancelling_terms_passes() -> None:
    data = _cancelling_data()
    honest = _sequential_fp32_sum(data)
    judged = _judge(honest, data)
    plain = precision.tolerance("fp32", TERMS)
    # the case hypothesis found: an honest sum outside the tolerance of random data
    assert judged.rel_error > plain
    assert judged.conditioned > 100
    assert judged.tolerance == pytest.approx(plain * judged.conditioned)
    assert judged.delivered == "fp32"


def test_a_result_off_by_clearly_too_much_still_fails() -> None:
    data = _cancelling_data()
    exact = reference.reference(ONE_WEIGHT, "bwd_filter", data)
    wrong = _judge(exact * 1.1, data)
    assert wrong.delivered is None and wrong.rel_error > wrong.tolerance
    # 30 times an honest fp32 sum's error is not fp32; on terms cancelling this much it is what
    # tf32's rounded operands could give, which the row would say (not `ok` at fp32)
    honest_error = _judge(_sequential_fp32_sum(data), data).rel_error
    too_far = _judge(exact * (1 + 30 * honest_error), data)
    assert too_far.rel_error > too_far.tolerance and too_far.delivered != "fp32"


def test_no_condition_widens_a_tolerance_to_pass_an_indexing_bug() -> None:
    for name in precision.FLOATING:
        assert precision.tolerance(name, 9, conditioned=1e12) < 0.1, name
    assert precision.tolerance("bf16", 9, conditioned=1e12) == pytest.approx(0.05)
    assert precision.tolerance("fp32", 9, conditioned=0.5) == precision.tolerance("fp32", 9)


@pytest.mark.parametrize("name", ["direct", "im2col", "fft"])
def test_cpu_algorithms_on_cancelling_data_pass(name: str) -> None:
    algo = backends.get("cpu").algorithm(name)
    data = _cancelling_data()
    prepared = algo.prepare(Point(ONE_WEIGHT, "bwd_filter", "fp32", "NCHW", "cpu", name), data)
    prepared.poison()
    prepared.launch()
    judged = _judge(prepared.output(), data, error_factor=algo.error_factor)
    prepared.release()
    assert judged.delivered == "fp32", judged


def test_well_conditioned_data_keeps_the_plain_tolerance() -> None:
    problem = ConvProblem(2, 8, 9, 9, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    data = reference.make_data(problem, "fp32", seed=3)
    for direction in ("fwd", "bwd_data", "bwd_filter"):
        exact = reference.reference(problem, direction, data)
        scales = reference.term_scales(problem, direction, data, exact)
        assert precision.condition(reference.l2_norm(exact), scales.spread_norm) < 1.05
        judged = _judge(exact * 1.1, data, problem=problem, direction=direction)
        assert judged.delivered is None and judged.conditioned < 1.05


def test_term_scales_are_computed_only_where_they_can_change_the_verdict() -> None:
    data = _cancelling_data()
    exact = reference.reference(ONE_WEIGHT, "bwd_filter", data)
    standard = verdict.Standard("fp32", TERMS, direction="bwd_filter")

    def refused() -> reference.TermScales:
        raise AssertionError("term scales computed for an output within the plain tolerance")
    assert verdict.judge(exact, exact, refused, standard).delivered == "fp32"
    with pytest.raises(AssertionError):
        verdict.judge(exact * 1.1, exact, refused, standard)


# dw is exactly 0 from two terms that cancel exactly; and a bwd_data whose every dx element is
# reached by padding only (no term at all), where the FFT still leaves ~5e-14 of rounding of the
# outputs it crops: 1.3 to 1.8 times the old tolerance (an absolute error, over seeds 0-5).
TWO_TERMS = ConvProblem(1, 1, 1, 2, 1, 1, 1)
ONLY_PADDING = ConvProblem(3, 6, 11, 1, 6, 4, 4, pad_top=3, pad_left=3, pad_bottom=1,
                           pad_right=3, dilation_h=3, dilation_w=2, groups=2)


def test_an_exact_zero_is_judged_against_its_terms() -> None:
    data = reference.ProblemData(x=np.array([[[[3.0, 3.0]]]]), w=np.ones((1, 1, 1, 1)),
                                 dy=np.array([[[[1.0, -1.0]]]]))
    assert not reference.reference(TWO_TERMS, "bwd_filter", data).any()
    # terms of 3: their spread is sqrt(9 + 9) = 4.24, so 1e-7 is 2.4e-8 of it
    assert _judge(np.full((1, 1, 1, 1), 1e-7), data, problem=TWO_TERMS).delivered == "fp32"
    wrong = _judge(np.full((1, 1, 1, 1), 0.1), data, problem=TWO_TERMS)
    assert wrong.delivered is None and wrong.rel_error == pytest.approx(0.1 / 18**0.5)


def test_an_exact_zero_of_small_terms_is_judged_relative_to_them() -> None:
    """The same zero at a scale of 2^-10: an output 10% of a term is wrong (its relative error
    was once an absolute one, which small data made look like rounding)."""
    data = reference.ProblemData(x=np.array([[[[3.0, 3.0]]]]) / 1024, w=np.ones((1, 1, 1, 1)),
                                 dy=np.array([[[[1.0, -1.0]]]]) / 1024)
    term = 3.0 / 1024**2
    assert _judge(np.full((1, 1, 1, 1), 0.1 * term), data, problem=TWO_TERMS).delivered is None
    assert _judge(np.full((1, 1, 1, 1), 1e-8 * term), data,
                  problem=TWO_TERMS).delivered == "fp32"


def test_a_zero_the_reference_rounds_to_a_tiny_value_is_still_zero(monkeypatch) -> None:
    """A float64 reference with FMA can leave 5e-23 where exactly cancelling terms sum to 0:
    the output 0 (what an fp32 sum gives) is right, not 100% off."""
    data = reference.ProblemData(x=np.array([[[[3e-3, 3e-3]]]]), w=np.ones((1, 1, 1, 1)),
                                 dy=np.array([[[[1e-3, -1e-3]]]]))
    real = reference.reference
    monkeypatch.setattr(reference, "reference",
                        lambda problem, direction, d, *rest: real(problem, direction, d, *rest)
                        + (-4.9e-23 if d is data else 0.0))
    judged = _judge(np.zeros((1, 1, 1, 1)), data, problem=TWO_TERMS)
    assert judged.rel_error < 1e-15 and judged.delivered == "fp32", judged


def test_a_relu_does_not_read_as_cancellation() -> None:
    """conv_bias_relu on random data: the ReLU zeroes half the results, not their terms' spread
    where they survive, so the condition stays 1 (a spread left unmasked read 1.4)."""
    problem = ConvProblem(4, 16, 8, 8, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1)
    for op in ("conv_bias", "conv_bias_relu", "conv_bias_add_relu"):
        data = reference.make_data(problem, "fp32", seed=5, op=op)
        exact = reference.reference(problem, "fwd", data, op=op)
        scales = reference.term_scales(problem, "fwd", data, exact, op=op)
        assert precision.condition(reference.l2_norm(exact), scales.spread_norm) < 1.05, op


def test_an_exact_zero_with_no_terms_is_judged_against_the_operands() -> None:
    data = reference.make_data(ONLY_PADDING, "fp64", seed=1)
    exact = reference.reference(ONLY_PADDING, "bwd_data", data)
    assert not exact.any()
    assert reference.term_scales(ONLY_PADDING, "bwd_data", data, exact).spread_norm == 0
    algo = backends.get("cpu").algorithm("fft")
    prepared = algo.prepare(Point(ONLY_PADDING, "bwd_data", "fp64", "NCHW", "cpu", "fft"), data)
    prepared.poison()
    prepared.launch()
    leak = prepared.output().copy()
    prepared.release()
    old = precision.tolerance("fp64", ONLY_PADDING.reduction_length("bwd_data"), 16.0)
    assert reference.l2_norm(leak) > old          # the old rule called the FFT wrong
    judged = _judge(leak, data, "fp64", ONLY_PADDING, "bwd_data", algo.error_factor)
    assert judged.delivered == "fp64", judged
    misplaced = exact.copy()
    misplaced.flat[0] = 1.0       # one value of a real output written where none belongs
    assert _judge(misplaced, data, "fp32", ONLY_PADDING, "bwd_data").delivered is None


def test_the_executors_row_says_the_tolerance_it_was_judged_by(monkeypatch) -> None:
    """Through the executor, as a sweep measures: the honest row is `ok` at fp32 and carries the
    widened tolerance its error is within."""
    monkeypatch.setattr(reference, "make_data", lambda *args: _cancelling_data())
    timing = TimingOptions(budget_ms=0, min_samples=1, max_samples=1, warmup=0)
    point = Point(ONE_WEIGHT, "bwd_filter", "fp32", "NCHW", "cpu", "direct", timing=timing)
    row = executor.PointExecutor().measure([point])[0]
    plain = precision.tolerance("fp32", TERMS)
    assert row.status == Status.OK and row.effective_precision == "fp32", row.reason
    assert row.rel_error > plain and row.tolerance > row.rel_error


def test_a_relu_recurrences_gradients_get_the_kinks_tolerance_and_nothing_else_does() -> None:
    """A ReLU RNN's gradients jump where a pre-activation crosses 0 (precision._KINK_UNITS): their
    tolerance is at least 1.5 sqrt(u) of the precision; its forward pass, an LSTM's gradients and
    a convolution keep the smooth one. A result 10% off stays wrong at every precision but bf16,
    and an fp32 result with a kink's tf32-sized error reads as delivered tf32, not wrong."""
    from harness.rnn.problem import RnnProblem
    relu, lstm = RnnProblem("rnn_relu", 8, 8, 5, 2), RnnProblem("lstm", 8, 8, 5, 2)
    assert relu.kinked("bwd_data") and relu.kinked("bwd_filter") and not relu.kinked("fwd")
    assert not lstm.kinked("bwd_data") and not ONE_WEIGHT.kinked("bwd_filter")
    for name in ("fp32", "tf32", "fp16", "bf16"):
        smooth = precision.tolerance(name, 40)
        kinked = precision.tolerance(name, 40, kinked=True)
        assert kinked == pytest.approx(max(smooth, 1.5 * precision.TABLE[name].operand_roundoff
                                           ** 0.5))
        assert kinked > 2 * smooth
        if name != "bf16":
            assert precision.delivered(name, 0.1, 40, 1.0, kinked=True) is None
    assert precision.delivered("fp32", 0.02, 40, 1.0, kinked=True) == "tf32"
    assert precision.delivered("fp32", 0.02, 40, 1.0) is None
    assert executor._standard(Point(relu, "bwd_data", "fp16", "TNC", "cpu", "x"), 1.0,
                              None).kinked


def test_a_recurrences_tolerance_grows_with_its_chain_of_stored_states() -> None:
    """A recurrence rounds its state to the precision after every step and reads it back in the
    next (precision._CHAIN_UNITS): PyTorch's fp16 GRU without cuDNN erred 0.0029, 0.0041 and
    0.0057 at 375, 750 and 1,500 steps on an H200 (sqrt(steps)), over the flat fp16 tolerance
    at 1,500. The chain's term admits those, grows as sqrt(chain), leaves a convolution and a
    one-step layer alone, and keeps a 10% error (a bug's) wrong at fp16 and fp32 on every
    DeepBench length."""
    gru = RnnProblem("gru", 1024, 1024, 1500, 64)
    assert gru.chain == 1500 and RnnProblem("lstm", 8, 8, 5, 2, layers=3).chain == 15
    assert ONE_WEIGHT.chain == 1
    length = gru.reduction_length("train_step")
    flat = precision.tolerance("fp16", length)
    assert flat < 0.0057 < precision.tolerance("fp16", length, chain=1500)
    assert precision.tolerance("fp16", length, chain=1) == flat
    walk = [precision.tolerance("fp16", length, chain=n) - flat for n in (375, 1500)]
    assert walk[1] == pytest.approx(2 * walk[0])
    for name in ("fp32", "tf32", "fp16", "bf16"):     # the walk stops short of a bug's error
        assert precision.delivered(name, 0.1, length, 1.0, chain=1500) is None
        assert precision.tolerance(name, length, chain=1500) <= max(
            0.05, precision.tolerance(name, length))
    # tf32 stores its state in fp32: the walk is in fp32's units
    tf32 = precision.tolerance("tf32", length)
    assert tf32 < precision.tolerance("tf32", length, chain=1500) < tf32 + 1e-5
    assert precision.delivered("fp16", 0.0057, length, 1.0, chain=1500) == "fp16"
    standard = executor._standard(Point(gru, "train_step", "fp16", "TNC", "torch_gpu", "x"),
                                  1.0, None)
    assert standard.chain == 1500 and standard.tolerance(1.0) > 0.0057
