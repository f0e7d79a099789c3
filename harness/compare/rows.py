"""One verdict per matched point: each frame's rows pooled per point (and per worker process),
the rank test, the scatter floor and the process rule (harness/compare/__init__.py has the
rules)."""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from harness import stats
from harness.analysis.points import raced_out
from harness.compare.verdicts import MATCHED, CompareOptions, RowResult, Verdict, floor_text
from harness.contention import HOST_SLOWER, SPELL_REACH
from harness.measurement import Status
from harness.process_split import process_groups
from harness.stats import adjust_p_values, mann_whitney_u


@dataclass
class PointSamples:
    """One point of one frame: its description, ok samples pooled, and its last non-ok status."""
    pid: str
    meta: dict[str, Any]
    samples: np.ndarray
    status: str = Status.OK
    reason: str = ""
    process_medians: list[float] = field(default_factory=list)   # one per worker process
    contended: str | None = None     # how an ok row shared the CPU (harness/contention.py)
    host_probe: float | None = None  # the slowest host_probe_ms its rows read (CPU rows)
    threads: int | None = None       # cpu_threads: the threads it ran with (CPU rows)
    raced: bool = False              # a race stopped it after its first samples (harness/race.py)
    kernels: str | None = None       # torch_kernels: what PyTorch ran (its autotuner's pick)


def points_by_id(df: pd.DataFrame) -> dict[str, PointSamples]:
    """point_id -> PointSamples. A point measured in several runs (a folder of results) is judged on
    all its ok samples together."""
    points: dict[str, PointSamples] = {}
    wanted = [c for c in ("point_id", "status", "reason", "samples_ms", "process_samples",
                          "torch_kernels", *_CONTENTION, *_META) if c in df.columns]
    # only what is read: result files are wide
    for rec, raced in zip(df[wanted].to_dict("records"), raced_out(df)):
        pid = str(rec["point_id"])
        point = points.setdefault(pid, PointSamples(pid, _meta(rec), np.empty(0)))
        status = _text(rec.get("status")) or "unknown"
        samples = np.asarray(_samples(rec), dtype=float) if status == Status.OK else np.empty(0)
        if samples.size:
            point.samples = np.concatenate([point.samples, samples])
            point.process_medians += [statistics.median(g) for g in process_groups(
                samples.tolist(), _text(rec.get("process_samples")))]
            point.contended = point.contended or _contention(rec)
            point.raced = point.raced or bool(raced)
            point.kernels = point.kernels or _text(rec.get("torch_kernels")) or None
            probe, ran_with = _number(rec.get("host_probe_ms")), _number(rec.get("cpu_threads"))
            if probe is not None:
                point.host_probe = max(point.host_probe or 0.0, probe)
            if ran_with is not None:
                point.threads = int(ran_with)
        else:
            point.status = status
            point.reason = ("no samples stored" if status == Status.OK
                            else _text(rec.get("reason")) or "")
    return points


def judge_matched(ids: list[str], base: dict[str, PointSamples], new: dict[str, PointSamples],
                   options: CompareOptions, scatter: float | None) -> list[RowResult]:
    tests = [mann_whitney_u(new[pid].samples, base[pid].samples) for pid in ids]
    floor = stats.scatter_floor(scatter, stats.SCATTER_ROW_K)
    slower_adj = adjust_p_values([t[1] for t in tests], options.correction)
    faster_adj = adjust_p_values([t[2] for t in tests], options.correction)
    rows = []
    for i, pid in enumerate(ids):
        b, n = base[pid], new[pid]
        base_med, new_med = _median(b.samples), _median(n.samples)
        ratio = _ratio(base_med, new_med)
        slower = ratio >= 1.0
        p, adj = (tests[i][1], slower_adj[i]) if slower else (tests[i][2], faster_adj[i])
        threshold = options.threshold_for(b.meta.get("layer"))
        verdict, reason = row_verdict(ratio, slower_adj[i], faster_adj[i], threshold,
                                      options.alpha, (b.samples.size, n.samples.size), floor,
                                      _process_overlap(b, n, slower, threshold))
        shared = _shared_cpu_reason(b, n, ratio)
        spell = None if shared else _host_spell_reason(b, n, ratio, verdict)
        if shared or spell:
            verdict, reason = Verdict.AMBIGUOUS, shared or spell
        picked = _picked_again(b, n)
        if picked and verdict != Verdict.SAME:
            reason += picked
        rows.append(RowResult(pid, verdict, reason, **b.meta, base_median_ms=base_med,
                              new_median_ms=new_med, ratio=ratio, p_value=float(p),
                              adjusted_p=float(adj), threshold=threshold,
                              n_base=b.samples.size, n_new=n.samples.size,
                              contended=bool(shared or spell), host_spell=bool(spell),
                              raced=b.raced or n.raced, picked_again=bool(picked)))
    return rows


