"""Numbers to text, and analysis frames to report tables. One formatter per kind of number, used by
every table and by the tests that look for recomputed values in the pages."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from harness.analysis import policies
from harness.measurement import Status
from harness.report import computed
from harness import threads
from harness.report.document import Block, Fold, Table
from harness.workspace_limit import limit_text

FOLD_ROWS = 25          # longer tables are folded so the page stays scannable
DASH = "—"
KEY_HEADERS = {"layer_label": "Layer", "direction": "Direction", "effective_precision": "Precision",
               "layout": "Layout", "workspace_limit": "Workspace limit", "timing_mode": "Timing",
               "threads": "Threads", "op": "Op", "output": "Output"}
SHARING_HEADER = "CPU sharing"      # the best tables' column of fmt_sharing cells


# ---- formatters ---------------------------------------------------------------------------------
def is_missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def fmt_ms(value: Any) -> str:
    """Milliseconds to four significant digits; thousands grouped instead of an exponent."""
    if is_missing(value):
        return DASH
    value = float(value)
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def fmt_ratio(value: Any) -> str:
    return DASH if is_missing(value) else f"{float(value):.2f}×"


def fmt_error(value: Any) -> str:
    """A relative error to two significant digits."""
    return DASH if is_missing(value) else f"{float(value):.2g}"


def fmt_bytes(value: Any) -> str:
    if is_missing(value):
        return DASH
    value = float(value)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def fmt_limit(value: Any) -> str:
    return limit_text(value)


def fmt_pct(value: Any) -> str:
    return DASH if is_missing(value) else f"{100 * float(value):.2g}%"


def fmt_total(total: Any, missing: int, points: int) -> str:
    """A network total, said to be a lower bound where some points had no verified pick."""
    if missing >= points or is_missing(total):
        return DASH
    text = fmt_ms(total)
    return f"≥ {text} ({missing} of {points} points missing)" if missing else text


def fmt_key(name: str, value: Any) -> str:
    if name == "threads":
        return threads.label(int(value))        # 0: every core ("all"), as --threads says it
    return fmt_limit(value) if name == "workspace_limit" else str(value)


def fmt_candidate(candidate: Any) -> str:
    """backend:algorithm (with "[asked fp32]" where it delivered a lower precision than asked)."""
    return DASH if is_missing(candidate) else str(candidate)


def fmt_sharing(counted: Any) -> str:
    """A point's Sharing (harness/analysis/sharing.py) in a cell: "retaken 4" (samples that
    waited for a core, taken again clean), "2 contended" (candidates left out of the ranking),
    blank where nothing shared the CPU or nothing was checked (GPU rows, older files)."""
    if is_missing(counted):
        return ""
    parts = []
    if counted.retaken:
        parts.append(f"retaken {counted.retaken}")
    if counted.contended:
        parts.append(f"{counted.contended} contended")
    return ", ".join(parts)


# ---- helpers -------------------------------------------------------------------------------------
def maybe_fold(summary: str, table: Table, limit: int = FOLD_ROWS) -> Block:
    if len(table.rows) <= limit:
        return table
    return Fold(f"{summary} ({len(table.rows)} rows)", (table,))


def _key_cells(row: pd.Series, keys: Iterable[str]) -> list[str]:
    return [fmt_key(k, row[k]) for k in keys]


# ---- 1. best algorithm per point -----------------------------------------------------------------
def best_tables(best: pd.DataFrame, baseline: str | None) -> list[Block]:
    """One table per direction x precision, rows sorted in network order, long ones folded."""
    shown = computed.varying(best, ["layout", "workspace_limit", "timing_mode", "threads", "op",
                                    "output"])
    with_workspace = best["best_workspace_bytes"].notna().any()
    blocks: list[Block] = []
    for (direction, precision), part in best.groupby(["direction", "effective_precision"],
                                                     sort=False):
        title = f"{direction} · {precision}"
        table = _best_table(part, shown, baseline, with_workspace, title)
        blocks.append(maybe_fold(title, table))
    return blocks


def _best_table(part: pd.DataFrame, keys: list[str], baseline: str | None,
                with_workspace: bool, title: str) -> Table:
    # CPU sharing beside Verified: it says why a point verified fewer candidates than it tried
    headers = ["Layer", "Mult.", *[KEY_HEADERS[k] for k in keys], "Best verified", "Median ms",
               "Workspace", "Verified", SHARING_HEADER, "Runner-up", "vs runner-up"]
    if baseline:
        headers += [f"{baseline} pick", f"{baseline} ms", f"vs {baseline}"]
    rows = [_best_cells(r, keys, baseline) for _, r in part.iterrows()]
    if not with_workspace:   # CPU algorithms report none: a column of dashes says nothing
        headers, rows = _drop_column(headers, rows, "Workspace")
    column = headers.index(SHARING_HEADER)
    if not any(r[column] for r in rows):   # GPU rows, older files, a quiet CPU: nothing to say
        headers, rows = _drop_column(headers, rows, SHARING_HEADER)
    numeric = tuple(h.endswith(" ms") or h.startswith("vs ") or h in ("Mult.", "Workspace")
                    for h in headers)
    return Table(tuple(headers), tuple(tuple(r) for r in rows), numeric, title)


def _drop_column(headers: list[str], rows: list[list[str]],
                 header: str) -> tuple[list[str], list[list[str]]]:
    drop = headers.index(header)
    return headers[:drop] + headers[drop + 1:], [r[:drop] + r[drop + 1:] for r in rows]


def _best_cells(r: pd.Series, keys: list[str], baseline: str | None) -> list[str]:
    cells = [str(r["layer_label"]), str(r["multiplicity"]), *_key_cells(r, keys),
             fmt_candidate(r["best_candidate"]),
             fmt_ms(r["best_median_ms"]), fmt_bytes(r["best_workspace_bytes"]),
             f"{r['n_ok']}/{r['n_tried']}", fmt_sharing(r["sharing"]),
             fmt_candidate(r["runner_candidate"]),
             fmt_ratio(r["speedup_runner"])]
    if baseline:
        cells += [_baseline_pick(r), fmt_ms(r["base_median_ms"]), fmt_ratio(r["speedup_base"])]
    return cells


def _baseline_pick(r: pd.Series) -> str:
    """"same" where the baseline already picks the best: the eye finds the rows that differ."""
    status = r["base_status"]
    if is_missing(status):
        return DASH
    if status != Status.OK:
        return f"{r['base_candidate']} ({status})"
    if not r["base_comparable"]:   # delivered a lower precision than its point's: no ratio
        return f"{r['base_candidate']} [{r['base_effective_precision']}]"
    return "same" if r["base_candidate"] == r["best_candidate"] else str(r["base_candidate"])


# ---- 3. workspace --------------------------------------------------------------------------------
def workspace_totals_table(totals: pd.DataFrame) -> Table:
    """Oracle network total (all layers and directions) under each workspace limit."""
    keys = ["effective_precision", "layout",
            *computed.varying(totals, ["timing_mode", "threads", "op"])]
    headers = [KEY_HEADERS[k] for k in keys] + ["Workspace limit", "Network total ms"]
    rows = [(*_key_cells(r, keys), fmt_limit(r["workspace_limit"]),
             fmt_total(r["total_oracle"], r["missing_oracle"], r["points"]))
            for _, r in totals.iterrows()]
    return Table(tuple(headers), tuple(rows), (False,) * len(keys) + (False, True))


def pareto_table(fronts: pd.DataFrame) -> Table:
    """Per point, the workspace/time trade-offs worth taking, by rising workspace."""
    keys = ["layer_label", "direction", "effective_precision",
            *computed.varying(fronts, ["layout", "timing_mode", "threads", "op", "output"])]
    rows = []
    for values, part in fronts.groupby(keys, sort=False):
        steps = "; ".join(f"{fmt_bytes(w)} → {fmt_ms(t)} ms ({c})" for w, t, c in
                          zip(part["ws"], part["median_ms"], part["candidate"]))
        rows.append((*[str(v) for v in values], steps))
    return Table(tuple(KEY_HEADERS[k] for k in keys) + ("Pareto front (workspace → time)",),
                 tuple(rows))


# ---- 6. network totals per policy ----------------------------------------------------------------
def network_table(totals: pd.DataFrame, policies: list[str], title: str = "") -> Table:
    keys = ["effective_precision",
            *computed.varying(totals, ["layout", "workspace_limit", "timing_mode", "threads"])]
    headers = [KEY_HEADERS[k] for k in keys] + [f"{p} ms" for p in policies]
    if "oracle" in policies and len(policies) > 1:
        headers += [f"{p} / oracle (oracle saves)" for p in policies if p != "oracle"]
    rows = []
    for _, r in totals.iterrows():
        cells = _key_cells(r, keys)
        cells += [fmt_total(r[f"total_{p}"], r[f"missing_{p}"], r["points"]) for p in policies]
        if "oracle" in policies and len(policies) > 1:
            cells += [_policy_ratio(r, p) for p in policies if p != "oracle"]
        rows.append(tuple(cells))
    numeric = (False,) * len(keys) + (True,) * (len(headers) - len(keys))
    return Table(tuple(headers), tuple(rows), numeric, title)


def _policy_ratio(r: pd.Series, policy: str) -> str:
    """Only where both totals cover every point: a partial total would flatter the policy."""
    saved = policies.saving(r, policy)
    if saved is None:
        return DASH
    return (f"{fmt_ratio(r[f'total_{policy}'] / r['total_oracle'])} ({fmt_ms(saved[0])} ms, "
            f"{saved[1]:.1f}%)")


# ---- 7. environment and method -------------------------------------------------------------------
def env_table(df: pd.DataFrame) -> Table:
    rows = []
    for column in [c for c in df.columns if c.startswith("env_")]:
        values = computed.distinct_values(df, column)
        if not values:
            continue
        text = values[0][0] if len(values) == 1 else "; ".join(f"{v} ({n} rows)" for v, n in values)
        rows.append((column.removeprefix("env_"), text))
    return Table(("Field", "Value"), tuple(rows), title="Environment")


def counts_text(values: list[tuple[str, int]]) -> str:
    return ", ".join(f"{v}: {n}" for v, n in values) if values else DASH


def method_table(df: pd.DataFrame) -> Table:
    """How the numbers were measured: modes, budgets, noise, stop reasons, host and setup cost."""
    noise = computed.noise_stats(df)
    ok = computed.verified(df)
    rows = [
        ("Timing modes", counts_text(computed.distinct_values(df, "timing_mode"))),
        ("Budget per point (ms)", counts_text(computed.distinct_values(df, "budget_ms"))),
        ("Stop reasons (verified rows)", counts_text(computed.distinct_values(ok, "stop_reason"))),
        ("Samples per verified row (median, min)",
         f"{_median(ok['n_samples']):.0f}, {_min(ok['n_samples']):.0f}" if len(ok) else DASH),
        ("Relative noise of the median (median, 90th pct)",
         f"{fmt_pct(noise['median'])}, {fmt_pct(noise['p90'])}" if noise else DASH),
        ("Throttled rows (SM clock < 90% of max)", str(int(df["throttled"].sum()))),
        ("Rows by status", counts_text(computed.distinct_values(df, "status"))),
    ]
    return Table(("What", "Value"), tuple(rows), title="How the numbers were measured")


def backend_cost_table(df: pd.DataFrame) -> Table:
    """Per backend: host cost per call and setup cost (plan building), verified rows' medians."""
    ok = computed.verified(df)
    grouped = ok.groupby("backend")[["host_ms", "setup_ms"]].median()
    tried = df.groupby("backend").size()
    rows = tuple((b, str(tried[b]), str(int((ok["backend"] == b).sum())),
                  fmt_ms(grouped.loc[b, "host_ms"]) if b in grouped.index else DASH,
                  fmt_ms(grouped.loc[b, "setup_ms"]) if b in grouped.index else DASH)
                 for b in tried.index)
    return Table(("Backend", "Rows", "Verified", "Host ms per call", "Setup ms"), rows,
                 (False, True, True, True, True), "Cost per backend (medians of verified rows)")


