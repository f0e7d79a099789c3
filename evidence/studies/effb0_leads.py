"""Issue 39, stop 64: efficientnet_b0's first sweep at the race leads' code (a cut first call's
journal) against stop 63's first run, on the points both reached: stage sums, the raced-out
plans' time, how fast points came, and whether each point's best verified time is the same.

    python evidence/studies/effb0_leads.py STOP63_FIRST.parquet NEW.partial.jsonl
"""
import sys
from pathlib import Path

import pandas as pd

from harness import store

old = pd.read_parquet(sys.argv[1])
new = store.read_journal(Path(sys.argv[2]))
STAGES = ["stage_list_ms", "stage_prepare_ms", "stage_verify_ms", "stage_time_ms"]
POINT = ["layer", "direction", "precision", "layout", "workspace_limit"]

done = set(new.planned_point_id)
old_c, new_c = old[old.planned_point_id.isin(done)], new
print(f"points: new reached {len(done)}; rows old {len(old_c)}, new {len(new_c)}")
for name, df in (("stop 63", old_c), ("stop 64", new_c)):
    sums = (df[STAGES].sum() / 1e3).round(1)
    print(f"{name}: stage sums (s) {sums.to_dict()}, total {sums.sum():.1f}; "
          f"statuses {df.status.value_counts().to_dict()}")

for name, df in (("stop 63", old_c), ("stop 64", new_c)):
    raced = df[df.stop_reason == "raced_out"]
    n = raced.samples_ms.apply(len)
    how = raced.gpu_timer.astype(str) + "/" + n.astype(str) + " samples"
    g = raced.groupby(how).stage_time_ms
    print(f"\n{name}, raced-out rows by timer/samples: rows, time stage (s), median (ms)")
    print(pd.concat([g.size(), (g.sum() / 1e3).round(1), g.median().round(1)], axis=1,
                    keys=["rows", "time_s", "median_ms"]).to_string())


def finished(df):
    t = pd.to_datetime(df.finished_at)
    return (t - t.min()).dt.total_seconds()


# the first run of stop 63 was resumed across calls: its first 1,376 points came in one call
old_first = old[old.planned_point_id.isin(done)]
for name, df in (("stop 63", old_first), ("stop 64", new_c)):
    order = df.assign(t=finished(df)).groupby("planned_point_id").t.max().sort_values()
    k = min(1376, len(order))
    print(f"{name}: point {k} finished {order.iloc[k - 1]:.0f} s after the first row")

ok_old = old_c[old_c.status == "ok"]
ok_new = new_c[new_c.status == "ok"]
best_old = ok_old[ok_old.stop_reason != "raced_out"].groupby(POINT).median_ms.min()
best_new = ok_new[ok_new.stop_reason != "raced_out"].groupby(POINT).median_ms.min()
both = pd.concat([best_old, best_new], axis=1, keys=["old", "new"]).dropna()
ratio = both.new / both.old
print(f"\nbest verified time per point, stop 64 / stop 63 (two H200 machines): {len(ratio)} points, "
      f"median {ratio.median():.4f}, within 2% at {(abs(ratio - 1) <= 0.02).mean():.1%}, "
      f"within 5% at {(abs(ratio - 1) <= 0.05).mean():.1%}")
print(ratio.describe().round(4).to_string())
