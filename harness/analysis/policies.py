"""Ways of choosing an algorithm (policies), in one table, and the oracle they are judged against.

A policy is a chooser: from a results frame, the rows it might run, each with an `_order` (lower is
preferred). Per point as the user states it (ASKED_KEYS: the precision asked for) the policy's
pick is its first verified row, else its first row (following that policy there gives a wrong or
failed call, and the pick says so by its status). The oracle is the fastest verified row at each
point, over every backend or over a named set of them. The CLI's `table --selection`, the
report's baseline and network totals all read this table. Pure pandas.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import NamedTuple

import pandas as pd

from harness.analysis.points import (ASKED_KEYS, POINT_KEYS, STEP_KEYS, fastest,
                                     one_step_per_layer, own_output, ranked,
                                     verified, with_candidate)
from harness.backends.torch.rnn_gpu import CUDNN_OFF
from harness.measurement import Status
from harness.precision import AUTO_OUTPUT

ORACLE = "oracle"
# Best-of policies like the oracle, over fewer rows: the fastest verified row whose output was
# equal on two runs, element for element (what deterministic mode may run), and one backend's
# fastest.
DETERMINISTIC = "deterministic"
BEST_PREFIX = "best_"
TORCH_PREFIX = "torch"     # backends torch_gpu, torch_cpu: what PyTorch itself would run
HAND_WRITTEN = "loop"      # ... but in this family: a user's own loop of PyTorch's tensor ops
# ... nor PyTorch with cuDNN switched off (torch_gpu's nn_rnn_native), which it does not run by
# default
NOT_PYTORCHS_OWN = (HAND_WRITTEN, CUDNN_OFF)
Chooser = Callable[[pd.DataFrame], pd.DataFrame]


class Policy(NamedTuple):
    choose: Chooser
    meaning: str


class PolicyError(ValueError):
    """A policy that names nothing in the data; the message lists what does exist."""


def _median_ms(picked: pd.DataFrame) -> pd.Series:
    # A callable, not df["median_ms"]: pandas 3 grows an empty frame to a Series' whole index.
    return picked["median_ms"]


def _flag(column: str, backend: str) -> Chooser:
    def choose(df: pd.DataFrame) -> pd.DataFrame:
        flagged = df[column].astype("boolean").fillna(False).astype(bool)
        return df[(df["backend"] == backend) & flagged].assign(_order=_median_ms)
    return choose


def _graph_heuristic(df: pd.DataFrame) -> pd.DataFrame:
    rank = pd.to_numeric(df["graph_heuristic_rank"], errors="coerce")
    keep = (df["backend"] == "cudnn_graph") & (df["status"] == Status.OK) & rank.notna()
    return df[keep].assign(_order=lambda picked: rank[picked.index])


def _pytorch(df: pd.DataFrame) -> pd.DataFrame:
    # the library's own calls, not code a user writes with its tensor ops (torch_cpu's
    # plain_loop: the hand-written recurrent layer PyTorch's is compared with)
    mine = (df["backend"].astype(str).str.startswith(TORCH_PREFIX)
            & ~df["family"].astype(str).isin(NOT_PYTORCHS_OWN))
    return df[mine].assign(_order=_median_ms)


POLICIES: dict[str, Policy] = {
    "cudnn_heuristic": Policy(_flag("heuristic_pick", "cudnn"),
                              "the algorithm cuDNN's heuristic (cudnnGet*Algorithm_v7) "
                              "ranks first"),
    "cudnn_find": Policy(_flag("find_pick", "cudnn"),
                         "cudnnFind*AlgorithmEx's pick at its first call for the shape in a "
                         "process, as CuPy, MXNet and PyTorch's v7 path call it once per shape "
                         "(Find's own timing, host work included; docs/analyses.md)"),
    "cudnn_find_warm": Policy(_flag("find_pick_warm", "cudnn"),
                              "cudnnFind*AlgorithmEx's pick when called again right after its "
                              "first call for the shape"),
    "graph_heuristic": Policy(_graph_heuristic,
                              "the graph API's heuristic mode A: its best-ranked plan that built, "
                              "fitted the limit and was verified"),
    "pytorch": Policy(_pytorch, "what PyTorch runs for the same convolution (torch.backends."
                                "cudnn.benchmark=True on the GPU)"),
}
# The names the report used before the table was shared; still accepted from users.
ALIASES = {"heuristic": "cudnn_heuristic", "find": "cudnn_find", "torch": "pytorch",
           "cudnn_find_first": "cudnn_find"}
ORACLE_MEANING = "the fastest verified algorithm at every point (what an exhaustive search gives)"
DETERMINISTIC_MEANING = ("the fastest verified algorithm at every point whose outputs on two runs "
                         "were equal element for element (what deterministic mode may run)")


def canonical(policy: str) -> str:
    return ALIASES.get(policy, policy)


def meaning(policy: str) -> str:
    """One line a report prints beside a policy's name."""
    if policy == ORACLE:
        return ORACLE_MEANING
    if policy == DETERMINISTIC:
        return DETERMINISTIC_MEANING
    if policy.startswith(BEST_PREFIX):
        return f"the fastest verified {policy.removeprefix(BEST_PREFIX)} algorithm at every point"
    known = POLICIES.get(canonical(policy))
    return known.meaning if known else f"the rows of {policy}"


