"""Where the GPU tests' time goes, row by row (issue 38: the GPU tests in <= 300 s on one H100).

Runs the GPU tests in one pytest process, as gpu_check.sh does, and records every row the tests'
Measurer hands back: the test that asked for it, its point, status, stage times, and the wall
time since the previous row of the same sweep (what the row really cost, worker overhead and hang
caps included). Writes OUT/gpu-test-rows.csv and prints the totals per test and, for the slowest
test, per (backend, precision, output, op, direction, status).

    python3 evidence/studies/gpu_test_rows.py OUT [pytest args...]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness import runner

ROWS: list[dict] = []


def _recording(run):
    def wrapped(self, points, on_result, *args, **kwargs):
        last = [time.perf_counter()]

        def record(m):
            now = time.perf_counter()
            p = m.point
            ROWS.append({
                "test": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0],
                "backend": p.backend, "algorithm": p.algorithm, "precision": p.precision,
                "output": p.output or "", "op": p.op, "direction": p.direction,
                "layout": p.layout, "status": m.status.value, "reason": m.reason[:100],
                "samples": len(m.samples_ms), "wall_ms": (now - last[0]) * 1e3,
                **{k: m.extras.get(k) for k in ("stage_prepare_ms", "stage_verify_ms",
                                                 "stage_time_ms")}})
            last[0] = now
            on_result(m)
        return run(self, points, record, *args, **kwargs)
    return wrapped


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    runner.Measurer.run = _recording(runner.Measurer.run)
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu", "--durations=15",
                        *(sys.argv[2:] or ["tests/"])])
    rows = pd.DataFrame(ROWS)
    rows.to_csv(out / "gpu-test-rows.csv", index=False)
    if rows.empty:
        return int(code)
    pd.set_option("display.width", 200)
    per_test = rows.groupby("test")["wall_ms"].agg(["count", "sum"]).sort_values("sum")
    print((per_test / [1, 1e3]).rename(columns={"sum": "wall_s"}).tail(12).round(1))
    slowest = per_test.index[-1]
    keys = ["backend", "precision", "output", "op", "direction", "status"]
    detail = rows[rows.test == slowest].groupby(keys)[["wall_ms", "stage_prepare_ms",
                                                        "stage_verify_ms", "stage_time_ms"]]
    table = detail.sum().join(detail.size().rename("rows")).sort_values("wall_ms")
    print(f"\n{slowest}: seconds per setting")
    print((table / [1e3, 1e3, 1e3, 1e3, 1]).round(2).tail(40).to_string())
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
