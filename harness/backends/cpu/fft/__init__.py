"""FFT convolution on the CPU. algorithm.py holds the algorithm (`Fft`) and the whole-image
path; lowering.py turns every problem into a stride-1 correlation; tiled.py (tiling, DFT
matrices, transforms), spectra.py (the per-frequency contraction) and tiled_directions.py (the
three directions) make the overlap-save tiled path. Nothing is imported here, so loading one
part does not load the others."""
