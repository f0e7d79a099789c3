"""Winograd's filter gradient (bwd_filter), F(3x3, mxm) on the same interpolation points as the
forward F(mxm, 3x3) of algorithm.py: each m x m dy tile acts as the "filter" correlated with its
input tile, giving a 3x3 contribution; the sum over all tiles is one GEMM per tile position
(transformed dy tiles^T @ transformed input tiles, the tiles being the GEMM's inner dimension).

Chunks of tiles run on the launch's threads as in algorithm.py; each thread sums its chunks'
GEMMs into an accumulator of its own, inside BLAS (beta = 1), and the accumulators are added
once at the end.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from harness.backends.cpu.blas import gemm_into
from harness.backends.cpu.tiles import (Chunk, Tiling, by_group, even_parts, kron, per_slot,
                                        place_tasks, plan, scratch, slot_count, transform_input)
from harness.backends.cpu.workers import run_chunks, run_tasks
from harness.problem import ConvProblem


def correlate_tiles(dy_t: np.ndarray, v: np.ndarray, acc: np.ndarray, groups: int,
                    accumulate: bool) -> None:
    """acc[ab, g] (+)= dy_t[ab, :, g]^T @ v[ab, :, g], the sum over a chunk's tiles (the GEMMs'
    inner dimension). Added inside BLAS (beta = 1) where NumPy's BLAS allows it: an extra pass
    over the accumulator per chunk would cost as much as a narrow chunk's GEMMs. A thread's
    first chunk is one batched np.matmul: a gemm_into call per GEMM costs 6-13 us of Python
    (res2a F4, 36 GEMMs (64 x 784) @ (784 x 64) on one thread: 82 GFLOP/s, 105 batched)."""
    lhs = by_group(dy_t, groups).swapaxes(-1, -2)
    rhs = by_group(v, groups)
    gemm = gemm_into(acc.dtype)
    depthwise = lhs.shape[-2] == 1 and rhs.shape[-1] == 1
    if not accumulate and not depthwise:
        np.matmul(lhs, rhs, out=acc)
        return
    if gemm is not None and not depthwise:
        for ab in range(acc.shape[0]):
            for g in range(groups):
                gemm(lhs[ab, g], rhs[ab, g], acc[ab, g], accumulate)
        return
    product = np.einsum("...it,...tj->...ij", lhs, rhs) if depthwise else np.matmul(lhs, rhs)
    if accumulate:
        np.add(acc, product, out=acc)
    else:
        np.copyto(acc, product)


class FilterGradient:
    """dw (K, C/groups, 3, 3) = F(3x3, mxm) over the m x m tiles of dy: per tile position one
    GEMM (K x tiles) @ (tiles x C) sums the products of transformed dy and input tiles.

    Each thread sums its chunks into an accumulator of its own (the accumulators are added at
    the end). Its tile buffer "front" holds the input tiles, then the dy tiles; "back" the
    transformed input tiles and "dy_t" the transformed dy tiles, the GEMMs' two operands."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, p: ConvProblem, dtype: type,
                 cores: int):
        self.p, self.t = p, (t := Tiling.of(m, p.out_h, p.out_w))
        self.bb = kron(mats["bt"], mats["bt"], dtype)      # (a*a, a*a)
        self.gg = kron(mats["g_f"], mats["g_f"], dtype)    # (a*a, m*m)
        self.aa = kron(mats["at_f"], mats["at_f"], dtype)  # (9, a*a)
        positions = t.alpha * t.alpha
        c, k = p.in_channels, p.out_channels
        self.chunks = plan(t, p.batch, max(c, k), dtype, filter_gradient=True, cores=cores)
        self.slots = slot_count(self.chunks, cores)
        most = max(chunk.tiles(t) for chunk in self.chunks)
        acc = positions * k * p.channels_per_group
        slot = {"front": positions * most * max(c, k), "back": positions * most * c,
                "dy_t": positions * most * k, "acc": acc}
        self.sizes = {"plane": int(np.prod(t.plane(p.batch, c))),
                      "dy_plane": int(np.prod(t.output_plane(p.batch, k))),
                      "taps": 9 * acc // positions, **per_slot(slot, self.slots)}

    def __call__(self, buf: dict[str, np.ndarray], x: np.ndarray, dy: np.ndarray,
                 dw: np.ndarray) -> None:
        p, t = self.p, self.t
        plane = scratch(buf["plane"], t.plane(p.batch, p.in_channels))
        dy_plane = scratch(buf["dy_plane"], t.output_plane(p.batch, p.out_channels))
        run_tasks([*place_tasks(x, p.pad_top, p.pad_left, plane, self.slots),
                   *place_tasks(dy, 0, 0, dy_plane, self.slots)], self.slots)
        windows, dy_tiles = t.input_windows(plane), t.output_tiles(dy_plane)
        acc_shape = (t.alpha * t.alpha, p.groups, p.filters_per_group, p.channels_per_group)
        started = [False] * self.slots

        def work(slot: int, chunk: Chunk) -> None:
            v = self._input_tiles(buf, slot, windows, chunk)
            dy_t = self._gradient_tiles(buf, slot, dy_tiles, chunk)
            acc = buf[f"acc{slot}"].reshape(acc_shape)
            correlate_tiles(dy_t, v, acc, p.groups, accumulate=started[slot])
            started[slot] = True

        run_chunks(self.chunks, work, self.slots)
        sums = [buf[f"acc{slot}"].reshape(acc_shape[0], -1)
                for slot in range(self.slots) if started[slot]]
        k = p.out_channels
        run_tasks([partial(self._finish, sums, buf["taps"].reshape(9, -1), dw, first, count)
                   for first, count in even_parts(k, -(-k // self.slots))], self.slots)

    def _finish(self, sums: list[np.ndarray], taps: np.ndarray, dw: np.ndarray, first: int,
                count: int) -> None:
        """dw[first:first+count] from the threads' accumulators: their sum, then dw[k, c, r, s]
        = sum_ab (A_f (x) A_f)[rs, ab] acc[ab, k, c]. A share of the filters per thread, at one
        BLAS thread each (OpenBLAS's own threads would spin into the next launch's chunks).
        Written straight into dw as acc^T @ (A_f (x) A_f)^T, a GEMM only 9 wide, it measured
        1.3-2x slower than this GEMM plus a transposing copy (res5: acc is 38 MB)."""
        cg = self.p.channels_per_group
        span = slice(first * cg, (first + count) * cg)
        acc = sums[0][:, span]
        for other in sums[1:]:
            np.add(acc, other[:, span], out=acc)
        np.matmul(self.aa, acc, out=taps[:, span])
        np.copyto(dw[first:first + count],
                  taps[:, span].reshape(3, 3, count, cg).transpose(2, 3, 0, 1))

    def _input_tiles(self, buf: dict[str, np.ndarray], slot: int, windows: np.ndarray,
                     chunk: Chunk) -> np.ndarray:
        """B^T d B of every input tile of a chunk: (a*a, tiles, C)."""
        t = self.t
        v = scratch(buf[f"back{slot}"], (t.alpha * t.alpha, chunk.tiles(t), self.p.in_channels))
        transform_input(t, self.bb, windows, chunk, scratch(buf[f"front{slot}"], v.shape), v)
        return v

    def _gradient_tiles(self, buf: dict[str, np.ndarray], slot: int, dy_tiles: np.ndarray,
                        chunk: Chunk) -> np.ndarray:
        """G_f e G_f^T of every m x m dy tile of a chunk (the overhang is zero): (a*a, tiles, K)."""
        t, k = self.t, self.p.out_channels
        positions, tiles = t.alpha * t.alpha, chunk.tiles(t)
        view = chunk.of(dy_tiles)
        e = scratch(buf[f"front{slot}"], view.shape)
        np.copyto(e, view)
        dy_t = scratch(buf[f"dy_t{slot}"], (positions, tiles, k))
        np.matmul(self.gg, e.reshape(t.m * t.m, -1), out=dy_t.reshape(positions, -1))
        return dy_t
