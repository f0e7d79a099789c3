"""`convbench history PATHS...`: steps and drift over a series of runs
(harness/analysis/history.py), written as Markdown (printed), JSON and HTML."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import EXIT_OK, EXIT_REGRESSION, UserError, say, writing
from harness.cli.inputs import load_checked, results_paths


def cmd_history(args: argparse.Namespace) -> int:
    import pandas as pd
    from harness.analysis import history
    from harness.compare import parse_threshold
    from harness.report import history_page
    try:
        threshold = parse_threshold(args.threshold)
    except ValueError as err:
        raise UserError(str(err)) from None
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: give a level between 0 and 1, e.g. 0.05")
    frames = [load_checked(path) for path in results_paths(args.results)]
    df = pd.concat(frames, ignore_index=True)
    versions = sorted({str(v) for v in df["schema_version"].dropna()})
    if len(versions) > 1:
        raise UserError(f"the results hold schema versions {', '.join(versions)}: a history "
                        "reads one; re-measure the older runs with this convbench, or name "
                        "one version's files")
    histories = history.analyse(df, threshold, args.alpha, args.window)
    summary = history_page.markdown(histories)
    say(summary)
    folder = _folder(args)
    with writing(folder):
        (folder / "history.md").write_text(summary, encoding="utf-8")
        (folder / "history.json").write_text(history_page.to_json(histories), encoding="utf-8")
        page = history_page.write_html(histories, folder)
    say(f"wrote {page}, history.md and history.json")
    gate = [s for h in histories for s in h.newest_confirms_regression()]
    return EXIT_REGRESSION if gate else EXIT_OK


def _folder(args: argparse.Namespace) -> Path:
    folder = Path(args.out or "reports/history")
    if (folder / "history.html").exists() and not args.force:
        raise UserError(f"{folder} already holds a history: pass --force to replace it, or "
                        "another --out")
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    return folder
