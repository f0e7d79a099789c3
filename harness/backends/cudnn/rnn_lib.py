"""ctypes binding to cuDNN 9's RNN API (the v8-style calls, the only ones cuDNN 9 keeps; facts:
shared/reference/rnn.md 1.1): the RNN, RNN-data and dropout descriptors, the weight, work and
reserve space queries, the weight-matrix addresses, and the forward and two backward calls.
cudnn-frontend has no recurrent node, so this is the one way to reach cuDNN's RNN algorithms.
Nothing here times or verifies anything; harness/backends/cudnn/rnn.py uses it.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_float, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from functools import lru_cache

from harness.backends.cudnn import lib

# ---- enums (cudnn_adv.h, cuDNN 9) ---------------------------------------------------------------
ALGORITHMS = {"standard": 0, "persist_static": 1, "persist_dynamic": 2,
              "persist_static_small_h": 3}
CELL_MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
NO_BIAS, DOUBLE_BIAS = 0, 2
UNIDIRECTIONAL, BIDIRECTIONAL = 0, 1
LINEAR_INPUT = 0
SEQ_MAJOR_UNPACKED = 0
PADDED_IO_ENABLED = 1
INFERENCE, TRAINING = 0, 1
# cudnnRNNBackwardWeights_v8 accumulates into dweightSpace: it takes only ADD (SET, 1, is
# NOT_SUPPORTED on cuDNN 9.19, an H100), so the gradient space is zeroed before each call
WGRAD_ADD = 0
# linLayerID of an LSTM's recurrent projection (cuDNN and PyTorch's add_projection_weights)
PROJECTION_ID = 8


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """libcudnn.so.9 (lib.library) with the RNN calls' argument types declared."""
    cudnn = lib.library()
    p, i, s = c_void_p, c_int, c_size_t
    pp, sp, ip = POINTER(c_void_p), POINTER(c_size_t), POINTER(c_int)
    signatures = {
        "cudnnCreateRNNDescriptor": [pp], "cudnnDestroyRNNDescriptor": [p],
        "cudnnSetRNNDescriptor_v8": [p, i, i, i, i, i, i, i, i, c_int32, c_int32, c_int32,
                                     c_int32, p, c_uint32],
        "cudnnBuildRNNDynamic": [p, p, i],
        "cudnnCreateDropoutDescriptor": [pp], "cudnnDestroyDropoutDescriptor": [p],
        "cudnnSetDropoutDescriptor": [p, p, c_float, p, s, c_uint64],
        "cudnnCreateRNNDataDescriptor": [pp], "cudnnDestroyRNNDataDescriptor": [p],
        "cudnnSetRNNDataDescriptor": [p, i, i, i, i, i, ip, p],
        "cudnnGetRNNWeightSpaceSize": [p, p, sp],
        "cudnnGetRNNTempSpaceSizes": [p, p, i, p, sp, sp],
        "cudnnGetRNNWeightParams": [p, p, c_int32, s, p, c_int32, p, pp, p, pp],
        "cudnnGetTensorNdDescriptor": [p, i, ip, ip, ip, ip],
        "cudnnRNNForward": [p, p, i, p, p, p, p, p, p, p, p, p, p, p, s, p, s, p, s, p],
        "cudnnRNNBackwardData_v8": [p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, s, p, s, p,
                                    s, p],
        "cudnnRNNBackwardWeights_v8": [p, p, i, p, p, p, p, p, p, p, s, p, s, p, s, p],
    }
    for name, argtypes in signatures.items():
        function = getattr(cudnn, name)
        function.argtypes = argtypes
        function.restype = c_int
    return cudnn


def call(name: str, *args) -> None:
    """Calls cuDNN's `name`; a status other than SUCCESS raises lib.CudnnError naming it."""
    lib.check(getattr(library(), name)(*args), name)


class _Owned:
    """A cuDNN descriptor this process created and destroys once."""
    _destroy = ""

    def __init__(self, create: str):
        self.ptr = c_void_p()
        call(create, byref(self.ptr))

    def close(self) -> None:
        if self.ptr:
            getattr(library(), self._destroy)(self.ptr)
            self.ptr = c_void_p()

    def __del__(self) -> None:
        self.close()


class DropoutDesc(_Owned):
    """No dropout (a rate of 0 needs no state buffer): what a benchmarked layer runs."""
    _destroy = "cudnnDestroyDropoutDescriptor"

    def __init__(self, handle: lib.Handle):
        super().__init__("cudnnCreateDropoutDescriptor")
        call("cudnnSetDropoutDescriptor", self.ptr, handle.ptr, 0.0, None, 0, 0)


