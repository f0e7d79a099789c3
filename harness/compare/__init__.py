"""Baseline vs candidate: one noise-aware verdict per point (shared/design/measurement.md).

Rows are matched by `point_id`. Only rows with status "ok" carry timings.

Verdicts, with r = median(new) / median(base), effect = r - 1, t the row's practical threshold
(`CompareOptions.threshold`, or `layer_thresholds[layer]`):

  SLOWER     effect > +t  and the one-sided Mann-Whitney U test "new is slower" is significant
             (p after Holm/BH correction across all matched rows <= alpha), and |log r| clears
             the run-to-run noise floor (below).
             A row also needs every replicate's median on the new side (GPU worker processes,
             CPU rounds) to be above every one on the base side by more than t (the process
             rule, below).
  FASTER     effect < -t  and the one-sided test "new is faster" is significant likewise.
  AMBIGUOUS  |effect| > t  but the test in that direction is not significant: the samples are too
             few or too noisy to call it; rerun with more samples (or `--confirm`). Or it is
             significant but within the scatter floor: two runs of unchanged code on this
             machine differ that much.
  SAME       |effect| <= t, significant or not. A significant effect below the threshold is real
             but too small to matter; with enough samples every run-to-run drift is significant,
             so significance alone must never produce a verdict.
  BROKEN     ok in the baseline, but wrong, crashed or failed in the candidate (BROKEN_STATUSES
             in rows.py; reason: its status and why): a correctness regression.
  MISSING    ok in the baseline, but absent from the candidate or not run there (unsupported,
             workspace_exceeded, not_tried; reason: its status).
  NEW        ok in the candidate only.

Why two one-sided families: "new is slower" is tested for every matched row and the correction
is applied to that family, so in an A/A comparison (no real change anywhere) the chance of any
false SLOWER is at most alpha, with Holm and with Benjamini-Hochberg alike. The "faster" family is
corrected separately and never changes a SLOWER verdict.

Why Benjamini-Hochberg by default: a real regression usually slows many rows at once (a library
update, one algorithm family); BH accepts the k-th smallest p-value at k*alpha/m where Holm needs
alpha/(m-k+1). Holm ("holm") bounds the chance of any false SLOWER even when other
rows really changed; use it when a single false alarm is expensive.

p-values are exact when the samples have no ties and at most 50 x 50 of them (the usual case), else
from the normal approximation with tie and continuity corrections. Either way, the smallest p a
row can reach depends on its sample counts: 5.4e-6 with 10 samples a side (exact), which just
passes alpha/m for m = 200 rows; with 5 samples a side it is 0.004, never significant. Rows with
few samples therefore come out AMBIGUOUS, not SLOWER: regression runs need 15-30 samples a point.

Why a scatter floor as well as the rank test: the test sees the noise inside each row's window
only, and on a shared machine the rows of two runs of unchanged code disagree by far more than
that (8-13% on the 2-core CI VM against ~2% inside a window; harness/stats.py). Each run measures
its own share of that: every point is timed in replicates (GPU worker processes, CPU rounds
with fresh buffers, apart by the points that share its test data), and the spread of a run's
replicate medians (stats.replicate_sd) predicts how far a row's ratio moves between two runs
(stats.replicate_scatter); a row must move stats.SCATTER_ROW_K of those before it can be SLOWER
or FASTER. A regression moves every replicate of a row alike, so it cannot raise this floor, as
it raised the pair's own
scatter (stats.run_to_run_scatter) used before: OPENBLAS_NUM_THREADS=1 slowed every CPU row by
+36% to +143% and was called AMBIGUOUS within a +-264% floor. Files without replicates (older
runs) fall back to the pair's scatter. What replicates seconds apart cannot see is a slow
spell of the whole host for a whole run (the 2-core VM: every row 17-90% slower, no trace in the
guest); `convbench check` re-measures what such a spell flags. Re-judging a subset (confirm)
keeps the first comparison's scatter.

Why the process rule: a GPU point's time can depend on the process it runs in (where its buffers
land in memory), by 5-16% for a few cuDNN points of 3,646, each process's samples tight, so the
rank test calls such a jump significant at any sample count. GPU rows share their samples among
worker processes (harness/process_split.py, `process_samples`), and a row is SLOWER only if the
fastest process of the new run is slower than the slowest process of the base run by more than
t; otherwise some process of the new run measured no regression: AMBIGUOUS, with both sets of
medians. A real regression moves every process (their medians agree to 0.2%, 1.2% at the 90th
percentile on an H100). CPU rows are split by round the same way. Rows measured in one go
(older files) give one median a side, and the rule is then the ratio rule itself.

The suite verdict (`Comparison.suite`) asks the same question of the run as a whole, because a
uniform slowdown that no row can prove alone (3-5 samples a point) is still a regression: the
geometric-mean ratio of the matched rows with a bootstrap interval over rows (harness/stats.py),
at `suite_confidence` (99%: it is one test, not a family of many), against `suite_threshold`:
SLOWER when the whole interval lies above +threshold and above stats.SCATTER_SUITE_K scatters,
FASTER likewise below, SAME inside ±threshold, AMBIGUOUS otherwise; no verdict (None) with fewer
than stats.MIN_ROWS rows.
Why a 3% default suite threshold, below the 5% row threshold: averaging many rows removes most
row noise, so a 3-5% suite-wide shift is measurable and worth a look; but a whole run also drifts
as a unit (clocks, thermals, neighbours: ~1% on a GPU, as the A/A self-tests model it), which the
interval over rows cannot see, and 3% keeps that drift 3 sigma away from a false SLOWER where 2%
would leave ~2% of A/A comparisons of large suites failing. Where the machine drifts far more
(the CI VM: up to 37% between two runs), the scatter floor is what holds.

A CPU row that shared the cores with other work (`contended`, harness/contention.py) in either
run is AMBIGUOUS, whatever its ratio, with how it shared them: its time measures the neighbours
as much as the code. It is left out of the scatter and of the suite estimate too. So is a row
a race stopped after its first samples in either run (`stop_reason` raced_out, harness/race.py):
it lost to a faster candidate by a margin, no pick rests on its time, and its few samples (on a
GPU a probe's, in stream order) would make the suite estimate follow them.
So is a CPU row timed during a slow spell of the host in either run (`host_spell`): the fixed
matmul each CPU row records (contention.host_probe_ms) read over contention.HOST_SLOWER slower
in one run than in the other. A `check` re-measures such rows (flagged_point_ids) and the rerun
gives their verdict.

`Comparison.fails(policy)` is what a regression check exits on (verdicts.FAILING): "slower" any
SLOWER, BROKEN or MISSING row or a SLOWER suite; "ambiguous" also any AMBIGUOUS row or an
AMBIGUOUS suite; "never". A point the candidate lost is a regression as much as a slower one;
`CompareOptions.allow_missing` excuses MISSING rows (a candidate meant to measure fewer points),
never BROKEN ones.

Pure logic: nothing here prints or decides exit codes (harness/cli/ does).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness import cpu_memory
from harness.analysis.points import raced_out
from harness.compare.rows import (BROKEN_STATUSES, confirmed_row, distinct_values, has_samples,
                                  host_spell, judge_matched, only_points, points_by_id,
                                  run_scatter, with_unmatched)
from harness.compare.verdicts import (CHANGED, DEFAULT_SUITE_CONFIDENCE, DEFAULT_SUITE_THRESHOLD,
                                      DEFAULT_THRESHOLD, FAIL_ON, MATCHED, CompareOptions,
                                      Comparison, EnvironmentMismatch, EnvMismatch,
                                      IncomparableResults, RowResult, SuiteVerdict, Verdict,
                                      confirmed_suite, interval_text, judge_suite,
                                      parse_layer_thresholds, parse_threshold, pct, values_text)
from harness.env import COMPARABILITY_FIELDS, GPU_FIELDS


def compare(base: pd.DataFrame, new: pd.DataFrame,
            options: CompareOptions | None = None) -> Comparison:
    """Judge every point of `base` and `new` (frames of store.COLUMNS); see the module docstring.

    Raises IncomparableResults when no verdict can come from the two (an empty frame, other
    schema versions, no point with timings on both sides and none BROKEN), and
    EnvironmentMismatch when the COMPARABILITY_FIELDS differ, unless allowed."""
    options = options or CompareOptions()
    shared = _refuse_incomparable(base, new, options.labels)
    comparison = _judge_frames(base, new, options)
    # A candidate wrong everywhere is a regression to report (exit 1), not unusable input.
    if not any(r.verdict in MATCHED or r.verdict is Verdict.BROKEN for r in comparison.rows):
        raise IncomparableResults(
            f"no point has timings in both {options.labels[0]} and {options.labels[1]}: none of "
            f"their {shared} common points is ok on both sides, so there is nothing to compare")
    return comparison


_ESTIMATE = object()     # _judge_frames: estimate the scatter from the rows being judged


def _judge_frames(base: pd.DataFrame, new: pd.DataFrame, options: CompareOptions,
                  scatter: Any = _ESTIMATE) -> Comparison:
    mismatches = environment_mismatches(base, new)
    if mismatches and not options.allow_env_mismatch:
        raise EnvironmentMismatch(mismatches)
    base_pts, new_pts = points_by_id(base), points_by_id(new)
    matched = [pid for pid, p in base_pts.items() if p.samples.size and has_samples(new_pts, pid)]
    if scatter is _ESTIMATE:     # rows that shared the CPU would widen it for every row, and
        # raced-out rows' few samples (a probe's in stream order) would too
        quiet = [pid for pid in matched if not (base_pts[pid].contended or new_pts[pid].contended
                                                or host_spell(base_pts[pid], new_pts[pid])
                                                or base_pts[pid].raced or new_pts[pid].raced)]
        scatter = run_scatter(quiet, base_pts, new_pts)
    rows = dict(zip(matched, judge_matched(matched, base_pts, new_pts, options, scatter)))
    return Comparison(with_unmatched(rows, base_pts, new_pts), options, tuple(mismatches),
                      scatter=scatter)


def _refuse_incomparable(base: pd.DataFrame, new: pd.DataFrame, labels: tuple[str, str]) -> int:
    """IncomparableResults naming the file for inputs no verdict can come from; else the number
    of point ids the two share."""
    for df, label in zip((base, new), labels):
        if not len(df):
            raise IncomparableResults(f"{label} has no rows")
        if "samples_ms" not in df.columns:     # store.load refuses it; frames made in code may not
            raise IncomparableResults(f"{label} has no samples_ms column (no raw samples)")
    versions = distinct_values(base, "schema_version"), distinct_values(new, "schema_version")
    if all(versions) and versions[0] != versions[1]:
        raise IncomparableResults(
            f"{labels[0]} has schema version {values_text(versions[0])} and {labels[1]} "
            f"{values_text(versions[1])}: re-measure the older one with this convbench")
    shared = len(set(base["point_id"].astype(str)) & set(new["point_id"].astype(str)))
    if not shared:
        suites = distinct_values(base, "suite"), distinct_values(new, "suite")
        which = (f" ({labels[0]} is suite {values_text(suites[0])}, {labels[1]} suite "
                 f"{values_text(suites[1])})" if suites[0] != suites[1] else "")
        raise IncomparableResults(f"{labels[0]} and {labels[1]} have no point in common{which}: "
                                  "compare two runs of the same suite")
    return shared


def flagged_point_ids(comparison: Comparison) -> list[str]:
    """The points a `--confirm` round must re-measure: every SLOWER row and every row timed
    during a slow spell of the host (its verdict could not be told), and every matched row when
    the suite is SLOWER (a suite verdict can only be re-judged on a rerun of all of it)."""
    if comparison.suite.verdict is Verdict.SLOWER:
        return [r.point_id for r in comparison.rows if r.verdict in MATCHED]
    return [r.point_id for r in comparison.rows if _rejudged(r)]


def _rejudged(row: RowResult) -> bool:
    return row.verdict is Verdict.SLOWER or row.host_spell


def confirm(first: Comparison, rerun_base: pd.DataFrame, rerun_new: pd.DataFrame,
            options: CompareOptions | None = None) -> Comparison:
    """Merge a confirmation round: a flagged row stays SLOWER only if the rerun flags it again,
    and a SLOWER suite stays SLOWER only if the rerun of all its rows is SLOWER as a suite.

    The rerun is judged on its own samples (never pooled with the first run's, which were selected
    for looking slow); the correction family of the rows is just the SLOWER rows. Other rows keep
    their first verdict, even where a suite rerun re-measured them: BROKEN and MISSING rows
    stay as they were, never re-measured (a wrong output is not timing noise that a rerun could
    clear). A flagged row that the rerun lost is BROKEN or MISSING by the rerun's status."""
    options = options or first.options
    slower = [r.point_id for r in first.rows if _rejudged(r)]
    reruns = [_judge_frames(only_points(rerun_base, slower), only_points(rerun_new, slower),
                            options, first.scatter)]
    suite = first.suite
    if suite.verdict is Verdict.SLOWER:
        every = flagged_point_ids(first)
        reruns.append(_judge_frames(only_points(rerun_base, every), only_points(rerun_new, every),
                                    options))
        suite = confirmed_suite(suite, reruns[-1].suite)
    again = {r.point_id: r for r in reruns[0].rows}
    rows = tuple(confirmed_row(r, again.get(r.point_id)) if _rejudged(r) else r
                 for r in first.rows)
    seen = first.env_mismatches + tuple(m for rerun in reruns for m in rerun.env_mismatches)
    return Comparison(rows, first.options, tuple(dict.fromkeys(seen)),
                      first.confirmation_rounds + 1, suite, first.scatter)


