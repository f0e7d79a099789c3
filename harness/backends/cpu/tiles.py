"""Winograd's tiles: the overlapping input windows and output tiles of a padded NHWC plane
(`Tiling`), the chunks of tiles a launch works through (`Chunk`) and how large they are, the
copies of images into such a plane, and the steps both Winograd pipelines (winograd/algorithm.py,
winograd/bwd_filter.py) take on a chunk's tiles."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided


@dataclass(frozen=True)
class Tiling:
    """An output of rows x cols cut into th x tw tiles of m x m outputs, each computed from an
    alpha x alpha window of a zero-bordered NHWC plane of (m*th + 2) x (m*tw + 2) pixels."""
    m: int
    alpha: int
    th: int
    tw: int

    @classmethod
    def of(cls, m: int, rows: int, cols: int) -> Tiling:
        return cls(m, m + 2, -(-rows // m), -(-cols // m))

    @property
    def per_image(self) -> int:
        return self.th * self.tw

    def plane(self, images: int, channels: int) -> tuple[int, int, int, int]:
        halo = self.alpha - self.m  # the 2 rows and columns a 3x3 window reaches past its tile
        return images, self.m * self.th + halo, self.m * self.tw + halo, channels

    def output_plane(self, images: int, channels: int) -> tuple[int, int, int, int]:
        return images, self.m * self.th, self.m * self.tw, channels

    def input_windows(self, plane: np.ndarray) -> np.ndarray:
        """Read-only view [i, j, n, u, v, c] = plane[n, m*u + i, m*v + j, c]: every tile's
        overlapping alpha x alpha window."""
        sn, sh, sw, sc = plane.strides
        shape = (self.alpha, self.alpha, plane.shape[0], self.th, self.tw, plane.shape[3])
        return as_strided(plane, shape, (sh, sw, sn, self.m * sh, self.m * sw, sc),
                          writeable=False)

    def output_tiles(self, plane: np.ndarray) -> np.ndarray:
        """View [i, j, n, u, v, c] = plane[n, m*u + i, m*v + j, c] of an output plane: its
        m x m tiles, which do not overlap."""
        n, _, _, c = plane.shape
        return plane.reshape(n, self.th, self.m, self.tw, self.m, c).transpose(2, 4, 0, 1, 3, 5)


@dataclass(frozen=True)
class Chunk:
    """Tile rows u0..u1-1 of images n0..n1-1: a whole-image group, or a band of one image."""
    n0: int
    n1: int
    u0: int
    u1: int

    def tiles(self, t: Tiling) -> int:
        return (self.n1 - self.n0) * (self.u1 - self.u0) * t.tw

    def of(self, view: np.ndarray) -> np.ndarray:
        """The chunk's part of an input_windows or output_tiles view ([i, j, n, u, v, c])."""
        return view[:, :, self.n0:self.n1, self.u0:self.u1]


