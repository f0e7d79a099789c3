"""The recurrent layers' answer (issue 40): per layer and precision, for inference (fwd) and one
training step (train_step, the whole step timed as one call; in results without it the sum
fwd_train + bwd_data + bwd_filter, fwd where fwd_train was not measured, which overstates a
library whose weight pass reruns its data pass, as PyTorch's does), the
fastest verified algorithm and the fastest of cuDNN's own RNN algorithms (cudnn_rnn) against
what PyTorch runs (its nn.LSTM / GRU / RNN: the pytorch policy), PyTorch with cuDNN switched off
(native) and a plain per-step loop
written by hand (torch's plain_loop): each one's time, largest relative error against the
float64 oracle and the precision it delivered, and the speed-ups. The classic comparison (a
cuDNN LSTM trained MNIST 7.5x faster than a plain LSTM at the same accuracy) is one row of it.

A candidate's time over a pass is the sum of its directions' medians; where a candidate lacks a
verified row for a direction of the pass, its total is missing (never a partial sum).
"""
from __future__ import annotations

import pandas as pd

from harness.analysis.points import ASKED_KEYS, ranked, verified
from harness.analysis.policies import POLICIES
from harness.backends.torch.rnn_gpu import CUDNN_OFF
from harness.families import RNN
from harness.sweep import TRAINING_FORWARD, TRAINING_STEP

BACKWARD = ("bwd_data", "bwd_filter")
# A training step's forward pass is `fwd_train` where it was measured, else inference's `fwd`.
PASSES = {"inference": ("fwd",), "training step": (TRAINING_FORWARD, *BACKWARD)}
PLAIN = "plain_loop"
CUDNN_RNN = "cudnn_rnn"        # the backend of cuDNN's own RNN algorithms
SPEEDUPS = (("best", "plain"), ("pytorch", "plain"), ("cudnn", "native"), ("cudnn", "plain"))
# What a row is keyed by besides its direction: the layer as the user states it.
KEYS = [k for k in ASKED_KEYS if k not in ("direction", "op")]


def answers(df: pd.DataFrame) -> pd.DataFrame:
    """One row per recurrent layer, asked precision (and the other point keys) and pass."""
    rows = _recurrent_rows(df)
    if rows.empty:
        return pd.DataFrame()
    candidates = {"best": rows,
                  "cudnn": rows[rows["backend"].astype(str) == CUDNN_RNN],
                  "pytorch": POLICIES["pytorch"].choose(rows),
                  "native": rows[rows["family"].astype(str) == CUDNN_OFF],
                  "plain": rows[rows["algorithm"].astype(str) == PLAIN]}
    out = []
    for key, layer in rows.groupby(KEYS, sort=False, dropna=False):
        for name, directions in _passes(set(layer["direction"])):
            line = dict(zip(KEYS, key), passes=name)
            for who, chosen in candidates.items():
                total = _total(chosen.loc[chosen.index.intersection(layer.index)], directions)
                line.update({f"{who}_{field}": total.get(field) for field in _FIELDS})
            out.append(line)
    return _with_speedups(pd.DataFrame(out))


def per_algorithm(df: pd.DataFrame) -> pd.DataFrame:
    """Every verified recurrent algorithm's total per layer, precision and pass (the time-versus-
    error figure's points): KEYS, passes, candidate (backend:algorithm), ms, error."""
    rows = _recurrent_rows(df)
    out = []
    for key, layer in rows.groupby(KEYS, sort=False, dropna=False):
        for name, directions in _passes(set(layer["direction"])):
            for (backend, algorithm), mine in layer.groupby(["backend", "algorithm"]):
                total = _total(mine, directions)
                if total:
                    out.append(dict(zip(KEYS, key), passes=name, candidate=f"{backend}:{algorithm}",
                                    ms=total["ms"], error=total["error"]))
    return pd.DataFrame(out)


def _recurrent_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The verified recurrent rows, each placed at its point (an empty frame where none)."""
    rows = ranked(df)
    if "problem" not in rows.columns:
        return rows.iloc[0:0]
    return verified(rows[rows["problem"].astype(str) == RNN])


def _passes(measured: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The passes a layer's measured directions make, with the directions each sums: a training
    step is the step measured whole where it was."""
    out = []
    for name, directions in PASSES.items():
        if name == "training step" and TRAINING_STEP in measured:
            directions = (TRAINING_STEP,)
        elif TRAINING_FORWARD not in measured:
            directions = tuple("fwd" if d == TRAINING_FORWARD else d for d in directions)
        if set(directions) <= measured:
            out.append((name, directions))
    return out


_FIELDS = ("ms", "error", "delivered", "algorithm")


def _total(rows: pd.DataFrame, directions: tuple[str, ...]) -> dict:
    """The candidate's fastest verified row per direction, summed over the pass (_FIELDS); {}
    where it lacks a direction (never a partial sum)."""
    fastest = rows.sort_values("median_ms", kind="stable").drop_duplicates("direction")
    fastest = fastest[fastest["direction"].isin(directions)]
    if len(fastest) < len(directions):
        return {}
    names = sorted({f"{b}:{a}" for b, a in zip(fastest["backend"], fastest["algorithm"])})
    return {"ms": float(fastest["median_ms"].sum()),
            "error": float(fastest["rel_error"].max()),
            "delivered": " ".join(sorted(set(fastest["effective_precision"].astype(str)))),
            "algorithm": " + ".join(names)}


def _with_speedups(out: pd.DataFrame) -> pd.DataFrame:
    """`<who>_over_<other>`: other's ms / who's ms (the issue's question: the fastest cuDNN RNN
    algorithm against PyTorch without cuDNN and the plain loop)."""
    if out.empty:
        return out
    for who, other in SPEEDUPS:
        out[f"{who}_over_{other}"] = (pd.to_numeric(out[f"{other}_ms"])
                                      / pd.to_numeric(out[f"{who}_ms"]))
    return out
