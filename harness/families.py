"""The problem families a point can hold: their names, the layout of a recurrent point, and
the text a row carries for each problem.

A convolution (harness/problem.ConvProblem) and a recurrent layer (harness/rnn/problem.
RnnProblem, issue 40) are separate families, neither a subclass of the other. Each names its
family in `kind`, and its oracle module offers make_data, reference and term_scales with the
signatures of harness/reference.py (harness/oracles.py picks it), so the executor checks every
output the same way.
"""
from __future__ import annotations

from typing import Any

CONV = "conv"
RNN = "rnn"
WORDS = {CONV: "convolution", RNN: "recurrent"}       # how messages name them
# The one layout a recurrent point is measured in: (seq_len, batch, features), PyTorch's
# batch_first=False and cuDNN's CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED.
RNN_LAYOUT = "TNC"


def descriptor(problem: Any) -> str:
    """The problem in the peers' text, as rows carry it: a benchdnn convolution descriptor, or
    benchdnn's --rnn knobs and descriptor."""
    if problem.kind == RNN:
        from harness.rnn.text import to_benchdnn_rnn
        return to_benchdnn_rnn(problem)
    from harness.problem_text import to_benchdnn
    return to_benchdnn(problem)
