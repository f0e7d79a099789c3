"""Issue 42's targets read off one cpu_compare run (every row verified and uncontended only):
few-channel forward best own and direct over oneDNN, im2col over its GEMM floor, class A best
own over oneDNN per direction, Winograd F4 forward over im2col; per thread count.

    python evidence/studies/cpu_targets.py RESULTS
"""
import sys

import numpy as np

from harness import store
from harness.analysis import ceilings, verified

df = store.load(sys.argv[1])
table = ceilings.ceilings(df)
ok = verified(df)
FEW = ["deepbench:train_02", "deepbench:train_55", "vgg_16:conv1_1"]
CLASS_A = [f"resnet_50:res{i}a_branch2b" for i in (2, 3, 4, 5)] + [
    f"vgg_16:conv{i}_1" for i in (2, 3, 4, 5)]


def geomean(values) -> float:
    """Over the values present (a point whose oneDNN row was contended has none)."""
    values = np.asarray(values, float)
    return float(np.exp(np.log(values[~np.isnan(values)]).mean()))


def ms(layer, direction, threads, backend, algorithm):
    rows = ok[(ok.layer == layer) & (ok.direction == direction) & (ok.threads == threads)
              & (ok.backend == backend) & (ok.algorithm == algorithm)]
    return rows["median_ms"].min() if len(rows) else np.nan


contended = df["contended"].fillna(False).astype(bool) if "contended" in df else False
print(f"rows {len(df)}: " + ", ".join(f"{k} {v}" for k, v in df.status.value_counts().items())
      + f"; contended (flagged, left out below) {int(contended.sum())}, verified and "
      f"uncontended {len(ok)}")
for threads, name in ((0, "all cores"), (1, "one thread")):
    t = table[table.threads == threads]
    print(f"== {name}")
    held = df[contended & (df.threads == threads)] if "contended" in df else df.iloc[:0]
    if len(held):
        print("contended: " + ", ".join(f"{r.layer} {r.direction} {r.backend}:{r.algorithm}"
                                        for r in held.itertuples()))
    few = t[t.layer.isin(FEW) & (t.direction == "fwd")]
    direct = [ms(layer, "fwd", threads, "cpu", "direct") / o
              for layer, o in zip(few.layer, few.onednn_ms)]
    print(f"few-channel fwd: best own / oneDNN geomean {geomean(few.own_over_onednn):.2f} "
          f"({', '.join(f'{v:.2f}' for v in few.own_over_onednn)}); direct / oneDNN "
          f"{', '.join(f'{v:.2f}' for v in direct)}, worst {max(direct):.2f}")
    for direction in ("bwd_data", "bwd_filter"):
        d = t[t.layer.isin(FEW) & (t.direction == direction)]
        print(f"few-channel {direction}: best own / oneDNN geomean "
              f"{geomean(d.own_over_onednn):.2f} ("
              + ", ".join(f"{r.layer} {r.own_candidate} {r.own_over_onednn:.2f}"
                          for r in d.itertuples()) + ")")
    t02 = few[few.layer == "deepbench:train_02"].iloc[0]
    print(f"train_02 fwd: best own {t02.own_candidate} {t02.own_peak_pct:.0f}% of the FMA peak, "
          f"oneDNN {t02.onednn_peak_pct:.0f}%")
    for direction in ("fwd", "bwd_data", "bwd_filter"):
        d = t[t.direction == direction]
        over = d[d.im2col_over_floor > 1.4]
        print(f"{direction}: im2col / floor median {d.im2col_over_floor.median():.2f}, worst "
              f"{d.im2col_over_floor.max():.2f}; over 1.4 at {len(over)} of {len(d)}: "
              + ", ".join(f"{r.layer} {r.im2col_over_floor:.2f}" for r in over.itertuples()))
        a = d[d.layer.isin(CLASS_A)]
        print(f"{direction}: class A best own / oneDNN geomean {geomean(a.own_over_onednn):.2f} "
              f"({a.own_over_onednn.notna().sum()} of {len(a)}), "
              f"worst {a.own_over_onednn.max():.2f} ({a.loc[a.own_over_onednn.idxmax(), 'layer']})")
    wino = [ms(layer, "fwd", threads, "cpu", "im2col") / ms(layer, "fwd", threads, "cpu",
                                                              "winograd_f4x4_3x3")
            for layer in CLASS_A]
    print(f"class A fwd: im2col / winograd_f4x4 geomean {geomean(wino):.2f}, least "
          f"{min(wino):.2f}")