def _picked_again(base: PointSamples, new: PointSamples) -> str:
    """"; PyTorch ran other kernels: ... -> ..." where the two runs' rows name different kernels
    (PyTorch's autotuner times its candidates afresh in each process and may pick another one:
    stop 62 saw 23 of 120 ResNet-50 torch_gpu rows change kernels between two runs of one tree,
    and all 5 of the SLOWER rows among them), else "". The change is real for the user, so the
    verdict stands; the reason says the pick, not the code, moved."""
    if base.kernels is None or new.kernels is None or base.kernels == new.kernels:
        return ""
    was, now = _kernel_list(base.kernels), _kernel_list(new.kernels)
    gone, came = [k for k in was if k not in now], [k for k in now if k not in was]
    said = "; PyTorch ran other kernels (its autotuner picked again): "
    if not gone or not came:        # only one more, or one fewer, kernel (a Memset, say)
        return said + ("also " + _kernel_names(came, was) if came
                       else "no longer " + _kernel_names(gone, now))
    return said + f"{_kernel_names(gone, came)} -> {_kernel_names(came, gone)}"


def _kernel_list(kernels: str) -> list[str]:
    """A row's torch_kernels ("a+b<1+2>+c": names joined by "+", which a kernel's template
    arguments may hold too) as its names."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(kernels):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "+" and depth == 0:
            names.append(kernels[start:i])
            start = i + 1
    return names + [kernels[start:]]


def _kernel_names(names: list[str], others: list[str], head: int = 16, most: int = 90) -> str:
    """The names, each cut to what tells it from the nearest of `others` (cuDNN's kernel names
    differ in a tile size amid 130 characters): its first `head` characters, then the words
    (split at "_") that differ."""
    shown = []
    for name in names:
        common = [(len(os.path.commonprefix([name, o])),
                   len(os.path.commonprefix([name[::-1], o[::-1]]))) for o in others]
        start, end = max(common, default=(0, 0))
        start = name.rfind("_", 0, start) + 1          # whole words: back to a "_"
        stop = name.find("_", max(start, len(name) - end))
        stop = len(name) if stop < 0 else stop
        text = name[:head] + "..." + name[start:stop] if start > head else name[:stop]
        cut = stop < len(name) or len(text) > most
        shown.append(text[:most] + ("..." if cut else ""))
    return " + ".join(shown)


def host_spell(base: PointSamples, new: PointSamples) -> float | None:
    """How much slower the host ran for one run's timing of the point than for the other's
    (contention.host_probe_ms, the slower over the faster, minus 1) where that exceeds
    contention.HOST_SLOWER, else None (or where either run has no probe: GPU rows, older files,
    and single-threaded points, which a spell hardly moves: each vCPU alone kept its speed)."""
    if not base.host_probe or not new.host_probe or base.threads == 1 or new.threads == 1:
        return None
    spell = max(base.host_probe, new.host_probe) / min(base.host_probe, new.host_probe) - 1.0
    return spell if spell > HOST_SLOWER else None


def _host_spell_reason(base: PointSamples, new: PointSamples, ratio: float,
                       verdict: Verdict) -> str | None:
    """Why a SLOWER (FASTER) row timed during a slow spell of the host in the new (base) run is
    AMBIGUOUS: every multi-threaded point slowed with the probe, so a ratio within the spell's
    reach (SPELL_REACH) measures the host as much as the code. A spell in the other run, or a
    ratio beyond the reach, changes nothing: the verdict stands."""
    spell = host_spell(base, new)
    if spell is None or verdict not in (Verdict.SLOWER, Verdict.FASTER):
        return None
    in_new = new.host_probe > base.host_probe
    if in_new != (verdict is Verdict.SLOWER) or \
            abs(math.log(ratio)) > SPELL_REACH * math.log1p(spell):
        return None
    which = "new" if in_new else "base"
    return (f"{ratio - 1.0:+.1%}, but the host ran {spell:.0%} slower while the {which} run "
            f"measured it (a fixed matmul on every core: base {base.host_probe:.3g} ms, new "
            f"{new.host_probe:.3g} ms): a slow spell of the host; `convbench check` "
            "re-measures it")


def _shared_cpu_reason(base: PointSamples, new: PointSamples, ratio: float) -> str | None:
    """Why a row whose CPU timing shared the cores, in either run, can be no verdict but
    AMBIGUOUS: its time measures the neighbours as much as the code (270 ms instead of 11 ms
    once), so neither SLOWER nor FASTER nor SAME would mean anything."""
    sides = [f"{label} run {point.contended}" for label, point in (("base", base), ("new", new))
             if point.contended]
    if not sides:
        return None
    return (f"{ratio - 1.0:+.1%}, but the {' and the '.join(sides)}: re-measure on a quiet "
            "machine")


def _process_overlap(base: PointSamples, new: PointSamples, slower: bool,
                     threshold: float) -> str | None:
    """The two runs' worker-process medians when even the least changed pairing of processes
    stays within the threshold (the process rule of the module docstring), else None."""
    if not base.process_medians or not new.process_medians or min(base.process_medians) <= 0:
        return None          # a zero median: the ratio rule has already said what it can
    if slower:
        change = min(new.process_medians) / max(base.process_medians) - 1.0
    else:
        change = max(new.process_medians) / min(base.process_medians) - 1.0
    if abs(change) > threshold and (change > 0) == slower:
        return None
    return f"base {_ms_list(base.process_medians)}, new {_ms_list(new.process_medians)} ms"


def _ms_list(values: list[float]) -> str:
    return "/".join(f"{v:.4g}" for v in values)


def row_verdict(ratio: float, p_slower: float, p_faster: float, threshold: float, alpha: float,
                sizes: tuple[int, int], floor: float = 0.0, overlap: str | None = None,
                unit: str = "samples") -> tuple[Verdict, str]:
    """The rules of the module docstring, with a reason a person can act on; `floor` is the
    scatter floor as a log ratio (0: none); `overlap` the process medians where the two runs'
    worker processes overlap (None: they do not); `unit` what `sizes` count (a paired run's
    rounds: harness/compare/paired.py)."""
    effect = ratio - 1.0
    if abs(effect) <= threshold:
        return Verdict.SAME, f"{effect:+.1%} within ±{threshold:.1%}"
    slower = effect > 0
    p, p_other = (p_slower, p_faster) if slower else (p_faster, p_slower)
    if p <= alpha and 0 < ratio < math.inf and abs(math.log(ratio)) <= floor:
        return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} and significant "
                                   f"(adjusted p {p:.2g}) but within {floor_text(floor)}: two "
                                   "runs of unchanged code on this machine differ that much")
    if p <= alpha and overlap:
        return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} and significant "
                                   f"(adjusted p {p:.2g}) but not in every worker process "
                                   f"(medians {overlap}): the point's time depends on the process "
                                   "it runs in; `convbench check` re-measures it")
    if p <= alpha:
        return (Verdict.SLOWER if slower else Verdict.FASTER,
                f"{effect:+.1%} beyond ±{threshold:.1%}, adjusted p {p:.2g} <= {alpha:g}")
    if p_other <= alpha:    # medians and ranks point opposite ways: odd, multi-modal samples
        return Verdict.AMBIGUOUS, (f"median {effect:+.1%} but the rank test says the other way "
                                   f"(adjusted p {p_other:.2g}): look at the samples")
    return Verdict.AMBIGUOUS, (f"{effect:+.1%} beyond ±{threshold:.1%} but not significant "
                               f"(adjusted p {p:.2g} > {alpha:g}, {sizes[0]}/{sizes[1]} "
                               f"{unit}): re-measure with more {unit}")


# Candidate statuses that say the code under test went wrong where the baseline verified it: a
# correctness regression (BROKEN). The others (unsupported, workspace_exceeded, not_tried) say
# the point was not run there, which a narrower machine or sweep explains: MISSING.
BROKEN_STATUSES = (Status.WRONG, Status.CRASHED, Status.FAILED)


def lost_row(point: PointSamples, new: PointSamples | None) -> RowResult:
    """The row of a point verified in the baseline that has no timing in the candidate."""
    broken = new is not None and new.status in BROKEN_STATUSES
    reason = "not in the new results" if new is None else (
        f"new status {new.status}" + (f": {new.reason}" if new.reason else ""))
    return RowResult(point.pid, Verdict.BROKEN if broken else Verdict.MISSING, reason,
                     **point.meta, base_median_ms=_median(point.samples),
                     n_base=point.samples.size)


def with_unmatched(rows: dict[str, RowResult], base: dict[str, PointSamples],
                   new: dict[str, PointSamples]) -> tuple[RowResult, ...]:
    """The matched rows' verdicts, then a row for every point with samples on one side only:
    the baseline's lost (BROKEN or MISSING), the candidate's NEW."""
    rows = dict(rows)
    for pid, point in base.items():
        if point.samples.size and pid not in rows:
            rows[pid] = lost_row(point, new.get(pid))
    for pid, point in new.items():
        if point.samples.size and pid not in rows:
            rows[pid] = new_row(point, base.get(pid))
    return tuple(rows.values())


def new_row(point: PointSamples, base: PointSamples | None) -> RowResult:
    if base is None:
        reason = "not in the baseline"
    else:
        reason = f"baseline status {base.status}" + (f": {base.reason}" if base.reason else "")
    return RowResult(point.pid, Verdict.NEW, reason, **point.meta,
                     new_median_ms=_median(point.samples), n_new=point.samples.size)


def confirmed_row(first: RowResult, again: RowResult | None) -> RowResult:
    before = f"first run {first.effect:+.1%}, adjusted p {first.adjusted_p:.2g}"
    if again is None:
        flagged = "timed in a slow spell of the host" if first.host_spell else "flagged SLOWER"
        return replace(first, verdict=Verdict.AMBIGUOUS,
                       reason=f"{flagged} ({before}) but the confirmation run has no timing")
    if first.host_spell:     # flagged for the host, not for its time: the rerun decides
        return replace(again, reason=f"re-measured after a slow spell of the host: "
                                     f"{again.reason} (first run {first.effect:+.1%})")
    if again.verdict is Verdict.SLOWER:
        return replace(again, reason=f"confirmed: {again.reason} ({before})")
    if again.verdict not in MATCHED:    # BROKEN or MISSING: the rerun lost it, and says how
        return replace(again, reason=f"flagged SLOWER ({before}); the confirmation run: "
                                     f"{again.reason}")
    return replace(again, reason=f"not confirmed ({before}); rerun: {again.reason}")


_CONTENTION = ("contended", "cpu_time_ratio", "load_avg", "cpu_steal", "host_probe_ms",
               "host_speedup", "cpu_threads")


def _contention(rec: dict[str, Any]) -> str | None:
    """"shared the CPU (load 3.1, CPU/wall 0.48, steal 15%)" for a row marked contended, else
    None (rows of older files, GPU rows and rows that had the cores to themselves)."""
    flag = rec.get("contended")
    if _text(flag) is None or not bool(flag):      # None, NA or NaN: not measured
        return None
    load, ratio = _number(rec.get("load_avg")), _number(rec.get("cpu_time_ratio"))
    steal, speedup = _number(rec.get("cpu_steal")), _number(rec.get("host_speedup"))
    parts = (None if load is None else f"load {load:.1f}",
             None if ratio is None else f"CPU/wall {ratio:.2f}",
             None if not steal else f"steal {steal:.0%}",
             None if speedup is None else f"its threads {speedup:.2f}x one in the host's probe")
    details = ", ".join(text for text in parts if text)
    return "shared the CPU" + (f" ({details})" if details else "")


def _number(value: Any) -> float | None:
    text = _text(value)
    return None if text is None else float(text)


_META = ("suite", "layer", "batch", "direction", "precision", "layout", "backend", "algorithm",
         "workspace_limit", "timing_mode", "threads", "op", "output")


def _meta(rec: dict[str, Any]) -> dict[str, Any]:
    meta = {name: _text(rec.get(name)) for name in _META}
    for name in ("batch", "workspace_limit", "threads"):
        meta[name] = None if meta[name] is None else int(float(meta[name]))
    return meta


def run_scatter(ids: list[str], base: dict[str, PointSamples],
                new: dict[str, PointSamples]) -> float | None:
    """The run-to-run scatter a row's ratio is held to over the matched rows `ids`: what the two
    runs' own replicates predict (stats.replicate_sd; a regression in the run judged cannot
    raise it), else, for files without replicates (older runs), the pair's own (stats.
    run_to_run_scatter)."""
    sides = [_replicate_noise([points[pid] for pid in ids]) for points in (base, new)]
    if None not in sides:
        (base_sd, base_k), (new_sd, new_k) = sides
        return stats.replicate_scatter(base_sd, base_k, new_sd, new_k)
    return _pair_scatter(ids, base, new)


def _replicate_noise(points: list[PointSamples]) -> tuple[float, float] | None:
    """(sd of one replicate's log median, replicates per row) of one run, or None where too few
    rows have replicates."""
    medians = [p.process_medians for p in points if len(p.process_medians) >= 2]
    sd = stats.replicate_sd(medians)
    return None if sd is None else (sd, statistics.median(len(m) for m in medians))


def _pair_scatter(ids: list[str], base: dict[str, PointSamples],
                  new: dict[str, PointSamples]) -> float | None:
    """The pair's run-to-run scatter over the matched rows `ids` (harness/stats.py)."""
    ratios = [_ratio(_median(base[pid].samples), _median(new[pid].samples)) for pid in ids]
    sampling = [math.hypot(stats.log_median_se(base[pid].samples),
                           stats.log_median_se(new[pid].samples)) for pid in ids]
    return stats.run_to_run_scatter(ratios, sampling)


def _ratio(base_median: float, new_median: float) -> float:
    """median(new) / median(base); infinite when the baseline's median is 0."""
    return new_median / base_median if base_median > 0 else math.inf


def _median(samples: np.ndarray) -> float:
    return float(statistics.median(samples.tolist()))   # 10x quicker than np.median on ~20 values


def has_samples(points: dict[str, PointSamples], pid: str) -> bool:
    return pid in points and points[pid].samples.size > 0


def _samples(rec: dict[str, Any]) -> list[float]:
    value = rec.get("samples_ms")
    if value is None or isinstance(value, str) or not hasattr(value, "__len__"):
        return []
    return [float(v) for v in value]


def only_points(df: pd.DataFrame, point_ids: list[str]) -> pd.DataFrame:
    return df[df["point_id"].isin(point_ids)] if len(df) else df


def distinct_values(df: pd.DataFrame, column: str) -> tuple[str, ...]:
    if column not in df.columns:
        return ()
    return tuple(sorted({str(v) for v in df[column] if _text(v) is not None}))


def _text(value: Any) -> str | None:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)
