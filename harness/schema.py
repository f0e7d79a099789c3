"""The results table's schema: every column once with its dtype, the schema version, how one
Measurement becomes one row (the workspace limit encoded by harness.workspace_limit). store.py
reads and writes files of it."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC
from typing import Any

import pandas as pd

from harness import epilogue, families
from harness.env import ENV_FIELDS
from harness.measurement import STAGE_COLUMNS, Measurement
from harness.precision import AUTO_OUTPUT, element_bytes
from harness.problem import DEPTH_DEFAULTS, DEPTH_FIELDS
from harness.stats import relative_noise
from harness.threads import ALL as ALL_THREADS
from harness.workspace_limit import limit_to_column


class ResultsError(ValueError):
    """A file that is not a convbench results file; the message names it."""


SCHEMA_VERSION = 1

# Every column, in order, with its pandas dtype. One definition; everything else refers to it.
_CORE_COLUMNS: dict[str, str] = {
    "schema_version": "int64", "run_id": "string", "suite": "string", "point_id": "string",
    "planned_point_id": "string",
    "finished_at": "string",
    # the problem
    "descriptor": "string", "layer": "string", "multiplicity": "int64", "batch": "int64",
    "in_channels": "int64",
    "in_h": "int64", "in_w": "int64", "out_channels": "int64", "kernel_h": "int64",
    "kernel_w": "int64", "stride_h": "int64", "stride_w": "int64", "pad_top": "int64",
    "pad_left": "int64", "pad_bottom": "int64", "pad_right": "int64", "dilation_h": "int64",
    "dilation_w": "int64", "groups": "int64", "out_h": "int64", "out_w": "int64",
    # depth (3-D problems; came after schema 1's first files, which read as 2-D: defaults below)
    **{name: "int64" for name in DEPTH_FIELDS}, "out_d": "int64",
    "flops": "int64", "flops_no_padding": "int64", "bytes_moved": "int64",
    "arithmetic_intensity": "float64",
    # the family (harness/families.py): "conv", or "rnn", whose shape is in RNN_COLUMNS and
    # whose convolution columns hold 0
    "problem": "string",
    # the point
    "direction": "string", "precision": "string", "layout": "string", "backend": "string",
    "algorithm": "string", "family": "string", "workspace_limit": "int64",
    "timing_mode": "string", "budget_ms": "float64",
    "threads": "int64",   # CPU points: threads the libraries were given (0: all cores)
    "op": "string",       # what followed the convolution in the timed call (harness.epilogue)
    # the result precision the point asked for (sweep.Point.output), "auto" where it asked for
    # none and the precision's own was written (precision.output_precision)
    "output": "string",
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
    "gpu_timer": "string",               # cuda_graph (warm replay), held_stream, unheld_events,
                                         # profiled_kernels (raced out: harness/call_bound.py)
    "capture_error": "string",           # why the calls were not timed by graph replay: capture
                                         # failed, or it changed a library's kernels
    # why the stream could not be held (gpu_timer "unheld_events": events call by call, host
    # gaps inside a call counted; harness/stream_hold.py); also in the row's reason
    "timer_fallback": "string",
    # a plan raced out after its first samples (stop_reason "raced_out", harness/stopping.py):
    # its median over the fastest plan of its point timed before it, and that plan's name
    "raced_out_by": "float64",
    "raced_against": "string",
    # a GPU finalist prepared afresh this many more times after its point's first measurement
    # (harness/runoff.py): `process_samples` names their samples after the first processes'
    "runoff_preparations": "Int64",
    # an expanding algorithm's row (the graph API's plans): how many candidates it named for the
    # point, measured or not (timing plan_limit measures only the first ones: harness/executor)
    "plans_offered": "Int64",
    # the precision whose run gave this row its output and samples, where the algorithm computes
    # the row's own precision alike (the graph API's tf32 rows: measured with fp32's)
    "measured_with": "string",
    # two timing processes (harness/verified_once.py): the first's fingerprint of the output
    # bits, and where a later process took the first's verdict instead of verifying again
    "output_checksum": "string",
    "verified_in": "string",
    "achieved_tflops": "float64",
    "achieved_gbps": "float64",
    "roofline_pct": "float64",           # achieved rate as % of min(peak, intensity x bandwidth)
    "heuristic_rank": "Int64",           # position in cuDNN's _v7 heuristic list (0 = its pick)
    "heuristic_pick": "boolean",         # cuDNN's heuristic would pick this under this limit
    "find_pick": "boolean",              # cudnnFind*Ex's first call for the shape picked this
    "find_ms": "float64",                # the time cudnnFind reported for this algorithm
    # Find called again right after (harness/backends/cudnn/choices.py): its pick and time, the
    # workspace both calls were offered, and CUDA's module loading (lazy or eager)
    "find_pick_warm": "boolean", "find_ms_warm": "float64", "find_workspace_bytes": "Int64",
    "find_module_loading": "string",
    # where the row's wall time went (measurement.STAGE_COLUMNS), summed over its processes
    **{name: "float64" for name in STAGE_COLUMNS},
    "numerical_notes": "string",         # graph-API plan notes (tensor_core, down_convert, ...)
    "engine_id": "Int64",
    # a plan that ran past its cap: the engine it is a knob setting of, so a resumed run gives
    # that engine's plans the short cap at once (harness/worker.py)
    "hung_engine": "string",
    # graph-API plan: behaviour notes (runtime_compilation, ...) and its position in heuristic
    # mode A's list (0 = the frontend's own pick; empty when only mode B or FALLBACK offered it)
    "behavior_notes": "string",
    "graph_heuristic_rank": "Int64",
    # cudnn_graph "unfused": the plan that ran the convolution before the separate epilogue
    # kernels (its engine_id and notes fill those columns; its rank is left out, so the graph
    # heuristic policy never takes this row for one of the fused graph's plans)
    "conv_plan": "string",
    "first_call_ms": "float64",          # host wall time of the first launch (cold start)
    # samples per worker process, in samples_ms order ("10 10"): harness/process_split.py
    "process_samples": "string",
    # torch_gpu: the CUDA kernels one call of PyTorch's autotuned pick ran (sorted short names
    # joined by "+", from PyTorch's profiler) and their summed device time, in the row's process;
    # whether every timing process ran the same kernels (NA: not recorded, or one process);
    # where they did not, each process's kernels ("A || B") and median ms ("0.41 0.52"), and
    # the row times process 1's pick alone (harness/process_split.py)
    "torch_kernels": "string",
    # torch_cpu recurrent rows: "onednn" (oneDNN's RNN primitive) or "native" (PyTorch's ATen
    # ops), from the op names one profiled call ran (harness/backends/torch/rnn.py)
    "torch_rnn_path": "string",
    # cudnn_rnn: the reserve space a training forward fills for backward (bytes; beside the
    # workspace), and PERSIST_DYNAMIC's cudnnBuildRNNDynamic, a run-time compile counted in setup
    "rnn_reserve_bytes": "Int64",
    "rnn_build_ms": "float64",
    # what one timed call ran, in order (e.g. "restore the reserve space +
    # cudnnRNNBackwardData_v8": BackwardData overwrites the reserve space it reads)
    "rnn_calls": "string",
    # cpu:direct: which kernel ran ("numba 0.68.0", the compiled one: harness/backends/cpu/
    # direct_compiled.py) or "numpy: <why>" (few channels without numba, or many channels)
    "cpu_kernel": "string",
    # cpu:im2col: the time of the GEMM the direction reduces to, operands ready, at the row's
    # threads (harness/backends/cpu/gemm_floor.py): median_ms over it is the gathers' cost
    "gemm_floor_ms": "float64",
    # CPU rows of `run`: the FMA peak their precision and thread count may reach on this machine
    # and the share of it the row reached (harness/cpu_peaks.py); empty where not measured
    "peak_gflops": "float64",
    "peak_pct": "float64",
    "torch_kernels_ms": "float64",
    "torch_pick_stable": "boolean",
    "torch_picks": "string",
    "torch_pick_ms": "string",
    # CPU points (harness/contention.py): process CPU time / wall time over the timing loop,
    # the higher 1-minute load average read before and after them, and whether the point shared
    # the cores with other work even when re-measured (the reason says how); cpu_steal: the share
    # of the machine's CPU time the hypervisor took over the loop (virtual machines)
    "cpu_time_ratio": "float64",
    "load_avg": "float64",
    "cpu_steal": "float64",
    "contended": "boolean",
    # how its samples were judged: "schedstat" (each sample by its threads' run-queue waits) or
    # "cpu_wall_load" (the fallback where those cannot be read); samples discarded for waiting
    # (or lying on a scheduler tick) and taken again; the kept samples' threads' summed
    # run-queue wait over their wall time; the threads the point ran with (harness/threads.py)
    "contention_check": "string",
    "samples_retaken": "Int64",
    "cpu_wait": "float64",
    "cpu_threads": "Int64",
    # a fixed matmul on every core, timed around the point: the host's speed then
    # (contention.host_probe_ms; the slowest round's)
    "host_probe_ms": "float64",
    # a small matmul's time at one thread over its time at every core, the higher of two
    # readings around the point (harness/host_cores.py; multi-threaded points only): well under
    # its usual value the host withheld cores, and the point was timed again or is contended
    "host_speedup": "float64",
}

# A recurrent layer's shape (harness/rnn/problem.RnnProblem; NA in convolution rows): layers,
# sequences, features; `lengths`: each sequence's own length, space-separated (NA: all seq_len).
RNN_COLUMNS: dict[str, str] = {
    "cell": "string", "input_size": "Int64", "hidden_size": "Int64", "proj_size": "Int64",
    "rnn_layers": "Int64", "bidirectional": "boolean", "seq_len": "Int64", "rnn_bias": "boolean",
    "lengths": "string",
}

ENV_COLUMNS: dict[str, str] = {f"env_{name}": "string" for name in ENV_FIELDS}

COLUMNS: dict[str, str] = {**_CORE_COLUMNS, **RNN_COLUMNS, **EXTRA_COLUMNS, **ENV_COLUMNS}
# What a column that older files lack means there (it came later, with the default it names).
COLUMN_DEFAULTS: dict[str, Any] = {"threads": ALL_THREADS, **DEPTH_DEFAULTS, "out_d": 1,
                                   "op": epilogue.CONV, "output": AUTO_OUTPUT,
                                   "problem": families.CONV}
# Extras, env columns and the defaulted ones may be absent (older files).
REQUIRED_COLUMNS = tuple(c for c in _CORE_COLUMNS if c not in COLUMN_DEFAULTS)


def to_row(m: Measurement, run_id: str, suite: str, env: dict[str, Any],
           finished_at: str) -> dict[str, Any]:
    """Flatten one measurement, with its run and environment, into a row of COLUMNS."""
    p, pt = m.point.problem, m.point
    samples = list(m.samples_ms)
    median = m.median_ms
    bytes_per_element = element_bytes(pt.precision)
    result = pt.result_precision                                # None: int8 backward
    result_bytes = element_bytes(result) if result else None
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": suite,
        "point_id": pt.point_id, "planned_point_id": m.planned_point_id or pt.point_id,
        "finished_at": finished_at,
        "layer": p.name, "multiplicity": p.multiplicity, "batch": p.batch,
        **_shape_columns(p), "problem": p.kind,
        "flops": p.flops_of(pt.direction),
        "flops_no_padding": p.flops_no_padding,
        "bytes_moved": p.bytes_moved(bytes_per_element, result_bytes, pt.direction),
        "arithmetic_intensity": p.arithmetic_intensity(bytes_per_element, result_bytes,
                                                       pt.direction),
        "direction": pt.direction, "precision": pt.precision, "layout": pt.layout,
        "backend": pt.backend, "algorithm": pt.algorithm, "family": m.family,
        "workspace_limit": limit_to_column(pt.workspace_limit),
        "timing_mode": pt.timing.mode, "budget_ms": pt.timing.budget_ms,
        "threads": pt.threads, "op": pt.op, "output": pt.output or AUTO_OUTPUT,
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


def _shape_columns(p: Any) -> dict[str, Any]:
    """The descriptor and shape columns of a convolution, or of a recurrent layer (whose
    convolution columns hold 0: COLUMNS says int64, and no convolution has a 0 in them)."""
    if p.kind == families.RNN:
        conv = dict.fromkeys(_CONV_SHAPE, 0)
        lengths = None if p.lengths is None else " ".join(map(str, p.lengths))
        return {"descriptor": families.descriptor(p), **conv, "cell": p.cell,
                "input_size": p.input_size, "hidden_size": p.hidden_size,
                "proj_size": p.proj_size, "rnn_layers": p.layers,
                "bidirectional": p.bidirectional, "seq_len": p.seq_len, "rnn_bias": p.bias,
                "lengths": lengths}
    return {"descriptor": families.descriptor(p),
            **{name: getattr(p, name) for name in _CONV_SHAPE}}


# A convolution's shape columns, each a ConvProblem attribute of the same name.
_CONV_SHAPE = ("in_channels", "in_h", "in_w", "out_channels", "kernel_h", "kernel_w",
               "stride_h", "stride_w", "pad_top", "pad_left", "pad_bottom", "pad_right",
               "dilation_h", "dilation_w", "groups", "out_h", "out_w", *DEPTH_FIELDS, "out_d")


def finished_now() -> str:
    """The `finished_at` of a row measured just now (UTC, to the second)."""
    from datetime import datetime
    return datetime.now(UTC).isoformat(timespec="seconds")


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a DataFrame with exactly COLUMNS, in order, with their dtypes."""
    df = pd.DataFrame(list(rows)).reindex(columns=list(COLUMNS))   # missing columns: None
    for name, default in COLUMN_DEFAULTS.items():    # object first: an all-missing column is
        df[name] = df[name].astype(object).where(df[name].notna(), default)   # float, not text
    for name, dtype in COLUMNS.items():
        if dtype != "object":
            df[name] = df[name].astype(dtype)
    return df


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)
