"""`convbench ab SUITE --base ENV --new ENV`: a paired, interleaved run of two environments
(harness/ab.py), judged with compare's words and exit codes (harness/compare/paired.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import UserError, say, writing
from harness.cli.results import compare_options, verdict_exit
from harness.cli.running import load_sweep, planned_points

# Fingerprint fields that differ between any two processes or say nothing about the code that
# runs: left out of "what is being compared".
_NOT_COMPARED = ("hostname", "git_commit")


def cmd_ab(args: argparse.Namespace) -> int:
    from harness import ab, backends, store
    from harness.compare.paired import judge_paired
    from harness.env_worker import EnvUnusable, EnvWorker
    if args.rounds < ab.MIN_ROUNDS:
        raise UserError(f"--rounds {args.rounds}: a paired verdict needs at least "
                        f"{ab.MIN_ROUNDS} rounds")
    sweep = load_sweep(args)
    options = compare_options(args, sweep.regression_threshold)
    points = planned_points(sweep)
    from harness import runs
    run_id = runs.new_run_id()        # the files' names and the rows' run ids share it
    paths = _output_paths(args, sweep.name, run_id)
    workers: dict = {}
    try:
        for side in ab.SIDES:
            workers[side] = EnvWorker(
                f"--{side}", ab.resolve_python(getattr(args, side), f"--{side}"),
                ab.parse_variables(getattr(args, f"{side}_var"), f"--{side}-var"), args.seed,
                backends.registry(), sorted({p.backend for p in points}))
            _same_schema(workers[side].start(), workers[side])
        for line in _what_is_compared(workers):
            say(line)
        say(f"suite {sweep.name}: {len(points)} points x 2 environments x {args.rounds} rounds, "
            "interleaved")
        rows = ab.run_ab(points, workers, args.rounds, args.seed,
                         on_round=lambda done, total: say(f"round {done}/{total} done"))
    except EnvUnusable as err:
        raise UserError(str(err)) from None
    finally:
        for worker in workers.values():
            worker.close()
    frames = {}
    for side, measured in (("base", rows.base), ("new", rows.new)):
        env = workers[side].info.get("fingerprint", {})
        frames[side] = store.frame([store.to_row(m, ab.side_run_id(run_id, side), sweep.name, env,
                                                 store.finished_now()) for m in measured])
        with writing(paths[side]):
            store.write(frames[side], paths[side])
        say(f"wrote {len(measured)} rows of the {side} environment to {paths[side]}")
    return verdict_exit(judge_paired(frames["base"], frames["new"], options), args)


def _output_paths(args: argparse.Namespace, suite: str, run_id: str) -> dict[str, Path]:
    """--out PREFIX -> PREFIX-base.parquet and PREFIX-new.parquet (default: results/<suite>-
    <machine>-<run id>-ab-{base,new}.parquet); an existing file is kept unless --force."""
    from harness import env, runs
    if args.out is not None:
        if not args.out.strip():
            raise UserError("--out '' is empty: give a path prefix, e.g. results/ab")
        prefix = Path(args.out.removesuffix(".parquet"))
        paths = {side: prefix.with_name(f"{prefix.name}-{side}.parquet") for side in ("base",
                                                                                       "new")}
    else:
        machine = env.fingerprint(include_gpu=False)
        paths = {side: runs.new_run_path(suite, machine, run_id, f"ab-{side}")
                 for side in ("base", "new")}
    for path in paths.values():
        if path.exists() and not args.force:
            raise UserError(f"{path} exists: pass --force to replace it, or another --out")
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
    return paths


def _same_schema(info: dict, worker) -> None:
    """Both sides must write rows this convbench reads as its own."""
    from harness.schema import SCHEMA_VERSION
    if info.get("schema") != SCHEMA_VERSION:
        raise UserError(f"{worker.label} {worker.python}: its convbench "
                        f"{info.get('version')} writes results schema {info.get('schema')}, "
                        f"this one {SCHEMA_VERSION}: install the same convbench in both")


def _what_is_compared(workers) -> list[str]:
    """The two environments' differences: what the verdicts are about (never refused)."""
    base, new = (workers[side] for side in ("base", "new"))
    lines = [f"base: {base.python}" + _variables(base.variables),
             f"new:  {new.python}" + _variables(new.variables)]
    fb, fn = base.info.get("fingerprint", {}), new.info.get("fingerprint", {})
    differ = [f"{key} {fb.get(key)!s} -> {fn.get(key)!s}" for key in sorted(set(fb) | set(fn))
              if key not in _NOT_COMPARED and fb.get(key) != fn.get(key)]
    if base.info.get("version") != new.info.get("version"):
        differ.insert(0, f"convbench {base.info.get('version')} -> {new.info.get('version')}")
    variables = sorted(set(base.variables) | set(new.variables))
    differ += [f"${name} {base.variables.get(name, '(unset)')} -> "
               f"{new.variables.get(name, '(unset)')}" for name in variables
               if base.variables.get(name) != new.variables.get(name)]
    lines.append("what differs: " + ("; ".join(differ) if differ else
                                     "nothing convbench records (an A/A run)"))
    return lines


def _variables(variables) -> str:
    return "".join(f" {name}={value}" for name, value in variables.items())
