"""im2col's col2im input gradient (algorithm.py's Im2col.bwd_data says where it runs: K >= 2C, or,
NumPy's, 8C at stride 1 with shifted correlations): dcol = W^T dy, the column matrix's gradient,
then each of its C*R*S rows added into padded dx at its tap's offset.

Two ways, the same sums:
- compiled (numba, col2im_compiled.py): the images shared among the launch's threads
  (workers.run_chunks, BLAS at one thread each), each image in blocks of about BLOCK_COLUMNS
  GEMM columns (whole output rows): dcol = W^T dy with dy read in place, then the block's
  scatter-add into dx, whose columns are kept split by stride phase so that each tap adds a
  contiguous run (with strided stores the scatter took 10.4 ms of a 38 ms train_02 launch on
  one thread, split 2.6). NumPy's adds below (one strided read-modify-write pass of dx per tap,
  on one core, blocks too large for L2) had DeepBench train_02's input gradient (100 taps,
  stride 2) at 3.97x its GEMM floor on two threads, 2.33x on one
  (evidence/logs/cpu_compare-issue42-targets-...). Sharing the images among threads ran as fast
  as each block's GEMM on all of BLAS's threads followed by the group's scatters at once, and
  is simpler.
- NumPy, where numba is missing or fails to compile, or with more groups than per-group BLAS
  calls pay for (blas.MAX_GROUP_CALLS): per block of whole images, dy copied into GEMM order,
  one batched GEMM, then one strided add per tap.
"""
from __future__ import annotations

import numpy as np

from harness.backends.cpu import compiled
from harness.backends.cpu.blas import MAX_GROUP_CALLS, gemm_or_numpy
from harness.backends.cpu.common import (CpuPrepared, allocate, interior, split, tap_cols,
                                         tap_rows, workspace_of)
from harness.backends.cpu.workers import run_chunks
from harness.problem import ConvProblem
from harness.sweep import Point
from harness.threads import cores_for

# The compiled path's GEMM columns a block: the GEMMs (C*R*S = 25-100 rows, K = 32-64 deep) ran
# slower in narrower blocks (DeepBench train_02, one thread: 2,400 columns 22-25 ms, 10,000
# 18-21); 8,192 - 32,768 ran alike within the 2-core AMD EPYC VM's noise on train_02, train_55
# and VGG-16 conv1_1, one thread and two (evidence/logs/im2col-col2im-...).
BLOCK_COLUMNS = 16384
KERNELS = "harness.backends.cpu.im2col.col2im_compiled"
# ... but no more than this many bytes of dcol a block, where its C*R*S rows are many: DeepBench
# train_06's whole image (1,600 rows x 6,308 columns, 40 MB) went to memory between the GEMM
# and the scatter; in blocks of 8 MiB its input gradient ran 0.79 / 0.78 of the phase
# correlations (one thread / all cores), VGG-16 conv3_1 and conv4_1 1.00-1.02, DeepBench
# train_61 0.96-0.98 of whole images
# (evidence/logs/im2col-col2im-blocks-issue42-cpu-amd-epyc-2026-11-28.txt).
DCOL_BYTES = 8 << 20
DCOL_MIN_COLUMNS = 1024     # and GEMMs no narrower than this
# Compiled, col2im beats the phase correlations at stride > 1 whatever K / C, from output planes
# of this many pixels up (ResNet-50 v1.5's stride-2 3x3 layers, one thread / all cores: 28x28
# 0.93 / 0.66, 14x14 1.00 / 0.74, but 7x7 1.29 / 0.75; same log).
STRIDED_MIN_PIXELS = 196


def numpy_reason(p: ConvProblem) -> str | None:
    """Why `p`'s col2im would be NumPy's, or None where the compiled one runs."""
    return (f"{p.groups} groups: one batched GEMM beats per-group BLAS calls"
            if p.groups > MAX_GROUP_CALLS else compiled.unavailable_reason())


def compiled_runs(p: ConvProblem) -> bool:
    return numpy_reason(p) is None


def pays_strided(p: ConvProblem) -> bool:
    """Whether col2im beats the phase correlations of a strided `p` whatever K / C
    (STRIDED_MIN_PIXELS)."""
    strided = any(a.stride > 1 for a in p.spatial)
    plane = int(np.prod([a.out for a in p.spatial]))
    return strided and plane >= STRIDED_MIN_PIXELS and compiled_runs(p)


def col2im(point: Point, p: ConvProblem, w: np.ndarray, dy: np.ndarray, dtype: type,
           block_bytes: int) -> CpuPrepared:
    """The compiled col2im where it runs and builds, else NumPy's (`block_bytes`: its blocks of
    whole images); the row says which (`cpu_kernel`)."""
    reason = numpy_reason(p)
    if reason is None:
        prepared = _compiled(point, p, w, dy, dtype)
        if isinstance(prepared, CpuPrepared):
            return prepared
        reason = prepared
    prepared = _numpy(point, p, w, dy, dtype, block_bytes)
    prepared.extras["cpu_kernel"] = f"numpy: {reason}"
    return prepared


