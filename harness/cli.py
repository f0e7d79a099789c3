"""The `convbench` command: argument parsing, and the only place that prints or sets exit codes.

Exit codes: 0 success, 1 a regression (compare/check) and nothing else, 2 bad input or an unusable
environment (one line naming the value, no traceback), 3 an internal error (one line, and the file
holding the traceback), 130 interrupted (finished rows are kept).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UserError(Exception):
    """Bad input: printed as one line, exit code 2."""


# ---- helpers ------------------------------------------------------------------------------------
def _say(text: str = "") -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:      # `convbench table ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _warn(text: str) -> None:
    print(f"convbench: {text}", file=sys.stderr, flush=True)


def _csv_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise UserError(f"empty item in list {text!r}")
    return items


# ---- run ----------------------------------------------------------------------------------------
def _load_sweep(args: argparse.Namespace):
    from harness import suite as suites
    sweep = suites.load_suite(args.suite)
    limits = None
    if args.workspace_limit is not None:
        limits = _csv_list(args.workspace_limit)
    sweep = suites.sweep_with_overrides(
        sweep, backends=_csv_list(args.backend), algorithms=_csv_list(args.algorithm),
        directions=_csv_list(args.direction), precisions=_csv_list(args.precision),
        layouts=_csv_list(args.layout), batch=args.batch, budget_ms=args.budget_ms,
        workspace_limits=limits, timing_mode=args.timing_mode, gpu_timer=args.gpu_timer,
        gpu_processes=args.gpu_processes)
    if args.layer:
        wanted = set(_csv_list(args.layer))
        kept = tuple(p for p in sweep.problems if _layer_names(p) & wanted)
        missing = wanted - {n for p in kept for n in _layer_names(p)}
        if missing:
            known = ", ".join(p.name for p in sweep.problems)
            raise UserError(f"--layer: no layer named {', '.join(sorted(missing))} in suite "
                            f"{sweep.name!r}; layers: {known}")
        sweep = replace(sweep, problems=kept)
    return sweep


def _layer_names(problem) -> set[str]:
    """What --layer accepts for a layer: "conv1" names "resnet_50:conv1" too."""
    return {problem.name, problem.name.rsplit(":", 1)[-1]}


def _measure(sweep, points, output: "RunOutput", seed: int, cluster=None) -> tuple[Any, bool]:
    """Run `points` here or on `cluster` (harness.cluster.Cluster), appending rows to the output
    as they finish; (this run's rows, interrupted)."""
    from harness import env as envmod
    from harness import runner, store
    env = envmod.fingerprint()
    writer = store.ResultWriter(output.path, output.mode)
    resuming = output.mode is store.WriteMode.RESUME
    try:
        done = writer.finished_point_ids() if resuming else set()
        run_id = (writer.resumed_run_id() if resuming else None) or output.run_id
    except BaseException:
        writer.close()
        raise
    if writer.damaged_lines:
        _warn(f"{writer.journal}: skipped {len(writer.damaged_lines)} damaged line(s) "
              f"(line {', '.join(map(str, writer.damaged_lines[:5]))}): a killed run's last "
              "row, or garbage; the rows after them count")
    todo = [p for p in points if p.point_id not in done]
    _say(f"suite {sweep.name}: {len(points)} points"
         + (f", {len(points) - len(todo)} already done" if done else "")
         + f"; machine: {env.get('gpu_name') or env.get('cpu_model')}")
    _say(f"writing {output.path}")
    interrupted = False
    try:
        with _progress(len(todo)) as advance:
            def on_result(m, measured_on: dict[str, Any] = env,
                          finished_at: str | None = None) -> None:
                stamp = finished_at or store.finished_now()
                writer.append(store.to_row(m, run_id, sweep.name, measured_on, stamp))
                advance(m)
            try:
                if cluster is None:
                    runner.run_points(todo, on_result, seed=seed)
                else:
                    _measure_on_cluster(cluster, todo, on_result, seed)
            except KeyboardInterrupt:
                interrupted = True
    except BaseException:
        writer.close()       # the journal stays: --resume carries on from it
        raise
    df = writer.finish(_with_roofline)
    total = f" ({len(df)} rows in the file)" if len(df) != writer.rows_written else ""
    _say(f"wrote {writer.rows_written} rows to {output.path}{total}")
    return (df[df["run_id"] == run_id] if len(df) else df), interrupted


def _measure_on_cluster(cluster, points, on_result: Callable[..., None], seed: int) -> None:
    """Shards go out largest first; each finished shard's rows are written with the
    environment of the worker that measured them and the time each point finished there (not
    when the shard came back), and a line counts shards per worker."""
    from collections import Counter
    from harness import runner
    shards = runner.shards(points)
    per_worker: Counter[str] = Counter()
    seen_env: dict[str, Any] | None = None    # a lost shard's rows take the last worker's
    for number, shard in enumerate(cluster.run(shards, seed), 1):
        refused = cluster.foreign_worker(shard)
        if refused:
            raise UserError(refused)
        seen_env = shard.env or seen_env
        for m, finished_at in zip(shard.measurements, shard.finished_at):
            if seen_env:
                on_result(m, seen_env, finished_at)
            else:                                 # nothing seen yet: the client's machine
                on_result(m, finished_at=finished_at)
        per_worker[shard.worker] += 1
        counts = ", ".join(f"{name} {n}" for name, n in sorted(per_worker.items()))
        _say(f"shard {number}/{len(shards)} done on worker {shard.worker} "
             f"({len(shard.measurements)} rows; shards per worker: {counts})")


def _cluster(args: argparse.Namespace, points):
    """The cluster --cluster names, connected and checked (a context that closes it), or a
    context holding None; harness.cluster, and with it dask, is imported only here."""
    import contextlib
    if not args.cluster:
        if args.workers is not None or args.cluster_config is not None:
            flag = "--workers" if args.workers is not None else "--cluster-config"
            raise UserError(f"{flag} needs --cluster")
        return contextlib.nullcontext(None)
    from harness import cluster as clustermod
    gpu, cpu = clustermod.needs_gpu(list(points)), clustermod.needs_cpu(list(points))
    try:
        cluster = clustermod.connect(args.cluster, args.workers, args.cluster_config, gpu)
    except clustermod.ClusterError as err:
        raise UserError(str(err)) from None
    try:
        environments = cluster.environments()
        _refuse_mixed(environments, cpu, args.allow_mixed)
    except BaseException:
        cluster.close()
        raise
    if not args.allow_mixed:
        cluster.comparable = clustermod.comparability_fields(cpu)
        cluster.reference_env = next(iter(environments.values()), {})
    names = cluster.worker_names()
    _say(f"cluster {args.cluster}: {len(names)} worker(s): {', '.join(names)}"
         + (f"; dashboard {cluster.dashboard}" if cluster.dashboard else ""))
    return cluster


def _refuse_mixed(environments: dict[str, dict[str, Any]], cpu: bool, allowed: bool) -> None:
    """Workers that differ in what makes timings comparable would make one table of rows that
    cannot be ranked together: refused unless --allow-mixed (every row names its machine).
    `cpu`: some point is timed on a CPU, so the CPU model matters too."""
    from harness.cluster import comparability_fields, difference
    differs = difference(list(environments.values()), comparability_fields(cpu))
    if differs and not allowed:
        field, seen = differs
        raise UserError(f"--cluster: workers differ in {field} ({', '.join(seen)}); "
                        "pass --allow-mixed to run on all of them anyway")


@dataclass(frozen=True)
class RunOutput:
    """Where a run writes, and what it may do to what is there already."""
    path: Path
    mode: Any            # store.WriteMode
    run_id: str


def _run_output(args: argparse.Namespace, suite_name: str, tag: str = "") -> RunOutput:
    """--out / --resume / --append / --force, checked before anything is measured."""
    from harness import env as envmod
    from harness import runs, store
    from harness.locks import OutputLock
    chosen = [flag for flag in ("resume", "append", "force") if getattr(args, flag, False)]
    if len(chosen) > 1:
        raise UserError(f"--{chosen[0]} and --{chosen[1]} cannot be combined")
    mode = store.WriteMode.NEW
    if chosen:
        mode = {"resume": store.WriteMode.RESUME, "append": store.WriteMode.APPEND,
                "force": store.WriteMode.REPLACE}[chosen[0]]
    run_id = runs.new_run_id()
    if args.out:
        path = _checked_out_path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        OutputLock(path).release()       # another run writing there is the first thing to say
        store.check_output(path, mode)
        return RunOutput(path, mode, run_id)
    env = envmod.fingerprint()
    if mode is store.WriteMode.RESUME:
        unfinished = runs.latest_unfinished(suite_name, env)
        if unfinished is None:
            raise UserError(f"--resume: no unfinished run of suite {suite_name!r} on this "
                            f"machine in {runs.RESULTS_DIR}/; name its file with --out")
        return RunOutput(unfinished, mode, run_id)
    if mode is not store.WriteMode.NEW:
        raise UserError(f"--{chosen[0]} needs --out naming the results file")
    return RunOutput(runs.new_run_path(suite_name, env, run_id, tag), mode, run_id)


def _checked_out_path(text: str) -> Path:
    from harness import store
    path = Path(text)
    if path.is_dir():
        raise UserError(f"--out {text} is a folder: give a file name ending in .parquet or .csv")
    if path.suffix not in store.RESULT_SUFFIXES:
        raise UserError(f"--out {text}: a results file ends in .parquet or .csv")
    if path.parent.exists() and not path.parent.is_dir():
        raise UserError(f"--out {text}: {path.parent} is not a folder")
    return path


def _planned(sweep):
    from harness import runner
    planned = runner.plan(sweep)
    for note in planned.notes:
        _say(f"note: {note}")
    from harness import memory
    memory.require_some_fit(planned.points)     # a suite no point of which fits: exit 2
    return planned.points


def cmd_run(args: argparse.Namespace) -> int:
    sweep = _load_sweep(args)
    output = _run_output(args, sweep.name)
    points = _planned(sweep)
    with _cluster(args, points) as cluster:
        df, interrupted = _measure(sweep, points, output, args.seed, cluster)
    _print_best(df)
    if interrupted:
        _warn("interrupted: finished rows were kept; rerun with --resume to finish")
        return EXIT_INTERRUPTED
    return EXIT_OK


def _with_roofline(df):
    """Roofline columns on GPU rows, each GPU's from its own measured peaks (convbench peaks)."""
    from harness import peaks
    annotated, missing = peaks.annotate_by_machine(df)
    if missing:
        _say(f"note: no measured peaks for {', '.join(missing)} on this machine; run "
             "`convbench peaks` there to get roofline columns")
    return annotated


class _progress:
    """A rich progress bar on a terminal, one plain line per row otherwise. It counts planned
    points, not rows: an expanding algorithm (every graph-API plan) turns one planned point
    into many rows, and "[4482/960]" helps nobody."""

    def __init__(self, total: int):
        self.total = total
        self.rows = 0
        self._points: set[str] = set()
        self._bar = None

    def __enter__(self) -> Callable[[Any], None]:
        if sys.stdout.isatty():
            from rich.progress import Progress
            self._bar = Progress(transient=True)
            self._bar.start()
            self._task = self._bar.add_task("measuring", total=self.total)
        return self.advance

    def advance(self, m) -> None:
        self.rows += 1
        self._points.add(m.planned_point_id or m.point.point_id)
        done = len(self._points)
        if self._bar is not None:
            self._bar.update(self._task, completed=done, description=m.point.problem.label[:40])
            return
        p = m.point
        timing = f" {m.median_ms:.4g} ms" if m.median_ms is not None else ""
        detail = "" if m.ok else f" ({m.reason[:100]})"
        rows = f", row {self.rows}" if self.rows != done else ""
        _say(f"[{done}/{self.total}{rows}] {p.problem.label} {p.direction} {p.precision} "
             f"{p.layout} {p.backend}:{p.algorithm}: {m.status}{timing}{detail}")

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---- table, list, shapes, env -------------------------------------------------------------------
def _print_best(df) -> None:
    from harness import analysis
    best = analysis.best_per_setting(df)
    counts = ", ".join(f"{n} {s}" for s, n in analysis.status_counts(df).items())
    if best.empty:
        _say(f"no verified results ({counts})")
        return
    _say("\nbest verified algorithm per layer (" + counts + "):")
    shown = best.assign(
        limit=best["workspace_limit"].map(_format_limit),
        best=best["backend"] + ":" + best["algorithm"],
        ms=best["median_ms"].map(lambda v: f"{v:.4g}"),
        gflops=best["gflops"].map(lambda v: f"{v:.1f}"),
        vs_next=best["speedup"].map(lambda v: "" if v != v or v is None else f"{v:.2f}x"))
    columns = ["layer", "direction", "effective_precision", "layout", "limit", "best", "ms",
               "gflops", "runner_up", "vs_next"]
    _say(shown[columns].rename(columns={"effective_precision": "precision"})
         .to_string(index=False))


def _format_limit(value: int) -> str:
    from harness.store import limit_from_column
    limit = limit_from_column(value)
    return "unlimited" if limit is None else f"{limit / (1 << 20):g}MiB"


def _results_paths(arguments: list[str]) -> list[Path]:
    """Files, folders, globs, or suite names (the latest finished run of the suite here)."""
    from harness import env as envmod
    from harness import runs
    return [path for argument in arguments
            for path in runs.resolve(argument, envmod.fingerprint)]


def _load_results(arguments: list[str]):
    import pandas as pd
    from harness import store
    frames = [store.load(path) for path in _results_paths(arguments)]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def cmd_table(args: argparse.Namespace) -> int:
    from harness import analysis
    for gpu, part in analysis.by_gpu(_load_results(args.results)):
        if gpu is not None:
            _say(f"\n== {gpu}: {len(part)} rows ==")
        if args.selection:
            from harness.analysis import selection
            _say(selection.format_selection(part))
        else:
            _print_best(part)
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from harness import backends
    for name, reason in backends.available().items():
        backend = backends.get(name)
        state = "available" if reason is None else f"unavailable: {reason}"
        _say(f"{name} ({backend.device}) - {backend.description} [{state}]")
        for algo in backend.algorithms():
            _say(f"    {algo.name:<22} {algo.family:<14} {algo.description}")
    return EXIT_OK


def cmd_shapes(args: argparse.Namespace) -> int:
    from harness import suite as suites
    from harness.problem import to_benchdnn
    sweep = suites.load_suite(args.suite)
    if args.batch is not None:
        sweep = suites.sweep_with_overrides(sweep, batch=args.batch)
    total = 0.0
    _say(f"{'layer':<34} {'x':>3} {'input':>16} {'output':>16} {'kernel':>9} {'GFLOP':>9}  benchdnn")
    for p in sweep.problems:
        gflop = p.flops / 1e9
        total += gflop * p.multiplicity
        _say(f"{p.label:<34} {p.multiplicity:>3} {'x'.join(map(str, p.input_shape)):>16} "
             f"{'x'.join(map(str, p.output_shape)):>16} {p.kernel_h}x{p.kernel_w}/s{p.stride_h:<3} "
             f"{gflop:>9.3f}  {to_benchdnn(p)}")
    _say(f"{len(sweep.problems)} layers; one forward pass of the network: {total:.3f} GFLOP")
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from harness import env as envmod
    for key, value in envmod.fingerprint().items():
        _say(f"{key:<24} {'' if value is None else value}")
    return EXIT_OK


def cmd_peaks(args: argparse.Namespace) -> int:
    from harness import env as envmod
    from harness import peaks
    from harness.backends import get
    reason = get("cudnn").unavailable_reason()
    if reason and "cudnn" not in reason.lower():
        raise UserError(f"peaks needs a CUDA GPU with CuPy: {reason}")
    env = envmod.fingerprint()
    measured = None if args.refresh else peaks.load_cached(env)
    if measured is None:
        _say(f"measuring {env.get('gpu_name')} (cuBLAS GemmEx through CuPy, 1 GiB copy)...")
        measured = peaks.measure(env)
    _say(peaks.describe(measured))
    _say(f"cached at {peaks.cache_path(env)}")
    return EXIT_OK


# ---- regression checks --------------------------------------------------------------------------
def _compare_options(args: argparse.Namespace, row_threshold: float | None = None):
    """CompareOptions from the flags; `row_threshold` is the suite file's [compare] threshold."""
    from harness import compare
    try:
        threshold = (compare.parse_threshold(args.threshold) if args.threshold is not None
                     else row_threshold if row_threshold is not None
                     else compare.DEFAULT_THRESHOLD)
        return compare.CompareOptions(
            alpha=args.alpha, threshold=threshold,
            layer_thresholds=compare.parse_layer_thresholds(args.layer_threshold or []),
            correction=args.correction, allow_env_mismatch=args.allow_env_mismatch,
            suite_threshold=(compare.parse_threshold(args.suite_threshold)
                             if args.suite_threshold is not None
                             else compare.DEFAULT_SUITE_THRESHOLD),
            # `check` has no candidate file: its candidate is the run it makes
            labels=(args.baseline, getattr(args, "candidate", None) or "this run"))
    except ValueError as err:
        raise UserError(str(err)) from None


def _judge(base, new, options):
    from harness import compare
    try:
        return compare.compare(base, new, options)
    except compare.EnvironmentMismatch as err:
        raise UserError(f"{err} (pass --allow-env-mismatch to compare anyway)") from None


def _verdict_exit(comparison, args: argparse.Namespace) -> int:
    from harness.report.compare_summary import markdown_summary
    summary = markdown_summary(comparison)
    _say(summary)
    try:
        if args.report:
            Path(args.report).write_text(summary)
        if args.verdicts:
            comparison.to_frame().to_csv(args.verdicts, index=False)
    except OSError as err:
        raise UserError(f"cannot write {err.filename}: {err.strerror}") from None
    return EXIT_REGRESSION if comparison.fails(args.fail_on) else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    base, new = _load_results([args.baseline]), _load_results([args.candidate])
    return _verdict_exit(_judge(base, new, _compare_options(args)), args)


def cmd_check(args: argparse.Namespace) -> int:
    """Run the suite, compare with the baseline, re-measure flagged rows up to --confirm times,
    and fail only for regressions that every round confirms."""
    sweep = _load_sweep(args)
    timing = replace(sweep.timing, min_samples=max(sweep.timing.min_samples, args.min_samples),
                     max_samples=max(sweep.timing.max_samples, args.min_samples))
    sweep = replace(sweep, timing=timing)
    options = _compare_options(args, sweep.regression_threshold)
    base = _load_results([args.baseline])
    output = _run_output(args, sweep.name, tag="check")
    points = _planned(sweep)
    with _cluster(args, points) as cluster:
        return _check_rounds(args, sweep, points, output, base, options, cluster)


def _check_rounds(args, sweep, points, output: "RunOutput", base, options, cluster) -> int:
    from harness import compare
    new, interrupted = _measure(sweep, points, output, args.seed, cluster)
    if interrupted:
        return EXIT_INTERRUPTED
    wanted = {p.point_id for p in points}
    base = base[base["point_id"].isin(wanted)]
    comparison = _judge(base, new, options)
    for round_number in range(1, args.confirm + 1):
        flagged = set(compare.flagged_point_ids(comparison))
        if not flagged:
            break
        _say(f"confirmation round {round_number}: re-measuring {len(flagged)} flagged points")
        again = [p for p in points if p.point_id in flagged]
        path = output.path.with_name(f"{output.path.stem}-confirm{round_number}"
                                     f"{output.path.suffix}")
        rerun, interrupted = _measure(sweep, again, replace(output, path=path), args.seed,
                                      cluster)
        if interrupted:
            return EXIT_INTERRUPTED
        comparison = compare.confirm(comparison, base, rerun, options)
    return _verdict_exit(comparison, args)


def _add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threshold", help="practical slowdown threshold, e.g. 5%% or 0.05 "
                                       "(default: the suite's, else 5%%)")
    p.add_argument("--layer-threshold", action="append", metavar="LAYER=PCT",
                   help="a threshold for one layer (repeatable)")
    p.add_argument("--suite-threshold",
                   help="threshold of the suite verdict on the geometric-mean ratio (default 3%%)")
    p.add_argument("--fail-on", default="slower", choices=["slower", "ambiguous", "never"],
                   help="exit 1 for: slower = a SLOWER row or suite (default); ambiguous = also "
                        "an AMBIGUOUS or MISSING row or an AMBIGUOUS suite; never = only report")
    p.add_argument("--alpha", type=float, default=0.002, help="significance level (0.002)")
    p.add_argument("--correction", default="bh", choices=["bh", "holm", "none"],
                   help="multiple-comparison control across rows (default bh)")
    p.add_argument("--allow-env-mismatch", action="store_true",
                   help="compare runs from different GPUs/drivers/libraries; marked in the report")
    p.add_argument("--report", help="also write the Markdown summary here")
    p.add_argument("--verdicts", help="write every row's verdict as CSV here")


