"""im2col's bwd_filter GEMMs (algorithm.py plans the blocks of whole images):
per block, dW += dy (K x cols) @ col^T, or dW^T (C*R*S x K) += col @ dy^T where the filters are
few (`transposed`), with several taps of a kernel row folded into one row of col and dy
copied once per folded tap where that copies far fewer rows (`fold_of`); dy read in place
where it can be (`reads_dy_in_place`).

Both forms accumulate in BLAS (beta = 1: no partial and no add pass per block). The operand
order matters for these skinny GEMMs with long reductions: col @ dy^T ran faster where the
column matrix's rows outnumber the filters, but DeepBench row 61 (512 filters) ran 1.39x slower
as dW^T, hence TRANSPOSED_MAX_FILTERS. Blocks are whole images: blocks of output rows were no
faster (evidence/notes/constants.md#im2col-bwd_filter-transposed_max_filters).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from harness.backends.cpu.blas import MAX_GROUP_CALLS, gemm_into, gemm_or_numpy
from harness.backends.cpu.common import split
from harness.backends.cpu.im2col.columns import Columns
from harness.backends.cpu.tiles import even_parts, per_slot, slot_count
from harness.backends.cpu.workers import run_chunks, run_tasks
from harness.problem import ConvProblem

# dW^T only where the filters are this few (and the column matrix's rows more): with many
# filters the transposed GEMM lost in the launch. Study:
# evidence/logs/im2col-classb-issue16-cpu-intel-xeon-2026-11-24.txt
TRANSPOSED_MAX_FILTERS = 64
# Blocks run on threads (one BLAS thread each) where the GEMM does under
# THREADS_MIN_FLOPS_PER_ELEMENT per element it streams (2 Kg Cg*R*S / (Kg + Cg*R*S)), or where
# one image's column matrix fills a block (algorithm.BLOCK_BYTES) alone, so that the gather is a
# long copy, which one thread ran with a core idle. Denser GEMMs over smaller images stay on one
# thread with BLAS's own: on a 2-core Xeon VM ResNet-50's 3x3 layers ran 1.4-1.9x slower threaded
# (evidence/logs/im2col-filter-threads-cpu-intel-xeon-2026-11-24.txt; a tie on the AMD EPYC VM).
# The skinny GEMMs (few filters times few taps: dW is a few KB, the reduction 28,000-55,000
# pixels an image) are what OpenBLAS splits worst over its threads: threaded they ran 0.72-0.76x
# on the 2-core AMD EPYC VM (VGG-16 conv1_1, DeepBench rows 2 and 55; on the Xeon 0.98, 0.70-1.07
# and 1.03; evidence/logs/im2col-fwd-filter-cpu-amd-epyc-2026-11-28.txt).
THREADS_MIN_FLOPS_PER_ELEMENT = 56
# dy is read in place where each image's GEMM reduces over at least this many pixels (here the
# image's columns are the GEMM's depth, not its width as in in_place.MIN_COLUMNS): large images
# gain from it, and from 196 to 784 pixels copied and in place tie. Study:
# evidence/logs/im2col-classb-issue16-cpu-intel-xeon-2026-11-24.txt
MIN_IMAGE_COLUMNS = 256
# bwd_filter folds taps (fold_of) where that copies at most this share of the rows it copied
# unfolded (dy read in place): a smaller saving does not pay for the fold's shifted dy copies.
# Study: evidence/logs/im2col-filter-fold-cpu-intel-xeon-2026-11-25.txt
FOLD_MAX_ROWS = 0.5


def batched(p: ConvProblem) -> bool:
    """Whether a block's GEMMs over the groups are one np.matmul and an add (many groups:
    blas.MAX_GROUP_CALLS) rather than one accumulating BLAS call per group."""
    return p.groups > MAX_GROUP_CALLS


def transposed(p: ConvProblem) -> bool:
    """Whether dW^T = col @ dy^T: the column matrix's rows (M) at least the filters (N)."""
    kg = p.filters_per_group
    return (not batched(p) and kg <= TRANSPOSED_MAX_FILTERS
            and p.channels_per_group * p.kernel_h * p.kernel_w >= kg)


