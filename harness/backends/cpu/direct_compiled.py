"""The compiled direct convolution's forward pass (issue 42): numba kernels on NCDHW tensors (a
2-D problem is depth 1), any groups, stride, dilation and asymmetric padding. Imported only
through harness/backends/cpu/compiled.py, which sets numba up first.

The input is first split into stride phases along its rows (`phases`: phase p of a row holds its
columns p, p+s, p+2s, ... after a zero margin, with zeros after them), so that each kernel tap
reads a contiguous run of one phase: input column o*s + t*d - p is column o + shift of phase
(t*d - p) mod s, and a column of the padding reads a zero of the margin or the tail. Every read
is then in bounds whatever the tap, and no loop tests an edge.

The work is a register-blocked micro-kernel: a tile of TILE_W output columns by BLOCK_K output
channels accumulates in a fixed-size array on the stack (`_stack_tile`) over every (input
channel, tap) of its output row, and is stored once. LLVM keeps that array in vector registers
(16 zmm at fp32) for the whole reduction, so each step is one input load per vector and
BLOCK_K fused multiply-adds with a broadcast weight. The first kernels kept their accumulators
in heap arrays: every step loaded and stored them, and they ran at 15-60 GF/s
(evidence/studies/numba_direct). The tile's shape was chosen by measurement on the 2-core AMD
EPYC VM (znver5, AVX-512; one thread, DeepBench train_02 forward, fp32, batch 8): 32 x 8 was
unrolled into scalar code before LLVM could vectorize it (6.7 GF/s), 256 x 1 reached 29, 128 x 2
57 and 64 x 4 70 GF/s, 60% of the FMA peak that `convbench peaks` measures there (116 GF/s a
core). Weights are packed per launch into (group, block, channel x tap, BLOCK_K) runs, zero past
the last filter, so a block never tests how many filters it has.

Threads: the kernels release the GIL (nogil) and take a range of independent jobs, and the
caller runs ranges on convbench's own CPU threads (harness/backends/cpu/workers.py: as many as
the point's --threads lets BLAS use). numba's own thread pools did not fit a benchmark here:
with its `workqueue` layer the dispatching thread competes with the workers (every sample of a
3 ms point waited 24% of its time for a core, so each row was flagged as sharing the CPU), and
with its OpenMP layer OpenBLAS points timed right after ran up to 1.7x slower
(evidence/studies/numba_direct).
"""
from __future__ import annotations

import numba
import numpy as np

from harness.backends.cpu.common import TILE_W   # four 16-lane vectors at fp32
from harness.backends.cpu.numba_stack import stack_array

FLAGS = {"contract", "reassoc"}
BLOCK_K = 4        # output channels of a tile, each input load feeding all four
TILE = TILE_W * BLOCK_K


# A tile's accumulators: an LLVM alloca (numba_stack.py), which LLVM keeps in registers.
_stack_tile = stack_array(TILE)


