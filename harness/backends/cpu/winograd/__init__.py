"""Winograd minimal filtering on the CPU. algorithm.py holds the algorithms (`WinogradF2`,
`WinogradF4`), toom_cook.py builds their transform matrices and bwd_filter.py their filter
gradient; the tiles they share with im2col live in harness/backends/cpu/tiles.py. Nothing is
imported here, so loading one part does not load the others."""
