"""Own CPU algorithms against oneDNN (torch_cpu) by layer class, from a results file.

    .venv/bin/python benchmarks/cpu_classes.py results/cpu_compare-cpu-DATE.parquet \
        [--standalone results/onednn-alone.parquet]

Class A: 3x3 stride-1 layers with >= 64 input and output channels (where Winograd and im2col
should match oneDNN); class B: every other layer. Each cell is the geometric mean over the class's
layers of (algorithm's median / torch_cpu's median at the same point), lower is better; "best
own" takes the fastest verified own algorithm per point. With --standalone, a run of torch_cpu
alone (`convbench run SUITE --backend torch_cpu`) is compared with the torch_cpu rows measured
inside the sweep: if the other library's threads slowed oneDNN there, every ratio above
flatters convbench (issue 16 asks for agreement within 5% before any ratio is quoted).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from harness import store  # noqa: E402
from harness.analysis import verified  # noqa: E402

KEYS = ["layer", "descriptor", "batch", "direction", "precision", "layout", "threads"]
PEER = "torch_cpu"


def layer_class(row: pd.Series) -> str:
    three_by_three = (row.kernel_h, row.kernel_w, row.stride_h, row.stride_w) == (3, 3, 1, 1)
    wide = min(row.in_channels, row.out_channels) >= 64
    return "A" if three_by_three and wide else "B"


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    ok = verified(df)
    peer = ok[ok.backend == PEER].set_index(KEYS)["median_ms"].rename("peer_ms")
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


def standalone_check(sweep: pd.DataFrame, alone: pd.DataFrame) -> str:
    a = verified(sweep[sweep.backend == PEER]).set_index(KEYS)["median_ms"]
    b = verified(alone[alone.backend == PEER]).set_index(KEYS)["median_ms"]
    both = (a / b).dropna()
    within = (both.sub(1).abs() <= 0.05).mean()
    return (f"torch_cpu in the sweep / alone over {len(both)} points: median "
            f"{both.median():.3f}, range {both.min():.3f}-{both.max():.3f}, "
            f"{within:.0%} within 5%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--standalone")
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
        print(standalone_check(df, store.load(args.standalone)))


if __name__ == "__main__":
    main()