def cmd_report(args: argparse.Namespace) -> int:
    from harness import report
    results = _results_paths(args.results)
    out = _report_folder(Path(args.out) if args.out else
                         Path("reports") / Path(results[0].name.removesuffix(".partial.jsonl")).stem,
                         bool(args.out), args.force)
    from harness import analysis
    from harness.runs import machine_label
    try:
        peaks = report.read_peaks(args.peaks) if args.peaks else None
        # Rows from several GPU models (a mixed cluster run): one report per GPU, in subfolders.
        parts = analysis.by_gpu(report.load_frames(results))
        if peaks and len(parts) > 1:
            raise UserError(f"--peaks {args.peaks} holds one GPU's ceilings and these results "
                            f"come from {len(parts)} machines; leave --peaks out (each report "
                            "then takes its GPU's ceilings from the rows' roofline columns)")
        for gpu, part in parts:
            folder = out if gpu is None else out / machine_label({"gpu_name": gpu})
            title = args.title if gpu is None or args.title is None else f"{args.title} ({gpu})"
            paths = report.render_report(part, folder, baseline_policy=args.baseline_policy,
                                         peaks=peaks, embed_images=args.embed_images,
                                         title=title, jobs=args.jobs)
            _say(f"wrote {paths.html} and {paths.markdown} with {len(paths.figures)} figures")
    except report.PeaksError as err:
        raise UserError(f"--peaks {err}") from None
    except (report.PolicyError, report.EmptyResults) as err:
        raise UserError(str(err)) from None
    return EXIT_OK