def _choose(df: pd.DataFrame, policy: str) -> pd.DataFrame:
    """The rows `policy` might run: a policy of the table, a backend, or `backend:algorithm`."""
    known = POLICIES.get(canonical(policy))
    if known is not None:
        return known.choose(df)
    match = df["candidate"] == policy if ":" in policy else df["backend"] == policy
    return df[match].assign(_order=_median_ms)


def deterministic_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose two runs gave equal outputs (harness/executor.py `_run_twice`: array_equal, so
    -0.0 equals 0.0 and NaN equals nothing); unknown (not checked) is not deterministic."""
    return df[df["deterministic"].astype("boolean").fillna(False).astype(bool)]


def _best_of(df: pd.DataFrame, policy: str) -> pd.DataFrame | None:
    """The rows of a best-of policy (the oracle, the deterministic best, a backend's best), one
    per point; None for a chooser."""
    if policy == ORACLE:
        return oracle(df)
    if policy == DETERMINISTIC:
        return oracle(deterministic_rows(df))
    if policy.startswith(BEST_PREFIX):
        return oracle(df, [policy.removeprefix(BEST_PREFIX)])
    return None


def backend_bests(df: pd.DataFrame) -> list[str]:
    """`best_<backend>` for every backend with a verified row, in the order they appear."""
    return [BEST_PREFIX + str(b) for b in dict.fromkeys(verified(df)["backend"])]


def available(df: pd.DataFrame) -> list[str]:
    """The policies of the table this data can answer, in the table's order."""
    return [name for name, policy in POLICIES.items() if len(policy.choose(df))]


def check(df: pd.DataFrame, policy: str) -> None:
    """Refuse a policy that matches no row, naming what the data does have."""
    df = with_candidate(df)
    best = _best_of(df, policy)
    if policy == ORACLE or len(_choose(df, policy) if best is None else best):
        return
    names = available(df) + sorted(set(df["backend"])) + sorted(set(df["candidate"]))
    close = difflib.get_close_matches(policy, names + list(ALIASES), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise PolicyError(f"baseline policy {policy!r} matches no row{hint} Known: "
                      f"{', '.join(names[:40])}{' ...' if len(names) > 40 else ''}")


def picks(df: pd.DataFrame, policy: str) -> pd.DataFrame:
    """The row a user following `policy` gets, indexed by POINT_KEYS: the point it answers for.
    A policy answers for the precision it was asked (so the index holds the asked precision and
    the `effective_precision` column what the pick delivered): its first verified row in the
    policy's order, else its first row, which keeps its status. The oracle and the other
    best-of policies (deterministic, best_<backend>) answer per point."""
    best = _best_of(df, policy)
    if best is not None:
        return best.set_index(POINT_KEYS).assign(
            effective_precision=best["effective_precision"].to_numpy())
    rows = _choose(with_candidate(ranked(df)), policy)
    rows = rows.assign(_bad=rows["status"] != Status.OK)
    rows = rows.sort_values(["_bad", "_order"], kind="stable").drop_duplicates(ASKED_KEYS)
    return rows.drop(columns=["_bad", "_order"]).set_index(ASKED_KEYS).rename_axis(POINT_KEYS)


def kept_precision(delivered: pd.Series, point: pd.Series) -> pd.Series:
    """Whether a pick computed at its point's precision (both Series on one index; unknown where
    it delivered nothing). A pick asked for fp32 that ran at TF32 accuracy is faster because it
    computes less exactly: against the fp32 oracle it would read as a win, so it is kept apart."""
    return (delivered == point).astype("boolean").mask(delivered.isna())


def point_precision(picks_frame: pd.DataFrame) -> pd.Series:
    """The precision of the point each row of `picks()` answers for (an index level there)."""
    return pd.Series(picks_frame.index.get_level_values("effective_precision"),
                     index=picks_frame.index)


def oracle(df: pd.DataFrame, backends: Iterable[str] | None = None) -> pd.DataFrame:
    """Per point, the fastest verified row, over every backend or only `backends`."""
    rows = with_candidate(ranked(df))
    if backends is not None:
        rows = rows[rows["backend"].isin(list(backends))]
    return fastest(rows, POINT_KEYS)


def weighted_totals(frame: pd.DataFrame, ms: str, keys: list[str]) -> pd.DataFrame:
    """Per group of `keys`, the time of one pass over the layers (`ms` x multiplicity): `total`,
    `missing` (points of the group with no time: the total is then a lower bound) and `points`."""
    timed = frame.assign(_weighted=frame[ms] * frame["multiplicity"], _missing=frame[ms].isna())
    grouped = timed.groupby(keys, sort=False, dropna=False)
    return pd.DataFrame({"total": grouped["_weighted"].sum(min_count=1),
                         "missing": grouped["_missing"].sum().astype(int),
                         "points": grouped.size()}).reset_index()


def comparable(picked: pd.DataFrame) -> pd.Series:
    """Which of `picks()`'s rows count in a total or a ratio: verified, and computed at the
    precision of the point they answer for (never an fp32 request served at TF32 accuracy)."""
    kept = kept_precision(picked["effective_precision"], point_precision(picked))
    return (picked["status"] == Status.OK) & kept.fillna(False).astype(bool)


def network_totals(df: pd.DataFrame, names: Iterable[str],
                   keys: list[str] = STEP_KEYS) -> pd.DataFrame:
    """Per group of `keys` (by default one training step: every layer and direction), each
    policy's total pick time x multiplicity: `total_<policy>`, and `missing_<policy>` points where
    it had no comparable pick (that total is then a lower bound); `points` in the group."""
    df = ranked(df)
    if "direction" not in keys:       # a step counts one forward pass of each layer
        df = one_step_per_layer(df)
    every = df
    if "output" not in keys:
        # A total over result types counts each layer-direction once, at its precision's own
        # type; one measured only in an asked type is a missing point of it, not a dropped one.
        every, df = df.assign(output=AUTO_OUTPUT), df[own_output(df)]
    points = every.drop_duplicates(POINT_KEYS)[POINT_KEYS + ["multiplicity"]].set_index(POINT_KEYS)
    out = points.groupby(keys, dropna=False).size().rename("points").to_frame()
    for policy in names:
        picked = picks(df, policy)
        ms = picked["median_ms"].where(comparable(picked))
        totals = weighted_totals(points.join(ms.rename("ms")).reset_index(), "ms", keys)
        totals = totals.set_index(keys)
        out[f"total_{policy}"] = totals["total"]
        out[f"missing_{policy}"] = totals["missing"]
    return out.reset_index()


def saving(totals_row: pd.Series, policy: str) -> tuple[float, float] | None:
    """What the oracle saves over `policy` in one row of network_totals(): (ms, % of the
    policy's total); None where either total misses points (a partial total would flatter it)."""
    if totals_row["missing_oracle"] or totals_row[f"missing_{policy}"]:
        return None
    best, theirs = totals_row[f"total_{ORACLE}"], totals_row[f"total_{policy}"]
    return theirs - best, 100.0 * (theirs - best) / theirs
