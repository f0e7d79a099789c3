"""Compare a one-GPU run with the same sweep spread over several GPUs (issue 14's evidence).

    python3 benchmarks/scaleout_check.py ONE.parquet MANY.parquet [--resumed-gap-s 60]

Prints whether both hold the same point ids and statuses, the per-point time ratio MANY / ONE
(median, 5th-95th percentile over points ok in both) and each run's wall time from its first to
its last `finished_at`. A run resumed across several device calls has idle gaps between them:
`--resumed-gap-s S` leaves out every gap between consecutive rows longer than S seconds (the time
no sweep ran) and says how much it left out, so the wall times compare work with work.
Exit 0 when the files could be compared (the verdict is printed, not encoded in the exit code).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd


def wall_seconds(rows: pd.DataFrame, resumed_gap_s: float | None) -> tuple[float, float]:
    """(wall time, seconds of gaps left out) from first to last finished_at."""
    times = pd.to_datetime(rows["finished_at"]).sort_values()
    gaps = times.diff().dt.total_seconds().fillna(0.0)
    left_out = float(gaps[gaps > resumed_gap_s].sum()) if resumed_gap_s else 0.0
    return float((times.iloc[-1] - times.iloc[0]).total_seconds()) - left_out, left_out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one")
    ap.add_argument("many")
    ap.add_argument("--resumed-gap-s", type=float, help="leave out idle gaps longer than this")
    args = ap.parse_args(argv)
    one, many = (pd.read_parquet(p).set_index("point_id") for p in (args.one, args.many))
    same_ids = set(one.index) == set(many.index)
    print(f"points: {len(one)} one-GPU, {len(many)} many-GPU; same ids: {same_ids}"
          f" (only one-GPU {len(set(one.index) - set(many.index))},"
          f" only many-GPU {len(set(many.index) - set(one.index))})")
    both = one.index.intersection(many.index)
    differ = (one.loc[both, "status"] != many.loc[both, "status"]).sum()
    print(f"statuses differing: {differ}; counts one {one['status'].value_counts().to_dict()}")
    ok = both[(one.loc[both, "status"] == "ok") & (many.loc[both, "status"] == "ok")]
    ratio = many.loc[ok, "median_ms"] / one.loc[ok, "median_ms"]
    p5, p50, p95 = np.percentile(ratio, [5, 50, 95])
    print(f"time ratio many/one over {len(ok)} ok points: median {p50:.4f}"
          f" (5th-95th percentile {p5:.3f}-{p95:.3f}); within 2%: {abs(p50 - 1) <= 0.02}")
    wall_one, gap_one = wall_seconds(one, args.resumed_gap_s)
    wall_many, gap_many = wall_seconds(many, args.resumed_gap_s)
    for name, wall, gap in (("one-GPU", wall_one, gap_one), ("many-GPU", wall_many, gap_many)):
        note = f" ({gap:.0f} s of gaps between device calls left out)" if gap else ""
        print(f"{name} wall time: {wall:.0f} s{note}")
    print(f"wall ratio many/one: {wall_many / wall_one:.3f}; "
          f"at most 0.55: {wall_many / wall_one <= 0.55}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