def _report_folder(out: Path, given: bool, replace: bool = False) -> Path:
    """The report's folder; an existing file there (or in its way) is refused, never replaced,
    and so is an earlier report there (its pages, or a per-GPU report in a subfolder) unless
    --force says to replace it."""
    flag = "--out " if given else "the default report folder "
    for folder in (out, *out.parents):
        if folder.exists() and not folder.is_dir():
            what = "" if folder == out else f": {folder} is a file"
            raise UserError(f"{flag}{out} is not a folder{what}; a report is a folder "
                            "(index.html, index.md, figures/): name another with --out")
    earlier = [p for pattern in ("index.html", "index.md", "*/index.html", "*/index.md")
               for p in out.glob(pattern)] if out.is_dir() else []
    if earlier and not replace:
        raise UserError(f"{flag}{out} already holds a report ({earlier[0]}); name another "
                        "folder with --out, or pass --force to replace it")
    return out


def _utf8_text(text: str) -> str:
    """An argparse type: text that can be written as UTF-8 (a shell passes undecodable bytes
    as lone surrogates, which no page can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid UTF-8 text") from None
    return text


def _count(lowest: int) -> Callable[[str], int]:
    """An argparse type: an integer >= lowest, named in the one-line error when not."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {lowest}")
        return value
    return parse


