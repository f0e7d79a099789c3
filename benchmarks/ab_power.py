"""How often does `convbench ab` catch a real regression, and how often does it cry wolf?
(issue 41: targets on the 2-core CI VM class)

    python benchmarks/ab_power.py SCENARIO [--tries 5] [--neighbour] [--rounds 8]
                                  [--suite quick] [--csv evidence/logs/ab-power-....csv]

SCENARIO:
  openblas1     the new side runs with OPENBLAS_NUM_THREADS=1 (a real regression of every
                multi-threaded point); a try passes when ab exits 1
  aa            both sides the same environment; a try passes when ab exits 0 with 0 SLOWER
  planted:F     the new side's real `cpu` launches F slower (e.g. 0.25) on every 4th point
                (tests/planted_env_worker.py, planted_backends.planted_share); counts the
                planted points called SLOWER and the others called SLOWER
--neighbour runs `yes > /dev/null` beside every try (one busy core of the two).

Each try is a real `python -m harness.cli ab SUITE` from this checkout, with this Python as both
environments. One CSV row per try (appended), and a summary line on stdout.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from planted_backends import planted_share  # noqa: E402  (the planted points' ids)


def _wrapper(folder: Path) -> str:
    path = folder / "planted-python"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" '
                    f'"{ROOT / "tests" / "planted_env_worker.py"}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def _command(scenario: str, folder: Path, args) -> list[str]:
    command = [sys.executable, "-m", "harness.cli", "ab", args.suite, "--base", sys.executable,
               "--rounds", str(args.rounds), "--out", str(folder / "ab"),
               "--verdicts", str(folder / "verdicts.csv")]
    if scenario == "openblas1":
        return command + ["--new", sys.executable, "--new-var", "OPENBLAS_NUM_THREADS=1"]
    if scenario == "aa":
        return command + ["--new", sys.executable]
    fraction = float(scenario.split(":")[1])
    return command + ["--new", _wrapper(folder), "--new-var",
                      f"CONVBENCH_PLANT=cpu:{fraction}:4"]


def one_try(scenario: str, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # `yes` itself, not a shell around it: killing a shell leaves its `yes` spinning.
        neighbour = (subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if args.neighbour
                     else None)
        start = time.monotonic()
        try:
            done = subprocess.run(_command(scenario, folder, args), cwd=ROOT,
                                  capture_output=True, text=True)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
        verdicts = (pd.read_csv(folder / "verdicts.csv") if (folder / "verdicts.csv").exists()
                    else pd.DataFrame(columns=["point_id", "verdict"]))
    planted = verdicts["point_id"].map(lambda pid: planted_share(str(pid), 4)) \
        if scenario.startswith("planted") else pd.Series(False, index=verdicts.index)
    slower = verdicts["verdict"].eq("SLOWER")
    suite = next((line for line in done.stdout.splitlines() if "suite:" in line), "")
    return {"scenario": scenario, "neighbour": args.neighbour, "rounds": args.rounds,
            "exit": done.returncode, "wall_s": round(time.monotonic() - start, 1),
            "rows": len(verdicts), "slower": int(slower.sum()),
            "planted": int(planted.sum()), "planted_slower": int((slower & planted).sum()),
            "others_slower": int((slower & ~planted).sum()),
            "suite": suite.strip("*# ")[:120],
            "error": done.stderr.strip().splitlines()[-1] if done.returncode == 2 else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--neighbour", action="store_true")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--suite", default="quick")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    for number in range(args.tries):
        row = one_try(args.scenario, args)
        print(f"{args.scenario} try {number + 1}/{args.tries}: {row}", flush=True)
        if args.csv is not None:
            args.csv.parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame([row]).to_csv(args.csv, mode="a", index=False,
                                       header=not args.csv.exists())


if __name__ == "__main__":
    main()
