"""Winograd's tiles: the overlapping input windows and output tiles of a padded NHWC plane
(`Tiling`), and the copies of an image block into and out of such a plane."""
from __future__ import annotations

from dataclasses import dataclass

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
    def of(cls, m: int, rows: int, cols: int) -> "Tiling":
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


def unplace(plane: np.ndarray, out: np.ndarray) -> None:
    """out (NCHW) = the top-left corner of an NHWC plane, dropping the tiles' overhang."""
    np.copyto(out, plane[:, :out.shape[2], :out.shape[3]].transpose(0, 3, 1, 2))
