"""Which algorithm does cudnnFind*AlgorithmEx pick for a framework, and under which conditions?
(issue 38; plan in evidence/notes/issue38-plan-2026-11-27.md, section 1.)

Each condition runs in a fresh process that walks a model's shapes in network order, fwd, bwd_data,
bwd_filter per shape, and calls Find the way that condition says:
  first-lazy     Find once per shape in a new process (CUDA's default lazy module loading): what
                 CuPy, MXNet and PyTorch's v7 path get on a model's first iteration. The same
                 process then calls Find a second time on the shape ("second-call").
  first-lazy-2   first-lazy again in another process: is the first call's pick stable?
  first-eager    first-lazy with CUDA_MODULE_LOADING=EAGER (no lazy kernel loading).
  after-warmup   every algorithm Find could run is first run 3 times and timed (10 calls between
                 two events, after the warm-up), then Find is called. Its timings are the
                 "measured" times every condition's picks are costed with.
  ws-algos-max   first-lazy offering the largest workspace any algorithm asks (<= 4 GiB), as
                 PyTorch's v7 path does; the other conditions offer the largest workspace of the
                 heuristic's runnable entries (convbench's rule).
  ws-8MiB        first call, 8 MiB of workspace: CuPy v13's default.

A pick costs the measured time of the picked algorithm on that shape and direction; the step is
the sum over layers and directions with each shape's multiplicity. Output: one table per model
(text) and every Find result (JSON), both named by GPU and date.

    python evidence/studies/find_conditions.py SUITE.toml [...] --out DIR [--precision fp16]
    python evidence/studies/find_conditions.py --cost FOUND.json RUN.parquet [...]   # no GPU

The second form costs the picks with convbench's own medians from a run of the same shapes on the
same GPU (kernel time by graph replay, the GPU warm), which is what a policy's pick costs a user;
the first form's own event timings of 10 back-to-back calls per algorithm include launch gaps and
a GPU whose clocks had dropped while the host made the next shape's data.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

CONDITIONS = ("first-lazy", "first-lazy-2", "first-eager", "after-warmup", "ws-algos-max",
              "ws-8MiB")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
WARMUP_CALLS, TIMED_CALLS = 3, 10


# ---- the worker: one condition, one model, one fresh process ---------------------------------
def _worker(condition: str, suite: str, precision: str, layout: str) -> None:
    import cupy
    from harness.backends.cudnn import lib
    from harness.backends.cudnn.device_buffers import DeviceTensors
    from harness.backends.cudnn.legacy import FIND_WORKSPACE_CAP, _Descriptors, _operands
    from harness.reference import make_data
    from harness.suite.loader import load_suite
    from harness.sweep import Point

    names = {d: {v: k for k, v in lib.ALGOS[d].items()} for d in DIRECTIONS}
    stream = cupy.cuda.Stream(non_blocking=True)
    handle = lib.Handle(stream.ptr)
    buffers = DeviceTensors(cupy)
    for problem in load_suite(suite).problems:
        data = make_data(problem, precision)
        for direction in DIRECTIONS:
            point = Point(problem, direction, precision, layout, "cudnn", "all")
            tensors = buffers.get(point, data)
            descs = _Descriptors(point)
            in_a, in_b, out = descs.in_order(direction)
            a_ptr, b_ptr, out_buffer = _operands(direction, tensors)
            sizes = _workspace_sizes(lib, direction, handle, in_a, in_b, descs.conv, out)
            heuristic = [p for p in lib.heuristic(direction, handle, in_a, in_b, descs.conv, out)
                         if p.status == 0]
            size = {"ws-algos-max": max(sizes.values(), default=0),
                    "ws-8MiB": 8 << 20}.get(condition,
                                            max((p.memory for p in heuristic), default=0))
            size = min(size, FIND_WORKSPACE_CAP)
            workspace = cupy.empty(max(size, 1), dtype=cupy.uint8)

            call = (direction, handle, in_a, a_ptr, in_b, b_ptr, descs.conv, out,
                    out_buffer.data.ptr, workspace.data.ptr, size)

            def find(call=call, direction=direction):
                found = lib.find(*call)
                stream.synchronize()
                return [(names[direction][p.algo], p.status, p.memory, p.time, p.mathType)
                        for p in found]

            measured = {}
            if condition == "after-warmup":
                measured = _time_each(cupy, lib, stream, handle, direction, descs, a_ptr, b_ptr,
                                      out_buffer, sizes, size)
            t0 = time.perf_counter()
            first = find()
            first_wall = (time.perf_counter() - t0) * 1e3
            second = find() if condition.startswith("first-lazy") else None
            print(json.dumps({"layer": problem.name, "multiplicity": problem.multiplicity,
                              "direction": direction, "workspace": size,
                              "find_wall_ms": first_wall, "found": first, "found_again": second,
                              "measured_ms": measured}), flush=True)


def _workspace_sizes(lib, direction, handle, in_a, in_b, conv, out) -> dict[str, int]:
    sizes = {}
    for name, algo in lib.ALGOS[direction].items():
        try:
            sizes[name] = lib.workspace_size(direction, handle, in_a, in_b, conv, out, algo)
        except lib.CudnnError:
            pass
    return sizes


def _time_each(cupy, lib, stream, handle, direction, descs, a_ptr, b_ptr, out_buffer, sizes,
               size) -> dict[str, float]:
    """Each algorithm that fits `size`: 3 warm-up calls, then 10 calls between two events."""
    from harness.backends.cudnn.legacy import _scalars
    from harness.backends.cudnn.data_types import type_config
    in_a, in_b, out = descs.in_order(direction)
    run = lib.run_function(direction)
    times = {}
    for name, need in sizes.items():
        if need > size:
            continue
        ws = cupy.empty(max(need, 1), dtype=cupy.uint8)
        alpha, beta = _scalars(type_config(PRECISION, direction, None).output)
        args = (handle.ptr, alpha, in_a.ptr, a_ptr, in_b.ptr, b_ptr, descs.conv.ptr,
                lib.ALGOS[direction][name], lib.c_void_p(ws.data.ptr), need, beta, out.ptr,
                lib.c_void_p(out_buffer.data.ptr))
        if any(run(*args) != 0 for _ in range(WARMUP_CALLS)):
            continue
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        with stream:
            start.record()
            for _ in range(TIMED_CALLS):
                run(*args)
            end.record()
        end.synchronize()
        times[name] = cupy.cuda.get_elapsed_time(start, end) / TIMED_CALLS
    return times


PRECISION = "fp16"     # set from the command line in the worker


# ---- the parent: run each condition, then cost the picks --------------------------------------
def _run_condition(condition: str, suite: str, args) -> list[dict] | str:
    env = dict(os.environ)
    if condition == "first-eager":
        env["CUDA_MODULE_LOADING"] = "EAGER"
    command = [sys.executable, __file__, "--worker", condition, "--precision", args.precision,
               "--layout", args.layout, suite]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.worker_timeout_s)
    except subprocess.TimeoutExpired:
        return f"timed out after {args.worker_timeout_s} s"
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _pick(found, workspace) -> str | None:
    for name, status, memory, *_ in found or []:
        if status == 0 and memory <= workspace:
            return name
    return None


def _table(model: str, runs: dict[str, list[dict] | str]) -> list[str]:
    warm = runs.get("after-warmup")
    if not isinstance(warm, list):
        return [f"{model}: no after-warmup run ({warm}), so no measured times to cost picks"]
    measured = {(r["layer"], r["direction"]): r["measured_ms"] for r in warm}
    best = sum(r["multiplicity"] * min(r["measured_ms"].values()) for r in warm
               if r["measured_ms"])
    lines = [f"## {model}: step = sum over layers x directions of multiplicity x measured ms of "
             f"the pick; best legacy algorithm per point: {best:.3f} ms",
             "condition | call | step ms | x best | picks = best | picks = after-warmup | "
             "median find/measured: implicit_precomp_gemm, algo_1, implicit_gemm, algo_0 | "
             "Find wall ms (sum)"]
    warm_picks = {(r["layer"], r["direction"]): _pick(r["found"], r["workspace"]) for r in warm}
    for condition in CONDITIONS:
        rows = runs.get(condition)
        if not isinstance(rows, list):
            lines.append(f"{condition} | - | {rows or 'not run'}")
            continue
        for call, key in (("first", "found"), ("second", "found_again")):
            if call == "second" and rows[0].get(key) is None:
                continue
            lines.append(_condition_line(condition, call, key, rows, measured, warm_picks, best))
    return lines


def _condition_line(condition, call, key, rows, measured, warm_picks, best) -> str:
    step, same_best, same_warm, missing = 0.0, 0, 0, 0
    ratios = {name: [] for name in ("implicit_precomp_gemm", "algo_1", "implicit_gemm", "algo_0")}
    for r in rows:
        where = (r["layer"], r["direction"])
        times = measured.get(where, {})
        pick = _pick(r[key], r["workspace"])
        if pick not in times:
            missing += 1
            continue
        step += r["multiplicity"] * times[pick]
        same_best += pick == min(times, key=times.get)
        same_warm += pick == warm_picks.get(where)
        for name, status, _, found_ms, _ in r[key]:
            if status == 0 and name in ratios and times.get(name):
                ratios[name].append(found_ms / times[name])
    medians = ", ".join(f"{statistics.median(v):.1f}" if v else "-" for v in ratios.values())
    wall = sum(r["find_wall_ms"] for r in rows) if call == "first" else float("nan")
    note = f" ({missing} points without a measured pick)" if missing else ""
    return (f"{condition} | {call} | {step:.3f} | {step / best:.2f} | {same_best}/{len(rows)} | "
            f"{same_warm}/{len(rows)} | {medians} | {wall:.0f}{note}")


def cost_with_run(found_json: Path, runs: list[str]) -> list[str]:
    """Each condition's picks costed with a convbench run's measured medians (graph replay: the
    GPU time of the kernels, steady clocks) of the same GPU and shapes: legacy cuDNN rows at the
    JSON's precision, beside the run's legacy best, its best over every backend and PyTorch."""
    import pandas as pd
    found = json.loads(found_json.read_text())
    lines = []
    for run in runs:
        model = next(m for m in found if f"-{m}-" in Path(run).name)
        df = pd.read_parquet(run)
        df = df[(df["precision"] == PRECISION) & (df["status"] == "ok")]
        legacy = df[df["backend"] == "cudnn"]
        times = {(r.layer, r.direction, r.algorithm): r.median_ms for r in legacy.itertuples()}
        multiplicity = df.groupby("layer")["multiplicity"].first()

        def step(series):
            return sum(multiplicity[layer] * ms for (layer, _), ms in series.items())
        per_point = ["layer", "direction"]
        best = legacy.groupby(per_point)["median_ms"].min()
        torch = df[df["backend"] == "torch_gpu"].groupby(per_point)["median_ms"].min()
        lines += [f"## {model}: picks costed with {Path(run).name} ({PRECISION}); legacy best "
                  f"{step(best):.2f} ms, best of all backends "
                  f"{step(df.groupby(per_point)['median_ms'].min()):.2f} ms, PyTorch "
                  f"{step(torch):.2f} ms",
                  "condition | call | step ms | x legacy best | x PyTorch | picks = legacy best"]
        for condition, rows in found[model].items():
            if not isinstance(rows, list):
                lines.append(f"{condition} | - | {rows}")
                continue
            for call, key in (("first", "found"), ("second", "found_again")):
                if rows[0].get(key) is None:
                    continue
                picks = {(r["layer"], r["direction"]): _pick(r[key], r["workspace"]) for r in rows}
                total = sum(r["multiplicity"] * times[(r["layer"], r["direction"],
                                                      picks[(r["layer"], r["direction"])])]
                            for r in rows)
                same = sum(times[(*where, pick)] == best[where] for where, pick in picks.items())
                lines.append(f"{condition} | {call} | {total:.2f} | {total / step(best):.2f} | "
                             f"{total / step(torch):.2f} | {same}/{len(rows)}")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--worker", choices=CONDITIONS)
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--layout", default="NHWC")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--worker-timeout-s", type=float, default=150)
    parser.add_argument("--deadline-s", type=float, default=480,
                        help="start no condition after this many seconds")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--cost", type=Path, metavar="FOUND_JSON",
                        help="no GPU: cost FOUND_JSON's picks with the runs named as SUITES "
                             "(results .parquet files) and print the table")
    args = parser.parse_args()
    global PRECISION
    PRECISION = args.precision
    if args.cost:
        print("\n".join(cost_with_run(args.cost, args.suites)))
        return
    if args.worker:
        _worker(args.worker, args.suites[0], args.precision, args.layout)
        return
    # nvidia-smi, not CuPy: the parent must not hold a CUDA context beside the workers
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    gpu = "-".join(smi[0].lower().replace("nvidia ", "").split()[:1]) if smi else "gpu"
    start, report, everything = time.monotonic(), [], {}
    for suite in args.suites:
        model = Path(suite).name.split("-")[1] if "-" in Path(suite).name else Path(suite).stem
        runs = {}
        for condition in args.conditions.split(","):
            if time.monotonic() - start > args.deadline_s:
                runs[condition] = "not run: past the deadline"
                continue
            t0 = time.monotonic()
            runs[condition] = _run_condition(condition, suite, args)
            print(f"{model} {condition}: {time.monotonic() - t0:.1f} s", flush=True)
        everything[model] = runs
        report += _table(model, runs) + [""]
    stamp = f"{gpu}-{date.today().isoformat()}"
    args.out.mkdir(parents=True, exist_ok=True)
    header = [f"# cudnnFind pick under call conditions, {args.precision} {args.layout}, "
              f"{gpu}, {date.today()}", f"# {' '.join(sys.argv)}", ""]
    (args.out / f"find-conditions-{stamp}.txt").write_text("\n".join(header + report))
    (args.out / f"find-conditions-{stamp}.json").write_text(json.dumps(everything))
    print("\n".join(report))


if __name__ == "__main__":
    main()
