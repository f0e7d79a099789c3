"""The `convbench` command: argument parsing, and the only place that prints or sets exit codes.

Exit codes: 0 success, 1 a regression (compare/check) and nothing else, 2 bad input or an unusable
environment (one line naming the value, no traceback), 3 an internal error (one line, and the file
holding the traceback), 130 interrupted (finished rows are kept).
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from harness.cli import models
from harness.cli.ab import cmd_ab
from harness.cli.history import cmd_history
from harness.cli.common import (EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, MOST_PROCESSES,
                                UserError, count, one_line, utf8_text, warn)
from harness.cli.results import (cmd_check, cmd_compare, cmd_env, cmd_list, cmd_peaks, cmd_report,
                                 cmd_shapes, cmd_table)
from harness.cli.flags import add_compare_flags, add_sweep_flags
from harness.cli.running import cmd_run


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line naming the value, exit 2 (subcommands inherit this class)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"convbench: error: {message} (see {self.prog} --help)\n")


def _add_cache_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write what earlier runs on this GPU and these "
                        "libraries learnt: the engines that hung (their plans get a 10 s cap "
                        "from the start) and graph-API plan labels (~/.cache/convbench)")


def _add_cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", metavar="local|tcp://HOST:PORT|slurm",
                   help="spread the sweep over Dask workers (pip install 'convbench[cluster]'): "
                        "local = one per visible GPU (or --workers CPU workers), tcp:// = an "
                        "existing scheduler, slurm = dask-jobqueue (--cluster-config)")
    p.add_argument("--workers", type=count(1, MOST_PROCESSES),
                   help="--cluster local: how many workers (default: one per visible GPU; "
                        "2 for a CPU sweep)")
    p.add_argument("--cluster-config", metavar="TOML",
                   help="--cluster slurm: a file with a [cluster] table "
                        "(examples/cluster-slurm.toml)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="--cluster: run even where workers differ in GPU, driver, CUDA or cuDNN")


def _add_existing_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--append", action="store_true",
                   help="--out exists: keep its rows and add this run's as a run of their own")
    p.add_argument("--force", action="store_true",
                   help="--out exists: replace it with this run's rows (atomically, at the end)")


# What `convbench table` shows instead of the best algorithm per layer (one at a time).
_TABLE_VIEWS = {
    "selection": "how often cuDNN's heuristic, cudnnFind, the graph heuristic and PyTorch's "
                 "autotuner pick the fastest verified algorithm (regret also tie-aware)",
    "networks": "one row per network, precision, layout and machine (each file its own): "
                "forward / backward / total ms of a training step per policy and each "
                "backend's best, and what the best saves",
    "determinism": "what deterministic mode costs per training step and per layer, and where "
                   "cuDNN's heuristic or PyTorch picks a nondeterministic algorithm",
    "conv3d": "3-D layers: per point the fastest verified algorithm and each backend's best "
              "time, or why it has none",
    "fusion": "what fusing bias, ReLU and the residual add into the convolution (--op) saves "
              "over separate pointwise kernels and over eager PyTorch, per network and point",
    "quantized": "fp8 and int8 against fp16: per precision, direction and layout the "
                 "speed-up of the fastest verified quantized plan over the fastest fp16 one, "
                 "its error, and the points where no quantized plan verified (with why)",
    "stability": "per point, how likely a rerun picks another algorithm (bootstrap of the raw "
                 "samples) and which layers are near-ties",
    "profile": "where the run's time went: stage seconds (prepare, verify against float64, "
               "time) per backend and direction, and the costliest rows",
    "ceilings": "per CPU point: best own and oneDNN as shares of the FMA peak; im2col / floor",
    "recurrent": "recurrent layers: per layer, precision and pass (inference, training step) "
                 "the fastest verified algorithm, PyTorch's layer and a plain loop, with "
                 "errors and speed-ups",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="convbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="sweep a suite and write verified timings",
                         description="Sweep a suite and write verified timings. With a GPU and "
                                     "no --backend: cudnn, cudnn_graph and torch_gpu at fp32 and "
                                     "tf32 (NCHW) and fp16 and bf16 (NHWC), one timing process, "
                                     "ending with the best per layer against PyTorch's autotuner "
                                     "and cuDNN's heuristics. Without a GPU: the suite's CPU "
                                     "algorithms.")
    run.add_argument("suite", nargs="?", help="suite name or TOML path (default: quick)")
    add_sweep_flags(run)
    _add_cache_flag(run)
    run.add_argument("--out", help="results file (.parquet or .csv); default: a new file "
                                   "results/<suite>-<machine>-<run id>.parquet")
    run.add_argument("--resume", action="store_true",
                     help="continue an unfinished run: the one in --out, else the latest "
                          "unfinished run of the suite on this machine")
    _add_existing_output_flags(run)
    run.add_argument("--seed", type=count(0), default=0, help="seed of the random test data")
    run.add_argument("--profile", action="store_true",
                     help="after the run, where its time went per backend and direction "
                          "(prepare, verify, time) and the costliest rows")
    _add_cluster_flags(run)
    models.add_run_flags(run)
    run.set_defaults(func=cmd_run)
    models.add_parsers(sub)

    table = sub.add_parser("table", help="best verified algorithm per layer from results")
    table.add_argument("results", nargs="+")
    shown = table.add_mutually_exclusive_group()
    for view, text in _TABLE_VIEWS.items():
        shown.add_argument(f"--{view}", action="store_true", help=text)
    table.set_defaults(func=cmd_table)

    sub.add_parser("list", help="backends and algorithms, or why not").set_defaults(func=cmd_list)

    shapes = sub.add_parser("shapes", help="a suite's layers, FLOPs and benchdnn strings")
    shapes.add_argument("suite")
    shapes.add_argument("--batch", type=int)
    shapes.set_defaults(func=cmd_shapes)

    sub.add_parser("env", help="the environment fingerprint stored with every row"
                   ).set_defaults(func=cmd_env)
    peaks = sub.add_parser("peaks", help="measure the CPU's FMA peak and a GPU's rates (cached)")
    peaks.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    peaks.set_defaults(func=cmd_peaks)
    _add_regression_parsers(sub)
    report = sub.add_parser("report", help="HTML and Markdown report with figures")
    report.add_argument("results", nargs="+", help="results files or folders")
    report.add_argument("--out", help="output folder (default reports/<first results name>)")
    report.add_argument("--baseline-policy", help="cudnn_heuristic, cudnn_find, graph_heuristic, "
                                                  "pytorch, a backend or backend:algorithm to "
                                                  "compare the best with")
    report.add_argument("--peaks", help="peaks JSON (convbench peaks) for the roofline figure")
    report.add_argument("--embed-images", action="store_true",
                        help="put the figures inside index.html (one self-contained file)")
    report.add_argument("--title", type=utf8_text, help="page title (default: from the data)")
    report.add_argument("--jobs", type=count(1, MOST_PROCESSES), default=os.cpu_count() or 1,
                        help="processes drawing figures (default: all cores)")
    report.add_argument("--force", action="store_true",
                        help="replace an earlier report, or write beside others' files (kept)")
    report.set_defaults(func=cmd_report)
    return parser


def _add_regression_parsers(sub) -> None:
    verdicts = """\
