"""Results frames (store.COLUMNS) in other tools' formats, so their dashboards and comparers work on
convbench numbers: pytest-benchmark JSON, github-action-benchmark's custom JSON, DeepBench's table.

Only rows with status "ok" carry timings; the others are left out (pytest-benchmark, github-action-
benchmark) or leave their cell empty (DeepBench). Nothing here measures or prints.
"""
from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import POINT_KEYS, ranked
from harness.analysis.points import own_output
from harness.env import ENV_FIELDS
from harness.epilogue import labelled
from harness.measurement import Status
from harness.stats import interquartile_range

# The pytest-benchmark release whose --benchmark-json layout these dicts follow (checked against
# the installed pytest-benchmark's own output in tests/test_export.py).
PYTEST_BENCHMARK_FORMAT = "5.2.3"

# DeepBench's problem tuple (conv_problems.h: W, H, C, N, K, S, R, pad_w, pad_h, wstride, hstride)
# and the three times conv_bench prints, in microseconds, named after its directions.
DEEPBENCH_SHAPE = ("W", "H", "C", "N", "K", "S", "R", "pad_w", "pad_h", "wstride", "hstride")
DEEPBENCH_TIMES = {"fwd": "fwd_time_usec", "bwd_data": "bwd_inputs_time_usec",
                   "bwd_filter": "bwd_params_time_usec"}
DEEPBENCH_ALGOS = {"fwd": "fwd_algo", "bwd_data": "bwd_inputs_algo",
                   "bwd_filter": "bwd_params_algo"}
# conv_bench's precision names where it has one; others keep ours.
DEEPBENCH_PRECISION = {"fp32": "float", "fp16": "half"}
# Trailing columns DeepBench lacks but a reader needs to tell rows apart.
# One DeepBench row: a layer at one point and backend, its three directions side by side, each in
# its precision's own result type (rows asked in another are left out: DeepBench has no column).
_DEEPBENCH_ROW = [k for k in POINT_KEYS if k not in ("direction", "output")] + ["backend"]
DEEPBENCH_EXTRA = ("layer", "backend", "layout", "groups", "dilation_h", "dilation_w",
                   "workspace_limit", "timing_mode", "threads", "op")


# ---- pytest-benchmark ----------------------------------------------------------------------------
def to_pytest_benchmark_json(df: pd.DataFrame) -> dict[str, Any]:
    """The dict pytest-benchmark writes with --benchmark-json (times in seconds), one benchmark per
    ok row. `fullname` is "convbench::<point_id>", so `pytest-benchmark compare` and
    --benchmark-compare match the same point across files."""
    rows = _ok_records(df)
    return {
        "machine_info": _machine_info(df),
        "commit_info": _commit_info(df),
        "benchmarks": [_pytest_benchmark_entry(r) for r in rows],
        "datetime": _datetime(df),
        "version": PYTEST_BENCHMARK_FORMAT,
    }


def pytest_benchmark_stats(samples_s: list[float], iterations: int = 1) -> dict[str, Any]:
    """pytest-benchmark's `stats` block computed from raw samples in seconds, with its own
    definitions (quartiles by Wikipedia's methods 2/3, Tukey fences, ops = rounds / total)."""
    data = [float(v) for v in samples_s]
    ordered = sorted(data)
    n = len(data)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if n > 1 else 0
    q1, q3 = _quartile(ordered, lower=True), _quartile(ordered, lower=False)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    stddev_outliers = sum(v < mean - stddev or v > mean + stddev for v in data)
    iqr_outliers = sum(v < low or v > high for v in data)
    total = sum(data)
    return {
        "min": ordered[0], "max": ordered[-1], "mean": mean, "stddev": stddev, "rounds": n,
        "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": iqr_outliers, "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": ordered[0] if n == 1 else ordered[bisect_left(ordered, low)],
        "hd15iqr": ordered[0] if n == 1 else ordered[bisect_right(ordered, high) - 1],
        "ops": n / total if total else 0, "total": total, "data": data, "iterations": iterations,
    }


def _pytest_benchmark_entry(r: dict[str, Any]) -> dict[str, Any]:
    params = {name: _plain(r.get(name)) for name in (
        "layer", "descriptor", "batch", "direction", "precision", "layout", "backend", "algorithm",
        "workspace_limit", "timing_mode", "threads", "op")}
    param = "-".join([str(params["backend"]), str(params["algorithm"]), _direction(r),
                      str(params["precision"]), str(params["layout"])])
    label = _label(r)
    return {
        "group": f"{label} {_direction(r)} {r.get('precision')} {r.get('layout')}",
        "name": f"{label}[{param}]",
        "fullname": f"convbench::{r['point_id']}",
        "params": params,
        "param": param,
        "extra_info": _extra_info(r),
        "options": {"disable_gc": None, "timer": "convbench", "min_rounds": None,
                    "max_time": _seconds(r.get("budget_ms")), "min_time": None, "warmup": None,
                    "precision": None, "confidence": None},
        "stats": pytest_benchmark_stats([v / 1e3 for v in r["samples_ms"]]),
    }


