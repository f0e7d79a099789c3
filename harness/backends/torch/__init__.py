"""PyTorch as a peer backend: cpu.py (backend `torch_cpu`) and gpu.py (backend `torch_gpu`).
torch itself is imported only inside the functions that run it; nothing is imported here."""
