"""ctypes binding to cuDNN 9's legacy convolution API (facts: shared/reference/cudnn-api.md).

Only what the cudnn backend needs: library loading, status names, the handle, tensor / filter /
convolution descriptors, workspace queries, the three convolution calls and the heuristic and Find
queries. Nothing here times or verifies anything.
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from ctypes import POINTER, byref, c_float, c_int, c_size_t, c_void_p
from functools import lru_cache

# ---- enums (cuDNN 9 headers; stable since 9.0) --------------------------------------------------
FLOAT, DOUBLE, HALF, INT8, INT32, BFLOAT16 = 0, 1, 2, 3, 4, 9
NCHW, NHWC = 0, 1
CROSS_CORRELATION = 1
DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, FMA_MATH = 0, 1, 2, 3
MATH_NAMES = {0: "default", 1: "tensor_op", 2: "tensor_op_allow_conversion", 3: "fma"}

FWD_ALGOS = {"implicit_gemm": 0, "implicit_precomp_gemm": 1, "gemm": 2, "direct": 3, "fft": 4,
             "fft_tiling": 5, "winograd": 6, "winograd_nonfused": 7}
BWD_DATA_ALGOS = {"algo_0": 0, "algo_1": 1, "fft": 2, "fft_tiling": 3, "winograd": 4,
                  "winograd_nonfused": 5}
BWD_FILTER_ALGOS = {"algo_0": 0, "algo_1": 1, "fft": 2, "algo_3": 3, "winograd": 4,
                    "winograd_nonfused": 5, "fft_tiling": 6}
ALGOS = {"fwd": FWD_ALGOS, "bwd_data": BWD_DATA_ALGOS, "bwd_filter": BWD_FILTER_ALGOS}

STATUS_NAMES = {
    0: "SUCCESS", 1001: "NOT_INITIALIZED", 1002: "SUBLIBRARY_VERSION_MISMATCH",
    1003: "SERIALIZATION_VERSION_MISMATCH", 1004: "DEPRECATED", 1005: "LICENSE_ERROR",
    1006: "RUNTIME_IN_PROGRESS", 1007: "RUNTIME_FP_OVERFLOW", 1008: "SUBLIBRARY_LOADING_FAILED",
    2000: "BAD_PARAM", 2001: "BAD_PARAM_INVALID_VALUE", 2002: "BAD_PARAM_NULL_POINTER",
    2003: "BAD_PARAM_MISALIGNED_POINTER", 2004: "BAD_PARAM_NOT_FINALIZED",
    2005: "BAD_PARAM_OUT_OF_BOUND", 2006: "BAD_PARAM_SIZE_INSUFFICIENT",
    2007: "BAD_PARAM_STREAM_MISMATCH", 2008: "BAD_PARAM_SHAPE_MISMATCH",
    2009: "BAD_PARAM_DUPLICATED_ENTRIES", 2010: "BAD_PARAM_ATTRIBUTE_TYPE",
    2011: "BAD_PARAM_CUDA_GRAPH_MISMATCH", 2012: "BAD_PARAM_DESCRIPTOR_TYPE",
    3000: "NOT_SUPPORTED", 3001: "NOT_SUPPORTED_GRAPH_PATTERN", 3002: "NOT_SUPPORTED_SHAPE",
    3003: "NOT_SUPPORTED_DATA_TYPE", 3004: "NOT_SUPPORTED_LAYOUT",
    3005: "NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER", 3006: "NOT_SUPPORTED_INCOMPATIBLE_CUDART",
    3007: "NOT_SUPPORTED_ARCH_MISMATCH", 3008: "NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
    3009: "NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE", 3010: "NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
    3011: "NOT_SUPPORTED_PADDING", 3012: "NOT_SUPPORTED_BAD_LAUNCH_PARAM",
    3013: "NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API",
    4000: "INTERNAL_ERROR", 4001: "INTERNAL_ERROR_COMPILATION_FAILED",
    4002: "INTERNAL_ERROR_UNEXPECTED_VALUE", 4003: "INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    4004: "INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", 4005: "INTERNAL_ERROR_BAD_LAUNCH_PARAM",
    4006: "INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
    5000: "EXECUTION_FAILED", 5001: "EXECUTION_FAILED_CUDA_DRIVER",
    5002: "EXECUTION_FAILED_CUBLAS", 5003: "EXECUTION_FAILED_CUDART",
    5004: "EXECUTION_FAILED_CURAND",
}


def status_name(code: int) -> str:
    name = STATUS_NAMES.get(code) or STATUS_NAMES.get(code // 1000 * 1000, "UNKNOWN")
    return f"CUDNN_STATUS_{name}"


_STATUS_CODES = {f"CUDNN_STATUS_{name}": code for code, name in STATUS_NAMES.items()}


def status_code(name: str) -> int | None:
    """The number of a status named as status_name() names it (an unknown refinement of a known
    status, from a newer cuDNN, as that status), or None."""
    known = [n for n in _STATUS_CODES if name.startswith(n)]
    return _STATUS_CODES[max(known, key=len)] if known else None


def is_not_supported(code: int) -> bool:
    return code // 1000 == 3


def is_execution_failed(code: int) -> bool:
    """EXECUTION_FAILED and its refinements (_CUDART, _CUDA_DRIVER, ...): a kernel faulted on
    the GPU, which leaves the process's CUDA context unusable."""
    return code // 1000 == 5


