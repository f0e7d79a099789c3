"""Recurrent problems from DeepBench's RNN tuples and benchdnn's RNN descriptors (issue 40):
the defaults each tool applies, and one clear line for what cuDNN and PyTorch do not compute."""
from __future__ import annotations

import pytest

from harness.rnn.problem import RnnProblem, RnnProblemError
from harness.rnn.text import parse_benchdnn_rnn, parse_deepbench_rnn


@pytest.mark.parametrize("text, cell", [("512, 16, 25, lstm", "lstm"),
                                        ('(1760, 16, 50, "vanilla")', "rnn_relu"),
                                        ("(2816,32,750,'gru')", "gru")])
def test_a_deepbench_tuple_is_one_layer_whose_input_is_its_hidden_size(text, cell):
    problem = parse_deepbench_rnn(text)
    hidden, batch, steps = (int(v) for v in text.strip("()").replace("'", "").split(",")[:3])
    assert problem == RnnProblem(cell, hidden, hidden, steps, batch, name=problem.name)
    assert problem.name.startswith("deepbench:")


def test_deepbench_lstm_512_costs_what_the_reference_notes_say():
    # forward 2*T*N*G*H*(I+H) FLOPs (shared/reference/rnn.md)
    assert parse_deepbench_rnn("512, 16, 25, lstm").forward_flops() == \
        2 * 25 * 16 * 4 * 512 * (512 + 512)


def test_a_benchdnn_descriptor_takes_benchdnns_defaults():
    problem = parse_benchdnn_rnn("l1t50sic1760")
    assert problem == RnnProblem("rnn_relu", 1760, 1760, 50, 2)
    named = parse_benchdnn_rnn('l1t50mb64sic500n"pytorch_testcase"', alg="VANILLA_LSTM")
    assert (named.cell, named.batch, named.input_size, named.name) == \
        ("lstm", 64, 500, "pytorch_testcase")


def test_a_benchdnn_projection_and_both_directions():
    problem = parse_benchdnn_rnn("l2t25mb16_sic512_slc1024_dhc1024_dic512",
                                 alg="VANILLA_LSTM", direction="concat")
    assert (problem.layers, problem.input_size, problem.hidden_size, problem.proj_size,
            problem.bidirectional) == (2, 1024, 1024, 512, True)
    assert parse_benchdnn_rnn("t3sic8", alg="VANILLA_RNN", activation="TANH").cell == \
        "rnn_tanh"
    assert parse_benchdnn_rnn("t3sic8", alg="LBR_GRU").cell == "gru"


@pytest.mark.parametrize("call, named", [
    (lambda: parse_deepbench_rnn("512, 16, lstm"), "'512, 16, lstm'"),
    (lambda: parse_deepbench_rnn("512, 16, 25, peephole"), "'peephole'"),
    (lambda: parse_benchdnn_rnn("t3sic8", alg="VANILLA_GRU"), "VANILLA_GRU"),
    (lambda: parse_benchdnn_rnn("t3sic8", activation="LOGISTIC"), "LOGISTIC"),
    (lambda: parse_benchdnn_rnn("t3sic8", direction="right2left"), "right2left"),
    (lambda: parse_benchdnn_rnn("l1t3mb2"), "sic is missing"),
    (lambda: parse_benchdnn_rnn("t3sic8dic4"), "sic8 must equal the state fed back, dic4"),
    (lambda: parse_benchdnn_rnn("t3t4sic8"), "t4 repeats t3"),
    (lambda: parse_benchdnn_rnn("t3sic8x1"), "'x1'"),
    (lambda: parse_benchdnn_rnn("t3sic8dic8dhc4", alg="VANILLA_GRU"), "VANILLA_GRU"),
    (lambda: parse_benchdnn_rnn("t3sic4dic4dhc8", alg="LBR_GRU"), "proj_size 4"),
    (lambda: parse_benchdnn_rnn("t3sic8dlc8", direction="concat"), "dlc8 must be"),
])
def test_what_cannot_be_run_is_one_line_naming_it(call, named):
    with pytest.raises(RnnProblemError) as error:
        call()
    message = str(error.value)
    assert named in message and "\n" not in message, message


def test_a_benchdnn_layer_output_size_is_read_and_checked():
    # GNMT's encoder rows state dlc (oneDNN's tests/benchdnn/inputs/rnn/rnn_gnmt_encoder)
    uni = parse_benchdnn_rnn("l1t101sic512slc512dhc512dlc512", alg="VANILLA_LSTM")
    bi = parse_benchdnn_rnn("l1t10sic256dlc512", alg="VANILLA_LSTM", direction="concat")
    assert (uni.hidden_size, uni.bidirectional, bi.bidirectional) == (512, False, True)
