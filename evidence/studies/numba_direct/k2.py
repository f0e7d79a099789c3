import numba, numpy as np
FLAGS = {"contract", "reassoc"}

@numba.njit(parallel=True, cache=False, fastmath=FLAGS)
def forward(x, w, y, stride, dilation, pad, groups):
    n_images, channels, depth, height, width = x.shape
    filters, cg, kd_n, kh_n, kw_n = w.shape
    _, _, out_d, out_h, out_w = y.shape
    xf = x.ravel(); wf = w.ravel(); yf = y.ravel()
    kg = filters // groups
    nb = (kg + 3) // 4
    s_w = stride[2]
    taps = kd_n * kh_n * kw_n
    for job in numba.prange(n_images * groups * nb * out_d * out_h):
        oh = job % out_h
        rest = job // out_h
        od = rest % out_d
        rest //= out_d
        block = rest % nb
        rest //= nb
        g = rest % groups
        n = rest // groups
        k0 = g * kg + block * 4
        count = min(4, g * kg + kg - k0)
        a0 = np.zeros(out_w, y.dtype); a1 = np.zeros(out_w, y.dtype)
        a2 = np.zeros(out_w, y.dtype); a3 = np.zeros(out_w, y.dtype)
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
                    lo = 0
                    if offset < 0:
                        lo = (-offset + s_w - 1) // s_w
                    last = width - 1 - offset
                    hi = 0 if last < 0 else min(out_w, last // s_w + 1)
                    if hi <= lo:
                        continue
                    tap = (kd * kh_n + kh) * kw_n + kw
                    for c in range(cg):
                        ci = g * cg + c
                        base = (((n * channels + ci) * depth + i_d) * height + i_h) * width + offset
                        wb = (k0 * cg + c) * taps + tap
                        step = cg * taps
                        w0 = wf[wb]
                        w1 = wf[wb + step] if count > 1 else 0.0
                        w2 = wf[wb + 2 * step] if count > 2 else 0.0
                        w3 = wf[wb + 3 * step] if count > 3 else 0.0
                        for ow in range(lo, hi):
                            v = xf[np.uint64(base + ow * s_w)]
                            a0[ow] += w0 * v
                            a1[ow] += w1 * v
                            a2[ow] += w2 * v
                            a3[ow] += w3 * v
        yb = (((n * filters + k0) * out_d + od) * out_h + oh) * out_w
        plane = out_d * out_h * out_w
        for ow in range(out_w):
            yf[yb + ow] = a0[ow]
        if count > 1:
            for ow in range(out_w):
                yf[yb + plane + ow] = a1[ow]
        if count > 2:
            for ow in range(out_w):
                yf[yb + 2 * plane + ow] = a2[ow]
        if count > 3:
            for ow in range(out_w):
                yf[yb + 3 * plane + ow] = a3[ow]
