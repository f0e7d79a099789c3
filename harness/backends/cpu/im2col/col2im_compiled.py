"""col2im's scatter-add as a numba kernel (issue 42; harness/backends/cpu/im2col/col2im.py says
when it runs). Imported only through harness/backends/cpu/compiled.py, which finds numba first.

One call folds a block of output rows of one image's column-matrix gradient into that image's
padded dx: dxpad[c, oh*sh + r*dh, s*dw + ow*sw] += dcol[(c, r, s), (oh - first) * Q + ow].
dx's columns are kept split by phase of the column stride (column j*sw + b at [b, j]), so that
each tap adds a contiguous run, which LLVM vectorizes (a stride-2 store does not). Output row by
output row, so the R dx rows an output row touches stay in L1 while its C*R*S taps add into
them; the block's dcol, just written by its GEMM, is read once from L2.
"""
from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def scatter_add(dcol, dxph, first, rows, kernel_h, kernel_w, stride_h, dilation_h, dilation_w):
    """dxph (C, padded H, stride_w, padded W / stride_w: padded dx, its columns split by phase of
    the column stride) += the block's dcol (C*R*S, rows*Q), whose column (oh - first)*Q + ow
    belongs to output row oh (module docstring)."""
    channels, _, stride_w, _ = dxph.shape
    out_w = dcol.shape[1] // rows
    for c in range(channels):
        for i in range(rows):
            top = (first + i) * stride_h
            for r in range(kernel_h):
                for s in range(kernel_w):
                    phase, shift = (s * dilation_w) % stride_w, (s * dilation_w) // stride_w
                    target = dxph[c, top + r * dilation_h, phase, shift:shift + out_w]
                    source = dcol[(c * kernel_h + r) * kernel_w + s, i * out_w:(i + 1) * out_w]
                    for ow in range(out_w):
                        target[ow] += source[ow]
