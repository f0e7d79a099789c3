"""What the report says, at its top, about CPU points that shared the cores while they were timed
(harness/analysis/sharing.py counts them). Contended rows are never ranked, so a page that left
them out without a word would show gaps in its tables, or nothing at all, and no reason."""
from __future__ import annotations

import pandas as pd

from harness.analysis import verified
from harness.analysis.sharing import contended_rows, sharing
from harness.report import computed
from harness.report.document import Block, Table, Text
from harness.report.tables import (DASH, KEY_HEADERS, SHARING_HEADER, fmt_candidate, fmt_key,
                                   fmt_ms, is_missing, maybe_fold)

TITLE = "Points that shared the CPU (not ranked)"
NOTHING_RANKED = (
    "Nothing in this report is ranked: every row whose output matched the reference was timed "
    "while other work held the CPU, and such a time measures that work as much as the "
    "algorithm, so the tables below have no best, no runner-up and no totals. Re-measure on a "
    "quiet machine.")
# Shown only where they vary, as in the report's other tables.
SHOWN_WHEN_VARYING = ["effective_precision", "layout", "threads", "timing_mode"]


def intro_blocks(df: pd.DataFrame) -> list[Block]:
    """The sentence, why nothing is ranked where that is so, and the contended rows."""
    counted = sharing(df)
    sentence = counted.sentence()
    if sentence is None:
        return []
    warning = "Warning: " if counted.contended else ""
    blocks: list[Block] = [Text(f"{warning}{sentence}.")]
    if not counted.contended:
        return blocks
    if verified(df).empty:
        blocks.append(Text(NOTHING_RANKED))
    blocks.append(maybe_fold(TITLE, contended_table(contended_rows(df))))
    return blocks


def contended_table(rows: pd.DataFrame) -> Table:
    """One line per contended row, with the reason the timer gave (how it shared the CPU)."""
    keys = ["layer_label", "direction", *computed.varying(rows, SHOWN_WHEN_VARYING)]
    cells = tuple((*[fmt_key(k, r[k]) for k in keys], fmt_candidate(r["candidate"]),
                   fmt_ms(r["median_ms"]), _reason(r["reason"]))
                  for _, r in rows.iterrows())
    headers = (*[KEY_HEADERS[k] for k in keys], "Backend:algorithm", "Median ms", "Reason")
    return Table(headers, cells, (False,) * (len(keys) + 1) + (True, False), TITLE)


def _reason(reason: object) -> str:
    return DASH if is_missing(reason) or not str(reason) else str(reason)


def best_note(df: pd.DataFrame) -> str:
    """What the best tables' CPU sharing cells mean, where any cell says something ("" else)."""
    counted = sharing(df)
    if not counted.touched:
        return ""
    note = (f"{SHARING_HEADER}: \"retaken n\": n samples of the point's candidates waited "
            "for a core and were taken again (the times shown are the clean ones)")
    if counted.contended:
        note += ('; "k contended": k candidates still shared the CPU when re-measured and are '
                 f'left out (listed under "{TITLE}" at the top)')
    return note + "."


def heatmap_note(df: pd.DataFrame) -> str:
    """The heatmap's S cells, said where some row was left contended ("" else)."""
    if not sharing(df).contended:
        return ""
    return ("S: the candidate shared the CPU while it was timed (contended); such a time is "
            "never ranked, so the cell shows none.")
