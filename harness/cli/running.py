"""`convbench run`: the sweep, where it writes, the cluster, progress, and the best per layer."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from harness.cli.common import EXIT_INTERRUPTED, EXIT_OK, UserError, csv_list, say, warn, writing
from harness.cli.gpu_default import with_gpu_default
from harness.cli.tables import print_best, print_profile, print_stages


def load_sweep(args: argparse.Namespace):
    """The suite with the sweep flags applied (an empty flag value is refused, never "all"), and
    on a GPU machine without --backend the GPU default (harness/cli/gpu_default.py)."""
    from harness import suite as suites
    from harness.suite.overrides import sweep_with_overrides
    sweep = suites.load_suite(args.suite)
    limits = csv_list(args.workspace_limit, "--workspace-limit")
    sweep = sweep_with_overrides(
        sweep, backends=csv_list(args.backend, "--backend"),
        algorithms=csv_list(args.algorithm, "--algorithm"),
        directions=csv_list(args.direction, "--direction"),
        precisions=csv_list(args.precision, "--precision"),
        layouts=csv_list(args.layout, "--layout"), batch=args.batch, budget_ms=args.budget_ms,
        workspace_limits=limits, timing_mode=args.timing_mode, gpu_timer=args.gpu_timer,
        gpu_processes=args.gpu_processes, cpu_rounds=args.cpu_rounds,
        threads=csv_list(args.threads, "--threads"),
        ops=csv_list(args.op, "--op"), outputs=csv_list(args.output_type, "--output-type"),
        race=False if args.no_race else None, runoff=False if args.no_runoff else None,
        plan_limit=args.plan_limit, build_budget_s=args.build_budget_s)
    if args.layer is not None:
        wanted = {name for flag in args.layer for name in csv_list(flag, "--layer")}
        kept = tuple(p for p in sweep.problems if _layer_names(p) & wanted)
        missing = wanted - {n for p in kept for n in _layer_names(p)}
        if missing:
            known = ", ".join(p.name for p in sweep.problems)
            raise UserError(f"--layer: no layer named {', '.join(sorted(missing))} in suite "
                            f"{sweep.name!r}; layers: {known}")
        sweep = replace(sweep, problems=kept)
    sweep, lines = with_gpu_default(sweep, args)
    for line in lines:
        say(line)
    return sweep


def _layer_names(problem) -> set[str]:
    """What --layer accepts for a layer: "conv1" names "resnet_50:conv1" too."""
    return {problem.name, problem.name.rsplit(":", 1)[-1]}


class Measured(NamedTuple):
    rows: Any               # this run's rows, a resumed run's earlier sittings included
    interrupted: bool
    sitting: Any            # the rows measured now: what this sitting's wall time was spent on


def measure(sweep, points, output: RunOutput, seed: int, cluster=None,
            use_cache: bool = True) -> Measured:
    """Run `points` here or on `cluster` (harness.cluster.Cluster), appending rows to the output
    as they finish. `use_cache`: start from the engines that
    hung in earlier runs on this GPU and libraries, and remember this run's (harness/hang_cache.py),
    and keep the graph API's plan labels (harness/plan_cache.py); not on a cluster, whose
    workers keep no memory."""
    from harness import cpu_memory, runner, store
    from harness import env as envmod
    from harness.cli import caches
    cpu_memory.keep_freed_memory()     # before the environment that the rows record
    env = envmod.fingerprint()
    use_cache = use_cache and cluster is None
    from harness import cpu_peaks
    from harness.backends.cpu import peaks as measured_peaks
    peaks = measured_peaks.for_run(env, points, say) if cluster is None else None
    env.update(cpu_peaks.env_fields(peaks) if peaks else {})
    remembered = caches.remembered_hangs(env) if use_cache else set()
    plans = caches.plan_cache_for(env) if use_cache else None
    with writing(output.path):
        writer = store.ResultWriter(output.path, output.mode)
    # A full disk (or a folder made read-only) mid-run: one line, and the rows so far are kept.
    kept = (f"; the rows written so far are kept in {writer.journal}: once it can be written, "
            "rerun with --resume to finish")

    def mark_done(point_ids: list[str]) -> None:
        with writing(output.path, kept):
            writer.mark_done(point_ids)
    resuming = output.mode is store.WriteMode.RESUME
    try:
        earlier = writer.resume_state() if resuming else store.ResumeState(set(), {}, set())
        run_id = earlier.run_id or output.run_id
    except BaseException:
        writer.close()
        raise
    if writer.damaged_lines:
        warn(f"{writer.journal}: skipped {len(writer.damaged_lines)} damaged line(s) "
             f"(line {', '.join(map(str, writer.damaged_lines[:5]))}): a killed run's last "
             "row, or garbage; the rows after them count")
    todo = [p for p in points if p.point_id not in earlier.finished]
    say(f"suite {sweep.name}: {len(points)} points"
        + (f", {len(points) - len(todo)} already done" if earlier.finished else "")
        + f"; machine: {env.get('gpu_name') or env.get('cpu_model')}")
    say(f"writing {output.path}")
    interrupted = False
    measured_now: set[str] = set()
    try:
        with _progress(len(todo)) as progress:
            def on_result(m, measured_on: dict[str, Any] = env,
                          finished_at: str | None = None) -> None:
                stamp = finished_at or store.finished_now()
                row = store.to_row(m, run_id, sweep.name, measured_on, stamp)
                row.update(measured_peaks.row_columns(row, peaks))
                with writing(output.path, kept):
                    writer.append(row)
                measured_now.add(row["point_id"])
                progress.advance(m)
            try:
                if cluster is None:
                    runner.run_points(todo, on_result, seed, mark_done,
                                      earlier.measured_variants,
                                      earlier.hung_engines | remembered, plans)
                else:       # a part-measured point is measured whole again (its rows deduped)
                    _measure_on_cluster(cluster, todo, on_result, seed, progress.shard_done,
                                        mark_done)
            except KeyboardInterrupt:
                interrupted = True
    except BaseException:
        writer.close()       # the journal stays: --resume carries on from it
        raise
    with writing(output.path, kept):
        df = writer.finish(_with_roofline)
    total = f" ({len(df)} rows in the file)" if len(df) != writer.rows_written else ""
    say(f"wrote {writer.rows_written} rows to {output.path}{total}")
    mine = df[df["run_id"] == run_id] if len(df) else df    # not an appended file's others
    if use_cache:
        caches.remember_hangs(env, remembered, store.hung_engines(mine) if len(mine) else set())
    sitting = mine[mine["point_id"].isin(measured_now)] if len(mine) else mine
    return Measured(mine, interrupted, sitting)


def _measure_on_cluster(cluster, points, on_result: Callable[..., None], seed: int,
                        shard_done: Callable[..., None], mark_done: Callable[[list[str]], None]
                        ) -> None:
    """Shards go out largest first; each finished shard's rows are written with the
    environment of the worker that measured them and the time each point finished there (not
    when the shard came back), and the progress counts shards per worker."""
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
        mark_done(sorted({m.planned_id for m in shard.measurements}))   # every point has a row
        per_worker[shard.worker] += 1
        shard_done(number, len(shards), shard.worker, len(shard.measurements), per_worker)


def connect_cluster(args: argparse.Namespace, points):
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
    say(f"cluster {args.cluster}: {len(names)} worker(s): {', '.join(names)}"
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


def run_output(args: argparse.Namespace, suite_name: str, tag: str = "") -> RunOutput:
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
    if args.out is not None:
        path = _checked_out_path(args.out)
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            OutputLock(path).release()   # another run writing there is the first thing to say
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
    path = runs.new_run_path(suite_name, env, run_id, tag)
    with writing(path):      # a file called `results` in the way: said before measuring
        path.parent.mkdir(parents=True, exist_ok=True)
    return RunOutput(path, mode, run_id)


def _checked_out_path(text: str) -> Path:
    """--out as a file to write: a symbolic link to a file stands for its target (written
    through, the link kept)."""
    from harness import store
    if not text:
        raise UserError("--out '' is empty: give a file name ending in .parquet or .csv")
    path = Path(text)
    if path.is_dir():
        raise UserError(f"--out {text} is a folder: give a file name ending in .parquet or .csv")
    if path.suffix not in store.RESULT_SUFFIXES:
        raise UserError(f"--out {text}: a results file ends in .parquet or .csv")
    if path.parent.exists() and not path.parent.is_dir():
        raise UserError(f"--out {text}: {path.parent} is not a folder")
    target = store.real_output(path)
    if target != path and (target.is_dir() or target.suffix not in store.RESULT_SUFFIXES):
        raise UserError(f"--out {text} is a link to {target}, which is no .parquet or .csv "
                        "file: name the results file itself")
    return target


def planned_points(sweep):
    from harness import memory, runner
    plan = runner.plan(sweep)
    for note in plan.notes:
        say(f"note: {note}")
    memory.require_some_fit(plan.points)     # a suite no point of which fits: exit 2
    return plan.points


def cmd_run(args: argparse.Namespace) -> int:
    if args.source is not None:
        return _run_model(args)
    if args.input is not None or args.name is not None:
        raise UserError(f"--{'input' if args.input is not None else 'name'} needs --model")
    args.suite = args.suite or "quick"
    sweep = load_sweep(args)
    return _run(args, sweep, run_output(args, sweep.name))


def _run_model(args: argparse.Namespace) -> int:
    """`run --model SOURCE`: import it, keep its suite beside the results, run that suite."""
    from harness import models
    from harness.cli.models import suite_for_model
    if args.suite is not None:
        raise UserError(f"--model {args.source} and suite {args.suite!r}: give one of them")
    output = run_output(args, args.name or models.default_name(args.source))
    args.suite = str(suite_for_model(args, output.path))
    return _run(args, load_sweep(args), output)


def _run(args: argparse.Namespace, sweep, output: RunOutput) -> int:
    import time
    points = planned_points(sweep)
    started = time.perf_counter()
    with connect_cluster(args, points) as cluster:
        measured = measure(sweep, points, output, args.seed, cluster,
                           use_cache=not args.no_cache)
    print_best(measured.rows)
    print_stages(measured.sitting, time.perf_counter() - started, whole=measured.rows)
    if getattr(args, "profile", False):
        print_profile(measured.rows)
    if measured.interrupted:
        warn("interrupted: finished rows were kept; rerun with --resume to finish")
        return EXIT_INTERRUPTED
    return EXIT_OK


def _with_roofline(df):
    """Roofline columns on GPU rows, each GPU's from its own measured peaks (convbench peaks)."""
    from harness import peaks
    annotated, missing = peaks.annotate_by_machine(df)
    if missing:
        say(f"note: no measured peaks for {', '.join(missing)} on this machine; run "
            "`convbench peaks` there to get roofline columns")
    return annotated


