"""im2col + GEMM on the CPU. algorithm.py holds the algorithm (`Im2col`) and its plans; the
column matrices (columns.py), the shifted GEMMs that skip them (shifted.py), the GEMM written
straight into y (in_place.py) and the bwd_filter GEMMs (bwd_filter.py) are its parts. Nothing
is imported here, so loading one part does not load the others."""