class CudnnUnavailable(Exception):
    """cuDNN cannot be loaded here; the message says why."""


class CudnnError(Exception):
    """A cuDNN call returned a status other than SUCCESS."""

    def __init__(self, code: int, call: str, detail: str = ""):
        self.code = code
        self.context_lost = is_execution_failed(code)
        text = f"{status_name(code)} ({code}) from {call}"
        super().__init__(f"{text}: {detail}" if detail else text)


class AlgoPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: identical 48-byte layouts."""
    _fields_ = [("algo", c_int), ("status", c_int), ("time", c_float), ("memory", c_size_t),
                ("determinism", c_int), ("mathType", c_int), ("reserved", c_int * 3)]


# ---- loading ------------------------------------------------------------------------------------
def _candidate_paths() -> list[str]:
    """The nvidia-cudnn wheel's library first, then whatever the system loader finds."""
    paths = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        paths += sorted(glob.glob(os.path.join(root, "cudnn", "lib", "libcudnn.so.9*")))
    return paths + ["libcudnn.so.9"]


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    errors = []
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError as err:
            errors.append(f"{path}: {err}")
            continue
        _declare(lib)
        version = lib.cudnnGetVersion()
        if version < 90000:
            raise CudnnUnavailable(f"{path} is cuDNN {version}; convbench needs cuDNN 9")
        return lib
    raise CudnnUnavailable("libcudnn.so.9 not found (pip install 'convbench[gpu]' installs "
                           "nvidia-cudnn-cu13); tried " + "; ".join(errors))


def library_version() -> str:
    v = library().cudnnGetVersion()
    return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"


def last_error() -> str:
    buffer = ctypes.create_string_buffer(1024)
    library().cudnnGetLastErrorString(buffer, c_size_t(len(buffer)))
    return buffer.value.decode(errors="replace").strip()


def check(code: int, call: str) -> None:
    if code != 0:
        raise CudnnError(code, call, last_error())


def _declare(lib: ctypes.CDLL) -> None:
    """Argument types: without them ctypes passes 64-bit sizes and pointers wrongly."""
    p, i, s = c_void_p, c_int, c_size_t
    ip = POINTER(c_int)
    signatures = {
        "cudnnGetVersion": ([], c_size_t),
        "cudnnGetLastErrorString": ([ctypes.c_char_p, s], None),
        "cudnnCreate": ([POINTER(c_void_p)], i), "cudnnDestroy": ([p], i),
        "cudnnSetStream": ([p, p], i),
        "cudnnCreateTensorDescriptor": ([POINTER(c_void_p)], i),
        "cudnnDestroyTensorDescriptor": ([p], i),
        "cudnnSetTensor4dDescriptor": ([p, i, i, i, i, i, i], i),
        "cudnnSetTensorNdDescriptor": ([p, i, i, ip, ip], i),
        "cudnnCreateFilterDescriptor": ([POINTER(c_void_p)], i),
        "cudnnDestroyFilterDescriptor": ([p], i),
        "cudnnSetFilter4dDescriptor": ([p, i, i, i, i, i, i], i),
        "cudnnSetFilterNdDescriptor": ([p, i, i, i, ip], i),
        "cudnnCreateConvolutionDescriptor": ([POINTER(c_void_p)], i),
        "cudnnDestroyConvolutionDescriptor": ([p], i),
        "cudnnSetConvolution2dDescriptor": ([p, i, i, i, i, i, i, i, i], i),
        "cudnnSetConvolutionNdDescriptor": ([p, i, ip, ip, ip, i, i], i),
        "cudnnSetConvolutionMathType": ([p, i], i),
        "cudnnSetConvolutionGroupCount": ([p, i], i),
        "cudnnGetConvolution2dForwardOutputDim": ([p, p, p, ip, ip, ip, ip], i),
        "cudnnGetConvolutionForwardWorkspaceSize": ([p, p, p, p, p, i, POINTER(s)], i),
        "cudnnGetConvolutionBackwardDataWorkspaceSize": ([p, p, p, p, p, i, POINTER(s)], i),
        "cudnnGetConvolutionBackwardFilterWorkspaceSize": ([p, p, p, p, p, i, POINTER(s)], i),
        "cudnnConvolutionForward": ([p, p, p, p, p, p, p, i, p, s, p, p, p], i),
        "cudnnConvolutionBackwardData": ([p, p, p, p, p, p, p, i, p, s, p, p, p], i),
        "cudnnConvolutionBackwardFilter": ([p, p, p, p, p, p, p, i, p, s, p, p, p], i),
        "cudnnGetConvolutionForwardAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7": ([p, p, p, p, p, i, ip, p], i),
        "cudnnFindConvolutionForwardAlgorithmEx": ([p, p, p, p, p, p, p, p, i, ip, p, p, s], i),
        "cudnnFindConvolutionBackwardDataAlgorithmEx":
            ([p, p, p, p, p, p, p, p, i, ip, p, p, s], i),
        "cudnnFindConvolutionBackwardFilterAlgorithmEx":
            ([p, p, p, p, p, p, p, p, i, ip, p, p, s], i),
    }
    for name, (argtypes, restype) in signatures.items():
        function = getattr(lib, name)
        function.argtypes = argtypes
        function.restype = restype


