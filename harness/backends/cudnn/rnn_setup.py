"""What cudnn_rnn (rnn.py) sets up once per process and decides per direction: the cuDNN types
of each precision, the calls each direction is made of, the buffers it writes, and the session
(stream, handle, and the RNN descriptors a layer's directions share)."""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from harness import setup_budget
from harness.backends.base import Unsupported
from harness.backends.cudnn import lib
from harness.backends.cudnn import rnn_lib as rl
from harness.backends.cudnn.legacy import CudnnFailed
from harness.sweep import TRAINING_STEP, Point

# precision -> (data type of data and weights, math precision, math type)
PRECISIONS = {
    "fp32": (lib.FLOAT, lib.FLOAT, lib.FMA_MATH),
    "tf32": (lib.FLOAT, lib.FLOAT, lib.TENSOR_OP_MATH_ALLOW_CONVERSION),
    "fp16": (lib.HALF, lib.FLOAT, lib.TENSOR_OP_MATH),
    "bf16": (lib.BFLOAT16, lib.FLOAT, lib.TENSOR_OP_MATH),
    "fp64": (lib.DOUBLE, lib.DOUBLE, lib.DEFAULT_MATH),
}
# RNN descriptors a process keeps for a layer's other directions (they come one after another)
DESCRIPTORS_KEPT = 8
# direction -> (what runs once in prepare, what each timed call runs), by _actions' names
DIRECTION_CALLS = {
    "fwd": ((), ("infer",)),
    "fwd_train": ((), ("train",)),
    "bwd_data": (("train",), ("restore", "data")),
    "bwd_filter": (("train", "data"), ("zero_dw", "weights")),
    TRAINING_STEP: ((), ("train", "data", "zero_dw", "weights")),
}
# the buffers each direction writes, in the oracle's order (dw: every weight's gradient)
_FORWARD, _DATA = ("y", "h_n", "c_n"), ("dx", "dh0", "dc0")
RESULTS = {"fwd": _FORWARD, "fwd_train": _FORWARD, "bwd_data": _DATA, "bwd_filter": ("dw",),
           TRAINING_STEP: (*_FORWARD, *_DATA, "dw")}
CALL_WORDS = {"infer": "cudnnRNNForward (inference)", "train": "cudnnRNNForward (training)",
              "data": "cudnnRNNBackwardData_v8", "weights": "cudnnRNNBackwardWeights_v8",
              "zero_dw": "zero the gradient space", "restore": "restore the reserve space"}
def refused_or_failed(err: lib.CudnnError) -> Exception:
    """cuDNN's NOT_SUPPORTED (at any stage: the message names the call) as a refusal, anything
    else as a failure."""
    if lib.is_not_supported(err.code):
        return Unsupported(str(err))
    return CudnnFailed(str(err), err.code)


class Descriptors:
    """The RNN descriptor of each layer, precision and algorithm a process measured last, with
    PERSIST_DYNAMIC's plan built in it, kept for the layer's other directions: the build, a
    run-time compile, took a median 1.65 s a layer on an H100 (DeepBench's training set,
    evidence/runs/deepbench_rnn_training-cudnn_rnn-*), and the directions share one plan, as
    PyTorch's forward and backward do. A build cuDNN refuses is not kept: each direction's row
    says so."""

    def __init__(self, handle: Any):
        self._handle = handle
        self._kept: OrderedDict[tuple, rl.RnnDesc] = OrderedDict()

    def get(self, algo: int, point: Point) -> tuple[rl.RnnDesc, float | None]:
        """The descriptor, and the ms its build took in this call (None: no build here)."""
        key = (algo, point.problem, point.precision)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key], None
        p, handle = point.problem, self._handle
        data_type, math_precision, math_type = PRECISIONS[point.precision]
        rnn = rl.RnnDesc(
            algo, rl.CELL_MODES[p.cell], rl.DOUBLE_BIAS if p.bias else rl.NO_BIAS,
            rl.BIDIRECTIONAL if p.bidirectional else rl.UNIDIRECTIONAL, data_type,
            math_precision, math_type, (p.input_size, p.hidden_size, p.out_size, p.layers),
            rl.DropoutDesc(handle), rl.PADDED_IO_ENABLED if p.lengths is not None else 0)
        built = None
        if algo == rl.ALGORITHMS["persist_dynamic"]:
            with setup_budget.watched(_build_key(point), f"cudnnBuildRNNDynamic ({p.cell}, "
                                      f"hidden {p.hidden_size}, {point.precision})",
                                      setup_budget.RNN_BUILD_BUDGET_S):
                started = time.perf_counter()
                rl.call("cudnnBuildRNNDynamic", handle.ptr, rnn.ptr, p.batch)
                built = (time.perf_counter() - started) * 1e3
        self._kept[key] = rnn
        while len(self._kept) > DESCRIPTORS_KEPT:
            self._kept.popitem(last=False)
        return rnn, built


def _build_key(point: Point) -> tuple:
    """What a PERSIST_DYNAMIC build's time depends on: the layer's sizes and precision, not its
    batch or length (hidden 2048 LSTMs, batch 16-128: 5.9-7.0 s on an H200, 9.2-11.0 s on an
    H100; setup_budget.py names the runs)."""
    p = point.problem
    return ("cudnn_rnn", "persist_dynamic", point.precision, p.cell, p.input_size,
            p.hidden_size, p.proj_size, p.layers, p.bidirectional)


class Session:
    """One stream and one cuDNN handle for every recurrent point of the process, and the
    layers' descriptors."""

    def __init__(self, prepared: type) -> None:
        import cupy
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.handle = lib.Handle(self.stream.ptr)
        self.descriptors = Descriptors(self.handle)
        self._prepared = prepared

    def prepare(self, algo: int, point: Point, data: Any) -> Any:
        try:
            return self._prepared(self, algo, point, data)
        except lib.CudnnError as err:
            raise refused_or_failed(err) from None
