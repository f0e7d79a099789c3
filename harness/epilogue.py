"""What a forward point computes after the convolution: the `op` axis (issue 17).

Inference graphs rarely run a bare convolution: a bias, a ReLU and, in residual blocks, the
shortcut's add follow it. cuDNN's graph API fuses them into the convolution's kernel; PyTorch
eager runs them as separate kernels. An op names the whole computation, so its rows are timed
and verified as one unit:

  conv                y = conv(x, w)                     (every direction; the default)
  conv_bias           y = conv(x, w) + b                 b: one value per output channel
  conv_bias_relu      y = max(conv(x, w) + b, 0)
  conv_bias_add_relu  y = max(conv(x, w) + b + z, 0)     z: the residual, shaped like y

The epilogues exist for the forward direction only (a training step's backward pass of a ReLU
is a mask, not a convolution). FLOP counts stay the convolution's, so an op's GFLOP/s compares
with plain rows: the epilogue's one to three operations per output element are small beside a
dense layer's 2*C*R*S, though not beside a depthwise layer's 18.
"""
from __future__ import annotations

from typing import Any

CONV = "conv"
OPS = (CONV, "conv_bias", "conv_bias_relu", "conv_bias_add_relu")


def needs_bias(op: str) -> bool:
    return op != CONV


def needs_residual(op: str) -> bool:
    return op == "conv_bias_add_relu"


def has_relu(op: str) -> bool:
    return op.endswith("_relu")


def applies_to(op: str, direction: str) -> bool:
    """Whether the op exists for a direction: plain convolution everywhere, epilogues on fwd."""
    return op == CONV or direction == "fwd"


def labelled(direction: str, op: str | None) -> str:
    """The direction with the op where one follows the convolution ("fwd+conv_bias_relu"): how
    point ids, exported names and the hung-engine memory tell a fused point from a plain one
    (plain convolution keeps the bare direction, so ids from before the op axis still match)."""
    return direction if op in (None, CONV) else f"{direction}+{op}"


def apply(op: str, y: Any, bias: Any, residual: Any, xp: Any) -> Any:
    """The epilogue on the exact convolution output `y` (N, K, *spatial), in float64: what the
    oracle checks an op's rows against."""
    if needs_bias(op):
        y = y + xp.asarray(bias, dtype=xp.float64).reshape(1, -1, *([1] * (y.ndim - 2)))
    if needs_residual(op):
        y = y + xp.asarray(residual, dtype=xp.float64)
    if has_relu(op):
        y = xp.maximum(y, 0.0)
    return y