def _extra_info(r: dict[str, Any]) -> dict[str, Any]:
    """What pytest-benchmark has no field for: how the time was taken, how good the result was."""
    names = ("suite", "run_id", "point_id", "status", "family", "gflops", "noise", "stop_reason",
             "n_samples", "workspace_bytes", "setup_ms", "host_ms", "rel_error", "max_abs_error",
             "tolerance", "effective_precision", "deterministic", "sm_clock_mhz", "throttled",
             "math_type", "engine_id")
    return {name: _plain(r.get(name)) for name in names if _plain(r.get(name)) is not None}


def _machine_info(df: pd.DataFrame) -> dict[str, Any]:
    env = {name: _first(df, f"env_{name}") for name in ENV_FIELDS}
    system, _, release = (env["os"] or "").partition(" ")
    return {
        "node": env["hostname"], "processor": env["cpu_model"], "machine": None,
        "python_compiler": None, "python_implementation": None,
        "python_implementation_version": env["python"], "python_version": env["python"],
        "python_build": None, "release": release or None, "system": system or None,
        "cpu": {"brand_raw": env["cpu_model"], "count": _int_or_none(env["cpu_cores"])},
        "convbench": env,          # the full fingerprint: GPU, clocks, driver, CUDA, cuDNN, BLAS
    }


def _commit_info(df: pd.DataFrame) -> dict[str, Any]:
    return {"id": _first(df, "env_git_commit") or "unknown", "time": None, "author_time": None,
            "dirty": None, "project": "convbench", "branch": None}


def _datetime(df: pd.DataFrame) -> str:
    finished = [v for v in df.get("finished_at", pd.Series(dtype=object)) if _plain(v)]
    return max(finished) if finished else datetime.now(UTC).isoformat()


