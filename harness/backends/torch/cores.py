"""How many threads PyTorch's CPU backend runs with: every core this process may use, as a
user's default process would (torch_cpu's convolutions and recurrent layers alike)."""
from __future__ import annotations

import os
from typing import Any


def every_core() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def use_every_core(torch: Any) -> None:
    torch.set_num_threads(every_core())
