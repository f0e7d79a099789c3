"""`convbench ab`: the same points measured in two Python environments, interleaved.

Why interleaved: a baseline recorded at another time cannot tell a 10-25% regression from the
machine's drift. On the 2-core CI VM quiet reruns of unchanged code scatter 5-34% a row, and the
host has slow spells of 10-90 s in which every multi-threaded point runs 20-90% slower. Measuring
A and B in the same minutes, alternately, and judging the paired differences cancels most of
that (the "duet" method: Bulej et al., "Duet Benchmarking: Improving Measurement Accuracy in the
Cloud", 2020). So:
- Each environment runs its own worker process (harness/env_worker.py), started once and kept
  warm; inside it points are measured as `convbench run` measures them (verified against the
  float64 reference, GPU points in crash-isolated processes).
- The run is `rounds` rounds. Each round goes over the points' shards (the points of one
  problem at one precision, which share test data) in an order shuffled per round, and
  measures each shard in both environments back to back, which one first drawn per shard
  and round. A spell that lands on one side of a pair moves that round's ratio only, and as
  often for A as for B.
- Each round measures a point with its share of the samples (process_split.share), at least
  ROUND_MIN_SAMPLES, so a point costs about what a plain run costs per environment; the
  rounds' rows merge into one row per environment with `process_samples` saying how many
  samples each round took, as a run's worker processes do. harness/compare/paired.py judges
  the per-round ratios.
"""
from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness import process_split, runner
from harness.env_worker import EnvUnusable, EnvWorker
from harness.measurement import Measurement
from harness.sweep import Point

DEFAULT_ROUNDS = 8
# Each round's share of a point's samples is at least this many: the round's median is what is
# paired, and a share of the suite's floor (12 samples for quick over 8 rounds: 2) left it a
# mean of two. Samples cost little beside a point's set-up and check (~3 of ~25 ms a round).
ROUND_MIN_SAMPLES = 7
MIN_ROUNDS = 3          # a paired t-test needs a spread: two rounds give one degree of freedom
SIDES = ("base", "new")


def side_run_id(run_id: str, side: str) -> str:
    """The run id of one side's rows: the run's, ending in -base or -new (is_side_run)."""
    return f"{run_id}-ab-{side}"


def is_side_run(run_id: str) -> bool:
    """Whether rows come from one side of an `ab` run: two environments, not two commits, so
    a series of runs (`convbench history`) leaves them out."""
    return any(str(run_id).endswith(f"-ab-{side}") for side in SIDES)


def resolve_python(spec: str, label: str) -> str:
    """The interpreter an ENV names: a virtualenv folder (its bin/python), an executable (a
    Python, or a wrapper script that sets variables and execs one), or a name on PATH."""
    # Absolute, never resolved: a virtualenv's bin/python is a link whose target is another
    # environment (the children start in another folder, so a relative path would not do).
    path = Path(os.path.abspath(Path(spec).expanduser()))
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "Scripts" / "python.exe"):
            if candidate.exists():
                return str(candidate)
        raise EnvUnusable(f"{label} {spec}: a folder without bin/python: not a virtualenv")
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise EnvUnusable(f"{label} {spec}: not executable: name a Python interpreter or "
                              "a virtualenv")
        return str(path)
    found = shutil.which(spec)
    if found is None:
        raise EnvUnusable(f"{label} {spec}: no such file, folder or command: name a Python "
                          "interpreter or a virtualenv")
    return found


def parse_variables(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """['OPENBLAS_NUM_THREADS=1'] -> {'OPENBLAS_NUM_THREADS': '1'}."""
    variables = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum():
            raise EnvUnusable(f"{flag} {item!r}: give NAME=VALUE, e.g. OPENBLAS_NUM_THREADS=1")
        variables[name] = value
    return variables


def round_points(points: Sequence[Point], rounds: int) -> list[Point]:
    """The points as one round measures them: its share of the samples and budget, and one
    replicate inside the round (the rounds are the replicates)."""
    rounds_timing = [process_split.share(p.timing, rounds) for p in points]
    return [replace(p, timing=replace(t, min_samples=max(t.min_samples, ROUND_MIN_SAMPLES),
                                      max_samples=max(t.max_samples, ROUND_MIN_SAMPLES),
                                      cpu_rounds=1, gpu_processes=1))
            for p, t in zip(points, rounds_timing)]


@dataclass
class AbRows:
    """What the run measured: each side's merged rows, in plan order."""
    base: list[Measurement]
    new: list[Measurement]
    first: dict[str, int]    # side -> how many pairs it went first in


def run_ab(points: Sequence[Point], workers: dict[str, EnvWorker], rounds: int, seed: int = 0,
           on_round: Callable[[int, int], None] | None = None) -> AbRows:
    """Measure `points` in both workers' environments, `rounds` times, interleaved (module
    docstring); `on_round(done, rounds)` after each round."""
    rng = random.Random(seed)
    shards = runner.shards(points)
    by_round: dict[str, list[dict[str, list[Measurement]]]] = {side: [] for side in SIDES}
    first = dict.fromkeys(SIDES, 0)
    for number in range(rounds):
        order = list(shards)
        rng.shuffle(order)
        measured: dict[str, dict[str, list[Measurement]]] = {side: {} for side in SIDES}
        for shard in order:
            sides = list(SIDES)
            rng.shuffle(sides)
            first[sides[0]] += 1
            for side in sides:
                for row in workers[side].measure(round_points(shard, rounds)):
                    measured[side].setdefault(row.planned_id, []).append(row)
        for side in SIDES:
            by_round[side].append(measured[side])
        if on_round is not None:
            on_round(number + 1, rounds)
    merged = {side: _merged(points, by_round[side]) for side in SIDES}
    return AbRows(merged["base"], merged["new"], first)


def _merged(points: Sequence[Point], rounds: list[dict[str, list[Measurement]]]
            ) -> list[Measurement]:
    """One row per point (per plan of an expanding algorithm) over the rounds, as a run merges
    its worker processes' rows (process_split.merge)."""
    rows: list[Measurement] = []
    for group in runner.groups(points):
        ids = [p.point_id for p in group]
        per_round = [[m for pid in ids for m in measured.get(pid, [])] for measured in rounds]
        rows += process_split.merge(group, per_round)
    return rows
