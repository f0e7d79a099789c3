"""Measurements <-> pandas, one long-format table with a schema version.

Rows are appended to a JSON-lines journal beside the results file as each point finishes, so a
crash or Ctrl-C loses nothing finished; `finish()` folds the journal into the Parquet file.
`load()` reads Parquet, CSV, a folder of them, or a journal left behind by a killed run.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from harness.env import ENV_FIELDS
from harness.measurement import Measurement, relative_noise
from harness.problem import to_benchdnn
from harness.sweep import ELEMENT_BYTES

SCHEMA_VERSION = 1
UNLIMITED_BYTES = -1   # how an unlimited workspace limit is stored (NaN would vanish in groupbys)

# Every column, in order, with its pandas dtype. One definition; everything else refers to it.
_CORE_COLUMNS: dict[str, str] = {
    "schema_version": "int64", "run_id": "string", "suite": "string", "point_id": "string",
    "planned_point_id": "string",
    "finished_at": "string",
    # the problem
    "descriptor": "string", "layer": "string", "multiplicity": "int64", "batch": "int64", "in_channels": "int64",
    "in_h": "int64", "in_w": "int64", "out_channels": "int64", "kernel_h": "int64",
    "kernel_w": "int64", "stride_h": "int64", "stride_w": "int64", "pad_top": "int64",
    "pad_left": "int64", "pad_bottom": "int64", "pad_right": "int64", "dilation_h": "int64",
    "dilation_w": "int64", "groups": "int64", "out_h": "int64", "out_w": "int64",
    "flops": "int64", "flops_no_padding": "int64", "bytes_moved": "int64",
    "arithmetic_intensity": "float64",
    # the point
    "direction": "string", "precision": "string", "layout": "string", "backend": "string",
    "algorithm": "string", "family": "string", "workspace_limit": "int64",
    "timing_mode": "string", "budget_ms": "float64",
    # what happened
    "status": "string", "reason": "string", "stop_reason": "string",
    "samples_ms": "object", "n_samples": "int64", "median_ms": "float64", "min_ms": "float64",
    "mean_ms": "float64", "iqr_ms": "float64", "noise": "float64", "gflops": "float64",
    "workspace_bytes": "Int64", "rel_error": "float64", "max_abs_error": "float64",
    "tolerance": "float64", "effective_precision": "string", "deterministic": "boolean",
    "setup_ms": "float64", "host_ms": "float64",
}

# Backend-specific results a Prepared object or the runner may report through `extras`.
EXTRA_COLUMNS: dict[str, str] = {
    "math_type": "string",               # cuDNN math type the algorithm ran with
    "sm_clock_mhz": "float64",           # lowest SM clock read around the point (NVML)
    "sm_clock_max_mhz": "float64",
    "throttled": "boolean",              # sm clock under 90% of max while timing
    "gpu_timer": "string",               # cuda_graph (warm replay) or held_stream
    "capture_error": "string",           # why the calls could not be captured into a graph
    "achieved_tflops": "float64",
    "achieved_gbps": "float64",
    "roofline_pct": "float64",           # achieved rate as % of min(peak, intensity x bandwidth)
    "heuristic_rank": "Int64",           # position in cuDNN's _v7 heuristic list (0 = its pick)
    "heuristic_pick": "boolean",         # cuDNN's heuristic would pick this under this limit
    "find_pick": "boolean",              # cudnnFind*Ex picked this under this limit
    "find_ms": "float64",                # the time cudnnFind reported for this algorithm
    "numerical_notes": "string",         # graph-API plan notes (tensor_core, down_convert, ...)
    "engine_id": "Int64",
    # graph-API plan: behaviour notes (runtime_compilation, ...) and its position in heuristic
    # mode A's list (0 = the frontend's own pick; empty when only mode B or FALLBACK offered it)
    "behavior_notes": "string",
    "graph_heuristic_rank": "Int64",
    "first_call_ms": "float64",          # host wall time of the first launch (cold start)
}

ENV_COLUMNS: dict[str, str] = {f"env_{name}": "string" for name in ENV_FIELDS}

COLUMNS: dict[str, str] = {**_CORE_COLUMNS, **EXTRA_COLUMNS, **ENV_COLUMNS}


def to_row(m: Measurement, run_id: str, suite: str, env: dict[str, Any],
           finished_at: str) -> dict[str, Any]:
    """Flatten one measurement, with its run and environment, into a row of COLUMNS."""
    p, pt = m.point.problem, m.point
    samples = list(m.samples_ms)
    median = m.median_ms
    element_bytes = ELEMENT_BYTES[pt.precision]
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": suite,
        "point_id": pt.point_id, "planned_point_id": m.planned_point_id or pt.point_id,
        "finished_at": finished_at,
        "descriptor": to_benchdnn(p), "layer": p.name, "multiplicity": p.multiplicity, "batch": p.batch,
        "in_channels": p.in_channels, "in_h": p.in_h, "in_w": p.in_w,
        "out_channels": p.out_channels, "kernel_h": p.kernel_h, "kernel_w": p.kernel_w,
        "stride_h": p.stride_h, "stride_w": p.stride_w, "pad_top": p.pad_top,
        "pad_left": p.pad_left, "pad_bottom": p.pad_bottom, "pad_right": p.pad_right,
        "dilation_h": p.dilation_h, "dilation_w": p.dilation_w, "groups": p.groups,
        "out_h": p.out_h, "out_w": p.out_w, "flops": p.flops,
        "flops_no_padding": p.flops_no_padding, "bytes_moved": p.bytes_moved(element_bytes),
        "arithmetic_intensity": p.arithmetic_intensity(element_bytes),
        "direction": pt.direction, "precision": pt.precision, "layout": pt.layout,
        "backend": pt.backend, "algorithm": pt.algorithm, "family": m.family,
        "workspace_limit": UNLIMITED_BYTES if pt.workspace_limit is None else pt.workspace_limit,
        "timing_mode": pt.timing.mode, "budget_ms": pt.timing.budget_ms,
        "status": m.status, "reason": m.reason, "stop_reason": m.stop_reason,
        "samples_ms": samples, "n_samples": len(samples), "median_ms": median,
        "min_ms": m.min_ms, "mean_ms": m.mean_ms, "iqr_ms": m.iqr_ms,
        "noise": relative_noise(samples) if len(samples) > 1 else None,
        "gflops": m.gflops, "workspace_bytes": m.workspace_bytes, "rel_error": m.rel_error,
        "max_abs_error": m.max_abs_error, "tolerance": m.tolerance,
        "effective_precision": m.effective_precision, "deterministic": m.deterministic,
        "setup_ms": m.setup_ms, "host_ms": m.host_ms,
    }
    unknown = set(m.extras) - set(EXTRA_COLUMNS)
    if unknown:
        raise KeyError(f"extras not in the schema: {sorted(unknown)}")
    row.update({name: m.extras.get(name) for name in EXTRA_COLUMNS})
    row.update({f"env_{name}": _as_text(env.get(name)) for name in ENV_FIELDS})
    return row


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a DataFrame with exactly COLUMNS, in order, with their dtypes."""
    df = pd.DataFrame(list(rows))
    for name in COLUMNS:
        if name not in df.columns:
            df[name] = None
    df = df[list(COLUMNS)]
    for name, dtype in COLUMNS.items():
        if dtype != "object":
            df[name] = df[name].astype(dtype)
    return df


