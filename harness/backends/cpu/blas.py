"""An accumulating GEMM (C += A B) from the BLAS NumPy itself calls, for im2col's shifted GEMMs.

np.matmul always overwrites its output (BLAS beta = 0), so a sum of GEMMs costs one extra pass
over the output per term; BLAS's own beta = 1 adds inside the GEMM kernel for free. NumPy
wheels (2.x) bundle OpenBLAS as scipy-openblas with 64-bit integers and prefixed symbols
(scipy_cblas_sgemm64_); that library, found where threadpoolctl sees it loaded (so `--threads`
limits it too), is the only one used. Elsewhere (a NumPy linked against MKL, Accelerate or a
system BLAS) `gemm_into` is None and callers keep their np.matmul path.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_SYMBOLS = {np.dtype(np.float32): ("scipy_cblas_sgemm64_", ctypes.c_float),
            np.dtype(np.float64): ("scipy_cblas_dgemm64_", ctypes.c_double)}

GemmInto = Callable[[np.ndarray, np.ndarray, np.ndarray, bool], None]

# A gemm_into call costs ~6 us of Python checks and ctypes before BLAS starts; np.matmul batched
# over groups ~0.3 us a group. Per-group gemm_into loops are taken up to this many groups only:
# with one call per group MobileNet's depthwise layers ran 1.2-9.6x slower than batched
# np.matmul, 8 groups at par (evidence/notes/constants.md#blas-max_group_calls).
MAX_GROUP_CALLS = 8


def _libraries() -> list[str]:
    """Loaded OpenBLAS libraries, NumPy's first (SciPy may bundle an LP64 one beside it)."""
    from threadpoolctl import threadpool_info
    paths = [info["filepath"] for info in threadpool_info()
             if info.get("internal_api") == "openblas"]
    return sorted(paths, key=lambda path: "numpy" not in path)


def symbol(name: str) -> Callable | None:
    """`name` from the first loaded OpenBLAS library that exports it (NumPy's first), or None."""
    for path in _libraries():
        function = getattr(ctypes.CDLL(path), name, None)
        if function is not None:
            return function
    return None


@cache
def _cblas_gemm(dtype: np.dtype):
    name, scalar = _SYMBOLS[dtype]
    function = symbol(name)
    if function is None:
        return None
    index, pointer = ctypes.c_int64, ctypes.c_void_p
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index, scalar,
                         pointer, index, pointer, index, scalar, pointer, index]
    function.restype = None
    return function


def _row_stride(matrix: np.ndarray, dtype: np.dtype) -> int | None:
    """Row stride in elements of a row-major matrix view with unit column stride, or None where
    it is not one (a wrong stride would make BLAS read or write outside the view)."""
    rows, cols = matrix.shape
    row_stride, col_stride = matrix.strides
    if matrix.dtype != dtype or (cols > 1 and col_stride != dtype.itemsize) or (
            rows > 1 and (row_stride % dtype.itemsize or row_stride < cols * dtype.itemsize)):
        return None
    return max(row_stride // dtype.itemsize, cols, 1)


def _leading_dimension(matrix: np.ndarray, dtype: np.dtype) -> int:
    """_row_stride, checked."""
    stride = _row_stride(matrix, dtype)
    if stride is None:
        raise ValueError(f"not a row-major {dtype} matrix view: {matrix.dtype}, "
                         f"strides {matrix.strides}, shape {matrix.shape}")
    return stride


def _operand(matrix: np.ndarray, dtype: np.dtype) -> tuple[int, int]:
    """(transpose flag, leading dimension) of a row-major view, or of the transpose of one (a
    column-major view such as `a.T`, which BLAS reads as it is, uncopied). Tried without an
    exception first: raising and formatting one cost a transposed operand 7 us a call (a
    gemm_into call 12.8 us against 6.2)."""
    stride = _row_stride(matrix, dtype)
    if stride is not None:
        return _NO_TRANS, stride
    return _TRANS, _leading_dimension(matrix.T, dtype)


def gemm_into(dtype: type) -> GemmInto | None:
    """`f(a, b, c, accumulate)`: c <- a @ b, or c += a @ b when accumulate; c a row-major view
    (any row stride, unit column stride) written in place; a and b such views or transposes of
    them. None where NumPy's BLAS is not the bundled OpenBLAS."""
    dt = np.dtype(dtype)
    function = _cblas_gemm(dt)
    if function is None:
        return None

    def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, accumulate: bool) -> None:
        (m, k), (k2, n) = a.shape, b.shape
        if c.shape != (m, n) or k2 != k or not c.flags.writeable:
            raise ValueError(f"GEMM shapes {a.shape} @ {b.shape} -> {c.shape}")
        (ta, lda), (tb, ldb) = _operand(a, dt), _operand(b, dt)
        ldc = _leading_dimension(c, dt)
        function(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a.ctypes.data, lda,
                 b.ctypes.data, ldb, 1.0 if accumulate else 0.0, c.ctypes.data, ldc)

    return gemm


def numpy_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, accumulate: bool) -> None:
    """gemm_into's contract through np.matmul, where NumPy's BLAS is not the bundled OpenBLAS:
    correct, at the cost of a product buffer (and a copy where c is a strided view)."""
    if accumulate:
        c += a @ b
    else:
        np.matmul(a, b, out=c)


def gemm_or_numpy(dtype: type) -> GemmInto:
    """gemm_into(dtype), or numpy_gemm where BLAS cannot be called directly."""
    return gemm_into(dtype) or numpy_gemm
