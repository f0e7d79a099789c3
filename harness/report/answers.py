"""Three answers users ask of a sweep, as report blocks: the cost of determinism, how stable
a pick is, and the network table. The report's sections and `convbench table --determinism /
--stability / --networks` show these same blocks (report/text.py writes them for a terminal),
so the pages and the terminal say the same numbers; the numbers come from harness/computed."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis import (determinism, layer_labels, networks, policies, selection,
                              stability)
from harness.analysis.points import STEP_KEYS
from harness.report import computed
from harness.report.document import Block, Fold, Table, Text
from harness.report.tables import (DASH, KEY_HEADERS, fmt_candidate, fmt_key, fmt_ms, fmt_total,
                                   is_missing)

HEADERS = {**KEY_HEADERS, "batch": "Batch", networks.SOURCE: "Source", "suite": "Network",
           networks.MACHINE: "Machine"}
SHOWN_WHEN_VARYING = ["batch", "workspace_limit", "timing_mode", "threads", "op", "output"]
NOT_MEASURED = "n/a"

DETERMINISM_TEXT = (
    "Deterministic mode (torch.use_deterministic_algorithms(True), or the cuDNN backend's "
    "deterministic flag) may run "
    "only algorithms whose results repeat. A row counts as deterministic when, before it was "
    "timed, two runs on the same inputs into a NaN-poisoned output gave equal outputs element "
    "for element (with several worker processes: in every process). That is evidence, not "
    "proof: an algorithm whose reduction order depends on timing can agree twice by chance. "
    "Rows never checked count as not deterministic. Cost = the fastest verified deterministic "
    "algorithm's time - the fastest verified algorithm's, per point x multiplicity, as ms and % "
    "of the best; a total missing points (no verified deterministic algorithm there) gets no "
    "cost. Nondeterministic picks: points where cuDNN's heuristic or PyTorch's autotuner, left "
    "alone, runs an algorithm whose two runs differed.")
STABILITY_TEXT = (
    "How likely a rerun is to pick another algorithm, from each verified algorithm's raw "
    f"samples: {stability.RESAMPLES} seeded bootstrap resamples of every candidate's median; "
    "P(change) = the share of resamples where another candidate's median is below the best's. "
    f"A candidate ties the best when its resampled median is at or below the best's in at least "
    f"{stability.NEAR_TIE_P:.0%} of the resamples, or its median lies within "
    f"{stability.NOISE_K:g} combined standard errors of the best's; a near-tie is a point with "
    f"P(change) ≥ {stability.NEAR_TIE_P:.0%} or a second candidate tying: there the choice "
    "among the tied candidates does not matter. The samples come from one window of one run, so "
    "run-to-run scatter is not in them: P(change) is a lower bound.")
NETWORKS_TEXT = (
    "One row per network (suite or imported model) at one precision, layout and machine; "
    "never summed across machines or results files. Cells: forward / backward (bwd_data + "
    "bwd_filter) / total ms of one training step's convolutions, each layer's pick x its "
    "multiplicity; where a recurrent layer was timed as one whole training step (train_step),"
    " those steps have a column of their own before the total. ≥ and (k of n missing): points"
    " where the policy had no verified pick at the precision asked (the sum is a lower "
    "bound); n/a: direction not measured. Best saves: what the fastest verified algorithm per"
    " layer saves over the policy, in ms and % of the policy's total, only where both totals "
    "are complete.")


def _label(policy: str) -> str:
    return "best verified" if policy == policies.ORACLE else policy


def shown_keys(frame: pd.DataFrame, always: list[str],
               optional: list[str] = SHOWN_WHEN_VARYING) -> list[str]:
    """A table's key columns: `always`, then those of `optional` whose value varies here."""
    return [*always, *computed.varying(frame, [k for k in optional
                                               if k in frame and k not in always])]


def _pct(value: Any) -> str:
    return DASH if is_missing(value) else f"{float(value):.1f}%"


