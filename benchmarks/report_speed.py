"""How long `convbench report` takes on a ResNet-50-sized GPU sweep (the synthetic frame the report
tests use, >10,000 rows), with one figure worker per core as the CLI renders it. A timing, so it
lives here and not in the unit tests (the machines are noisy); the target is under a minute on
the 2-core CI machine, with the 15+ long best-algorithm tables folded into <details>.

    python3 benchmarks/report_speed.py [--jobs N]
Exit 1 when over the target or when the tables are not folded.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
TARGET_S = 60.0


def main() -> int:
    from report_fixtures import gpu_frame
    from harness.report import render_report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 1))
    args = ap.parse_args()
    df = gpu_frame("resnet50")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        paths = render_report(df, out, jobs=args.jobs)
        seconds = time.perf_counter() - start
        folded = paths.html.read_text(encoding="utf-8").count("<details>")
    print(f"rendered {len(df)} rows, {len(paths.figures)} figures in {seconds:.1f} s with "
          f"{args.jobs} figure workers; {folded} tables folded")
    return 0 if seconds < TARGET_S and folded >= 15 else 1


if __name__ == "__main__":
    sys.exit(main())
