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
from harness.stopping import PROBE_RACE_FACTOR, RACE_MARGIN

INTRO = (
    "Per recurrent layer, precision asked and pass: inference is the forward pass; a training "
    "step is the whole step timed as one call (train_step: forward, then both gradients), or "
    "where results lack it forward + backward data + backward weights (each candidate's "
    "fastest verified row per direction, summed; this counts PyTorch's data pass twice, since "
    "its weight gradients rerun it; a dash where a direction has none). Best: the fastest verified "
    "algorithm of any backend. cuDNN RNN: the fastest of cuDNN's own RNN algorithms (cudnn_rnn). "
    "PyTorch: what nn.LSTM / nn.GRU / nn.RNN run by default (the pytorch policy: through cuDNN "
    "on a GPU). PyTorch native: the same with cuDNN switched off (torch_gpu:nn_rnn_native). "
    "Plain loop: the textbook cell written by hand as a "
    "per-step loop of PyTorch tensor ops (plain_loop, on the CPU or the GPU), the \"plain "
    "LSTM\" of the classic comparison. Error: "
    "the largest relative L2 error of the pass's rows against the float64 oracle, with the "
    "precision that error is within (what the pass delivered). Speed-ups: the other's ms / ms "
    "(plain loop, or PyTorch native for cuDNN RNN / native). A candidate that lost its race "
    f"by more than {(1 + RACE_MARGIN) * PROBE_RACE_FACTOR:.2g}x already on its verified call is "
    "not timed further (its row's gpu_timer says how its one sample was read): PyTorch's rows "
    "then show the time their kernels kept the GPU busy, without the gaps between kernels a "
    "replay keeps (0.82-0.98x a replayed median on DeepBench's and rnn_quick's layers), so a "
    "speed-up over them reads low by as much; cuDNN's show their verified call in stream "
    "order.")


def has_recurrent(df: pd.DataFrame) -> bool:
    return "problem" in df.columns and bool(df["problem"].astype(str).eq(RNN).any())


# (candidate, its columns' title, whether the algorithm's name is shown): a candidate no layer
# has (cuDNN's own algorithms or PyTorch without cuDNN on a CPU run) is left out
CANDIDATES = (("best", "Best", True), ("cudnn", "cuDNN RNN", True), ("pytorch", "PyTorch", True),
              ("native", "PyTorch native", False), ("plain", "Plain loop", False))
SPEEDUP_TITLES = {("best", "plain"): "Best speed-up", ("pytorch", "plain"): "PyTorch speed-up",
                  ("cudnn", "native"): "cuDNN RNN / native",
                  ("cudnn", "plain"): "cuDNN RNN / plain"}


def recurrent_blocks(df: pd.DataFrame) -> list[Block]:
    table = recurrent.answers(df)
    if table.empty:
        return [Text("No verified recurrent rows.")]
    keys = shown_keys(table, ["precision"])
    columns = [(HEADERS.get(k, k.capitalize()), False, lambda r, k=k: fmt_key(k, r[k]))
               for k in keys] + [("Pass", False, lambda r: str(r["passes"]))]
    for who, title, named in CANDIDATES:
        if not table[f"{who}_ms"].isna().all():
            cells = [title] * named + [f"{title} ms", f"{title} error"]
            columns += [(h, i >= named, lambda r, who=who, j=i + 1 - named: _candidate(r, who)[j])
                        for i, h in enumerate(cells)]
    for who, other in recurrent.SPEEDUPS:
        name = f"{who}_over_{other}"
        if not table[name].isna().all():
            columns.append((SPEEDUP_TITLES[who, other], True, lambda r, n=name: fmt_ratio(r[n])))
    rows = tuple((str(r["layer"]), *[cell(r) for _, _, cell in columns])
                 for _, r in table.iterrows())
    headers = ("Layer", *[h for h, _, _ in columns])
    numeric = (False, *[n for _, n, _ in columns])
    return [Text(INTRO), Table(headers, rows, numeric, "Recurrent layers")]


def _candidate(r: pd.Series, who: str) -> tuple[str, ...]:
    """Algorithm, ms and "error (delivered precision)" of one candidate."""
    name, delivered = r[f"{who}_algorithm"], r[f"{who}_delivered"]
    error = fmt_error(r[f"{who}_error"])
    return (DASH if is_missing(name) else str(name), fmt_ms(r[f"{who}_ms"]),
            error if is_missing(delivered) else f"{error} ({delivered})")