Judge every point measured in both runs: SLOWER / FASTER beyond the threshold and significant
(one-sided Mann-Whitney U, corrected across rows), SAME within it, AMBIGUOUS beyond it but not
significant. A point verified in the baseline is BROKEN when the candidate's row is wrong,
crashed or failed (a correctness regression), MISSING when the candidate lacks it or did not run
it. Then the run as a whole, printed first: the geometric-mean ratio new/base of the matched rows
with a 99% bootstrap interval over rows, SLOWER when the whole interval lies above the suite
threshold (3%), so a slowdown of every row is caught even where too few samples a point leave
each row AMBIGUOUS."""
    exit_codes = """\
exit codes:
  0  no regression under the --fail-on policy
  1  a regression under the policy (and nothing else): by default a SLOWER row or suite, a
     BROKEN row, or a MISSING row unless --allow-missing
  2  bad input or unusable environment: unreadable, empty or other-schema files, no point in
     common, different GPUs/drivers/libraries without --allow-env-mismatch (one line)
  3  internal error (one line, and where the full traceback was written)"""
    compare = sub.add_parser("compare", help="regression verdicts between two results; "
                                             "exit 1 on a slower, broken or missing row or "
                                             "a slower suite",
                             description=verdicts, epilog=exit_codes,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("baseline")
    compare.add_argument("candidate")
    add_compare_flags(compare)
    compare.set_defaults(func=cmd_compare)

    check = sub.add_parser("check", help="run a suite and compare it with a baseline, "
                                         "confirming flagged rows before failing",
                           description=verdicts + "\n\nFlagged rows are re-measured up to "
                           "--confirm times (every row when the suite is SLOWER);\na SLOWER "
                           "verdict fails the check only if every round repeats it. BROKEN and\n"
                           "MISSING rows are not re-measured: a wrong or lost point is no "
                           "timing noise.", epilog=exit_codes,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("suite")
    check.add_argument("--baseline", required=True)
    check.add_argument("--confirm", type=count(0), default=1,
                       help="confirmation rounds (default 1)")
    check.add_argument("--min-samples", type=count(1), default=20,
                       help="samples per point (fewer can never reach significance)")
    check.add_argument("--out", help="results of this run (default: a new file "
                                     "results/<suite>-<machine>-<run id>-check.parquet)")
    _add_existing_output_flags(check)
    check.add_argument("--seed", type=count(0), default=0)
    _add_cluster_flags(check)
    add_sweep_flags(check)
    _add_cache_flag(check)
    add_compare_flags(check)
    check.set_defaults(func=cmd_check)
    _add_ab_parser(sub, exit_codes)
    _add_history_parser(sub)


def _add_history_parser(sub) -> None:
    history = sub.add_parser(
        "history", help="steps and drift over a series of runs (exit 1 when the newest run "
                        "confirms a regression)",
        description="""\