# ---- parser -------------------------------------------------------------------------------------
def _add_sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", help="comma list of backends (default: the suite's)")
    p.add_argument("--algorithm", help="comma list of algorithms (default: all of each backend)")
    p.add_argument("--direction", help="comma list of fwd, bwd_data, bwd_filter")
    p.add_argument("--precision", help="comma list of fp32, tf32, fp16, bf16, fp64")
    p.add_argument("--layout", help="comma list of NCHW, NHWC")
    p.add_argument("--batch", type=int, help="override every layer's batch size")
    p.add_argument("--layer", help="comma list of layer names to run (default: all)")
    p.add_argument("--workspace-limit", help="comma list of limits, e.g. 0,64MiB,unlimited")
    p.add_argument("--budget-ms", type=float, help="time budget per point in milliseconds")
    p.add_argument("--timing-mode", help="warm (default) or cold (caches flushed per sample)")
    p.add_argument("--gpu-timer", help="graph (default: replay a CUDA graph of the calls, kernel "
                                       "time) or stream (stream order, as eager frameworks run)")
    p.add_argument("--gpu-processes", type=int,
                   help="worker processes that share each GPU point's samples (default 2): a "
                        "point's time can depend on the process it runs in, and a row that "
                        "shows that spread is not mistaken for a regression by compare")


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line naming the value, exit 2 (subcommands inherit this class)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"convbench: error: {message} (see {self.prog} --help)\n")


