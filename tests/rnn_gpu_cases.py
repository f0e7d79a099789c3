"""The recurrent layers both GPU recurrent test files measure (tests/test_torch_gpu_rnn.py,
tests/test_cudnn_rnn.py): every cell, a projection, stacked bidirectional layers and a batch of
sequences of their own lengths, in every recurrent direction."""
from __future__ import annotations

from harness.rnn.problem import RnnProblem
from harness.sweep import RNN_DIRECTIONS

CASES = (
    RnnProblem("lstm", 28, 128, 28, 16, name="mnist_row_lstm"),
    RnnProblem("lstm", 16, 32, 6, 8, layers=2, bidirectional=True, proj_size=16, name="lstmp"),
    RnnProblem("gru", 16, 32, 7, 8, layers=2, bidirectional=True, name="gru2bi"),
    RnnProblem("rnn_tanh", 16, 32, 5, 8, name="tanh"),
    # gradients with kinks (precision._KINK_UNITS): at 256 units and 25 steps every path erred
    # 1.2-3.9% below fp32 before the kink's tolerance
    RnnProblem("rnn_relu", 64, 256, 25, 16, name="relu"),
    RnnProblem("lstm", 16, 32, 7, 3, lengths=(7, 3, 5), name="lstm_var"),
)
DIRECTIONS = RNN_DIRECTIONS