# ---- the network table ------------------------------------------------------------------------
def networks_table(long: pd.DataFrame) -> Table:
    """The long frame of computed.networks.network_table as one row per network setting."""
    split = [k for k in (networks.SOURCE, "suite", networks.MACHINE) if k in long.columns]
    keys = shown_keys(long, [*split, "effective_precision", "layout"])
    names = list(dict.fromkeys(long["policy"]))
    headers = [HEADERS[k] for k in keys] + ["Layer-dirs"]
    parts = _parts(long)
    headers += [f"{_label(p)} {' / '.join(_PART_NAMES[x] for x in parts)} / total ms"
                for p in names]
    headers += [f"best saves vs {p}" for p in names if p != policies.ORACLE]
    rows = []
    for _, group in long.groupby([*split, *STEP_KEYS], sort=False, dropna=False):
        by_policy = group.set_index("policy")
        first = group.iloc[0]
        cells = [fmt_key(k, first[k]) for k in keys] + [str(int(first["points"]))]
        cells += [_network_cell(by_policy.loc[p], parts) for p in names]
        cells += [_saves(by_policy.loc[p]) for p in names if p != policies.ORACLE]
        rows.append(tuple(cells))
    numeric = (False,) * len(keys) + (True,) * (len(headers) - len(keys))
    return Table(tuple(headers), tuple(rows), numeric, "Network table")


_PART_NAMES = {"fwd": "fwd", "bwd": "bwd", networks.STEP: "whole steps"}


def _parts(long: pd.DataFrame) -> tuple[str, ...]:
    """fwd and bwd, and the layers timed as whole training steps where any was."""
    steps = f"{networks.STEP}_points"
    whole = steps in long.columns and long[steps].fillna(0).gt(0).any()
    return networks.PARTS if whole else networks.PARTS[:2]


def _network_cell(r: pd.Series, shown: tuple[str, ...]) -> str:
    parts = [_part(r[f"{p}_ms"], r[f"{p}_missing"], r[f"{p}_points"]) for p in shown]
    parts.append(_part(r["total_ms"], r["missing"], r["points"]))
    missing = int(r["missing"])
    counted = f" ({missing} of {int(r['points'])} missing)" if missing else ""
    return " / ".join(parts) + counted


def _part(ms: Any, missing: Any, points: Any) -> str:
    if is_missing(points) or not points:
        return NOT_MEASURED
    if missing >= points or is_missing(ms):
        return DASH
    return f"≥{fmt_ms(ms)}" if missing else fmt_ms(ms)


def _saves(r: pd.Series) -> str:
    if is_missing(r["saves_ms"]):
        return DASH
    return f"{fmt_ms(r['saves_ms'])} ms ({r['saves_pct']:.1f}%)"


def networks_blocks(df: pd.DataFrame) -> list[Block]:
    return [Text(NETWORKS_TEXT), networks_table(networks.network_table(df))]


# ---- the cost of determinism --------------------------------------------------------------------
def determinism_blocks(df: pd.DataFrame) -> list[Block]:
    """The per-network cost table, then the points where determinism is not free, folded."""
    points = determinism.point_cost(df)
    cost = determinism.network_cost(df, points=points)
    marked = _marked_policies(df)
    keys = shown_keys(cost, ["effective_precision", "layout"])
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["points"]),
                  fmt_total(r["total_oracle"], r["missing_oracle"], r["points"]),
                  fmt_total(r["total_deterministic"], r["missing_deterministic"], r["points"]),
                  fmt_ms(r["cost_ms"]), _pct(r["cost_pct"]),
                  *[str(r[f"nondeterministic_{p}"]) for p in marked])
                 for _, r in cost.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Layer-dirs", "Best ms", "Deterministic ms",
               "Deterministic mode costs ms", "costs % of best",
               *[f"{p} picks nondeterministic" for p in marked])
    table = Table(headers, rows, (False,) * len(keys) + (True,) * (5 + len(marked)),
                  "Cost of determinism per training step")
    return [Text(DETERMINISM_TEXT), table, *_determinism_points(points, marked)]


def _marked_policies(df: pd.DataFrame) -> list[str]:
    """The marked policies this data can answer (no column of dashes for the others)."""
    return [p for p in determinism.MARKED if p in policies.available(df)]


def _determinism_points(points: pd.DataFrame, marked: list[str]) -> list[Block]:
    flagged = [points[f"{p}_deterministic"].astype("boolean") == False  # noqa: E712
               for p in marked]
    costly = points["cost_ms"].fillna(1.0) > 0
    if flagged:
        costly |= pd.concat(flagged, axis=1).fillna(False).any(axis=1)
    shown = points[costly].assign(layer_label=layer_labels(points[costly]))
    if shown.empty:
        return [Text(f"At all {len(points)} points the fastest verified algorithm is "
                     "deterministic" + (" and no policy above picks a nondeterministic one."
                                        if marked else "."))]
    keys = ["layer_label", "direction", *shown_keys(shown, ["effective_precision", "layout"])]
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["multiplicity"]),
                  _candidate(r["best_candidate"], r["best_deterministic"]),
                  fmt_ms(r["best_ms"]), fmt_candidate(r["det_candidate"]), fmt_ms(r["det_ms"]),
                  _pct(r["cost_pct"]), *[_marked(r, p) for p in marked])
                 for _, r in shown.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Mult.", "Best", "ms", "Best deterministic", "ms",
               "costs %", *[f"{p} pick" for p in marked])
    table = Table(headers, rows, (False,) * len(keys) + (True, False, True, False, True, True)
                  + (False,) * len(marked))
    return [Fold(f"Points where determinism costs time or a policy picks a nondeterministic "
                 f"algorithm ({len(rows)} of {len(points)})", (table,))]