# ---- handle and descriptors ---------------------------------------------------------------------
class Handle:
    def __init__(self, stream_ptr: int):
        self.ptr = c_void_p()
        check(library().cudnnCreate(byref(self.ptr)), "cudnnCreate")
        check(library().cudnnSetStream(self.ptr, c_void_p(stream_ptr)), "cudnnSetStream")

    def close(self) -> None:
        if self.ptr:
            library().cudnnDestroy(self.ptr)
            self.ptr = c_void_p()


class TensorDesc:
    def __init__(self, fmt: int, dtype: int, n: int, c: int, h: int, w: int):
        self.ptr = c_void_p()
        lib = library()
        check(lib.cudnnCreateTensorDescriptor(byref(self.ptr)), "cudnnCreateTensorDescriptor")
        # Trap: the tensor call takes (format, dataType); the filter call takes the reverse.
        check(lib.cudnnSetTensor4dDescriptor(self.ptr, fmt, dtype, n, c, h, w),
              "cudnnSetTensor4dDescriptor")

    def close(self) -> None:
        library().cudnnDestroyTensorDescriptor(self.ptr)


def _ints(values) -> ctypes.Array:
    """A C int[] of `values` (the Nd calls take arrays, one entry per dimension)."""
    return (c_int * len(values))(*values)


class TensorNdDesc(TensorDesc):
    """A tensor of any rank (5-D for 3-D convolution) with explicit element strides; the Nd call
    has no format argument, the strides are the layout."""

    def __init__(self, dtype: int, dims: tuple[int, ...], strides: tuple[int, ...]):
        self.ptr = c_void_p()
        lib = library()
        check(lib.cudnnCreateTensorDescriptor(byref(self.ptr)), "cudnnCreateTensorDescriptor")
        check(lib.cudnnSetTensorNdDescriptor(self.ptr, dtype, len(dims), _ints(dims),
                                             _ints(strides)), "cudnnSetTensorNdDescriptor")


class FilterDesc:
    def __init__(self, dtype: int, fmt: int, k: int, c: int, r: int, s: int):
        self.ptr = c_void_p()
        lib = library()
        check(lib.cudnnCreateFilterDescriptor(byref(self.ptr)), "cudnnCreateFilterDescriptor")
        check(lib.cudnnSetFilter4dDescriptor(self.ptr, dtype, fmt, k, c, r, s),
              "cudnnSetFilter4dDescriptor")

    def close(self) -> None:
        library().cudnnDestroyFilterDescriptor(self.ptr)


class FilterNdDesc(FilterDesc):
    """A filter of any rank; `dims` in logical K, C, spatial... order whatever the format (NHWC:
    stored K, spatial..., C)."""

    def __init__(self, dtype: int, fmt: int, dims: tuple[int, ...]):
        self.ptr = c_void_p()
        lib = library()
        check(lib.cudnnCreateFilterDescriptor(byref(self.ptr)), "cudnnCreateFilterDescriptor")
        check(lib.cudnnSetFilterNdDescriptor(self.ptr, dtype, fmt, len(dims), _ints(dims)),
              "cudnnSetFilterNdDescriptor")


