"""The compiled direct convolution's forward pass (issue 42): numba kernels on NCDHW tensors (a
2-D problem is depth 1), any groups, stride, dilation and asymmetric padding. Imported only
through harness/backends/cpu/compiled.py, which sets numba up first.

The input is first split into stride phases along its rows (`phases`: phase p of a row holds
its columns p, p+s, p+2s, ...), so that each kernel tap reads a contiguous run of one phase:
input column o*s + t*d - p is column o + shift of phase (t*d - p) mod s. Then per output row and
block of four output channels, every tap adds its weight times that run into four accumulator
rows: one load of input feeds four fused multiply-adds, and the innermost loop over output
columns has no bounds test (the range that reads real input is computed per tap) and only
unsigned indices, which numba then vectorizes (a signed index costs a wraparound select per
element, and the loop stays scalar: evidence/studies/numba_direct). fastmath is limited to
`contract` (fused multiply-adds: one rounding where two would be) and `reassoc`.

Threads: the kernels release the GIL (nogil) and take a range of independent jobs, and the
caller runs ranges on convbench's own CPU threads (harness/backends/cpu/workers.py: as many as
the point's --threads lets BLAS use). numba's own thread pools did not fit a benchmark here:
with its `workqueue` layer the dispatching thread competes with the workers (every sample of a
3 ms point waited 24% of its time for a core, so each row was flagged as sharing the CPU), and
with its OpenMP layer OpenBLAS points timed right after ran up to 1.7x slower
(evidence/studies/numba_direct). On one thread, in `convbench run cpu_compare --direction
fwd` on the 2-core AMD EPYC VM (fp32, batch 8; two runs with numba and two with it blocked,
alternating) the kernel ran DeepBench train_02 (1 channel, 20x5, stride 2) in 40-41 ms where
the NumPy direct took 104-108 on two threads, train_55 in 26 against 99-102 and VGG-16 conv1_1
in 47 against 50-52. It is not a peer of oneDNN: PyTorch's conv2d ran those layers in 4.0, 4.5
and 8.5 ms, NumPy's im2col in 9.9, 6.7 and 11.1. With 16 or more input channels per group the
NumPy direct's per-tap BLAS GEMMs run instead (harness/backends/cpu/direct.py).
"""
from __future__ import annotations

import numba
import numpy as np

FLAGS = {"contract", "reassoc"}
BLOCK_K = 4        # output channels sharing each input load


def phase_jobs(x: np.ndarray) -> int:
    """The independent jobs of `phases` (one per image, channel and depth slice)."""
    n_images, channels, depth = x.shape[:3]
    return n_images * channels * depth


def forward_jobs(w: np.ndarray, y: np.ndarray, groups: int) -> int:
    """The independent jobs of `forward` (one per image, group, block of BLOCK_K output
    channels, output depth slice and output row)."""
    blocks = (w.shape[0] // groups + BLOCK_K - 1) // BLOCK_K
    return y.shape[0] * groups * blocks * y.shape[2] * y.shape[3]


@numba.njit(cache=True, nogil=True)
def phases(x, stride_w, out, first, last):
    """out[n, c, d, h, p, j] = x[n, c, d, h, j * stride_w + p], 0 past the row's end, for jobs
    first .. last - 1 (phase_jobs)."""
    n_images, channels, depth, height, width = x.shape
    per = out.shape[5]
    for job in range(first, last):
        n = job // (channels * depth)
        c = (job // depth) % channels
        d = job % depth
        for h in range(height):
            for p in range(stride_w):
                for j in range(per):
                    i = j * stride_w + p
                    out[n, c, d, h, p, j] = x[n, c, d, h, i] if i < width else 0.0


@numba.njit(cache=True, fastmath=FLAGS, nogil=True)
def forward(xp, w, y, stride, dilation, pad, groups, width, first, last):
    """y = conv(x, w) from x's phases `xp` (module docstring); `width` is x's row length; jobs
    first .. last - 1 (forward_jobs), each writing its own output rows."""
    n_images, channels, depth, height, s_w, per = xp.shape
    filters, cg, kd_n, kh_n, kw_n = w.shape
    _, _, out_d, out_h, out_w = y.shape
    xf, wf, yf = xp.ravel(), w.ravel(), y.ravel()
    kg = filters // groups
    blocks = (kg + BLOCK_K - 1) // BLOCK_K
    taps = kd_n * kh_n * kw_n
    plane = out_d * out_h * out_w
    # Accumulators allocated once a call, not once a job: a numba allocation takes the malloc
    # lock, and with one arena (harness/cpu_memory.py) two threads allocating per output row
    # ran DeepBench train_55 at 33 ms in some rounds against 15 ms in others (27 on one thread).
    a0, a1 = np.empty(out_w, y.dtype), np.empty(out_w, y.dtype)
    a2, a3 = np.empty(out_w, y.dtype), np.empty(out_w, y.dtype)
    for job in range(first, last):
        oh = job % out_h
        rest = job // out_h
        od = rest % out_d
        rest //= out_d
        block = rest % blocks
        rest //= blocks
        g = rest % groups
        n = rest // groups
        k0 = g * kg + block * BLOCK_K
        count = min(BLOCK_K, g * kg + kg - k0)
        a0[:] = 0.0
        a1[:] = 0.0
        a2[:] = 0.0
        a3[:] = 0.0
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
                    lo = (-offset + s_w - 1) // s_w if offset < 0 else 0
                    last = width - 1 - offset
                    hi = min(out_w, last // s_w + 1) if last >= 0 else 0
                    if hi <= lo:
                        continue
                    phase = offset % s_w
                    shift = (offset - phase) // s_w
                    tap = (kd * kh_n + kh) * kw_n + kw
                    for c in range(cg):
                        row = (((n * channels + g * cg + c) * depth + i_d) * height + i_h) * s_w
                        base = (row + phase) * per + shift
                        wb = (k0 * cg + c) * taps + tap
                        step = cg * taps
                        w0 = wf[wb]
                        w1 = wf[wb + step] if count > 1 else 0.0
                        w2 = wf[wb + 2 * step] if count > 2 else 0.0
                        w3 = wf[wb + 3 * step] if count > 3 else 0.0
                        for ow in range(lo, hi):
                            o = np.uint64(ow)
                            v = xf[np.uint64(base + ow)]
                            a0[o] += w0 * v
                            a1[o] += w1 * v
                            a2[o] += w2 * v
                            a3[o] += w3 * v
        first = (((n * filters + k0) * out_d + od) * out_h + oh) * out_w
        for b, acc in enumerate((a0, a1, a2, a3)):
            if b < count:
                start = first + b * plane
                for ow in range(out_w):
                    yf[np.uint64(start + ow)] = acc[np.uint64(ow)]


def as_5d(array: np.ndarray, spatial: int) -> np.ndarray:
    """A tensor of a 2-D problem viewed with depth 1; a 3-D one's as it is."""
    return array if spatial == 3 else array[:, :, np.newaxis]