Read results files (files, folders, globs: e.g. a results branch CI keeps), order their runs by
when they finished, split them by suite and machine, and find steps: a step with one run after
it is suspected, confirmed once a later run agrees (windowed rank test, binary segmentation;
harness/analysis/history.py says why). Runs timed in a slow spell of the host are labelled and
left out. A slow monotone trend no step explains is reported as drift. Writes history.html
(trend figures), history.md (also printed) and history.json.""",
        epilog="exit codes: 0 no regression just confirmed; 1 the newest run confirms a "
               "regression (a SLOWER step with two runs after it); 2 bad input",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    history.add_argument("results", nargs="+", help="results files, folders or globs")
    history.add_argument("--out", metavar="FOLDER", help="where to write (default "
                                                         "reports/history)")
    history.add_argument("--force", action="store_true", help="replace an existing history")
    history.add_argument("--threshold", default="10%",
                         help="smallest step worth reporting (default 10%%: quiet reruns on a "
                              "shared 2-core VM sat 5%% apart; on a quiet GPU machine 3%%)")
    history.add_argument("--alpha", type=float, default=0.05,
                         help="significance of a confirmed step (default 0.05; per point, "
                              "divided by the number of points)")
    history.add_argument("--window", type=count(2), default=10,
                         help="runs compared on each side of a step (default 10)")
    history.set_defaults(func=cmd_history)


def _add_ab_parser(sub, exit_codes: str) -> None:
    ab = sub.add_parser(
        "ab", help="measure a suite in two Python environments, interleaved, and judge the "
                   "paired differences; exit 1 as compare",
        description="""\
Measure the same points in two environments (ENV: a virtualenv folder, a Python interpreter, or
a script that sets variables and execs one; convbench installed in each) in alternating rounds:
each round measures every point in both, back to back, the order shuffled per round. A point's
verdict comes from its per-round ratios new/base (a one-sided paired t-test over the rounds,
corrected across points), with compare's words: SAME within the threshold, SLOWER / FASTER
beyond it and significant, AMBIGUOUS beyond it but not, BROKEN where the new side's output is
wrong, crashed or failed. Drift of the machine hits both sides of a round alike, so this catches
on a shared runner what two stored runs cannot (docs/regression-checks.md).""",
        epilog=exit_codes, formatter_class=argparse.RawDescriptionHelpFormatter)
    ab.add_argument("suite", nargs="?", default="quick")
    ab.add_argument("--base", required=True, metavar="ENV", help="the baseline environment")
    ab.add_argument("--new", required=True, metavar="ENV", help="the candidate environment")
    for side in ("base", "new"):
        ab.add_argument(f"--{side}-var", action="append", metavar="NAME=VALUE",
                        help=f"an environment variable for the {side} side only (repeatable)")
    ab.add_argument("--rounds", type=count(1), default=8,
                    help="rounds, each measuring every point once per environment (default 8)")
    ab.add_argument("--out", metavar="PREFIX",
                    help="write PREFIX-base.parquet and PREFIX-new.parquet (default: results/"
                         "<suite>-<machine>-<run id>-ab-{base,new}.parquet)")
    ab.add_argument("--force", action="store_true", help="replace existing output files")
    ab.add_argument("--seed", type=count(0), default=0)
    add_sweep_flags(ab)
    add_compare_flags(ab)
    ab.set_defaults(func=cmd_ab, cluster=None)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input, not a harness bug."""
    from harness.backends.base import BackendUnavailable
    from harness.locks import OutputBusy
    from harness.models import ModelError
    from harness.plan import PlanInputError
    from harness.problem import ProblemError
    from harness.runner import PlanError
    from harness.runs import RunNotFound
    from harness.store import ResultsError
    from harness.suite import SuiteError
    return (UserError, SuiteError, PlanError, ProblemError, BackendUnavailable, ResultsError,
            OutputBusy, RunNotFound, ModelError, PlanInputError, FileNotFoundError,
            IsADirectoryError)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:      # --help (0) or a bad argument (2, already said in one line)
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    try:
        return args.func(args)
    except _user_errors() as err:
        warn(f"error: {one_line(err)}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        warn("interrupted")
        return EXIT_INTERRUPTED
    except Exception as err:  # a harness bug: one line here, the traceback on disk
        where = _save_traceback()
        warn(f"internal error: {type(err).__name__}: {one_line(err)} (a convbench bug; the "
             f"full traceback is in {where})")
        return EXIT_INTERNAL


def _save_traceback() -> str:
    import tempfile
    import traceback
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(tempfile.gettempdir()) / f"convbench-traceback-{stamp}-{os.getpid()}.txt"
    try:
        path.write_text(f"convbench {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}",
                        errors="backslashreplace")
    except OSError:
        return "(could not be written)"
    return str(path)

