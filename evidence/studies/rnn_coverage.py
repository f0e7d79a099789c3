"""Issue 40's first target over several results files: every algorithm x precision of every layer
of a suite ran and was verified, or was refused with the library's reason. Prints the statuses
found, the layers that miss an (algorithm, precision), and every row that is neither ok,
unsupported nor not_tried. Not a test: a reading of committed runs.

    .venv/bin/python evidence/studies/rnn_coverage.py SUITE BACKEND DIRECTION PRECISIONS RESULTS...

e.g. `deepbench_rnn_training cudnn_rnn train_step fp32,tf32,fp16,bf16,fp64 evidence/runs/...`.
The algorithms expected are those the files hold for the backend. Where files hold the same
(layer, algorithm, precision) twice, the later file's row counts.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd

from harness import store
from harness.suite import load_suite

KEY = ["layer", "algorithm", "precision"]
SETTLED = {"ok", "unsupported", "not_tried"}


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        print(__doc__.strip().splitlines()[-5].strip())
        return 2
    suite, backend, direction, precisions, *files = argv
    rows = pd.concat([store.load(Path(f)).assign(_file=i) for i, f in enumerate(files)])
    rows = rows[(rows.backend == backend) & (rows.direction == direction)]
    rows = rows.sort_values("_file").drop_duplicates(KEY, keep="last")
    layers = [p.label for p in load_suite(suite).problems]
    algorithms = sorted(rows.algorithm.unique())
    wanted = pd.MultiIndex.from_product([layers, algorithms, precisions.split(",")], names=KEY)
    found = rows.set_index(KEY).reindex(wanted)
    print(f"{len(rows)} rows of {len(wanted)} expected ({len(layers)} layers x "
          f"{len(algorithms)} algorithms x {len(precisions.split(','))} precisions)")
    print("statuses:", found.status.fillna("missing").value_counts().to_dict())
    missing = found[found.status.isna()].reset_index().groupby("layer").size()
    print(f"layers whole: {len(layers) - len(missing)} of {len(layers)}")
    for layer, count in missing.items():
        print(f"  missing {count}: {layer}")
    bad = found[found.status.notna() & ~found.status.isin(SETTLED)]
    for key, row in bad.iterrows():
        print(f"  {row.status}: {' '.join(key)}: {str(row.reason)[:160]}")
    return 1 if len(bad) or len(missing) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