def chunks(t: Tiling, batch: int, tiles: int) -> list[Chunk]:
    """Near-equal chunks of about `tiles` tiles covering the batch in order: bands of whole
    tile rows of one image where an image has more, groups of whole images where it has fewer
    (a band is at least one tile row, a group at least one image)."""
    if t.per_image >= tiles:
        bands = even_parts(t.th, max(1, round(tiles / t.tw)))
        return [Chunk(n, n + 1, u0, u0 + rows) for n in range(batch) for u0, rows in bands]
    return [Chunk(n0, n0 + images, 0, t.th)
            for n0, images in even_parts(batch, -(-tiles // t.per_image))]


def even_parts(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of near-equal parts, as many as parts of `size` would need; lengths differ
    by at most one."""
    count = -(-total // max(1, min(size, total)))
    length, longer = divmod(total, count)
    lengths = [length + 1] * longer + [length] * (count - longer)
    return [(sum(lengths[:i]), n) for i, n in enumerate(lengths)]


def overlap(offset: int, size: int, room: int) -> tuple[slice, slice]:
    """(destination, source) slices of the source's elements 0..size-1 that land inside
    0..room-1 when moved by `offset` (a padding larger than the window reach crops)."""
    first, last = max(0, -offset), max(0, min(size, room - offset))
    return slice(first + offset, last + offset), slice(first, max(first, last))


def place(src: np.ndarray, top: int, left: int, plane: np.ndarray) -> None:
    """plane[n, top + h, left + w, c] = src[n, c, h, w] (NCHW -> NHWC) where it lands in the
    plane; the plane's other entries are never written and keep the zeros of its allocation."""
    rows = overlap(top, src.shape[2], plane.shape[1])
    cols = overlap(left, src.shape[3], plane.shape[2])
    np.copyto(plane[:, rows[0], cols[0]], src[:, :, rows[1], cols[1]].transpose(0, 2, 3, 1))


def place_tasks(src: np.ndarray, top: int, left: int, plane: np.ndarray,
                parts: int) -> list[Callable[[], None]]:
    """place() of a whole batch as up to `parts` tasks of near-equal image groups (for threads)."""
    groups = even_parts(src.shape[0], -(-src.shape[0] // parts))
    return [partial(place, src[n0:n0 + n], top, left, plane[n0:n0 + n]) for n0, n in groups]


def scratch(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A contiguous array of `shape` at the start of flat scratch `buf` (smaller chunks use a
    prefix)."""
    return buf[:int(np.prod(shape))].reshape(shape)


# ---- chunk sizes -------------------------------------------------------------------------------
# A chunk's tile buffer (positions x tiles x the wider channel count) is sized to about
# CHUNK_BYTES, so that its buffers stay in this Xeon's 2 MiB L2 per core while each chunk's
# pipeline passes over them five times...
CHUNK_BYTES = 1 << 20
# ...but never under MIN_CHUNK_TILES tiles (GEMM rows), below which the per-position GEMMs
# ran well under BLAS's speed, and each chunk re-reads all transformed weights (36 MiB on
# res5; where all tiles make one chunk they go by filters instead: winograd.BY_FILTERS_MAX_CHUNKS).
MIN_CHUNK_TILES = 64
# bwd_filter sums each chunk's GEMMs into a (positions x K x C) accumulator per thread, over the
# chunk's tiles (the GEMMs' inner dimension): there fewer, larger chunks ran faster, one per
# thread where that stays under FILTER_CHUNK_BYTES, and never under MIN_FILTER_CHUNK_TILES.
# Measured on the 2-core Xeon (bwd_filter ms by tiles per chunk): res2a 13.3 at 256, 8.5 at 784
# (one chunk per thread), 12.6 at 1568 (whole batch); conv2_1 93 at 196, 50 at 392-784, 66 at
# 3136; conv3_1 32 at 392, 36 at 784, 49 at 1568; res4a 9.7 at 64, 6.6 whole (128).
MIN_FILTER_CHUNK_TILES = 192
FILTER_CHUNK_BYTES = 8 << 20


def plan(t: Tiling, batch: int, widest: int, dtype: type, filter_gradient: bool,
         cores: int) -> list[Chunk]:
    """The chunks of a launch whose tiles carry up to `widest` channels: about CHUNK_BYTES of
    tiles each but at least MIN_CHUNK_TILES, or for bwd_filter one chunk per thread within
    FILTER_CHUNK_BYTES but at least MIN_FILTER_CHUNK_TILES (the whole batch if it has fewer);
    `cores`: the threads the point may use (threads.cores_for)."""
    tile_bytes = t.alpha * t.alpha * widest * np.dtype(dtype).itemsize
    if not filter_gradient:
        return chunks(t, batch, max(MIN_CHUNK_TILES, CHUNK_BYTES // tile_bytes))
    per_thread = -(-batch * t.per_image // cores)
    return chunks(t, batch, max(MIN_FILTER_CHUNK_TILES,
                                min(FILTER_CHUNK_BYTES // tile_bytes, per_thread)))


def slot_count(chunk_list: list[Chunk], cores: int) -> int:
    """Threads (scratch slots) a launch may use: one per core, at most one per chunk."""
    return max(1, min(cores, len(chunk_list)))


def per_slot(sizes: dict[str, int], slots: int) -> dict[str, int]:
    """Scratch sizes, one copy per slot, named name0, name1, ..."""
    return {f"{name}{slot}": size for slot in range(slots) for name, size in sizes.items()}


# ---- steps on a chunk's tiles ------------------------------------------------------------------
def kron(a: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    return np.kron(a, b).astype(dtype)


def transform_input(t: Tiling, bb: np.ndarray, windows: np.ndarray, chunk: Chunk,
                    tiles: np.ndarray, out: np.ndarray) -> None:
    """out (a*a, tiles, C) = B^T d B of every window d of a chunk, gathered from the plane's
    `windows` view into `tiles` (same size as out) by one copy."""
    view = chunk.of(windows)
    gathered = tiles.reshape(view.shape)
    np.copyto(gathered, view)
    np.matmul(bb, gathered.reshape(len(bb), -1), out=out.reshape(len(bb), -1))


def by_group(a: np.ndarray, groups: int) -> np.ndarray:
    """(positions, tiles, G*n) -> view (positions, G, tiles, n)."""
    positions, tiles, _ = a.shape
    return a.reshape(positions, tiles, groups, -1).transpose(0, 2, 1, 3)