def _median(s: pd.Series) -> float:
    return float(pd.to_numeric(s, errors="coerce").median())


def _min(s: pd.Series) -> float:
    return float(pd.to_numeric(s, errors="coerce").min())


# ---- selection: who picks the fastest ---------------------------------------------------------
def policy_table(summary: pd.DataFrame) -> Table:
    rows = tuple((r["policy"], str(r["settings"]), str(r["compared"]),
                  _share(r["picks_oracle_pct"]),
                  _regret(r["geomean_regret"]), _regret(r["max_regret"]), r["worst_setting"],
                  str(r["precision_lowered"]), _share(r["picks_tie_pct"]),
                  _regret(r["geomean_tie_regret"]))
                 for _, r in summary.iterrows())
    return Table(("Policy", "Settings", "Compared", "Picks the oracle", "Geomean regret",
                  "Worst regret", "Worst setting", "Precision lowered",
                  "Picks the oracle or a near-tie", "Geomean tie-aware regret"), rows,
                 (False, True, True, True, True, True, False, True, True, True))


def _share(percent: Any) -> str:
    return DASH if is_missing(percent) else f"{float(percent):.1f}%"


def _regret(value: Any) -> str:
    return DASH if is_missing(value) else f"{float(value):.3f}"


def versus_pytorch_table(versus: pd.DataFrame) -> Table:
    rows = tuple((r["effective_precision"], r["layout"], str(r["points"]),
                  _regret(r["geomean_oracle_over_pytorch"]), _regret(r["best"]),
                  _regret(r["worst"]), r["worst_points"])
                 for _, r in versus.iterrows())
    return Table(("Precision", "Layout", "Points", "Geomean oracle / PyTorch", "Best", "Worst",
                  "Worst points"), rows, (False, False, True, True, True, True, False))
