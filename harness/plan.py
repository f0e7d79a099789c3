"""A plan: per layer of a suite and per direction, the fastest verified algorithm under a workspace
limit, with its expected time, workspace and delivered precision. JSON a framework integration can
apply (schema below); built from results by the one analysis (harness.analysis).

{"schema": "convbench-plan/1", "suite": ..., "precision": "fp16", "layout": "NHWC",
 "workspace_limit_bytes": null | int, "machine": {"gpu": ..., "cudnn": ..., ...},
 "results": [run ids], "layers": [
   {"layer": "layer1.0.conv2", "multiplicity": 3, "benchdnn": "g1mb32ic64...",
    "shape": {"batch": 32, "in_channels": 64, ...},
    "directions": {"fwd": {"backend": "cudnn", "algorithm": "algo_1", "median_ms": 0.031,
                           "workspace_bytes": 0, "effective_precision": "fp16"} | null, ...}}]}
A direction is null where no verified row fits the limit (never measured, or every algorithm was
wrong, failed or too big).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

import pandas as pd

from harness import families
from harness.analysis import POINT_KEYS, best_per_point, ranked, verified
from harness.analysis.points import own_output
from harness.backends.base import fits
from harness.epilogue import CONV
from harness.problem import DEPTH_FIELDS
from harness.workspace_limit import limit_to_column
from harness.sweep import Sweep
from harness.threads import ALL as ALL_THREADS

SCHEMA = "convbench-plan/1"
_MACHINE = {"gpu": "env_gpu_name", "driver": "env_gpu_driver", "cuda": "env_cuda_runtime",
            "cudnn": "env_cudnn", "cpu": "env_cpu_model", "hostname": "env_hostname"}


class PlanInputError(ValueError):
    """Results that cannot answer the plan asked for; the message says what they hold."""


def build(df: pd.DataFrame, sweep: Sweep, limit: int | None, precision: str | None,
          layout: str | None) -> dict[str, Any]:
    rows = ranked(df)
    precision = _only(rows, "precision", precision)
    layout = _only(rows, "layout", layout)
    rows = rows[(rows["precision"] == precision) & (rows["layout"] == layout)]
    rows = rows[rows["threads"] == _thread_count(rows)]
    # a plan names the algorithm for each layer's convolution: fused rows (--op) time another call
    if "op" in rows.columns:
        rows = rows[rows["op"].fillna(CONV) == CONV]
    rows = rows[own_output(rows)]     # ... written in the precision's own type (not --output-type)
    best = _fastest_within(rows, limit)
    layers = [_layer(problem, best) for problem in sweep.problems]
    return {"schema": SCHEMA, "suite": sweep.name, "precision": precision, "layout": layout,
            "workspace_limit_bytes": limit, "machine": _machine(rows),
            "results": sorted(set(rows["run_id"].dropna().astype(str))), "layers": layers}


def _only(rows: pd.DataFrame, column: str, wanted: str | None) -> str:
    present = sorted(set(rows[column].dropna().astype(str)))
    if wanted is None and len(present) == 1:
        return present[0]
    if wanted is None:
        raise PlanInputError(f"the results hold {column}s {', '.join(present) or 'none'}: "
                             f"choose one with --{column}")
    if wanted not in present:
        raise PlanInputError(f"--{column} {wanted}: "
                             f"the results hold {', '.join(present) or 'none'}")
    return wanted


def _thread_count(rows: pd.DataFrame) -> int:
    """The thread count a plan answers for: the default (all cores) where it was measured, else
    the most threads measured (a plan is for the framework's own thread settings)."""
    counts = set(rows["threads"].fillna(ALL_THREADS).astype(int))
    return ALL_THREADS if ALL_THREADS in counts or not counts else max(counts)


def _fastest_within(rows: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """The best verified row per point whose workspace fits `limit`, whatever limit it was
    measured under (an algorithm's workspace does not depend on the limit it ran beside).
    Warm timings: a framework calls a layer over and over."""
    ok = verified(rows)
    ok = ok[(ok["timing_mode"].fillna("warm") == "warm")
            & ok["workspace_bytes"].fillna(0).map(lambda b: fits(int(b), limit))]
    ok = ok.assign(workspace_limit=limit_to_column(limit))
    ok = ok.sort_values("median_ms", kind="stable").drop_duplicates(
        [*POINT_KEYS, "backend", "algorithm"])
    best = best_per_point(ok)
    return best[best["n_ok"] > 0]


def _layer(problem, best: pd.DataFrame) -> dict[str, Any]:
    text = families.descriptor(problem)    # what the rows of this layer carry as their descriptor
    mine = best[best["descriptor"].astype(str) == text]
    directions = {}
    for direction in ("fwd", "bwd_data", "bwd_filter"):
        hit = mine[mine["direction"] == direction]
        directions[direction] = None if hit.empty else _choice(hit.iloc[0])
    return {"layer": problem.name, "multiplicity": problem.multiplicity, "benchdnn": text,
            "shape": _shape(problem), "directions": directions}


def _choice(row: pd.Series) -> dict[str, Any]:
    workspace = row["best_workspace_bytes"]
    return {"backend": str(row["best_backend"]), "algorithm": str(row["best_algorithm"]),
            "median_ms": float(row["best_median_ms"]),
            "workspace_bytes": None if pd.isna(workspace) else int(workspace),
            "effective_precision": str(row["effective_precision"])}


def _shape(problem) -> dict[str, int]:
    """The problem's fields; depth ones only for a 3-D problem (2-D plans read as before)."""
    return {f.name: getattr(problem, f.name) for f in fields(problem)
            if f.name not in ("name", "multiplicity")
            and (problem.is_3d or f.name not in DEPTH_FIELDS)}


def _machine(rows: pd.DataFrame) -> dict[str, Any]:
    out = {}
    for key, column in _MACHINE.items():
        values = sorted(set(rows[column].dropna().astype(str))) if column in rows else []
        out[key] = values[0] if len(values) == 1 else (values or None)
    return out
