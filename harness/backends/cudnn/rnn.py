"""cuDNN's four RNN algorithms (issue 40) through the v8 API (rnn_lib.py): STANDARD, and the
persistent kernels PERSIST_STATIC, PERSIST_DYNAMIC (compiled for the batch by
cudnnBuildRNNDynamic, which counts as setup: `rnn_build_ms` of the layer's first row; a build
past its budget (`--build-budget-s`) makes the row and the same sizes' later rows `not_tried`:
setup_budget.py) and PERSIST_STATIC_SMALL_H, for LSTM, GRU and plain ReLU / tanh RNNs, every
direction:

  fwd         cudnnRNNForward in INFERENCE mode
  fwd_train   cudnnRNNForward in TRAINING mode (it also fills the reserve space backward reads)
  bwd_data    cudnnRNNBackwardData_v8 on a training forward's reserve space (run in prepare)
  bwd_filter  the gradient space zeroed, then cudnnRNNBackwardWeights_v8, which only adds into
              it (as PyTorch runs it: zeros, then ADD), after that forward and one
              BackwardData, which cuDNN requires first
  train_step  a whole training step: the training forward, BackwardData, the gradient space
              zeroed and BackwardWeights

BackwardData overwrites the reserve space it reads (on an H100 a second call on the same
reserve space erred by 100% to 7e4x, fp16 NaN: evidence/studies/rnn_repeat_probe.py), so each
bwd_data call first restores the reserve space from a copy taken after prepare's forward; the
copy is part of its time, as the row's `rnn_calls` says.

Data in SEQ_MAJOR_UNPACKED (the TNC layout of every recurrent row), per-sequence lengths with
padded outputs written as zero. Weights go in through cudnnGetRNNWeightParams, one gate block
at a time in PyTorch's gate order (LSTM i, f, g, o; GRU r, z, n), which cuDNN shares; the
weight gradients come out the same way, so no layout is assumed.

Precisions: fp32 FLOAT data with FMA math (true fp32), tf32 FLOAT with
TENSOR_OP_MATH_ALLOW_CONVERSION, fp16 / bf16 data with FLOAT math on tensor cores, fp64 DOUBLE.
cuDNN refuses an algorithm for a shape at the descriptor, the dynamic build or the temp-space
query: each is an `unsupported` row with cuDNN's status, its text and the call that refused.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness import families
from harness.backends.base import Algorithm, Backend, Prepared, Unsupported, require_fits
from harness.backends.cudnn import lib
from harness.backends.cudnn import rnn_lib as rl
from harness.backends.cudnn.rnn_setup import (CALL_WORDS, DIRECTION_CALLS, PRECISIONS, RESULTS,
                                              Session, refused_or_failed)
from harness.backends.cudnn.device_buffers import from_storage, poison_value, storage_dtype, \
    to_storage
from harness.backends.cudnn.legacy import CudnnFailed, cudnn_unavailable_reason
from harness.rnn.oracle import RnnData, flat
from harness.rnn.problem import RnnProblem
from harness.sweep import RNN_DIRECTIONS, Point

DESCRIPTIONS = {
    "standard": "CUDNN_RNN_ALGO_STANDARD: one GEMM for every step's inputs, then a "
                "recurrent GEMM and a cell kernel a step",
    "persist_static": "CUDNN_RNN_ALGO_PERSIST_STATIC: a persistent kernel holds the recurrent "
                      "weights on chip (small batches)",
    "persist_dynamic": "CUDNN_RNN_ALGO_PERSIST_DYNAMIC: a persistent kernel compiled for the "
                       "batch at run time (setup)",
    "persist_static_small_h": "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H: persistent kernels for "
                              "small hidden sizes",
}


class CudnnRnnAlgorithm(Algorithm):
    backend = "cudnn_rnn"
    problem_kinds = (families.RNN,)
    directions = RNN_DIRECTIONS

    def __init__(self, name: str, owner: CudnnRnnBackend):
        self.name = name
        self.family = "standard" if name == "standard" else "persistent"
        self.description = DESCRIPTIONS[name]
        self._owner = owner

    def supports(self, point: Point) -> str | None:
        if point.precision not in PRECISIONS:
            return (f"precision {point.precision}: cuDNN's RNN API runs "
                    f"{', '.join(PRECISIONS)}")
        return None

    def prepare(self, point: Point, data: RnnData) -> RnnPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        return self._owner.session().prepare(rl.ALGORITHMS[self.name], point, data)

    def ahead(self, point: Point) -> None:
        if self.name == "persist_dynamic" and not self.refusal(point):
            self._owner.session().descriptors.build_ahead(point)


class CudnnRnnBackend(Backend):
    name = "cudnn_rnn"
    device = "cuda"
    description = "cuDNN 9's RNN algorithms (STANDARD and the three persistent ones; ctypes)"
    prepared: type[RnnPrepared]      # what a point is bound into (tests plant faulty ones)

    def __init__(self) -> None:
        self._algorithms = [CudnnRnnAlgorithm(name, self) for name in rl.ALGORITHMS]
        self._session: Session | None = None

    def unavailable_reason(self) -> str | None:
        return cudnn_unavailable_reason(rl.library)       # with the RNN calls declared

    def algorithms(self) -> list[Algorithm]:
        return list(self._algorithms)

    def session(self) -> Session:
        if self._session is None:
            self._session = Session(self.prepared)
        return self._session


@dataclass
class _Layer:
    """One linear layer of the weight space: where its matrix and bias sit (byte offsets) and
    how many elements each has, as cudnnGetRNNWeightParams reports them."""
    matrix: tuple[int, int]
    bias: tuple[int, int]


class RnnPrepared(Prepared):
    """Descriptors, the weight space with the test weights in it, the inputs, outputs, work and
    reserve space of one point, and the call of its direction."""
    device = "cuda"

    def __init__(self, session: Session, algo: int, point: Point, data: RnnData):
        cp, handle = session.cupy, session.handle
        p: RnnProblem = point.problem
        self._cupy, self._point, self.stream = cp, point, session.stream
        self._precision = point.precision
        data_type, _, math_type = PRECISIONS[point.precision]
        self._rnn, built_ms = session.descriptors.get(algo, point)
        self.extras: dict[str, Any] = {"math_type": lib.MATH_NAMES[math_type]}
        if built_ms is not None:
            self.extras["rnn_build_ms"] = built_ms
        lengths = list(p.lengths) if p.lengths is not None else [p.seq_len] * p.batch
        k = p.layers * p.directions
        self._x = rl.RnnDataDesc(data_type, p.seq_len, p.batch, p.input_size, lengths)
        self._y = rl.RnnDataDesc(data_type, p.seq_len, p.batch, p.directions * p.out_size,
                                 lengths)
        self._h = rl.StateDesc(data_type, (k, p.batch, p.out_size))
        self._c = rl.StateDesc(data_type, (k, p.batch, p.hidden_size))
        mode = rl.INFERENCE if point.direction == "fwd" else rl.TRAINING
        work, reserve = rl.temp_space_sizes(handle, self._rnn, mode, self._x)
        require_fits(work, point.workspace_limit)
        self.workspace_bytes = work
        if reserve:
            self.extras["rnn_reserve_bytes"] = reserve
        self._space = rl.weight_space_size(handle, self._rnn)
        self._buffers = self._allocate(data, work, reserve, lengths)
        self._layers = self._weight_layers(handle, self._buffers["w"].data.ptr)
        self._write_weights(data)
        self._bind(handle, point.direction)

    # ---- buffers --------------------------------------------------------------------------
    def _allocate(self, data: RnnData, work: int, reserve: int, lengths: list[int]) -> dict:
        cp, precision, p = self._cupy, self._precision, self._point.problem
        stored = storage_dtype(precision)

        def upload(values: Any) -> Any:
            return None if values is None else cp.asarray(to_storage(values, precision))

        def empty_like(values: Any) -> Any:
            return None if values is None else cp.empty(values.shape, dtype=stored)
        buffers = {name: upload(getattr(data, name))
                   for name in ("x", "h0", "c0", "dy", "dh_n", "dc_n")}
        buffers.update(y=cp.empty(p.output_shape, dtype=stored),
                       h_n=empty_like(data.h0), c_n=empty_like(data.c0),
                       dx=empty_like(data.x), dh0=empty_like(data.h0), dc0=empty_like(data.c0),
                       w=cp.zeros(self._space, dtype=cp.uint8),
                       dw=cp.zeros(self._space, dtype=cp.uint8),
                       work=cp.empty(max(work, 1), dtype=cp.uint8),
                       reserve=cp.empty(max(reserve, 1), dtype=cp.uint8),
                       lengths=cp.asarray(lengths, dtype=cp.int32))
        self._sizes = (work, reserve)
        cp.cuda.Stream.null.synchronize()      # uploads done before our stream reads them
        return buffers

    def _weight_layers(self, handle: lib.Handle, base: int) -> dict[tuple[int, int], _Layer]:
        """(pseudo layer, linear layer id) -> where cuDNN keeps it, as offsets into a space."""
        p = self._point.problem
        ids = list(range(2 * p.gates)) + ([rl.PROJECTION_ID] if p.proj_size else [])
        layers = {}
        for pseudo in range(p.layers * p.directions):
            for lin in ids:
                (m, m_n), (b, b_n) = rl.weight_params(handle, self._rnn, pseudo, base,
                                                      self._space, lin)
                layers[pseudo, lin] = _Layer((m - base if m else -1, m_n),
                                             (b - base if b else -1, b_n))
        return layers

    def _blocks(self, layer: int, d: int) -> list[tuple[str, int, slice, str]]:
        """(weight name, linear layer id, rows of the weight, matrix or bias) of one layer and
        direction: gate g of W is id g, of R id gates + g; their biases alike; P id 8."""
        p = self._point.problem
        h, out = p.hidden_size, []
        for g in range(p.gates):
            rows = slice(g * h, (g + 1) * h)
            out += [("W", g, rows, "matrix"), ("R", p.gates + g, rows, "matrix")]
            if p.bias:
                out += [("bW", g, rows, "bias"), ("bR", p.gates + g, rows, "bias")]
        if p.proj_size:
            out.append(("P", rl.PROJECTION_ID, slice(None), "matrix"))
        return out

    def _view(self, space: Any, layer: _Layer, part: str) -> Any:
        offset, elements = getattr(layer, part)
        stored = storage_dtype(self._precision)
        size = elements * stored().itemsize
        if offset < 0 or elements == 0:
            raise CudnnFailed(f"cudnnGetRNNWeightParams gave no {part} where the layer has one")
        return space[offset:offset + size].view(stored)

    def _write_weights(self, data: RnnData) -> None:
        p, cp = self._point.problem, self._cupy
        for layer in range(p.layers):
            for d in range(p.directions):
                weights = data.weights[layer][d]
                for name, lin, rows, part in self._blocks(layer, d):
                    block = weights[name][rows]
                    target = self._view(self._buffers["w"], self._layers[layer * p.directions
                                                                         + d, lin], part)
                    if target.size != block.size:
                        raise CudnnFailed(f"cuDNN holds {target.size} elements for {name} gate "
                                          f"block {lin}; the layer has {block.size}")
                    target[...] = cp.asarray(to_storage(block.reshape(-1), self._precision))
        cp.cuda.Stream.null.synchronize()

    # ---- calls ----------------------------------------------------------------------------
    def _actions(self, handle: lib.Handle) -> dict[str, Callable[[], None]]:
        """Each cuDNN call (and buffer step) a direction is made of, by name."""
        b, runtime = self._buffers, self._cupy.cuda.runtime
        work, reserve = self._sizes
        ptr = _pointer
        lengths, c_desc, stream = ptr(b["lengths"]), self._c.ptr, self.stream.ptr
        tail = (work, ptr(b["work"]), reserve, ptr(b["reserve"]))

        def forward(mode: int, reserved: tuple) -> tuple:
            return (handle.ptr, self._rnn.ptr, mode, lengths, self._x.ptr, ptr(b["x"]),
                    self._y.ptr, ptr(b["y"]), self._h.ptr, ptr(b["h0"]), ptr(b["h_n"]), c_desc,
                    ptr(b["c0"]), ptr(b["c_n"]), self._space, ptr(b["w"]), *reserved)
        data = (handle.ptr, self._rnn.ptr, lengths, self._y.ptr, ptr(b["y"]), ptr(b["dy"]),
                self._x.ptr, ptr(b["dx"]), self._h.ptr, ptr(b["h0"]), ptr(b["dh_n"]),
                ptr(b["dh0"]), c_desc, ptr(b["c0"]), ptr(b["dc_n"]), ptr(b["dc0"]),
                self._space, ptr(b["w"]), *tail)
        weights = (handle.ptr, self._rnn.ptr, rl.WGRAD_ADD, lengths, self._x.ptr, ptr(b["x"]),
                   self._h.ptr, ptr(b["h0"]), self._y.ptr, ptr(b["y"]), self._space,
                   ptr(b["dw"]), *tail)

        def cudnn(name: str, args: tuple) -> Callable[[], None]:
            function = getattr(rl.library(), name)
            return lambda: _run(function, name, args)
        return {
            "infer": cudnn("cudnnRNNForward", forward(rl.INFERENCE, (work, ptr(b["work"]), 0,
                                                                     None))),
            "train": cudnn("cudnnRNNForward", forward(rl.TRAINING, tail)),
            "data": cudnn("cudnnRNNBackwardData_v8", data),
            "weights": cudnn("cudnnRNNBackwardWeights_v8", weights),
            "zero_dw": lambda: runtime.memsetAsync(ptr(b["dw"]), 0, self._space, stream),
            "restore": lambda: runtime.memcpyAsync(ptr(b["reserve"]), ptr(b["kept"]), reserve,
                                                   runtime.memcpyDeviceToDevice, stream)}

    def _bind(self, handle: lib.Handle, direction: str) -> None:
        """Runs what the direction's call needs done once, then keeps the call: `_timed`."""
        actions = self._actions(handle)
        before, timed = DIRECTION_CALLS[direction]
        with self.stream:
            for name in before:
                actions[name]()
            if "restore" in timed:
                self._buffers["kept"] = self._buffers["reserve"].copy()
        self.stream.synchronize()
        self._timed = [actions[name] for name in timed]
        self.extras["rnn_calls"] = " + ".join(CALL_WORDS[name] for name in timed)

    def launch(self) -> None:
        for action in self._timed:
            action()

    # ---- results --------------------------------------------------------------------------
    def poison(self) -> None:
        value, b = poison_value(self._precision), self._buffers
        with self.stream:
            for name in RESULTS[self._point.direction]:
                buffer = b[name].view(storage_dtype(self._precision)) if name == "dw" else b[name]
                if buffer is not None:
                    buffer.fill(value)

    def output(self) -> Any:
        cp, p, parts = self._cupy, self._point.problem, []
        with self.stream:
            for name in RESULTS[self._point.direction]:
                if name == "dw":
                    parts += self._weight_gradients()
                elif self._buffers[name] is not None:      # c_n, dc0: an LSTM's alone
                    values = from_storage(cp, self._buffers[name], self._precision)
                    if name == "dx" and p.lengths is not None:
                        values = values * _valid_steps(cp, p)[:, :, None]
                    parts.append(values)
        self.stream.synchronize()
        return flat(*parts, xp=cp)

    def _weight_gradients(self) -> list[Any]:
        """Every weight's gradient in RnnProblem.weight_keys order, each assembled from its gate
        blocks in the gradient space."""
        p, cp, out = self._point.problem, self._cupy, []
        for layer in range(p.layers):
            for d in range(p.directions):
                pieces: dict[str, list[Any]] = {}
                for name, lin, _, part in self._blocks(layer, d):
                    view = self._view(self._buffers["dw"], self._layers[layer * p.directions
                                                                        + d, lin], part)
                    pieces.setdefault(name, []).append(from_storage(cp, view, self._precision))
                out += [cp.concatenate(pieces[name]) for name in p.weight_shapes(layer)]
        return out

    def release(self) -> None:
        self._buffers = {}
        self._timed = []


def _run(function: Any, name: str, args: tuple) -> None:
    """Calls a cuDNN RNN function. A persistent algorithm may refuse variable sequence lengths
    only when called (NOT_SUPPORTED from cudnnRNNForward on cuDNN 9.19): Unsupported, which
    makes the row `unsupported` wherever it comes."""
    code = function(*args)
    if code != 0:
        raise refused_or_failed(lib.CudnnError(code, name, lib.last_error()))


def _pointer(buffer: Any) -> int | None:
    return None if buffer is None else buffer.data.ptr


def _valid_steps(cp: Any, p: RnnProblem) -> Any:
    """1.0 where a (time, sequence) step is within the sequence's length, else 0.0: the input
    gradient of a padding step is undefined in cuDNN's unpacked layout (only outputs are
    filled), and zero in the oracle, where a padding step carries no data."""
    return (cp.arange(p.seq_len)[:, None] < cp.asarray(p.lengths)[None, :]).astype(cp.float64)


CudnnRnnBackend.prepared = RnnPrepared
