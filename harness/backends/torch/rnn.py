"""PyTorch's recurrent layers (issue 40): nn.LSTM, nn.GRU and nn.RNN as a user calls them, with
their autograd for the backward directions: the peer a user would otherwise pick. On the CPU
PyTorch runs an LSTM through oneDNN's RNN primitive where it can and everything else through its
native ATen ops; each row says which (`torch_rnn_path`). torch is imported lazily, in prepare.

The module's weights are the test data's (RnnData.weights, PyTorch's gate order), copied in
before anything is timed. Sequences of their own lengths go through pack_padded_sequence, as a
user's padded batch does; the outputs are unpacked back to (seq_len, batch, ...) with zeros past
each sequence's end, as the oracle writes them.

Directions, each one timed call:
  fwd:        the module's forward pass under no_grad (inference)
  fwd_train:  the same with autograd recording, as training runs it (the weights require
              grad; oneDNN and cuDNN then run their training kernels and keep what backward
              reads); the graph is dropped after each call
  bwd_data:   torch.autograd.grad of (y, h_n, c_n) with gradients (dy, dh_n, dc_n) w.r.t. the
              input and initial states, on a forward graph built once in prepare and kept
  bwd_filter: the same w.r.t. the weights
  train_step: the training forward and the gradients w.r.t. the input, initial states and
              weights in one backward pass, a fresh graph each call: one whole training step
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from harness import families
from harness.backends.base import Algorithm, Prepared, Unsupported
from harness.backends.torch.cores import use_every_core
from harness.backends.torch.dtypes import ON_CPU, dtype
from harness.rnn.oracle import RnnData, flat
from harness.rnn.problem import RnnProblem
from harness.sweep import RNN_DIRECTIONS, TRAINING_FORWARD, TRAINING_STEP, Point

# RnnProblem.weight_shapes names -> PyTorch's parameter names (suffixed _l{layer}[_reverse]).
PARAMETERS = {"W": "weight_ih", "R": "weight_hh", "bW": "bias_ih", "bR": "bias_hh",
              "P": "weight_hr"}


def module_for(torch: Any, problem: RnnProblem, weights: list, element: Any,
               device: str) -> Any:
    """The nn.LSTM / nn.GRU / nn.RNN of `problem` on `device` holding `weights`
    (RnnData.weights). Made on the meta device and given memory uninitialized, since every
    weight is written here: PyTorch's own initialization of a hidden-2560 GRU, on the CPU before
    the move, took 0.55 s on a 2-core VM, and the whole build 0.89 s."""
    kwargs = dict(num_layers=problem.layers, bidirectional=problem.bidirectional,
                  bias=problem.bias, device="meta")
    if problem.cell == "lstm":
        module = torch.nn.LSTM(problem.input_size, problem.hidden_size,
                               proj_size=problem.proj_size, **kwargs)
    elif problem.cell == "gru":
        module = torch.nn.GRU(problem.input_size, problem.hidden_size, **kwargs)
    else:
        module = torch.nn.RNN(problem.input_size, problem.hidden_size,
                              nonlinearity=problem.cell.removeprefix("rnn_"), **kwargs)
    module = module.to_empty(device=device).to(element)
    with torch.no_grad():
        for (layer, d, key), parameter in zip(problem.weight_keys(), parameters(module, problem)):
            parameter.copy_(torch.from_numpy(np.asarray(weights[layer][d][key])))
    return module


def parameters(module: Any, problem: RnnProblem) -> list[Any]:
    """The module's parameters in RnnProblem.weight_keys order."""
    return [getattr(module, f"{PARAMETERS[key]}_l{layer}{'_reverse' if d else ''}")
            for layer, d, key in problem.weight_keys()]


class RnnPrepared(Prepared):
    """`call()` returns the direction's tensors; `output()` flattens the latest ones in the
    oracle's order (harness/rnn/oracle.py)."""
    stream = None
    workspace_bytes = 0

    def __init__(self, call: Callable[[], tuple], device: str):
        self._call = call
        self.device = device
        self.extras: dict[str, Any] = {}
        self.result: tuple = ()

    def launch(self) -> None:
        self.result = tuple(t for t in self._call() if t is not None)

    def poison(self) -> None:
        for tensor in self.result:
            tensor.fill_(float("nan"))

    def output(self) -> Any:
        return flat(*(t.detach().cpu().double().numpy() for t in self.result))

    def release(self) -> None:
        self._call = None
        self.result = ()