class RnnDesc(_Owned):
    _destroy = "cudnnDestroyRNNDescriptor"

    def __init__(self, algo: int, cell: int, bias: int, direction: int, data_type: int,
                 math_precision: int, math_type: int, sizes: tuple[int, int, int, int],
                 dropout: DropoutDesc, aux_flags: int):
        """`sizes`: input, hidden, projection (the hidden size where there is none), layers."""
        super().__init__("cudnnCreateRNNDescriptor")
        self._dropout = dropout            # cuDNN keeps its pointer: it must outlive this
        call("cudnnSetRNNDescriptor_v8", self.ptr, algo, cell, bias, direction, LINEAR_INPUT,
             data_type, math_precision, math_type, *sizes, dropout.ptr, aux_flags)


class RnnDataDesc(_Owned):
    """A sequence batch in SEQ_MAJOR_UNPACKED order (seq_len, batch, vector): every sequence's
    length given, its padding written as zero in an output."""
    _destroy = "cudnnDestroyRNNDataDescriptor"

    def __init__(self, data_type: int, seq_len: int, batch: int, vector: int,
                 lengths: list[int]):
        super().__init__("cudnnCreateRNNDataDescriptor")
        self._lengths = (c_int * batch)(*lengths)
        self._fill = ctypes.c_double(0.0)     # all-zero bytes: zero in every data type
        call("cudnnSetRNNDataDescriptor", self.ptr, data_type, SEQ_MAJOR_UNPACKED, seq_len,
             batch, vector, self._lengths, ctypes.cast(byref(self._fill), c_void_p))


class StateDesc(_Owned):
    """A packed 3-D state tensor (layers x directions, batch, size)."""
    _destroy = "cudnnDestroyTensorDescriptor"

    def __init__(self, data_type: int, dims: tuple[int, int, int]):
        super().__init__("cudnnCreateTensorDescriptor")
        strides = (dims[1] * dims[2], dims[2], 1)
        call("cudnnSetTensorNdDescriptor", self.ptr, data_type, 3, (c_int * 3)(*dims),
             (c_int * 3)(*strides))


class BlankDesc(_Owned):
    """A tensor descriptor for cuDNN to fill in (a weight matrix's or bias's shape)."""
    _destroy = "cudnnDestroyTensorDescriptor"

    def __init__(self) -> None:
        super().__init__("cudnnCreateTensorDescriptor")

    def elements(self) -> int:
        """How many elements the descriptor cuDNN filled in spans (0 where it left it empty)."""
        dims, strides = (c_int * 8)(), (c_int * 8)()
        data_type, rank = c_int(), c_int()
        call("cudnnGetTensorNdDescriptor", self.ptr, 8, byref(data_type), byref(rank), dims,
             strides)
        count = 1
        for k in range(rank.value):
            count *= dims[k]
        return count if rank.value else 0


def weight_space_size(handle: lib.Handle, rnn: RnnDesc) -> int:
    size = c_size_t()
    call("cudnnGetRNNWeightSpaceSize", handle.ptr, rnn.ptr, byref(size))
    return size.value


def temp_space_sizes(handle: lib.Handle, rnn: RnnDesc, mode: int,
                     x: RnnDataDesc) -> tuple[int, int]:
    """(workspace, reserve space) bytes; NOT_SUPPORTED here is how cuDNN refuses an algorithm
    for a shape (shared/reference/rnn.md 1.3)."""
    work, reserve = c_size_t(), c_size_t()
    call("cudnnGetRNNTempSpaceSizes", handle.ptr, rnn.ptr, mode, x.ptr, byref(work),
         byref(reserve))
    return work.value, reserve.value


def weight_params(handle: lib.Handle, rnn: RnnDesc, pseudo_layer: int, space: int,
                  space_bytes: int, lin_id: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((address, elements) of the matrix, (address, elements) of its bias) of one linear layer
    in a weight space; an address of 0 where the layer has none."""
    matrix, bias = BlankDesc(), BlankDesc()
    m_addr, b_addr = c_void_p(), c_void_p()
    call("cudnnGetRNNWeightParams", handle.ptr, rnn.ptr, pseudo_layer, space_bytes,
         c_void_p(space), lin_id, matrix.ptr, byref(m_addr), bias.ptr, byref(b_addr))
    return ((m_addr.value or 0, matrix.elements() if m_addr.value else 0),
            (b_addr.value or 0, bias.elements() if b_addr.value else 0))
