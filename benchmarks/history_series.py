"""Does `convbench history` find a real step where it is, confirm it one run later, and stay
quiet before it? (issue 41's target, on real reruns)

    python benchmarks/history_series.py RESULTS [--step-at 12]

RESULTS: one results file (or folder) holding a series of runs of one suite, oldest first by
finish time, e.g. 20 reruns of `quick` with a real slowdown planted from run 12 on
(tests/run_planted.py --slowdown 0.15 run quick ...). For every prefix of the series (runs 1..n,
as CI would have seen it after run n) the history is analysed at its defaults; one line per n:
the steps found (where, state, change), whether run n would have failed CI (exit 1), and the
runs left out as slow spells. Then a verdict on the target: no step over runs 1..step-at-1, the
suite step suspected at run step-at and confirmed at step-at+1 between runs step-at-1 and step-at.
"""
from __future__ import annotations

import argparse

from harness import store
from harness.analysis import history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--step-at", type=int, default=12, help="first run with the step (1-based)")
    args = parser.parse_args()
    df = store.load(args.results)
    order = df.groupby("run_id")["finished_at"].max().sort_values().index.tolist()
    ok = True
    for n in range(2, len(order) + 1):
        (series,) = history.analyse(df[df["run_id"].isin(order[:n])])
        steps = [f"{s.series[:40]} at run {s.at + 1} {s.state} {s.ratio - 1:+.1%}"
                 for s in series.steps]
        spells = [f"{i + 1} ({r.noise})" for i, r in enumerate(series.runs) if r.noise]
        fails = bool(series.newest_confirms_regression())
        print(f"runs 1..{n:2d}: exit {int(fails)}; steps: {'; '.join(steps) or 'none'}"
              + (f"; left out: runs {', '.join(spells)}" if spells else ""))
        suite = [s for s in series.steps if s.series == "suite"]
        if n < args.step_at:
            ok &= not series.steps and not fails
        elif n == args.step_at:
            ok &= [(s.at + 1, s.state) for s in suite] == [(args.step_at, "suspected")]
        elif n == args.step_at + 1:
            ok &= [(s.at + 1, s.state) for s in suite] == [(args.step_at, "confirmed")] and fails
    print(f"target {'met' if ok else 'NOT met'}: no step before run {args.step_at}, suspected "
          f"at run {args.step_at}, confirmed at run {args.step_at + 1} (exit 1 there)")


if __name__ == "__main__":
    main()
