"""The torch element type of each precision the PyTorch backends measure: one table, read by
torch_cpu, torch_gpu and the recurrent layers. torch itself is passed in (imported lazily by
the callers)."""
from __future__ import annotations

from typing import Any

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16",
                "fp64": "float64"}
# What PyTorch is measured in on the CPU (torch/cpu.py says why not the others).
ON_CPU = ("fp32", "fp64")


def dtype(torch: Any, precision: str) -> Any:
    """torch's dtype for `precision` (tf32: float32 data, TF32 arithmetic switched on apart)."""
    return getattr(torch, TORCH_DTYPES[precision])
