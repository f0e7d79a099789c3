"""The report's "Recurrent layers" section and `convbench table --recurrent` (issue 40): per
layer, precision and pass (inference, one training step), the fastest verified algorithm against
PyTorch's own layer and a plain per-step loop, with each one's error and delivered precision
(numbers from harness/analysis/recurrent.py)."""
from __future__ import annotations

import pandas as pd

from harness.analysis import recurrent
from harness.families import RNN
from harness.report.answers import HEADERS, shown_keys
from harness.report.document import Block, Table, Text
from harness.report.tables import DASH, fmt_error, fmt_key, fmt_ms, fmt_ratio, is_missing

INTRO = (
    "Per recurrent layer, precision asked and pass: inference is the forward pass; a training "
    "step is the whole step timed as one call (train_step: forward, then both gradients), or "
    "where results lack it forward + backward data + backward weights (each candidate's "
    "fastest verified row per direction, summed; this counts PyTorch's data pass twice, since "
    "its weight gradients rerun it; a dash where a direction has none). Best: the fastest verified "
    "algorithm of any backend. PyTorch: what nn.LSTM / nn.GRU / nn.RNN run by default (the "
    "pytorch policy: through cuDNN on a GPU; torch_gpu:nn_rnn_native, the same with cuDNN "
    "switched off, competes only for Best). Plain loop: the textbook cell written by hand as a "
    "per-step loop of PyTorch tensor ops (plain_loop, on the CPU or the GPU), the \"plain "
    "LSTM\" of the classic comparison. Error: "
    "the largest relative L2 error of the pass's rows against the float64 oracle, with the "
    "precision that error is within (what the pass delivered). Speed-up: plain loop ms / ms.")


def has_recurrent(df: pd.DataFrame) -> bool:
    return "problem" in df.columns and bool(df["problem"].astype(str).eq(RNN).any())


def recurrent_blocks(df: pd.DataFrame) -> list[Block]:
    table = recurrent.answers(df)
    if table.empty:
        return [Text("No verified recurrent rows.")]
    keys = shown_keys(table, ["precision"])
    rows = tuple((str(r["layer"]), *[fmt_key(k, r[k]) for k in keys], str(r["passes"]),
                  *_candidate(r, "best"), *_candidate(r, "pytorch"), *_candidate(r, "plain")[1:],
                  fmt_ratio(r["best_over_plain"]), fmt_ratio(r["pytorch_over_plain"]))
                 for _, r in table.iterrows())
    headers = ("Layer", *[HEADERS.get(k, k.capitalize()) for k in keys], "Pass",
               "Best", "Best ms", "Best error", "PyTorch", "PyTorch ms", "PyTorch error",
               "Plain loop ms", "Plain loop error", "Best speed-up", "PyTorch speed-up")
    numeric = (False,) * (2 + len(keys)) + (False, True, True) * 2 + (True,) * 4
    return [Text(INTRO), Table(headers, rows, numeric, "Recurrent layers")]


def _candidate(r: pd.Series, who: str) -> tuple[str, ...]:
    """Algorithm, ms and "error (delivered precision)" of one candidate."""
    name, delivered = r[f"{who}_algorithm"], r[f"{who}_delivered"]
    error = fmt_error(r[f"{who}_error"])
    return (DASH if is_missing(name) else str(name), fmt_ms(r[f"{who}_ms"]),
            error if is_missing(delivered) else f"{error} ({delivered})")
