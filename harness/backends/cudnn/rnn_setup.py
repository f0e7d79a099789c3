"""What cudnn_rnn (rnn.py) sets up once per process and decides per direction: the cuDNN types
of each precision, the calls each direction is made of, the buffers it writes, and the session
(stream, handle, and the RNN descriptors a layer's directions share)."""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from harness import ahead, setup_budget
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
    says so. A build asked for ahead of its point (build_ahead) runs on a background thread with
    a handle of its own (harness/ahead.py); the point's prepare waits for it under the build's
    budget, and its row's `rnn_build_ms` is still the build's own time."""

    def __init__(self, handle: Any, build_handle: Callable[[], Any] | None = None):
        self._handle = handle
        self._build_handle = build_handle or (lambda: handle)
        self._kept: OrderedDict[tuple, rl.RnnDesc] = OrderedDict()
        self._ahead = ahead.Ahead(on_thread=relaxed_capture_mode)

    def get(self, algo: int, point: Point) -> tuple[rl.RnnDesc, float | None]:
        """The descriptor, and the ms its build took for this call (None: built before)."""
        key = (algo, point.problem, point.precision)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key], None
        step = self._ahead.claim(key)
        if step is not None:
            with _watched(point):
                rnn = step.result()
            built = step.ms
        else:
            rnn = _descriptor(algo, point, self._handle)
            built = None
            if algo == DYNAMIC:
                with _watched(point):
                    built = _build(rnn, point, self._handle)
        self._kept[key] = rnn
        while len(self._kept) > DESCRIPTORS_KEPT:
            self._kept.popitem(last=False)
        return rnn, built

    def build_ahead(self, point: Point) -> None:
        """Start PERSIST_DYNAMIC's descriptor and build for `point` on the background thread,
        unless it is kept, asked for already, or its sizes ran past the budget in this run."""
        key = (DYNAMIC, point.problem, point.precision)
        if key in self._kept or setup_budget.is_over(_build_key(point)):
            return
        handle = self._build_handle()

        def work() -> rl.RnnDesc:
            rnn = _descriptor(DYNAMIC, point, handle)
            _build(rnn, point, handle)
            return rnn
        self._ahead.submit(key, work)


DYNAMIC = rl.ALGORITHMS["persist_dynamic"]


def _descriptor(algo: int, point: Point, handle: Any) -> rl.RnnDesc:
    p = point.problem
    data_type, math_precision, math_type = PRECISIONS[point.precision]
    return rl.RnnDesc(
        algo, rl.CELL_MODES[p.cell], rl.DOUBLE_BIAS if p.bias else rl.NO_BIAS,
        rl.BIDIRECTIONAL if p.bidirectional else rl.UNIDIRECTIONAL, data_type,
        math_precision, math_type, (p.input_size, p.hidden_size, p.out_size, p.layers),
        rl.DropoutDesc(handle), rl.PADDED_IO_ENABLED if p.lengths is not None else 0)


def _build(rnn: rl.RnnDesc, point: Point, handle: Any) -> float:
    """cudnnBuildRNNDynamic for the point's batch; the ms it took."""
    started = time.perf_counter()
    rl.call("cudnnBuildRNNDynamic", handle.ptr, rnn.ptr, point.problem.batch)
    return (time.perf_counter() - started) * 1e3


def _watched(point: Point) -> Any:
    """A PERSIST_DYNAMIC build (or the wait for one under way) under its budget."""
    p = point.problem
    return setup_budget.watched(_build_key(point), f"cudnnBuildRNNDynamic ({p.cell}, hidden "
                                f"{p.hidden_size}, {point.precision})",
                                point.timing.build_budget_s)


def relaxed_capture_mode() -> None:
    """Let this thread make calls a CUDA graph capture elsewhere would otherwise forbid: the
    main thread may be capturing a timed call (PyTorch captures in the global mode, which bars
    every other thread from allocating or loading a module) while this one builds. The driver's
    setting, per thread; where it cannot be set, a build during a capture fails and the point's
    prepare meets the failure (Step.result)."""
    import ctypes
    try:
        mode = ctypes.c_int(2)          # CU_STREAM_CAPTURE_MODE_RELAXED
        ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))
    except (OSError, AttributeError):
        pass


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
        self.descriptors = Descriptors(self.handle, self._build_handle)
        self._prepared = prepared
        self._builds: tuple[Any, lib.Handle] | None = None

    def _build_handle(self) -> lib.Handle:
        """The handle (on a stream of its own) the background thread builds with: cuDNN's
        handles are one thread's each."""
        if self._builds is None:
            stream = self.cupy.cuda.Stream(non_blocking=True)
            self._builds = (stream, lib.Handle(stream.ptr))
        return self._builds[1]

    def prepare(self, algo: int, point: Point, data: Any) -> Any:
        try:
            return self._prepared(self, algo, point, data)
        except lib.CudnnError as err:
            raise refused_or_failed(err) from None
