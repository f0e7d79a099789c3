"""Own CPU algorithms against oneDNN (torch_cpu) by layer class, from a results file.

    .venv/bin/python evidence/studies/cpu_classes.py evidence/runs/cpu_compare-cpu-DATE.parquet \
        [--standalone results/onednn-alone.parquet [more alone runs ...]]

Class A: 3x3 stride-1 layers with >= 64 input and output channels (where Winograd and im2col
should match oneDNN); class B: every other layer. Each cell is the geometric mean over the class's
layers of (algorithm's median / torch_cpu's median at the same point), lower is better; "best
own" takes the fastest verified own algorithm per point. With --standalone, a run of torch_cpu
alone (`convbench run SUITE --backend torch_cpu`) is compared with the torch_cpu rows measured
inside the sweep: if the other library's threads slowed oneDNN there, every ratio above
flatters convbench (issue 16 asks for agreement within 5% before any ratio is quoted). Where
oneDNN's own runs disagree with each other (several alone runs show it), a second table takes at
each point the fastest torch_cpu median of the sweep and the alone runs: oneDNN at its best seen.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from harness import store  # noqa: E402
from harness.analysis import verified  # noqa: E402

KEYS = ["layer", "descriptor", "batch", "direction", "precision", "layout", "threads"]
PEER = "torch_cpu"


def layer_class(row: pd.Series) -> str:
    three_by_three = (row.kernel_h, row.kernel_w, row.stride_h, row.stride_w) == (3, 3, 1, 1)
    wide = min(row.in_channels, row.out_channels) >= 64
    return "A" if three_by_three and wide else "B"


def ratios(df: pd.DataFrame, peer_runs: list[pd.DataFrame] = (), pick: str = "min"
           ) -> pd.DataFrame:
    """Each own row's median over torch_cpu's at its point: the sweep's own torch_cpu row, or
    with `peer_runs` the fastest (`pick` "min": oneDNN at its best seen, the ratio least
    flattering to convbench) or the median ("median": one run's outlier either way left out)
    torch_cpu median of the sweep and those runs."""
    ok = verified(df)
    peers = pd.concat([ok[ok.backend == PEER], *(verified(r[r.backend == PEER]) for r in peer_runs)])
    peer = peers.groupby(KEYS)["median_ms"].agg(pick).rename("peer_ms")
    own = ok[ok.backend != PEER]
    best = own.sort_values("median_ms").drop_duplicates(KEYS).assign(algorithm="best own")
    rows = pd.concat([own, best]).join(peer, on=KEYS)
    rows = rows[rows.peer_ms.notna()]
    return rows.assign(ratio=rows.median_ms / rows.peer_ms,
                       klass=rows.apply(layer_class, axis=1))


def geomean(values: pd.Series) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def class_table(rows: pd.DataFrame) -> pd.DataFrame:
    table = rows.groupby(["klass", "direction", "algorithm"])["ratio"].agg(
        geomean=geomean, layers="size")
    return table["geomean"].unstack("algorithm").round(2)


def point_table(rows: pd.DataFrame) -> str:
    table = rows.pivot_table(index=["klass", "layer", "direction"], columns="algorithm",
                             values="ratio")
    table["oneDNN ms"] = rows.drop_duplicates(["layer", "direction"]).set_index(
        ["klass", "layer", "direction"]).peer_ms
    first = [c for c in ("best own", "im2col", "winograd_f4x4_3x3", "winograd_f2x2_3x3")
             if c in table]
    table = table[first + [c for c in table if c not in first]]
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.max_rows", 500):
        return table.round(2).to_string()


# A row's own relative noise (schema `noise`: the median's standard error / median) at or below
# this is a timing tight enough to be compared at 5%.
TIGHT_NOISE = 0.05


def _peer(df: pd.DataFrame) -> pd.DataFrame:
    return verified(df[df.backend == PEER]).set_index(KEYS)[["median_ms", "noise"]]


def agreement(a: pd.DataFrame, b: pd.DataFrame, label: str) -> str:
    """How torch_cpu's medians in two files agree: over every common point, and over those
    where both timings are tight (a point that scatters by itself cannot agree within 5%)."""
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    ratio = both.median_ms_a / both.median_ms_b
    tight = (both.noise_a <= TIGHT_NOISE) & (both.noise_b <= TIGHT_NOISE)

    def text(r: pd.Series) -> str:
        if r.empty:
            return "no points"
        within = int((r.sub(1).abs() <= 0.05).sum())
        return (f"median {r.median():.3f}, range {r.min():.3f}-{r.max():.3f}, "
                f"{within} of {len(r)} within 5%")
    return (f"{label}: all points {text(ratio)}; tight points (noise <= {TIGHT_NOISE:.0%} in "
            f"both) {text(ratio[tight])}")


def standalone_check(sweep: pd.DataFrame, alone: list[pd.DataFrame]) -> list[str]:
    """The sweep's torch_cpu rows against each run of torch_cpu alone, and, with two or more
    alone runs, the alone runs against the first: the agreement two runs without any other
    library reach, against which the sweep's is to be read."""
    lines = [agreement(_peer(sweep), _peer(run), f"torch_cpu in the sweep / alone run {i + 1}")
             for i, run in enumerate(alone)]
    lines += [agreement(_peer(run), _peer(alone[0]), f"alone run {i + 2} / alone run 1")
              for i, run in enumerate(alone[1:])]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--standalone", nargs="+", default=[],
                        help="results of torch_cpu alone (several: their own agreement too)")
    parser.add_argument("--per-point", action="store_true",
                        help="also each point's ratios (against the median oneDNN of the runs "
                             "where there are 2+ alone runs), with oneDNN's ms")
    args = parser.parse_args()
    df = store.load(args.results)
    env = df.iloc[0]
    print(f"{args.results}: {env.get('env_cpu_model', '?')}, {env.get('env_cpu_cores', '?')} cores, threads "
          f"{sorted(set(df.threads))} (0 = all cores), load average median "
          f"{df.load_avg.median():.2f} (max {df.load_avg.max():.2f}), "
          f"{int(df.contended.fillna(False).sum())} contended rows")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(class_table(ratios(df)).to_string())
    if args.standalone:
        alone = [store.load(f) for f in args.standalone]
        print("\n".join(standalone_check(df, alone)))
        for pick, what in (("min", "fastest"), ("median", "median"))[:1 + (len(alone) > 1)]:
            print(f"against each point's {what} torch_cpu median of the sweep and the "
                  f"{len(alone)} alone run(s):")
            with pd.option_context("display.width", 200, "display.max_columns", 20):
                print(class_table(ratios(df, alone, pick)).to_string())
    if args.per_point:
        pick = "median" if len(args.standalone) > 1 else "min"
        print(f"per point, time / oneDNN ({'in the sweep' if not args.standalone else pick + ' of the runs'}):")
        print(point_table(ratios(df, [store.load(f) for f in args.standalone], pick)))


if __name__ == "__main__":
    main()