def _add_cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", metavar="local|tcp://HOST:PORT|slurm",
                   help="spread the sweep over Dask workers (pip install 'convbench[cluster]'): "
                        "local = one per visible GPU (or --workers CPU workers), tcp:// = an "
                        "existing scheduler, slurm = dask-jobqueue (--cluster-config)")
    p.add_argument("--workers", type=_count(1),
                   help="--cluster local: how many workers (default: one per visible GPU; "
                        "2 for a CPU sweep)")
    p.add_argument("--cluster-config", metavar="TOML",
                   help="--cluster slurm: a file with a [cluster] table (examples/cluster-slurm.toml)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="--cluster: run even where workers differ in GPU, driver, CUDA or cuDNN")


def _add_existing_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--append", action="store_true",
                   help="--out exists: keep its rows and add this run's as a run of their own")
    p.add_argument("--force", action="store_true",
                   help="--out exists: replace it with this run's rows (atomically, at the end)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="convbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="sweep a suite and write verified timings")
    run.add_argument("suite", nargs="?", default="quick", help="suite name or TOML path")
    _add_sweep_flags(run)
    run.add_argument("--out", help="results file (.parquet or .csv); default: a new file "
                                   "results/<suite>-<machine>-<run id>.parquet")
    run.add_argument("--resume", action="store_true",
                     help="continue an unfinished run: the one in --out, else the latest "
                          "unfinished run of the suite on this machine")
    _add_existing_output_flags(run)
    run.add_argument("--seed", type=_count(0), default=0, help="seed of the random test data")
    _add_cluster_flags(run)
    run.set_defaults(func=cmd_run)

    table = sub.add_parser("table", help="best verified algorithm per layer from results")
    table.add_argument("results", nargs="+")
    table.add_argument("--selection", action="store_true",
                       help="how often cuDNN's heuristic, cudnnFind, the graph heuristic and "
                            "PyTorch's autotuner pick the fastest verified algorithm")
    table.set_defaults(func=cmd_table)

    sub.add_parser("list", help="backends and algorithms, and why any is unavailable"
                   ).set_defaults(func=cmd_list)

    shapes = sub.add_parser("shapes", help="a suite's layers, FLOPs and benchdnn strings")
    shapes.add_argument("suite")
    shapes.add_argument("--batch", type=int)
    shapes.set_defaults(func=cmd_shapes)

    sub.add_parser("env", help="the environment fingerprint stored with every row"
                   ).set_defaults(func=cmd_env)
    peaks = sub.add_parser("peaks", help="measure this GPU's matrix rates and bandwidth (cached)")
    peaks.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    peaks.set_defaults(func=cmd_peaks)
    _add_regression_parsers(sub)
    report = sub.add_parser("report", help="HTML and Markdown report with figures")
    report.add_argument("results", nargs="+", help="results files or folders")
    report.add_argument("--out", help="output folder (default reports/<first results name>)")
    report.add_argument("--baseline-policy", help="heuristic, find, torch, a backend or "
                                                  "backend:algorithm to compare the best with")
    report.add_argument("--peaks", help="peaks JSON (convbench peaks) for the roofline figure")
    report.add_argument("--embed-images", action="store_true",
                        help="put the figures inside index.html (one self-contained file)")
    report.add_argument("--title", type=_utf8_text, help="page title (default: from the data)")
    report.add_argument("--jobs", type=_count(1), default=os.cpu_count() or 1,
                        help="processes drawing figures (default: all cores)")
    report.add_argument("--force", action="store_true",
                        help="replace a report already in the output folder")
    report.set_defaults(func=cmd_report)
    return parser


