"""A comparison as Markdown: the suite verdict first, the counts, warnings about noise and power,
and one table row per changed point with the `convbench run` line that re-measures it. The
verdicts themselves come from harness/compare/; this module only words them."""
from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import asdict

from harness import stats
from harness.compare import (BROKEN_STATUSES, CHANGED, MATCHED, Comparison, RowResult, SuiteVerdict,
                             Verdict, interval_text, pct)
from harness.epilogue import CONV
from harness.precision import AUTO_OUTPUT
from harness.workspace_limit import limit_from_column

# Fields are RowResult's; values are shell-quoted when the template is filled.
REPRODUCE_TEMPLATE = ("convbench run {suite} --backend {backend} --algorithm {algorithm} "
                      "--direction {direction} --precision {precision} --layout {layout} "
                      "--batch {batch} --layer {layer}")


def reproduce_command(row: RowResult) -> str:
    """The `convbench run` line that re-measures just this row: REPRODUCE_TEMPLATE, plus the
    workspace limit, timing mode, GPU timer and thread count where they are not the defaults
    (they are part of the point)."""
    command = _fill(REPRODUCE_TEMPLATE, row)
    limit = limit_from_column(row.workspace_limit)
    if limit is not None:
        command += f" --workspace-limit {limit}"
    if row.timing_mode and row.timing_mode != "warm":
        command += f" --timing-mode {shlex.quote(row.timing_mode)}"
    if "+stream" in row.point_id:
        command += " --gpu-timer stream"
    if row.threads:
        command += f" --threads {row.threads}"
    if row.op and row.op != CONV:
        command += f" --op {row.op}"
    if row.output and row.output != AUTO_OUTPUT:
        command += f" --output-type {row.output}"
    return command


def markdown_summary(comparison: Comparison,
                     reproduce_command: str | Callable[[RowResult], str] = reproduce_command,
                     title: str = "convbench comparison") -> str:
    """The suite verdict, counts and one line per changed row with the command that reproduces
    it. `reproduce_command` is a template over RowResult fields (values are shell-quoted) or a
    callable taking the row."""
    lines = [f"## {title}", "", _suite_line(comparison.suite, comparison.scatter), ""]
    if comparison.env_mismatches:
        lines += ["> **Environment mismatch: compared anyway (--allow-env-mismatch); timings may "
                  "differ for reasons other than the change.**"]
        lines += [f"> - {m.describe()}" for m in comparison.env_mismatches] + [""]
    lines += [_counts_line(comparison), ""]
    lines += _broken_lines(comparison)
    lines += _noisy_pair_lines(comparison)
    weak = comparison.underpowered
    if weak:
        lines += [f"**{len(weak)} of {sum(r.verdict in MATCHED for r in comparison.rows)} matched "
                  f"rows have too few samples to be called SLOWER on their own** (as few as "
                  f"{min(min(r.n_base, r.n_new) for r in weak)} a side): collect more samples "
                  "per point (`[timing] min_samples`, 20 or more for regression runs).", ""]
    if comparison.confirmation_rounds:
        lines += [f"SLOWER rows (every matched row when the suite was SLOWER) were re-measured "
                  f"{comparison.confirmation_rounds} time(s); only rows and a suite flagged every "
                  "time stay SLOWER.", ""]
    changed = sorted((r for r in comparison.rows if r.verdict in CHANGED),
                     key=lambda r: (CHANGED.index(r.verdict), -(r.ratio or 0.0)))
    if not changed:
        return "\n".join(lines + ["No changed rows."]) + "\n"
    lines += ["| verdict | layer | direction | precision | backend / algorithm | base ms | new ms "
              "| change | adj. p | reason | reproduce |",
              "|---|---|---|---|---|---:|---:|---:|---:|---|---|"]
    lines += [_table_row(r, _command(r, reproduce_command)) for r in changed]
    return "\n".join(lines) + "\n"


def _counts_line(c: Comparison) -> str:
    counts = c.counts
    line = ", ".join(f"**{counts[v.value]} {v.value}**" if v in CHANGED and counts[v.value]
                     else f"{counts[v.value]} {v.value}" for v in Verdict)
    shared = sum(r.contended for r in c.rows)
    if shared:   # apart: these say nothing about the code, only that the CPU was shared
        line += (f" ({shared} of the AMBIGUOUS rows shared the CPU in either run, with other "
                 "processes or in a slow spell of the host: their times measure the neighbours; "
                 "re-measure them on a quiet machine)")
    picked = sum(r.picked_again and r.verdict in CHANGED for r in c.rows)
    if picked:   # a real change for the user, but of PyTorch's pick, not of the code measured
        line += (f" ({picked} of the changed rows ran other kernels than in the baseline: "
                 "PyTorch's autotuner picked again, see each row's reason and `torch_kernels`)")
    return line


def _broken_lines(c: Comparison) -> list[str]:
    """Said in words: a BROKEN row is no timing question, and its table row may scroll away."""
    broken = len(c.of(Verdict.BROKEN))
    if not broken:
        return []
    points = ("1 point verified in the baseline is" if broken == 1
              else f"{broken} points verified in the baseline are")
    return [f"**{points} {'/'.join(BROKEN_STATUSES)} in the candidate (BROKEN): a correctness "
            "regression.**", ""]


def _noisy_pair_lines(comparison: Comparison) -> list[str]:
    """Warn where the scatter floor, not the threshold, decides what a row can be called."""
    floor = stats.scatter_floor(comparison.scatter, stats.SCATTER_ROW_K)
    if math.expm1(floor) <= comparison.options.threshold:
        return []
    return [f"**Noisy pair: the rows of these two runs scatter "
            f"±{math.expm1(comparison.scatter):.1%} beyond their sampling noise, so no row "
            f"can be called SLOWER or FASTER within ±{math.expm1(floor):.0%}.** Two runs of "
            "unchanged code on this machine differ that much; compare runs from a quieter "
            "machine, or re-measure with `convbench check`.", ""]


def _suite_line(s: SuiteVerdict, scatter: float | None) -> str:
    """e.g. "**suite: +24.8% [+23.9%, +25.6%] SLOWER** (...)": the verdict people read first."""
    if s.ratio is None:
        return f"**suite: n/a** ({s.reason})"
    mean = f"geometric-mean ratio new/base {s.ratio:.4f} over {s.n_rows} matched rows"
    if s.verdict is None:
        return f"suite: {interval_text(s)}, no verdict ({mean}): {s.reason}"
    noise = "" if scatter is None else f", run-to-run scatter ±{math.expm1(scatter):.1%}"
    return (f"**suite: {interval_text(s)} {s.verdict.value}** ({mean}, {pct(s.confidence)} "
            f"interval, threshold {pct(s.threshold)}{noise}): {s.reason}")


def _table_row(r: RowResult, command: str) -> str:
    cells = [r.verdict.value, r.layer or "", r.direction or "", r.precision or "",
             f"{r.backend} / {r.algorithm}", _num(r.base_median_ms), _num(r.new_median_ms),
             "" if r.effect is None else f"{r.effect:+.1%}",
             "" if r.adjusted_p is None else f"{r.adjusted_p:.2g}", r.reason, f"`{command}`"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _command(row: RowResult, reproduce: str | Callable[[RowResult], str]) -> str:
    return reproduce(row) if callable(reproduce) else _fill(reproduce, row)


def _fill(template: str, row: RowResult) -> str:
    fields = {k: shlex.quote("" if v is None else str(v)) for k, v in asdict(row).items()}
    return template.format(**fields)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
