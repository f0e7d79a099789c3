"""Render the reports of the project's evidence runs, which are not committed (issue 37): each
evidence/runs/<name>.parquet becomes evidence/reports/<name>/ (index.html, index.md, figures),
exactly as `convbench report` renders a user's run.

    python evidence/render_reports.py                    # every run (a few minutes on 2 cores)
    python evidence/render_reports.py 'resnet50-*' --jobs 2

A name pattern matches run file names without `.parquet`. Exit status: 0 when every report was
rendered, else the first failing report's `convbench report` exit code.
"""
from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

EVIDENCE = Path(__file__).resolve().parent
sys.path.insert(0, str(EVIDENCE.parent))   # run from a checkout without installing

from harness.cli import main as convbench  # noqa: E402


def _runs(patterns: list[str]) -> list[Path]:
    runs = sorted((EVIDENCE / "runs").glob("*.parquet"))
    if not patterns:
        return runs
    return [r for r in runs if any(fnmatch.fnmatch(r.stem, p) for p in patterns)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="run name patterns (default: every run)")
    parser.add_argument("--jobs", type=int, default=None, help="figure workers per report")
    args = parser.parse_args(argv)
    runs = _runs(args.patterns)
    if not runs:
        print(f"render_reports: no run in {EVIDENCE / 'runs'} matches {args.patterns}",
              file=sys.stderr)
        return 2
    first_failure = 0
    for run in runs:
        out = EVIDENCE / "reports" / run.stem
        # --force: a report rendered here before is replaced (only the files its manifest lists)
        command = ["report", str(run), "--out", str(out), "--force"]
        if args.jobs:
            command += ["--jobs", str(args.jobs)]
        code = convbench(command)
        print(f"{run.stem}: {'ok' if code == 0 else f'exit {code}'}", flush=True)
        first_failure = first_failure or code
    return first_failure


if __name__ == "__main__":
    sys.exit(main())
