"""The cuDNN backends: the legacy API (legacy.py, backend `cudnn`) through a ctypes binding
(lib.py) and its type configurations (data_types.py), and the graph API through cudnn-frontend
(graph.py, backend `cudnn_graph`, with its fused epilogues in graph_epilogue.py); both upload
operands with device_buffers.py.

Nothing is imported here: backends/base.py imports lib.py (for CudnnError), so this package
must load without base, CuPy or cudnn-frontend. The registry (harness/backends/__init__.py)
names the modules themselves."""