class ConvDesc:
    def __init__(self, pad: tuple[int, ...], stride: tuple[int, ...],
                 dilation: tuple[int, ...], compute: int, groups: int, math: int):
        self.ptr = c_void_p()
        lib = library()
        check(lib.cudnnCreateConvolutionDescriptor(byref(self.ptr)),
              "cudnnCreateConvolutionDescriptor")
        self._set_geometry(lib, pad, stride, dilation, compute)
        check(lib.cudnnSetConvolutionGroupCount(self.ptr, groups), "cudnnSetConvolutionGroupCount")
        check(lib.cudnnSetConvolutionMathType(self.ptr, math), "cudnnSetConvolutionMathType")

    def _set_geometry(self, lib, pad, stride, dilation, compute) -> None:
        check(lib.cudnnSetConvolution2dDescriptor(self.ptr, pad[0], pad[1], stride[0], stride[1],
                                                  dilation[0], dilation[1], CROSS_CORRELATION,
                                                  compute), "cudnnSetConvolution2dDescriptor")

    def close(self) -> None:
        library().cudnnDestroyConvolutionDescriptor(self.ptr)


class ConvNdDesc(ConvDesc):
    """A convolution over any number of spatial axes (3 for 3-D): one pad, stride and dilation
    per axis, outermost first; the pad is both sides' (the legacy API has no asymmetric pad)."""

    def _set_geometry(self, lib, pad, stride, dilation, compute) -> None:
        check(lib.cudnnSetConvolutionNdDescriptor(self.ptr, len(pad), _ints(pad), _ints(stride),
                                                  _ints(dilation), CROSS_CORRELATION, compute),
              "cudnnSetConvolutionNdDescriptor")


# ---- calls by direction -------------------------------------------------------------------------
# Argument order differs per direction (fwd: x, w -> y; bwd_data: w, dy -> dx; bwd_filter:
# x, dy -> dw); each helper takes the descriptors in the order the C function wants them.
_WORKSPACE_CALL = {"fwd": "cudnnGetConvolutionForwardWorkspaceSize",
                   "bwd_data": "cudnnGetConvolutionBackwardDataWorkspaceSize",
                   "bwd_filter": "cudnnGetConvolutionBackwardFilterWorkspaceSize"}
_RUN_CALL = {"fwd": "cudnnConvolutionForward", "bwd_data": "cudnnConvolutionBackwardData",
             "bwd_filter": "cudnnConvolutionBackwardFilter"}
_HEURISTIC_CALL = {"fwd": "cudnnGetConvolutionForwardAlgorithm_v7",
                   "bwd_data": "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                   "bwd_filter": "cudnnGetConvolutionBackwardFilterAlgorithm_v7"}
_FIND_CALL = {"fwd": "cudnnFindConvolutionForwardAlgorithmEx",
              "bwd_data": "cudnnFindConvolutionBackwardDataAlgorithmEx",
              "bwd_filter": "cudnnFindConvolutionBackwardFilterAlgorithmEx"}


def workspace_size(direction: str, handle: Handle, in_a, in_b, conv: ConvDesc, out,
                   algo: int) -> int:
    """Raises CudnnError (e.g. NOT_SUPPORTED) when the algorithm cannot run this problem."""
    size = c_size_t()
    check(getattr(library(), _WORKSPACE_CALL[direction])(
        handle.ptr, in_a.ptr, in_b.ptr, conv.ptr, out.ptr, algo, byref(size)),
        _WORKSPACE_CALL[direction])
    return size.value


def run_function(direction: str):
    """The raw C function, for the hot launch path (status is checked by the caller)."""
    return getattr(library(), _RUN_CALL[direction])


def heuristic(direction: str, handle: Handle, in_a, in_b, conv: ConvDesc, out) -> list[AlgoPerf]:
    count = 2 * len(ALGOS[direction])   # one algorithm may come back under two math types
    results = (AlgoPerf * count)()
    returned = c_int()
    check(getattr(library(), _HEURISTIC_CALL[direction])(
        handle.ptr, in_a.ptr, in_b.ptr, conv.ptr, out.ptr, count, byref(returned), results),
        _HEURISTIC_CALL[direction])
    return list(results[:returned.value])


def find(direction: str, handle: Handle, in_a, a_ptr, in_b, b_ptr, conv: ConvDesc, out,
         out_ptr, workspace_ptr: int, workspace_bytes: int) -> list[AlgoPerf]:
    count = 2 * len(ALGOS[direction])
    results = (AlgoPerf * count)()
    returned = c_int()
    check(getattr(library(), _FIND_CALL[direction])(
        handle.ptr, in_a.ptr, c_void_p(a_ptr), in_b.ptr, c_void_p(b_ptr), conv.ptr, out.ptr,
        c_void_p(out_ptr), count, byref(returned), results, c_void_p(workspace_ptr),
        workspace_bytes), _FIND_CALL[direction])
    return list(results[:returned.value])