def margin_of(pad_w: int, stride_w: int) -> int:
    """Zero columns before each phase's data: the most a tap's column reaches left of it."""
    return -(-pad_w // stride_w)


def phase_length(width: int, out_w: int, kernel_w: int, dilation_w: int, pad_w: int,
                 stride_w: int) -> int:
    """Columns of one phase row: the margin, then room for every tile's widest read."""
    tiles = -(-out_w // TILE_W)
    furthest = ((kernel_w - 1) * dilation_w - pad_w) // stride_w
    return margin_of(pad_w, stride_w) + max(-(-width // stride_w),
                                           tiles * TILE_W + max(furthest, 0))


def packed_shape(w: np.ndarray, groups: int) -> tuple[int, int, int, int]:
    """(group, block of BLOCK_K filters, channel x tap, BLOCK_K): `pack`'s output."""
    filters, cg = w.shape[:2]
    blocks = -(-(filters // groups) // BLOCK_K)
    return groups, blocks, cg * int(np.prod(w.shape[2:])), BLOCK_K


def phase_jobs(x: np.ndarray) -> int:
    """The independent jobs of `phases` (one per image, channel and depth slice)."""
    n_images, channels, depth = x.shape[:3]
    return n_images * channels * depth


def forward_jobs(wp: np.ndarray, y: np.ndarray) -> int:
    """The independent jobs of `forward` (one per image, group, block of BLOCK_K output
    channels, output depth slice and output row); `wp` is the packed weights."""
    groups, blocks = wp.shape[:2]
    return y.shape[0] * groups * blocks * y.shape[2] * y.shape[3]


@numba.njit(cache=True, nogil=True)
def phases(x, stride_w, margin, out, first, last):
    """out[n, c, d, h, p, margin + j] = x[n, c, d, h, j * stride_w + p] for jobs first ..
    last - 1 (phase_jobs); the margin and tail are never written (zero from allocation)."""
    n_images, channels, depth, height, width = x.shape
    for job in range(first, last):
        n = job // (channels * depth)
        c = (job // depth) % channels
        d = job % depth
        for h in range(height):
            for p in range(stride_w):
                for j in range((width - p + stride_w - 1) // stride_w):
                    out[n, c, d, h, p, margin + j] = x[n, c, d, h, j * stride_w + p]


@numba.njit(cache=True, nogil=True)
def pack(w, groups, out):
    """out[g, b, r, k] = w[g * kg + b * BLOCK_K + k, r] (r: channel x tap, flattened); filters
    past the group's last stay zero (from allocation)."""
    filters = w.shape[0]
    kg = filters // groups
    wf = w.reshape(filters, -1)
    for f in range(filters):
        g, local = f // kg, f % kg
        for r in range(wf.shape[1]):
            out[g, local // BLOCK_K, r, local % BLOCK_K] = wf[f, r]


@numba.njit(cache=True, fastmath=FLAGS, nogil=True)
def forward(xp, wp, y, kernel, stride, dilation, pad, margin, xoff, woff, first, last):
    """y = conv(x, w) from x's phases `xp` and the packed weights `wp` (module docstring) for
    jobs first .. last - 1 (forward_jobs), each writing its own output row; `kernel` holds the
    kernel's (depth, height, width), `xoff` and `woff` are this thread's scratch for the row's
    (input, weight) offsets, one per input channel and tap that reads real rows."""
    n_images, channels, depth, height, s_w, per = xp.shape
    groups, blocks, reduction, _ = wp.shape
    filters, out_d, out_h, out_w = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
    kd_n, kh_n, kw_n = kernel[0], kernel[1], kernel[2]
    taps = kd_n * kh_n * kw_n
    cg, kg = channels // groups, filters // groups
    xf, wf, yf = xp.ravel(), wp.ravel(), y.ravel()
    acc = numba.carray(_stack_tile(y), (TILE,))
    for job in range(first, last):
        oh = job % out_h
        rest = job // out_h
        od = rest % out_d
        rest //= out_d
        block = rest % blocks
        rest //= blocks
        g = rest % groups
        n = rest // groups
        reads = 0
        for kd in range(kd_n):
            i_d = od * stride[0] + kd * dilation[0] - pad[0]
            if i_d < 0 or i_d >= depth:
                continue
            for kh in range(kh_n):
                i_h = oh * stride[1] + kh * dilation[1] - pad[1]
                if i_h < 0 or i_h >= height:
                    continue
                for kw in range(kw_n):
                    offset = kw * dilation[2] - pad[2]
                    phase = offset % s_w
                    shift = (offset - phase) // s_w
                    tap = (kd * kh_n + kh) * kw_n + kw
                    for c in range(cg):
                        row = (((n * channels + g * cg + c) * depth + i_d) * height + i_h) * s_w
                        xoff[reads] = (row + phase) * per + margin + shift
                        woff[reads] = ((g * blocks + block) * reduction + c * taps + tap) * BLOCK_K
                        reads += 1
        count = min(BLOCK_K, kg - block * BLOCK_K)
        for t0 in range(0, out_w, TILE_W):
            for i in range(TILE):
                acc[i] = 0.0
            for j in range(reads):
                xb = np.uint64(xoff[j] + t0)
                wb = np.uint64(woff[j])
                for k in range(BLOCK_K):
                    weight = wf[wb + np.uint64(k)]
                    for v in range(TILE_W):
                        acc[k * TILE_W + v] += weight * xf[xb + np.uint64(v)]
            columns = min(TILE_W, out_w - t0)
            for k in range(count):
                start = (((n * filters + g * kg + block * BLOCK_K + k) * out_d + od) * out_h
                         + oh) * out_w + t0
                for v in range(columns):
                    yf[np.uint64(start + v)] = acc[k * TILE_W + v]


def as_5d(array: np.ndarray, spatial: int) -> np.ndarray:
    """A tensor of a 2-D problem viewed with depth 1; a 3-D one's as it is."""
    return array if spatial == 3 else array[:, :, np.newaxis]
