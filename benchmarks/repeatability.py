"""Do two back-to-back sweeps agree? (issue 4: within 2%, median over points >= 50 us)

    python benchmarks/repeatability.py FIRST SECOND [--min-ms 0.05]
"""
from __future__ import annotations

import argparse

from harness import store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--min-ms", type=float, default=0.05)
    args = parser.parse_args()
    a, b = (store.load(path) for path in (args.first, args.second))
    ok = ["point_id", "median_ms", "algorithm", "layer", "direction", "precision", "layout"]
    a = a[a["status"] == "ok"][ok].drop_duplicates("point_id")
    b = b[b["status"] == "ok"][["point_id", "median_ms"]].drop_duplicates("point_id")
    both = a.merge(b, on="point_id", suffixes=("_first", "_second"))
    both = both[both["median_ms_first"] >= args.min_ms]
    deviation = (both["median_ms_second"] / both["median_ms_first"] - 1).abs()
    print(f"{len(both)} points measured ok in both runs with a median >= {args.min_ms} ms")
    print(f"|second/first - 1|: median {deviation.median() * 100:.2f}%, "
          f"90th percentile {deviation.quantile(0.9) * 100:.2f}%, max {deviation.max() * 100:.2f}%")
    print(f"points within 2%: {(deviation <= 0.02).mean() * 100:.1f}%")
    worst = both.assign(deviation=deviation).nlargest(5, "deviation")
    print(worst.drop(columns=["point_id"]).round(4).to_string(index=False))


if __name__ == "__main__":
    main()