# How the times were taken: a change of GPU timer moves small kernels by ~5% (graph replay leaves
# out the stream-order gap the held stream counts), which is not the code getting faster. Read
# from rows timed to their floor with the run's timer: a raced-out plan keeps its probe's, heat's,
# first replay's or verified call's few samples (harness/graph_timer.py, stopping.py,
# call_bound.py), too few for a verdict of its
# own either way; and a row whose measurement chose another timer for itself (a replay slower
# than stream order or a capture that failed: `capture_error`; a stream no hold could cover:
# `timer_fallback`) says so in its reason, and two runs of one commit differed in such rows
# (stop 59's four-GPU pair).
METHOD_COLUMNS = ("gpu_timer",)
_OWN_TIMER = ("capture_error", "timer_fallback")


def _run_timer_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose timer is the run's (METHOD_COLUMNS' comment)."""
    own = pd.Series(False, frame.index)
    for column in _OWN_TIMER:
        if column in frame.columns:
            own |= frame[column].notna()
    return frame[~raced_out(frame) & ~own]


def environment_mismatches(base: pd.DataFrame, new: pd.DataFrame) -> list[EnvMismatch]:
    """The COMPARABILITY_FIELDS (and timing methods) whose recorded values differ between the
    two frames, and how freed memory was kept where both have CPU rows. The GPU_FIELDS are read
    from GPU rows only: a CPU row's times do not depend on the cuDNN beside it."""
    found = []
    gpu_base, gpu_new = base[gpu_row_mask(base)], new[gpu_row_mask(new)]
    for name in COMPARABILITY_FIELDS:
        b, n = distinct_values(base, f"env_{name}"), distinct_values(new, f"env_{name}")
        if name in GPU_FIELDS:
            # Where one side has no GPU row, no GPU point is matched: nothing to keep apart.
            if not (len(gpu_base) and len(gpu_new)):
                continue
            b, n = distinct_values(gpu_base, f"env_{name}"), distinct_values(gpu_new, f"env_{name}")
        if b != n:
            found.append(EnvMismatch(name, b, n))
    for name in METHOD_COLUMNS:
        b, n = (distinct_values(_run_timer_rows(frame), name) for frame in (base, new))
        if b != n:
            found.append(EnvMismatch(name, b, n))
    b, n = _cpu_allocator(base), _cpu_allocator(new)
    if b and n and b != n:
        found.append(EnvMismatch("malloc", b, n))
    return found