def columns_for(p: ConvProblem, dtype: type) -> Columns:
    """Flat columns where they fold (`fold_of`); exact windows where dy can be read in place
    (`reads_dy_in_place`); the rule of Columns.of elsewhere."""
    columns = Columns.of(p)
    if fold_of(p, columns) > 1:
        return columns
    exact = replace(columns, kept=p.out_w)
    return exact if reads_dy_in_place(exact, dtype) else columns


def fold_of(p: ConvProblem, columns: Columns) -> int:
    """Taps of a kernel row that one row of the column matrix stands for (1: none folded).

    Folding `fold` taps into a row (Columns.gather_folded) turns dW^T's GEMM (Cg*R*S x cols) @
    (cols x Kg) into (Cg*R*S / fold x cols') @ (cols' x fold*Kg), dy copied once per fold
    with the matching shift: the same flops in a squarer GEMM, and Cg*R*S / fold + fold*Kg
    rows copied a pixel instead of Cg*R*S (dy read in place) or Cg*R*S + Kg. Taken where dW^T
    is the GEMM's result (few filters, `transposed`), at the divisor of Columns.fold_sizes
    that copies least (which also brings the GEMM's sides closest), and only where that is at
    most FOLD_MAX_ROWS of the unfolded copy. The squarer GEMM ran faster (DeepBench row 6: 93 ->
    142 GFLOP/s folded by 5; evidence/notes/constants.md#im2col-bwd_filter-fold_of)."""
    if not transposed(p):
        return 1
    kg, depth = p.filters_per_group, p.channels_per_group * p.kernel_h * p.kernel_w
    fold = min(columns.fold_sizes, key=lambda f: depth / f + kg * f)
    return fold if depth / fold + kg * fold <= FOLD_MAX_ROWS * depth else 1


def image_columns(columns: Columns, fold: int) -> int:
    """GEMM columns per image: a folded row's run, or out_h rows of `kept`."""
    return columns.folded_run(fold) if fold > 1 else columns.p.out_h * columns.kept


def image_bytes(columns: Columns, fold: int, dtype: type) -> int:
    """Scratch an image's block holds: its column matrix, and where folded its fold shifted dy
    copies too (as large as a third of the folded matrix on DeepBench row 6)."""
    p = columns.p
    rows = p.in_channels * p.kernel_h * p.kernel_w // fold
    if fold > 1:
        rows += fold * p.out_channels
    return rows * image_columns(columns, fold) * np.dtype(dtype).itemsize


def reads_dy_in_place(columns: Columns, dtype: type) -> bool:
    """Whether each image's GEMM reads dy[n] (K x P*Q) as it stands, not a copy with gap zeros:
    exact windows, a plane that is not the column matrix already, an accumulating BLAS and GEMMs
    deep enough per image (MIN_IMAGE_COLUMNS; blocks are whole images here). The copy was as
    large as the gather where K > C*R*S (VGG conv1_1, DeepBench row 55)."""
    p = columns.p
    return (columns.kept == p.out_w and not columns.plane_is_column_matrix
            and gemm_into(dtype) is not None and p.out_h * p.out_w >= MIN_IMAGE_COLUMNS)


def threaded(p: ConvProblem, image_fills_block: bool) -> bool:
    """Whether blocks of images run on threads: a skinny GEMM, or one image's scratch
    (image_bytes) filling a block (see THREADS_MIN_FLOPS_PER_ELEMENT)."""
    kg, taps = p.filters_per_group, p.channels_per_group * p.kernel_h * p.kernel_w
    return image_fills_block or 2 * kg * taps < THREADS_MIN_FLOPS_PER_ELEMENT * (kg + taps)


