"""What cuDNN itself would choose for one problem, beside what convbench measures: the `_v7`
heuristic's list and two cudnnFind*AlgorithmEx calls, and how a framework turns either into a
pick under a workspace limit. Kept apart from legacy.py, which asks cuDNN for them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CudnnChoices:
    """What cuDNN itself would choose for one problem: the _v7 heuristic list (in its order) and
    the results of two Find calls (each sorted by cuDNN's own measured time): the first for the
    problem in this process, as CuPy, MXNet and PyTorch's v7 path make it, and one made right
    after it. Find times each algorithm once, host work of the call included, so the first call
    can rank a fast kernel behind a slower one; evidence/logs/find-conditions-*.txt measured
    how often and what it costs. Under a workspace limit, the pick is the first successful entry
    that fits, as frameworks (CuPy, PyTorch) apply it."""
    heuristic: list[tuple[int, int, int]]        # (algo, status, memory)
    found: list[tuple[int, int, int, float]]     # (algo, status, memory, time_ms): first call
    found_warm: list[tuple[int, int, int, float]] = field(default_factory=list)  # second call
    find_workspace: int = 0                      # bytes offered to both Find calls

    def heuristic_pick(self, limit: int | None) -> int | None:
        return _first_fitting(self.heuristic, limit)

    def find_pick(self, limit: int | None, warm: bool = False) -> int | None:
        return _first_fitting(self.found_warm if warm else self.found, limit)

    def heuristic_rank(self, algo: int) -> int | None:
        ranked = [a for a, status, _ in self.heuristic if status == 0]
        return ranked.index(algo) if algo in ranked else None

    def find_extras(self, algo: int) -> dict[str, Any]:
        """The row's Find columns: what each call reported for `algo`, and the conditions."""
        return {"find_ms": _found_ms(self.found, algo),
                "find_ms_warm": _found_ms(self.found_warm, algo),
                "find_workspace_bytes": self.find_workspace,
                "find_module_loading": module_loading()}


def _found_ms(found, algo: int) -> float | None:
    times = [t for a, status, _, t in found if a == algo and status == 0]
    return times[0] if times else None


def module_loading() -> str:
    """CUDA's module loading as this process runs it: lazy (the default since CUDA 12.2: a
    kernel's module is loaded at its first launch, inside whatever times that launch) or eager."""
    import os
    return os.environ.get("CUDA_MODULE_LOADING", "LAZY").lower()


def _first_fitting(entries, limit: int | None) -> int | None:
    for algo, status, memory, *_ in entries:
        if status == 0 and (limit is None or memory <= limit):
            return algo
    return None
