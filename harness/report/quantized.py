"""The report's "Quantized precisions" section and `convbench table --quantized`: what fp8 and
int8 buy over fp16 per point and summed up, at what error, and how many quantized rows have no
plan (numbers from harness/analysis/quantized.py)."""
from __future__ import annotations


import pandas as pd

from harness.analysis import layer_labels, quantized
from harness.analysis.networks import SOURCE
from harness.analysis.points import own_output
from harness.precision import QUANTIZED, TABLE
from harness.report.answers import HEADERS, SHOWN_WHEN_VARYING, shown_keys
from harness.report.document import Block, Fold, Table, Text
from harness.report.tables import (DASH, fmt_candidate, fmt_error, fmt_key, fmt_ms, fmt_ratio,
                                   is_missing, maybe_fold)

_ALWAYS = ["effective_precision", "direction", "layout"]
_OPTIONAL = [SOURCE, "suite", *SHOWN_WHEN_VARYING]     # a network's name where several are read
_STATUSES = ("ok", "unsupported", "wrong", "crashed", "other")
OWN_HEADER = "Speed-up over own result type"


def _outputs() -> str:
    """Which precision each quantized format's results are written in, from the precision
    table (formats that agree are named together)."""
    by_outputs: dict[str, list[str]] = {}
    for name in QUANTIZED:
        outputs = TABLE[name].outputs
        text = ", ".join(f"{direction} {result}" for direction, result in outputs)
        if [direction for direction, _ in outputs] == ["fwd"]:
            text += ", forward only"
        by_outputs.setdefault(text, []).append(name)
    return "; ".join(f"{' and '.join(names)}: {text}" for text, names in by_outputs.items())


def _data() -> str:
    scaled = [f"{name} as round({TABLE[name].data_scale:g}·N(0,1)) clipped to ±127"
              for name in QUANTIZED if TABLE[name].data_scale != 1.0]
    return ", ".join(["drawn N(0,1) and rounded to the format", *scaled])


def intro() -> str:
    return (
        f"The quantized precisions ({', '.join(QUANTIZED)}) against {quantized.BASELINE}. "
        f"Operands are exact in their format ({_data()}); the products are exact in the "
        f"accumulator and the results are written wider ({_outputs()}). Error: relative L2 "
        "against the float64 oracle computed on the same (dequantized) operand values, so it "
        "measures the accumulation and the result's rounding, not the quantization of the data. "
        f"Per point (same layer, direction, op, layout and workspace limit): the fastest "
        f"verified quantized row and the fastest verified {quantized.BASELINE} row; speed-up = "
        f"{quantized.BASELINE} ms / quantized ms (below 1: the quantized plan is slower). The "
        "summary's geometric mean, min and max run over the points where both were verified; "
        f"\"{quantized.NO_PLAN}\" counts points whose quantized rows were all refused, wrong or "
        "failed, listed below with their most common reason. Rows: the quantized rows by "
        "status (ok / unsupported / wrong / crashed / other). Output: the result type a point "
        "asked for (--output-type; auto: the precision's own, as above); an 8-bit result is "
        "multiplied by a power of two that leaves it 6-11 standard deviations of headroom, "
        "and its error includes its own rounding (about 2-5%). Speed-up over own result type: "
        "the same point written in the precision's own type, ms / this point's ms.")


def _rows(r: pd.Series) -> str:
    return " / ".join(str(int(r[f"{s}_rows"])) for s in _STATUSES)


def quantized_blocks(df: pd.DataFrame) -> list[Block]:
    points = quantized.point_speedups(df)
    if points.empty:
        return [Text(f"No row at a quantized precision ({', '.join(QUANTIZED)}).")]
    totals = quantized.summary(points)
    keys = shown_keys(totals, _ALWAYS, _OPTIONAL)
    own = _asked_outputs(points)          # the own-type column only where another was asked
    rows = tuple((*[fmt_key(k, r[k]) for k in keys],
                  f"{r['points_compared']} of {r['points']}", str(r["no_plan"]),
                  fmt_ratio(r["speedup_geomean"]),
                  DASH if is_missing(r["speedup_min"]) else
                  f"{fmt_ratio(r['speedup_min'])} – {fmt_ratio(r['speedup_max'])}",
                  *([fmt_ratio(r["vs_own_geomean"])] if own else []),
                  fmt_error(r["max_rel_error_fastest"]), fmt_error(r["max_rel_error"]), _rows(r))
                 for _, r in totals.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Points compared", quantized.NO_PLAN.capitalize(),
               f"Speed-up over {quantized.BASELINE} (geomean)", "Speed-up min – max",
               *([OWN_HEADER + " (geomean)"] if own else []),
               "Max error, fastest", "Max error, all verified", "Rows ok / U / W / C / other")
    table = Table(headers, rows, (False,) * len(keys) + (True,) * (7 + own),
                  f"Quantized precisions against {quantized.BASELINE}")
    blocks: list[Block] = [Text(intro()), table]
    shown = points.assign(layer_label=layer_labels(points))
    compared = shown[shown["quantized_ms"].notna()]
    if len(compared):
        blocks.append(_point_table(compared))
    missing = shown[shown["quantized_ms"].isna()]
    if len(missing):
        blocks.append(_no_plan_table(missing))
    return blocks


def _point_keys(shown: pd.DataFrame) -> list[str]:
    return ["layer_label", *shown_keys(shown, _ALWAYS, _OPTIONAL)]


def _asked_outputs(points: pd.DataFrame) -> bool:
    """Whether some point's result was asked in a type other than its precision's own."""
    return bool((~own_output(points)).any())


def _point_table(shown: pd.DataFrame) -> Block:
    keys = _point_keys(shown)
    own = _asked_outputs(shown)
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], str(r["multiplicity"]),
                  fmt_candidate(r["quantized_candidate"]), fmt_ms(r["quantized_ms"]),
                  fmt_error(r["quantized_rel_error"]), fmt_candidate(r["fp16_candidate"]),
                  fmt_ms(r["fp16_ms"]), fmt_ratio(r["speedup"]),
                  *([fmt_ratio(r["speedup_vs_own"])] if own else []))
                 for _, r in shown.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Mult.", "Quantized", "ms", "Error",
               quantized.BASELINE, "ms", "Speed-up", *([OWN_HEADER] if own else []))
    numeric = (False,) * len(keys) + (True, False, True, True, False, True, True) + (True,) * own
    return Fold(f"Quantized precisions per point ({len(rows)})", (Table(headers, rows, numeric),))


def _no_plan_table(shown: pd.DataFrame) -> Block:
    keys = _point_keys(shown)
    rows = tuple((*[fmt_key(k, r[k]) for k in keys], _rows(r), fmt_ms(r["fp16_ms"]),
                  str(r["reason"]).removeprefix(f"{quantized.NO_PLAN}: "))
                 for _, r in shown.iterrows())
    headers = (*[HEADERS[k] for k in keys], "Rows ok / U / W / C / other",
               f"{quantized.BASELINE} ms", "Most common reason")
    table = Table(headers, rows, (False,) * len(keys) + (True, True, False),
                  f"Points with {quantized.NO_PLAN} ({len(rows)})")
    return maybe_fold(f"Points with {quantized.NO_PLAN}", table)


def has_quantized(df: pd.DataFrame) -> bool:
    """Whether the frame holds rows asked at a quantized precision (the section's cue)."""
    return "precision" in df.columns and bool(df["precision"].astype(str).isin(QUANTIZED).any())
