"""The recurrent family's side of the executor's check (harness/families.py): test data, the
float64 result of a direction, and the scales the verdict may ask for, with the signatures
harness/reference.py has for convolutions.

A direction's result is one flat float64 vector of everything it writes, in a fixed order, so
the one normwise check (harness/verdict.py) judges it like a convolution's tensor:
  fwd, fwd_train: y, the final hidden states h_n, and (LSTM) the final cell states c_n
  bwd_data:   dx, dh0, and (LSTM) dc0: the gradients of a loss whose gradients at the outputs
              are dy, dh_n, dc_n (RnnData)
  bwd_filter: every weight's gradient, layer by layer, direction by direction, in
              RnnProblem.weight_shapes order
  train_step: the forward's outputs, then bwd_data's, then bwd_filter's: a whole training step
Backends return their result through `flat` in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import epilogue
from harness import precision as precision_table
from harness.reference import TermScales, l2_norm
from harness.rnn import reference as recurrence
from harness.rnn.problem import RnnProblem


@dataclass
class RnnData:
    """Host float64 arrays, already rounded to the point's storage precision, so the oracle and
    the algorithm see the same numbers. `weights[layer][direction]` maps the names of
    RnnProblem.weight_shapes to arrays; c0 and dc_n are None but for an LSTM."""
    x: Any
    h0: Any
    c0: Any
    weights: list
    dy: Any
    dh_n: Any
    dc_n: Any
    # What the oracle computed from these arrays, by array module (_passes): the executor keeps
    # a problem's data per precision across its directions, so the next direction reuses it.
    passes: dict = field(default_factory=dict, repr=False, compare=False)


# The parts of the oracle's passes each direction writes (module docstring), in order
_PARTS = {"fwd": ("y", "h", "c"), "fwd_train": ("y", "h", "c"), "bwd_data": ("dx", "dh0", "dc0"),
          "bwd_filter": ("dw",), "train_step": ("y", "h", "c", "dx", "dh0", "dc0", "dw")}


def make_data(problem: RnnProblem, precision: str, seed: int = 0,
              op: str = epilogue.CONV) -> RnnData:
    """Random normal inputs and states; weights N(0, 1/(3 hidden)), the spread (standard
    deviation 1/sqrt(3 hidden)) of PyTorch's default uniform(-1/sqrt(hidden), 1/sqrt(hidden))
    init, so gates neither saturate (where every gradient vanishes and a wrong result could
    pass) nor blow up over the steps. At N(0, 1/hidden) the recurrent matrix's spectral radius
    is about 1: DeepBench's ReLU RNN (1760 units, 50 steps) then amplified float rounding in its
    gradients to 2-7% at fp32 (computed in TF32 by cuDNN), fp16 and bf16 alike on an H100
    (evidence/logs/deepbench-rnn-training-444836d-...log.gz)."""
    if op != epilogue.CONV:
        raise ValueError(f"op {op!r}: a recurrent layer has no fused epilogue")
    rng = np.random.default_rng(seed)
    scale = precision_table.TABLE[precision].data_scale
    k, n = problem.layers * problem.directions, problem.batch

    def draw(shape: tuple[int, ...], times: float = scale) -> Any:
        return precision_table.round_to(rng.standard_normal(shape) * times, precision)
    lstm = problem.cell == "lstm"
    x = draw((problem.seq_len, n, problem.input_size))
    h0 = draw((k, n, problem.out_size))
    c0 = draw((k, n, problem.hidden_size)) if lstm else None
    spread = scale / (3 * problem.hidden_size) ** 0.5
    weights = [[{name: draw(shape, spread) for name, shape in problem.weight_shapes(layer).items()}
                for _ in range(problem.directions)] for layer in range(problem.layers)]
    dy = draw((problem.seq_len, n, problem.directions * problem.out_size))
    dh_n = draw((k, n, problem.out_size))
    dc_n = draw((k, n, problem.hidden_size)) if lstm else None
    if problem.lengths is not None:       # padding steps hold no data (and carry none)
        mask = (np.arange(problem.seq_len)[:, None] < np.asarray(problem.lengths)[None, :])
        x, dy = x * mask[:, :, None], dy * mask[:, :, None]
    return RnnData(x, h0, c0, weights, dy, dh_n, dc_n)


def flat(*parts: Any, xp: Any = np) -> Any:
    """The parts (None skipped) as one float64 vector, in the order given."""
    return xp.concatenate([xp.asarray(p, dtype=xp.float64).reshape(-1)
                           for p in parts if p is not None])


def reference(problem: RnnProblem, direction: str, data: RnnData, xp: Any = np,
              op: str = epilogue.CONV) -> Any:
    """The exact (float64) result of `direction` on `data`, flat (module docstring)."""
    if op != epilogue.CONV:
        raise ValueError(f"op {op!r}: a recurrent layer has no fused epilogue")
    if direction not in _PARTS:
        raise ValueError(f"unknown direction {direction!r}")
    parts = _passes(problem, data, xp, backward=direction not in ("fwd", "fwd_train"))
    return flat(*(a for name in _PARTS[direction]
                  for a in (parts[name] if name == "dw" else [parts[name]])), xp=xp)


def _passes(problem: RnnProblem, data: RnnData, xp: Any, backward: bool) -> dict[str, Any]:
    """The forward pass's outputs and, where `backward`, the gradients (dw: every weight's, in
    RnnProblem.weight_keys order), computed once per data and array module: forward's for
    fwd and fwd_train, one forward and backward for the rest (a training step's)."""
    done = data.passes.get(xp.__name__)
    if done is not None and (not backward or "dx" in done):
        return done
    def as_xp(a: Any) -> Any:
        return None if a is None else xp.asarray(a, dtype=xp.float64)
    weights = [[{k: as_xp(v) for k, v in w.items()} for w in layer] for layer in data.weights]
    fwd = recurrence.forward(problem, as_xp(data.x), as_xp(data.h0), as_xp(data.c0), weights, xp)
    done = {"y": fwd.y, "h": fwd.h, "c": fwd.c}
    if backward:
        dx, dh0, dc0, grads = recurrence.backward(problem, fwd, weights, as_xp(data.dy),
                                                  as_xp(data.dh_n), as_xp(data.dc_n), xp)
        done.update(dx=dx, dh0=dh0, dc0=dc0,
                    dw=[grads[layer][d][name] for layer, d, name in problem.weight_keys()])
    data.passes[xp.__name__] = done
    return done


def term_scales(problem: RnnProblem, direction: str, data: RnnData, expected: Any,
                xp: Any = np, op: str = epilogue.CONV) -> TermScales:
    """A recurrence's outputs are no sums of products whose spread one more reference could
    give: the result's own norm stands for the spread (condition 1: the plain tolerance, never
    widened), and the operands' norms bound what an output of zero may err by."""
    first = data.dy if direction == "bwd_data" else data.x
    weights = flat(*(w for layer in data.weights for d in layer for w in d.values()))
    return TermScales(l2_norm(expected, xp), l2_norm(first) * l2_norm(weights))
