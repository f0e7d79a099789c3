"""What both FFT paths (whole-image in algorithm.py, tiled in tiled.py) share: transform sizes
and the lowering of every problem to a stride-1, undilated correlation.

- dilation: the kernel is spread out with zeros (R -> (R-1)*dilation+1 taps);
- stride s: polyphase split. y[p] = sum_r x[p*s + r] w[r] equals, with r = i*s + a,
  sum_a sum_i x_a[p + i] w_a[i], where x_a[u] = x[u*s + a] and w_a[i] = w[i*s + a]: a stride-1
  correlation over s*s times as many channels with a kernel s*s times smaller. Strided layers
  (the DeepBench speech layers are stride 2) thus cost no more FFT work than stride-1 ones.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.problem import ConvProblem


def fast_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            size = p35
            while size < n:
                size *= 2
            best = min(best, size)
            p35 *= 3
        p5 *= 5
    return best


@dataclass(frozen=True)
class Lowering:
    """Geometry of the stride-1 correlation a problem is lowered to."""
    sh: int
    sw: int
    hs: int          # phase-input height/width: ceil(padded / stride)
    ws: int
    rs: int          # phase-kernel height/width: ceil(dilated kernel / stride)
    ss: int
    lh: int          # whole-image transform sizes
    lw: int

    @property
    def phases(self) -> int:
        return self.sh * self.sw

    @property
    def f2(self) -> int:
        return self.lw // 2 + 1

    @classmethod
    def of(cls, p: ConvProblem) -> Lowering:
        sh, sw = p.stride_h, p.stride_w
        hs, ws = -(-p.padded_h // sh), -(-p.padded_w // sw)
        return cls(sh, sw, hs, ws, -(-p.effective_kernel_h // sh), -(-p.effective_kernel_w // sw),
                   fast_size(hs), fast_size(ws))


def taps(p: ConvProblem, lo: Lowering) -> list[tuple[int, int, int, int, int, int]]:
    """(r, s, i, a, j, c) per kernel tap (r, s): its dilated, phase-split position is
    r*dilation_h = i*sh + a, s*dilation_w = j*sw + c (phase-kernel tap (i, j) of phase (a, c))."""
    return [(r, s, *divmod(r * p.dilation_h, lo.sh), *divmod(s * p.dilation_w, lo.sw))
            for r in range(p.kernel_h) for s in range(p.kernel_w)]