def _quartile(ordered: list[float], lower: bool) -> float:
    n = len(ordered)
    if n == 1:
        return ordered[0]
    if n % 2 == 0:       # method 2: median of each half
        return statistics.median(ordered[: n // 2] if lower else ordered[n // 2:])
    k, rest = n // 4, n % 4   # method 3: weighted between neighbours
    if lower:
        return (0.25 * ordered[k - 1] + 0.75 * ordered[k] if rest == 1
                else 0.75 * ordered[k] + 0.25 * ordered[k + 1])
    return (0.75 * ordered[3 * k] + 0.25 * ordered[3 * k + 1] if rest == 1
            else 0.25 * ordered[3 * k + 1] + 0.75 * ordered[3 * k + 2])


# ---- github-action-benchmark ---------------------------------------------------------------------
def to_github_action_benchmark(df: pd.DataFrame) -> list[dict[str, Any]]:
    """github-action-benchmark's `customSmallerIsBetter` entries: median in ms, range ± half the
    IQR, extra = what a chart tooltip needs. Names are unique and stable across runs."""
    rows = _ok_records(df)
    names = [_chart_name(r) for r in rows]
    duplicated = {n for n in names if names.count(n) > 1}
    out = []
    for r, name in zip(rows, names):
        samples = sorted(float(v) for v in r["samples_ms"])
        entry = {"name": f"{name} [{r['point_id']}]" if name in duplicated else name,
                 "unit": "ms", "value": statistics.median(samples)}
        if len(samples) > 1:
            entry["range"] = f"± {_half_iqr(samples):.4g}"
        entry["extra"] = _chart_extra(r, samples)
        out.append(entry)
    return out


def _chart_name(r: dict[str, Any]) -> str:
    name = (f"{_label(r)} n{r.get('batch')} {_direction(r)} {r.get('precision')} "
            f"{r.get('layout')} {r.get('backend')}:{r.get('algorithm')}")
    limit = _plain(r.get("workspace_limit"))
    if limit is not None and limit >= 0:
        name += f" ws<={limit}B"
    if r.get("timing_mode") == "cold":
        name += " cold"
    return name


def _chart_extra(r: dict[str, Any], samples: list[float]) -> str:
    parts = [f"min {samples[0]:.4g} ms", f"samples {len(samples)}"]
    for name, fmt in (("gflops", "GFLOP/s {:.4g}"), ("noise", "noise {:.2%}"),
                      ("descriptor", "{}"), ("env_gpu_name", "{}")):
        value = _plain(r.get(name))
        if value is not None:
            parts.append(fmt.format(value))
    return "\n".join(parts)


def _half_iqr(samples: list[float]) -> float:
    return interquartile_range(samples) / 2



# ---- DeepBench -----------------------------------------------------------------------------------
def to_deepbench_csv(df: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """DeepBench's results layout, written to `path` and returned.

    One row per problem, precision, layout and backend (and workspace limit and timing mode), as
    conv_bench prints one per problem: the shape tuple W,H,C,N,K,S,R,pad_w,pad_h,wstride,hstride,
    then `precision` ("float"/"half" where DeepBench has a name), the fwd / bwd_inputs (our
    bwd_data) / bwd_params (our bwd_filter) times in microseconds and their sum, then the algorithm
    behind each time. Like conv_bench, which times the algorithm cuDNN picks, each direction shows
    the fastest ok algorithm (by median). Times keep three decimals (DeepBench prints whole us).
    A direction with no ok row is empty; the total only when all three are there. Trailing columns
    that DeepBench lacks (layer, groups, dilation, ...) tell rows apart."""
    table = deepbench_table(df)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return table


def deepbench_table(df: pd.DataFrame) -> pd.DataFrame:
    columns = [*DEEPBENCH_SHAPE, "precision", *DEEPBENCH_TIMES.values(), "total_time_usec",
               *DEEPBENCH_ALGOS.values(), *DEEPBENCH_EXTRA]
    groups: dict[tuple, dict[str, Any]] = {}
    rows = ranked(df)
    for r in _ok_records(rows[own_output(rows)]):
        key = tuple(_plain(r.get(k)) for k in _DEEPBENCH_ROW)
        row = groups.setdefault(key, _deepbench_row(r))
        us = statistics.median(float(v) for v in r["samples_ms"]) * 1e3
        time_col, algo_col = DEEPBENCH_TIMES[r["direction"]], DEEPBENCH_ALGOS[r["direction"]]
        if row[time_col] is None or us < row[time_col]:
            row[time_col], row[algo_col] = round(us, 3), r.get("algorithm")
    for row in groups.values():
        times = [row[c] for c in DEEPBENCH_TIMES.values()]
        row["total_time_usec"] = round(sum(times), 3) if None not in times else None
    return pd.DataFrame(list(groups.values()), columns=columns)


def _deepbench_row(r: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict(zip(DEEPBENCH_SHAPE, (
        r["in_w"], r["in_h"], r["in_channels"], r["batch"], r["out_channels"], r["kernel_w"],
        r["kernel_h"], r["pad_left"], r["pad_top"], r["stride_w"], r["stride_h"])))
    row = {k: _plain(v) for k, v in row.items()}
    delivered = r["effective_precision"]    # a TF32 plan asked for fp32 is a tf32 row
    row["precision"] = DEEPBENCH_PRECISION.get(delivered, delivered)
    row.update({c: None for c in DEEPBENCH_TIMES.values()})
    row.update({c: None for c in DEEPBENCH_ALGOS.values()})
    row.update({c: _plain(r.get(c)) for c in DEEPBENCH_EXTRA})
    return row


# ---- shared helpers ------------------------------------------------------------------------------
def _ok_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows with timings: status ok and at least one sample."""
    return [r for r in df.to_dict("records")
            if _plain(r.get("status")) == Status.OK and _has_samples(r.get("samples_ms"))]


def _has_samples(value: Any) -> bool:
    return hasattr(value, "__len__") and not isinstance(value, str) and len(value) > 0


def _label(r: dict[str, Any]) -> str:
    return _plain(r.get("layer")) or str(r.get("descriptor"))


def _first(df: pd.DataFrame, column: str) -> Any:
    """The first recorded value of a column (None where the column or every value is missing)."""
    if column not in df.columns:
        return None
    values = [_plain(v) for v in df[column]]
    return next((v for v in values if v is not None), None)


def _plain(value: Any) -> Any:
    """A JSON-ready scalar: numpy scalars unwrapped, NA/NaN as None."""
    if value is None or isinstance(value, (list, tuple, dict)):
        return value
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return value
    return value.item() if hasattr(value, "item") else value


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _seconds(ms: Any) -> float | None:
    value = _plain(ms)
    return None if value is None else float(value) / 1e3


def _direction(r: dict[str, Any]) -> str:
    """The direction, with the op where one follows the convolution (as in the point id), so a
    fused row never takes a plain row's name."""
    return labelled(str(r.get("direction")), r.get("op"))