def gpu_row_mask(df: pd.DataFrame) -> pd.Series:
    """True for the rows measured on a GPU: their backend's device, from the registry (static:
    no GPU is touched). A backend no longer registered counts as GPU unless the row carries a
    load average, which only CPU timing records."""
    from harness import backends
    devices: dict[str, bool] = {}
    for name in (distinct_values(df, "backend") if "backend" in df.columns else ()):
        try:
            devices[name] = backends.get(name).device != "cpu"
        except (KeyError, ImportError):
            pass
    backend = df["backend"].astype(str) if "backend" in df.columns else pd.Series("", df.index)
    timed_on_cpu = (df["load_avg"].notna() if "load_avg" in df.columns
                    else pd.Series(False, df.index))
    return pd.Series([devices.get(b, not cpu) for b, cpu in zip(backend, timed_on_cpu)],
                     index=df.index, dtype=bool)


def _cpu_allocator(df: pd.DataFrame) -> tuple[str, ...]:
    """How the CPU rows' process kept freed memory (harness/cpu_memory.py: oneDNN's times moved
    up to 5x with it); rows from before it was recorded read as the allocator's default. GPU
    rows (no load average) are not affected and not looked at."""
    if "load_avg" not in df.columns:
        return ()
    cpu = df[df["load_avg"].notna()]
    column = cpu["env_malloc"] if "env_malloc" in cpu.columns else pd.Series(pd.NA, cpu.index)
    return tuple(sorted({cpu_memory.DEFAULT if pd.isna(v) else str(v) for v in column}))


__all__ = [
    "BROKEN_STATUSES", "CHANGED", "CompareOptions", "Comparison", "DEFAULT_SUITE_CONFIDENCE",
    "DEFAULT_SUITE_THRESHOLD", "DEFAULT_THRESHOLD", "EnvMismatch", "EnvironmentMismatch",
    "FAIL_ON", "IncomparableResults", "MATCHED", "METHOD_COLUMNS", "RowResult", "SuiteVerdict",
    "Verdict", "compare", "confirm", "environment_mismatches", "flagged_point_ids",
    "interval_text", "judge_suite", "parse_layer_thresholds", "parse_threshold", "pct"
]