def _marked(r: pd.Series, policy: str) -> str:
    candidate, deterministic = r[f"{policy}_candidate"], r[f"{policy}_deterministic"]
    return DASH if is_missing(candidate) else _candidate(candidate, deterministic)


def _candidate(candidate: Any, deterministic: Any) -> str:
    return f"{candidate} (nondeterministic)" if _false(deterministic) else str(candidate)


def _false(flag: Any) -> bool:
    """Known to be False (a nullable flag: unknown is not False)."""
    return not is_missing(flag) and not bool(flag)


# ---- pick stability ---------------------------------------------------------------------------
def stability_blocks(df: pd.DataFrame) -> list[Block]:
    points = stability.point_stability(df)
    if points.empty:
        return [Text("No verified rows: nothing to judge.")]
    summary = stability.stability_summary(points)
    keys = shown_keys(summary, ["effective_precision", "layout"])
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["points"]), str(r["near_ties"]),
                  _pct(r["near_tie_pct"]), f"{r['median_p_change']:.2f}", str(r["likely_change"]))
                 for _, r in summary.iterrows())
    everything = stability.stability_summary(points.assign(_all="all"), ["_all"]).iloc[0]
    headers = (*[HEADERS[k] for k in keys], "Layer-dirs", "Near-ties", "Share near-ties",
               "Median P(change)", "P(change) ≥ 50%")
    blocks: list[Block] = [
        Text(STABILITY_TEXT),
        Table(headers, rows, (False,) * len(keys) + (True,) * 5, "Pick stability"),
        Text(f"Near-ties: {everything['near_ties']} of {everything['points']} layer-directions "
             f"({everything['near_tie_pct']:.1f}%).")]
    ties = points[points["near_tie"]].assign(layer_label=layer_labels(points[points["near_tie"]]))
    if len(ties):
        tkeys = ["layer_label", "direction", *shown_keys(ties, ["effective_precision", "layout"])]
        trows = tuple((*[fmt_key(k, r[k]) for k in tkeys], str(r["best_candidate"]),
                       fmt_ms(r["best_ms"]), str(r["runner_candidate"]), fmt_ms(r["runner_ms"]),
                       f"{r['p_change']:.2f}", str(r["tie_candidates"]))
                      for _, r in ties.iterrows())
        theaders = (*[HEADERS[k] for k in tkeys], "Best", "ms", "Runner-up", "ms", "P(change)",
                    "Tied with the best")
        blocks.append(Fold(f"Near-tie points ({len(trows)})", (Table(
            theaders, trows, (False,) * len(tkeys) + (False, True, False, True, True, False),
            "Near-tie points"),)))
    return blocks + _torch_pick_blocks(df)


def _torch_pick_blocks(df: pd.DataFrame) -> list[Block]:
    """Where PyTorch's autotuner picked differently in the timing processes of one run: the
    count, and those points with each process's kernels and time (nothing where no pick was
    recorded)."""
    unstable, recorded = selection.pytorch_pick_counts(df)
    if not recorded:
        return []
    if not unstable:
        return [Text("PyTorch's autotuner ran the same kernels in every timing process "
                     f"wherever its pick was recorded ({recorded} points).")]
    text = Text(f"PyTorch's pick is unstable at {unstable} of {recorded} points: its autotuner "
                "picked different kernels in different timing processes of the same run, so a "
                "rerun may time another pick. Those rows time process 1's pick alone; the "
                "reason of each names every process's kernels and median time.")
    shown = df[df[selection.PICK_STABLE].astype("boolean") == False]  # noqa: E712 - nullable
    shown = shown.assign(layer_label=layer_labels(shown))
    keys = ["layer_label", "direction", *shown_keys(shown, ["effective_precision", "layout"])]
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["torch_picks"]),
                  str(r["torch_pick_ms"])) for _, r in shown.iterrows())
    table = Table((*[HEADERS[k] for k in keys], "Kernels per process", "ms per process"),
                  rows, (False,) * (len(keys) + 2), "Unstable PyTorch picks")
    return [text, Fold(f"Points where PyTorch's pick is unstable ({len(rows)})", (table,))]
