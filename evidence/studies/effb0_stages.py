"""Issue 39, stop 63: where efficientnet_b0's first sweep spent its stage time, and how far a second
run with the caches got (the two parquets `effb0_calls.sh` wrote, in evidence/runs).

    python evidence/studies/effb0_stages.py FIRST.parquet SECOND_CUT.parquet FIRST_WALL_S SECOND_WALL_S
"""
import sys

import pandas as pd

pd.set_option("display.width", 200)
first, second = (pd.read_parquet(p) for p in sys.argv[1:3])
first_wall, second_wall = float(sys.argv[3]), float(sys.argv[4])
STAGES = ["stage_list_ms", "stage_prepare_ms", "stage_verify_ms", "stage_time_ms"]
KEY = ["layer", "direction", "precision", "layout", "workspace_limit"]

for name, df in (("first", first), ("second (cut)", second)):
    print(f"{name}: {len(df)} rows, {df.planned_point_id.nunique()} points, "
          f"statuses {df.status.value_counts().to_dict()}, stage sums (s) "
          f"{(df[STAGES].sum() / 1e3).round(1).to_dict()}")

ok = first[first.status == "ok"].assign(raced=first.raced_out_by.notna())
by = ok.groupby(["backend", "raced", "gpu_timer"])
print("\nfirst run, ok rows by backend / raced out / timer: rows, time stage (s), its median (ms), "
      "prepare (s)")
print(pd.concat([by.size().rename("rows"), (by.stage_time_ms.sum() / 1e3).rename("time_s"),
                 by.stage_time_ms.median().rename("time_median_ms"),
                 (by.stage_prepare_ms.sum() / 1e3).rename("prepare_s")], axis=1).round(2))
probe = ok[(ok.backend == "cudnn_graph") & ok.raced & (ok.gpu_timer == "held_stream")]
print(f"\nraced out by the probe (graph API): {len(probe)} rows, {(probe.groups > 1).sum()} depthwise; "
      f"per row median: call {probe.median_ms.median():.3f} ms, host {probe.host_ms.median():.2f} ms "
      f"a call, time stage {probe.stage_time_ms.median():.1f} ms "
      f"({(probe.stage_time_ms / probe.median_ms).median():.1f}x the call)")
heat = ok[(ok.backend == "cudnn_graph") & ok.raced & (ok.gpu_timer == "cuda_graph")]
print(f"raced out on replays (graph API): {len(heat)} rows; per row median: call "
      f"{heat.median_ms.median() * 1e3:.1f} us, time stage {heat.stage_time_ms.median():.1f} ms")

done = second.groupby(KEY).size()
whole = (first.groupby(KEY).size().reindex(done.index) == done)
whole = whole[whole].index
ratio = (second[second.status == "ok"].groupby(KEY).median_ms.min().loc[whole]
         / first[first.status == "ok"].groupby(KEY).median_ms.min().loc[whole])
print(f"\nsecond / first best verified time, {len(ratio)} layer-directions whole in both: median "
      f"{ratio.median():.4f}, within 2% at {(abs(ratio - 1) <= 0.02).sum()}, range "
      f"{ratio.min():.3f}-{ratio.max():.3f}")
reached = first[first.planned_point_id.isin(set(second.planned_point_id))]
share = reached[STAGES].sum().sum() / first[STAGES].sum().sum()
cut = second[STAGES].sum().sum() / reached[STAGES].sum().sum()
print(f"the points the second run reached: {share:.3f} of the first run's stage time; the second "
      f"run's stages {cut:.3f}x the first's on them")
print(f"second run whole, estimated: {second_wall / share:.0f} s by its share of the first's stage "
      f"time, {first_wall * cut:.0f} s by the stage ratio (first run {first_wall:.0f} s)")