class _progress:
    """A rich progress bar on a terminal, one plain line per row otherwise. It counts planned
    points, not rows: an expanding algorithm (every graph-API plan) turns one planned point
    into many rows, and "[4482/960]" helps nobody. A cluster run's bar also says how many shards
    each worker finished (the one bar over all shards); off a terminal that is a line a shard."""

    def __init__(self, total: int):
        self.total = total
        self.rows = 0
        self._points: set[str] = set()
        self._bar = None
        self._shards = ""

    def __enter__(self) -> _progress:
        if sys.stdout.isatty():
            from rich.progress import Progress
            self._bar = Progress(transient=True)
            self._bar.start()
            self._task = self._bar.add_task("measuring", total=self.total)
        return self

    def advance(self, m) -> None:
        self.rows += 1
        self._points.add(m.planned_id)
        done = len(self._points)
        if self._bar is not None:
            self._bar.update(self._task, completed=done,
                             description=self._shards or m.point.problem.label[:40])
            return
        p = m.point
        timing = f" {m.median_ms:.4g} ms" if m.median_ms is not None else ""
        detail = "" if m.ok else f" ({m.reason[:100]})"
        rows = f", row {self.rows}" if self.rows != done else ""
        say(f"[{done}/{self.total}{rows}] {p.problem.label} {p.direction} {p.precision} "
            f"{p.layout} {p.backend}:{p.algorithm}: {m.status}{timing}{detail}")

    def shard_done(self, number: int, total: int, worker: str, rows: int,
                   per_worker: dict[str, int]) -> None:
        counts = ", ".join(f"{name} {n}" for name, n in sorted(per_worker.items()))
        if self._bar is None:
            say(f"shard {number}/{total} done on worker {worker} ({rows} rows; shards per "
                f"worker: {counts})")
            return
        self._shards = f"shards {number}/{total} ({counts})"
        self._bar.update(self._task, description=self._shards)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