def tensors(torch: Any, point: Point, device: str) -> Callable[[Any], Any]:
    """Converts a test array to a tensor of the point's precision on `device` (None stays)."""
    element = dtype(torch, point.precision)

    def as_tensor(a: Any) -> Any:
        return None if a is None else torch.from_numpy(np.ascontiguousarray(a)).to(
            device=device, dtype=element)
    return as_tensor


Forward = Callable[[Any, Any, Any], tuple]      # (x, h0, c0) -> (y, h_n, c_n or None)


def timed_call(torch: Any, point: Point, data: RnnData, as_tensor: Callable[[Any], Any],
               forward: Forward, weights: list[Any]) -> Callable[[], tuple]:
    """The timed call of `point`'s direction (module docstring) for an implementation given
    as its forward pass and its weight tensors in RnnProblem.weight_keys order."""
    x, h0, c0 = as_tensor(data.x), as_tensor(data.h0), as_tensor(data.c0)
    if point.direction == "fwd":
        def infer() -> tuple:
            with torch.no_grad():
                return forward(x, h0, c0)
        return infer
    if point.direction == TRAINING_FORWARD:      # weights require grad: the graph is recorded
        def train() -> tuple:
            return tuple(t.detach() if t is not None else None for t in forward(x, h0, c0))
        return train
    inputs = [t.requires_grad_() for t in (x, h0, c0) if t is not None]
    grads = [t for t in (as_tensor(data.dy), as_tensor(data.dh_n), as_tensor(data.dc_n))
             if t is not None]
    if point.direction == TRAINING_STEP:
        def step() -> tuple:
            outputs = [t for t in forward(x, h0, c0) if t is not None]
            return (*(t.detach() for t in outputs),
                    *torch.autograd.grad(outputs, [*inputs, *weights], grads))
        return step
    outputs = [t for t in forward(x, h0, c0) if t is not None]
    wrt = inputs if point.direction == "bwd_data" else weights

    def backward() -> tuple:
        return torch.autograd.grad(outputs, wrt, grads, retain_graph=True)
    return backward


def module_call(torch: Any, point: Point, data: RnnData, device: str) -> Callable[[], tuple]:
    """nn.LSTM / nn.GRU / nn.RNN's timed call; per-sequence lengths go through
    pack_padded_sequence and come back padded with zeros, as the oracle writes them."""
    p: RnnProblem = point.problem
    as_tensor = tensors(torch, point, device)
    module = module_for(torch, p, data.weights, dtype(torch, point.precision), device)
    # The module's weights are allocated one by one; cuDNN wants them in one block, or PyTorch
    # copies them into one on every call (a UserWarning says so) and that copy is timed.
    module.flatten_parameters()

    def forward(x: Any, h0: Any, c0: Any) -> tuple:
        xin = x if p.lengths is None else torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(p.lengths), enforce_sorted=False)
        y, state = module(xin, (h0, c0) if c0 is not None else h0)
        if p.lengths is not None:
            y = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=p.seq_len)[0]
        return (y, *state) if c0 is not None else (y, state, None)
    return timed_call(torch, point, data, as_tensor, forward, parameters(module, p))


class TorchRnn(Algorithm):
    """nn.LSTM / nn.GRU / nn.RNN on the backend's device."""
    backend = "torch_cpu"
    name = "nn_rnn"
    family = "library"
    description = "torch.nn.LSTM / GRU / RNN and their autograd (oneDNN's or native CPU kernels)"
    problem_kinds = (families.RNN,)
    directions = RNN_DIRECTIONS
    device = "cpu"

    def supports(self, point: Point) -> str | None:
        if point.precision not in ON_CPU:
            return (f"precision {point.precision}: PyTorch's recurrent layers are measured on "
                    f"the CPU in {' and '.join(ON_CPU)}")
        return None

    def prepare(self, point: Point, data: RnnData) -> RnnPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        import torch  # lazy: heavy, optional
        use_every_core(torch)
        prepared = RnnPrepared(module_call(torch, point, data, self.device), self.device)
        prepared.extras["torch_rnn_path"] = _path(torch, prepared)
        return prepared


def _path(torch: Any, prepared: RnnPrepared) -> str:
    """Which of PyTorch's CPU implementations one call ran: oneDNN's RNN primitive (an LSTM
    without projection, in fp32) or its native per-step ATen ops (the rest), read from the ATen
    ops the call dispatched (a dispatch mode; the profiler would print its own log lines) rather
    than guessed from PyTorch's dispatch rules."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(str(func))
            return func(*args, **(kwargs or {}))
    with Names() as seen:
        prepared.launch()
    return "onednn" if any("mkldnn_rnn" in name for name in seen.names) else "native"