# ---- writing as we go ---------------------------------------------------------------------------
def journal_path(results: Path) -> Path:
    return results.with_name(results.name + ".partial.jsonl")


class ResultWriter:
    """Appends each row to the journal at once; `finish()` writes the Parquet file."""

    def __init__(self, results: Path, resume: bool = False):
        self.results = Path(results)
        self.journal = journal_path(self.results)
        self.results.parent.mkdir(parents=True, exist_ok=True)
        if not resume:
            self.journal.unlink(missing_ok=True)
        self._file = self.journal.open("a", encoding="utf-8")

    def finished_point_ids(self) -> set[str]:
        """Points already measured by an earlier, interrupted or completed, run of this file."""
        existing = self._existing_rows()
        if not len(existing):
            return set()
        return set(existing["point_id"]) | set(existing["planned_point_id"].dropna())

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, default=_json_default) + "\n")
        self._file.flush()

    def finish(self) -> pd.DataFrame:
        self._file.close()
        df = self._existing_rows()
        df = df.drop_duplicates("point_id", keep="last").reset_index(drop=True)
        write(df, self.results)
        self.journal.unlink(missing_ok=True)
        return df

    def _existing_rows(self) -> pd.DataFrame:
        parts = []
        if self.results.exists():
            parts.append(read_parquet_or_csv(self.results))
        if self.journal.exists():
            if not self._file.closed:
                self._file.flush()
            parts.append(read_journal(self.journal))
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else frame([])