def _compiled(point: Point, p: ConvProblem, w: np.ndarray, dy: np.ndarray,
              dtype: type) -> CpuPrepared | str:
    """The compiled col2im (module docstring), compiled here (its cost is the point's setup);
    the reason NumPy's runs instead where numba fails to load or compile."""
    kernels = compiled.kernels(KERNELS)
    if kernels is None:
        return str(compiled.unavailable_reason())
    g, kg, cg = p.groups, p.filters_per_group, p.channels_per_group
    taps, q = p.kernel_h * p.kernel_w, p.out_w
    crs = p.in_channels * taps
    columns = min(BLOCK_COLUMNS, max(DCOL_MIN_COLUMNS,
                                     DCOL_BYTES // (crs * np.dtype(dtype).itemsize)))
    rows = max(1, min(p.out_h, -(-columns // q)))
    blocks = split(p.out_h, rows)
    slots = cores_for(point.threads)
    wmat_t = np.ascontiguousarray(w.reshape(g, kg, cg * taps).swapaxes(1, 2))
    dx = np.empty(p.input_shape, dtype)
    sw = p.stride_w
    buf = allocate(point, dtype, {"dxph": (p.batch, p.in_channels, p.padded_h, sw,
                                           -(-p.padded_w // sw)),
                                  **{f"dcol{s}": (crs * rows * q,) for s in range(slots)}})
    rows_in = interior(p)[0]
    # dx's columns of each phase b of the stride: from `start` on, every sw-th, at [b, first:]
    phases = [(start, (start + p.pad_left) % sw, (start + p.pad_left) // sw,
               len(range(start, p.in_w, sw))) for start in range(min(sw, p.in_w))]
    gemm = gemm_or_numpy(dtype)

    def image(slot: int, n: int) -> None:
        """Image n into dx: per block, dcol = W^T dy (dy read in place), then its taps added."""
        target = buf["dxph"][n]
        target.fill(0)
        for first, count in blocks:
            dcol = buf[f"dcol{slot}"][:crs * count * q].reshape(g, cg * taps, count * q)
            dyb = dy[n, :, first:first + count].reshape(g, kg, count * q)
            for j in range(g):
                gemm(wmat_t[j], dyb[j], dcol[j], False)
            kernels.scatter_add(dcol.reshape(crs, -1), target, first, count, p.kernel_h,
                                p.kernel_w, p.stride_h, p.dilation_h, p.dilation_w)
        for start, phase, begin, width in phases:
            np.copyto(dx[n, :, :, start::sw], target[:, rows_in, phase, begin:begin + width])

    images = list(range(p.batch))

    def kernel() -> None:
        run_chunks(images, image, slots)
    try:
        kernel()                    # compiles (or loads the cache) for this dtype
    except Exception as error:      # numba's typing and lowering errors have no common base
        return compiled.failed(error)
    prepared = CpuPrepared(dx, kernel, workspace_of(buf))
    prepared.extras["cpu_kernel"] = compiled.label()
    return prepared


def _numpy(point: Point, p: ConvProblem, w: np.ndarray, dy: np.ndarray, dtype: type,
           block_bytes: int) -> CpuPrepared:
    """dcol = W^T dy per block of whole images, then one strided add per tap into padded dx."""
    g, kg = p.groups, p.filters_per_group
    crs = p.in_channels * p.kernel_h * p.kernel_w
    per_image = crs * p.out_h * p.out_w * np.dtype(dtype).itemsize
    images = split(p.batch, max(1, block_bytes // per_image))
    length = max(count for _, count in images) * p.out_h * p.out_w
    wmat_t = w.reshape(g, kg, crs // g).swapaxes(1, 2)
    dx = np.empty(p.input_shape, dtype)
    buf = allocate(point, dtype, {
        "dxpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
        "dcol": (crs * length,), "dy": (p.out_channels * length,)})
    dxpad, dcol_flat, dy_flat = buf["dxpad"], buf["dcol"], buf["dy"]
    rows_in, cols_in = interior(p)

    def kernel() -> None:
        dxpad.fill(0)
        for n0, ni in images:
            cols = ni * p.out_h * p.out_w
            dyb = dy_flat[:p.out_channels * cols]
            np.copyto(dyb.reshape(p.out_channels, ni, p.out_h, p.out_w),
                      dy[n0:n0 + ni].transpose(1, 0, 2, 3))
            dcol = dcol_flat[:crs * cols]
            np.matmul(wmat_t, dyb.reshape(g, kg, cols), out=dcol.reshape(g, crs // g, cols))
            taps = dcol.reshape(p.in_channels, p.kernel_h, p.kernel_w, ni, p.out_h, p.out_w)
            for r in range(p.kernel_h):
                row_slice = tap_rows(p, r, 0, p.out_h)
                for s in range(p.kernel_w):
                    target = dxpad[n0:n0 + ni, :, row_slice, tap_cols(p, s)]
                    target += taps[:, r, s].transpose(1, 0, 2, 3)
        np.copyto(dx, dxpad[:, :, rows_in, cols_in])

    return CpuPrepared(dx, kernel, workspace_of(buf))