def thread_slots(p: ConvProblem, images: list[tuple[int, int]], image_fills_block: bool,
                 cores: int) -> int:
    """Threads a launch over these image blocks uses: one per core (of `cores`) where
    `threaded`, else one."""
    return slot_count(images, cores) if threaded(p, image_fills_block) else 1


def shared_blocks(batch: int, images: list[tuple[int, int]], cores: int) -> list[tuple[int, int]]:
    """The blocks of whole images `images` re-split for `cores` threads: a multiple of `cores`
    near-equal blocks (at most one an image), none larger than before. DeepBench row 55's three
    blocks of 3, 3 and 2 images gave one thread 5 images and the other 3."""
    count = min(batch, cores * -(-len(images) // cores))
    return split(batch, -(-batch // count))


def scratch_shapes(p: ConvProblem, columns: Columns, block_columns: int, dtype: type,
                   slots: int, fold: int = 1) -> dict[str, tuple]:
    """Per thread slot: a block's column matrix (1 / fold of the rows where folded), its dy
    columns unless read in place (fold shifted copies where folded), a dW accumulator (dW^T
    where the GEMM leaves it; slot 0 sums into dW itself otherwise) and the batched GEMM's
    product."""
    taps = p.channels_per_group * p.kernel_h * p.kernel_w
    shapes = {"col": (columns.column_elements(block_columns) // fold,)}
    if fold > 1 or not reads_dy_in_place(columns, dtype):
        shapes["dy"] = (p.out_channels * fold * block_columns,)
    shapes["acc"] = (p.groups, taps, p.filters_per_group) if transposed(p) else (
        p.groups, p.filters_per_group, taps)
    if batched(p):
        shapes["partial"] = (p.groups, p.filters_per_group, taps)
    slotted = per_slot(shapes, slots)
    if not transposed(p):
        del slotted["acc0"]
    return slotted


def bind(columns: Columns, images: list[tuple[int, int]], slots: int, x: np.ndarray,
         dy: np.ndarray, buf: dict[str, np.ndarray], dw_taps: np.ndarray,
         fold: int = 1) -> Callable[[], None]:
    """The launch: dw_taps (G, Kg, Cg*taps, taps in the column matrix's order) <- the filter
    gradient over blocks of whole images ((n0, count) of dy), through buf's planes and each of
    the `slots` threads' scratch (scratch_shapes), `fold` taps a column-matrix row (fold_of).

    With several slots the blocks run on the launch's threads (workers.run_chunks, BLAS at
    one thread each): a thread splits its own images into phase planes, gathers their columns
    and sums their GEMMs into an accumulator of its own; the accumulators are added at the end.
    On one thread the copies left a core idle: DeepBench row 6 spent 22 of 49 ms in them."""
    p = columns.p
    g, k = p.groups, p.out_channels
    gemm = gemm_or_numpy(x.dtype)
    planes = buf["planes"]
    flip = transposed(p)
    sums = [buf.get("acc0", dw_taps), *(buf[f"acc{s}"] for s in range(1, slots))]
    in_place = reads_dy_in_place(columns, x.dtype)

    def accumulate(slot: int, col_i: np.ndarray, dy_i: np.ndarray, first: bool) -> None:
        """The slot's sum (+)= dy_i @ col_i^T over the groups ((G, Kg, cols), (G, Cg*taps,
        cols)), as its transpose col_i @ dy_i^T where `flip` (folded: (G, fold*Kg, cols) and
        (G, Cg*taps / fold, cols))."""
        acc = sums[slot]
        if flip:    # folded: row (c, tap / fold) times column (tap % fold, k) is dW^T[c, tap, k]
            acc = acc.reshape(g, col_i.shape[1], dy_i.shape[1])
        if batched(p):
            product = buf[f"partial{slot}"]
            np.matmul(dy_i, col_i.transpose(0, 2, 1), out=acc if first else product)
            if not first:
                np.add(acc, product, out=acc)
            return
        for j in range(g):
            if flip:
                gemm(col_i[j], dy_i[j].T, acc[j], not first)
            else:
                gemm(dy_i[j], col_i[j].T, acc[j], not first)

    def operands(slot: int, col: np.ndarray, n0: int, ni: int) -> list[tuple]:
        """(columns, dy) GEMM operand pairs of a block: per image where dy is read in place."""
        pq = p.out_h * p.out_w
        if fold > 1:
            return [(col, _shifted_dy(columns, fold, dy[n0:n0 + ni], buf[f"dy{slot}"]))]
        if in_place:
            return [(col[:, i * pq:(i + 1) * pq], dy[n0 + i].reshape(k, pq)) for i in range(ni)]
        cols = col.shape[1]
        dyb = buf[f"dy{slot}"][:k * cols].reshape(k, ni, p.out_h, columns.kept)
        np.copyto(dyb[..., :p.out_w], dy[n0:n0 + ni].transpose(1, 0, 2, 3))
        dyb[..., p.out_w:] = 0    # the flat matrix's gap columns must add nothing
        return [(col, dyb.reshape(k, cols))]

    started = [False] * slots

    def work(slot: int, block: tuple[int, int]) -> None:
        n0, ni = block
        columns.fill_planes(planes, x, slice(n0, n0 + ni))
        col = (columns.gather_folded(planes, buf[f"col{slot}"], n0, ni, fold) if fold > 1
               else columns.gather(planes, buf[f"col{slot}"], n0, ni, 0, p.out_h))
        for col_i, dy_i in operands(slot, col, n0, ni):
            cols = col_i.shape[1]
            accumulate(slot, col_i.reshape(g, -1, cols), dy_i.reshape(g, -1, cols),
                       not started[slot])
            started[slot] = True

    def kernel() -> None:
        started[:] = [False] * slots
        run_chunks(images, work, slots)
        used = [acc.reshape(len(acc), -1) for acc, done in zip(sums, started) if done]
        if len(used) > 1:
            run_tasks([partial(_add_rows, used, first, count)
                       for first, count in even_parts(len(used[0]), -(-len(used[0]) // slots))],
                      slots)
        if flip:
            np.copyto(dw_taps, sums[0].transpose(0, 2, 1))

    return kernel


def _shifted_dy(columns: Columns, fold: int, dy: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """dy's block (images, K, P, Q) as the folded GEMM's (G * fold * Kg, images * run) operand:
    row (g, j, k) is dy[k] on the flat plane's grid (zeros in the gap columns) shifted j * step
    columns on, zeros before and after, so that it meets tap j of each folded row's taps."""
    p = columns.p
    g, kg, images = p.groups, p.filters_per_group, len(dy)
    run, span = columns.folded_run(fold), p.out_h * columns.width
    step = columns.col_phases[0].step
    shifted = flat[:p.out_channels * fold * images * run].reshape(g, fold, kg, images, run)
    source = dy.reshape(images, g, kg, p.out_h, p.out_w).transpose(1, 2, 0, 3, 4)
    for j in range(fold):
        rows = shifted[:, j]
        rows[..., :j * step] = 0
        rows[..., j * step + span:] = 0
        grid = rows[..., j * step:j * step + span].reshape(g, kg, images, p.out_h, -1,
                                                            copy=False)
        np.copyto(grid[..., :p.out_w], source)
        grid[..., p.out_w:] = 0
    return shifted.reshape(p.out_channels * fold, -1)


def _add_rows(sums: list[np.ndarray], first: int, count: int) -> None:
    """sums[0][rows] += the other slots' sums of those rows (a share of the rows a thread)."""
    rows = slice(first, first + count)
    for other in sums[1:]:
        np.add(sums[0][rows], other[rows], out=sums[0][rows])
