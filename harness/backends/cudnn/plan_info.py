"""What the graph API's heuristics say of one point's execution plans before any is built
(harness/backends/cudnn/graph.py lists them; harness/plan_cache.py remembers their labels)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import epilogue


@dataclass(frozen=True)
class PlanInfo:
    """What is known of one plan before it is built."""
    index: int                          # position in the A + B + FALLBACK candidate list
    engine_id: int | None
    notes: tuple[str, ...]              # numerical notes, lower case
    behavior: tuple[str, ...]           # behaviour notes, lower case (runtime_compilation, ...)
    heuristic_rank: int | None          # position in heuristic mode A's list (0 = its pick)

    @property
    def family(self) -> str:
        if "fft" in self.notes:
            return "fft"
        if "winograd" in self.notes:
            return "winograd"
        return "engine"

    @property
    def error_factor(self) -> float:
        # As for the legacy backend: transform-based algorithms round in a transformed domain
        # (Winograd ~5x a dot product's error in fp32 on an H200), so 4x keeps them in.
        return 4.0 if self.family in ("fft", "winograd") else 1.0

    def extras(self) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "numerical_notes": ",".join(self.notes),
                "behavior_notes": ",".join(self.behavior),
                "graph_heuristic_rank": self.heuristic_rank}


@dataclass
class PlanSet:
    """One built operation graph and its candidate plans, by unique name in heuristic order;
    `op` is what the graph computes (its epilogue's operands join the variant pack)."""
    graph: Any
    plans: dict[str, PlanInfo]
    op: str = epilogue.CONV