def _add_regression_parsers(sub) -> None:
    verdicts = """\
Judge every point measured in both runs: SLOWER / FASTER beyond the threshold and significant
(one-sided Mann-Whitney U, corrected across rows), SAME within it, AMBIGUOUS beyond it but not
significant, MISSING when the candidate lost it. Then the run as a whole, printed first: the
geometric-mean ratio new/base of the matched rows with a 99% bootstrap interval over rows, SLOWER
when the whole interval lies above the suite threshold (3%), so a slowdown of every row is caught
even where too few samples a point leave each row AMBIGUOUS."""
    exit_codes = """\
exit codes:
  0  no regression under the --fail-on policy
  1  a regression under the policy (and nothing else)
  2  bad input or unusable environment: unreadable, empty or other-schema files, no point in
     common, different GPUs/drivers/libraries without --allow-env-mismatch (one line)
  3  internal error (one line, and where the full traceback was written)"""
    compare = sub.add_parser("compare", help="regression verdicts between two results; "
                                             "exit 1 on a slower row or suite",
                             description=verdicts, epilog=exit_codes,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("baseline")
    compare.add_argument("candidate")
    _add_compare_flags(compare)
    compare.set_defaults(func=cmd_compare)

    check = sub.add_parser("check", help="run a suite and compare it with a baseline, "
                                         "confirming flagged rows before failing",
                           description=verdicts + "\n\nFlagged rows are re-measured up to "
                           "--confirm times (every row when the suite is SLOWER);\nonly verdicts "
                           "that every round repeats fail the check.", epilog=exit_codes,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("suite")
    check.add_argument("--baseline", required=True)
    check.add_argument("--confirm", type=_count(0), default=1,
                       help="confirmation rounds (default 1)")
    check.add_argument("--min-samples", type=_count(1), default=20,
                       help="samples per point (fewer can never reach significance)")
    check.add_argument("--out", help="results of this run (default: a new file "
                                     "results/<suite>-<machine>-<run id>-check.parquet)")
    _add_existing_output_flags(check)
    check.add_argument("--seed", type=_count(0), default=0)
    _add_cluster_flags(check)
    _add_sweep_flags(check)
    _add_compare_flags(check)
    check.set_defaults(func=cmd_check)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input, not a harness bug."""
    from harness.backends.base import BackendUnavailable
    from harness.problem import ProblemError
    from harness.runner import PlanError
    from harness.locks import OutputBusy
    from harness.runs import RunNotFound
    from harness.store import ResultsError
    from harness.suite import SuiteError
    return (UserError, SuiteError, PlanError, ProblemError, BackendUnavailable, ResultsError,
            OutputBusy, RunNotFound, FileNotFoundError, IsADirectoryError)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:      # --help (0) or a bad argument (2, already said in one line)
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    try:
        return args.func(args)
    except _user_errors() as err:
        _warn(f"error: {_one_line(err)}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _warn("interrupted")
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - a harness bug: one line here, the traceback on disk
        where = _save_traceback()
        _warn(f"internal error: {type(err).__name__}: {_one_line(err)} (a convbench bug; the "
              f"full traceback is in {where})")
        return EXIT_INTERNAL


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _save_traceback() -> str:
    import tempfile
    import traceback
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(tempfile.gettempdir()) / f"convbench-traceback-{stamp}-{os.getpid()}.txt"
    try:
        path.write_text(f"convbench {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}",
                        errors="backslashreplace")
    except OSError:
        return "(could not be written)"
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