def write(df: pd.DataFrame, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        export_csv(df, path)
    else:
        df.to_parquet(path, index=False)


def export_csv(df: pd.DataFrame, path: Path) -> None:
    """CSV keeps the raw samples as a space-separated list in one cell."""
    out = df.copy()
    out["samples_ms"] = out["samples_ms"].map(
        lambda s: " ".join(repr(float(v)) for v in s) if _is_list(s) else "")
    out.to_csv(path, index=False)


# ---- reading ------------------------------------------------------------------------------------
def load(path: str | Path) -> pd.DataFrame:
    """A results file (Parquet, CSV, or a journal of a killed run) or a folder of them."""
    path = Path(path)
    if path.is_dir():
        files = sorted(list(path.glob("*.parquet")) + list(path.glob("*.csv")))
        if not files:
            raise FileNotFoundError(f"no .parquet or .csv results in folder {path}")
        return pd.concat([load(f) for f in files], ignore_index=True)
    if not path.exists():
        journal = journal_path(path)
        if journal.exists():
            return read_journal(journal)
        raise FileNotFoundError(f"no results file {path}")
    if path.name.endswith(".partial.jsonl"):
        return read_journal(path)
    return read_parquet_or_csv(path)


class ResultsError(ValueError):
    """A file that is not a convbench results file; the message names it."""


def read_parquet_or_csv(path: Path) -> pd.DataFrame:
    try:
        df = _read_table(path)
    except (OSError, ValueError, KeyError) as err:
        raise ResultsError(f"{path} is not a readable convbench results file "
                           f"({type(err).__name__}: {str(err)[:200]})") from None
    missing = {"schema_version", "point_id", "status", "samples_ms"} - set(df.columns)
    if missing:
        raise ResultsError(f"{path} is not a convbench results file: no column "
                           f"{', '.join(sorted(missing))}")
    version = int(df["schema_version"].iloc[0]) if len(df) else SCHEMA_VERSION
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{path} has schema version {version}; this convbench reads up to "
                           f"{SCHEMA_VERSION}: upgrade convbench")
    return frame(df.to_dict("records"))


def _read_table(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        df["samples_ms"] = df["samples_ms"].map(
            lambda s: [float(v) for v in str(s).split()] if isinstance(s, str) else [])
    else:
        df = pd.read_parquet(path)
        df["samples_ms"] = df["samples_ms"].map(lambda s: list(s) if _is_list(s) else [])
    return df


def read_journal(path: Path) -> pd.DataFrame:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the last line of a killed run may be cut short; what came before stands
    return frame(rows)


def _is_list(value: Any) -> bool:
    return hasattr(value, "__len__") and not isinstance(value, str)


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a results row")
