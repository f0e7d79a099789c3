"""Points (what a user fixes before choosing an algorithm), the verified rows, the fastest
verified algorithm per point and by how much, and the per-GPU split of a mixed run.

The one point key of the project lives here: the CLI's table, the report, the selection analysis
and the exports group by POINT_KEYS and nothing else.
"""
from __future__ import annotations

import pandas as pd

from harness.measurement import Status
from harness.precision import AUTO_OUTPUT
from harness.stopping import RACED_OUT
from harness.sweep import TRAINING_FORWARD, TRAINING_STEP

# Which layer a row measured: its name and its exact shape. The name alone is not enough: an
# unnamed problem (`--problem` text) has none, and a model may reuse a name for two shapes.
LAYER_KEYS = ["layer", "descriptor", "batch"]
# A point is what a user fixes before choosing an algorithm. Ranking happens inside it on the
# precision the result actually delivered (a plan asked for fp32 that computes at tf32 accuracy is
# ranked with tf32, never with fp32); `ranked()` fills it for rows that delivered nothing.
# The result precision asked for (`output`, "auto": the precision's own) is a choice too: an fp8
# forward pass written in fp16 and one written in fp8 are two answers.
POINT_KEYS = [*LAYER_KEYS, "direction", "op", "effective_precision", "output", "layout",
              "workspace_limit", "timing_mode", "threads"]
# The point as the user states it: the precision asked for. A policy (cuDNN's heuristic, PyTorch)
# answers for what it was asked, whatever precision its pick then delivers.
ASKED_KEYS = ["precision" if k == "effective_precision" else k for k in POINT_KEYS]
# What a network total keeps apart: everything but the layer.
NETWORK_KEYS = [k for k in POINT_KEYS if k not in ("layer", "descriptor")]
# What one training step's total keeps apart: it sums every layer and direction, each written in
# its precision's own result type (an fp8 step: fp16 y and dx, fp32 dw; own_output).
STEP_KEYS = [k for k in NETWORK_KEYS if k not in ("direction", "output")]

GPU = "env_gpu_name"    # what a mixed run is split by (rows carry their worker's fingerprint)

_BEST_COLUMNS = ["candidate", "backend", "algorithm", "median_ms", "gflops", "workspace_bytes"]


def by_gpu(df: pd.DataFrame) -> list[tuple[str | None, pd.DataFrame]]:
    """The frame split per GPU model when its rows come from more than one (a `--cluster` run
    with --allow-mixed, or files from several machines read together): the fastest algorithm
    on an H100 and on an H200 are two answers, and ranking them together would compare GPUs,
    not algorithms. One part, labelled None, when there is nothing to split. Rows measured
    without a GPU are the part labelled "no GPU"."""
    names = df[GPU].fillna("").astype(str) if GPU in df.columns else None
    if names is None or names.nunique() <= 1:
        return [(None, df)]
    return [(name or "no GPU", part) for name, part in df.groupby(names, sort=True)]


def verified(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose output matched the reference and were timed alone: a CPU row whose samples
    waited for a core (`contended`, harness/contention.py) timed its neighbours as much as its
    algorithm, so it is never ranked, picked or called best."""
    timed = (df["status"] == Status.OK) & df["median_ms"].notna()
    if "contended" in df.columns:
        timed &= ~df["contended"].fillna(False).astype(bool)
    return df[timed]


def raced_out(df: pd.DataFrame) -> pd.Series:
    """Rows a race stopped after their first samples in some timing process (harness/stopping.py;
    merged rows join their processes' stop reasons)."""
    if "stop_reason" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["stop_reason"].fillna("").astype(str).str.contains(RACED_OUT)


def fastest(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The fastest verified row per `keys` (a tie: the first met)."""
    return verified(df).sort_values("median_ms", kind="stable").drop_duplicates(keys)


# What keeps networks apart in a table of several: the suite, and the results file where several
# are read (networks.SOURCE).
NETWORK_SPLIT = ("source", "suite")


def network_split(df: pd.DataFrame) -> list[str]:
    """The NETWORK_SPLIT columns `df` has."""
    return [k for k in NETWORK_SPLIT if k in df.columns]


def own_output(df: pd.DataFrame) -> pd.Series:
    """Rows (or points) whose result was written in their precision's own type, not in one a
    sweep's `output` axis asked for: what a network or training-step total adds up, so that
    one layer-direction is never counted twice."""
    return df["output"] == AUTO_OUTPUT


def ranked(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with every row placed at a point: a row that delivered no precision (it failed,
    was refused or was wrong; files older than the column) belongs to the point it was asked at,
    and a row without an `output` (a frame built without schema.frame) asked for none."""
    out = df.assign(effective_precision=df["effective_precision"].fillna(df["precision"]))
    return out if "output" in out.columns else out.assign(output=AUTO_OUTPUT)


def one_step_per_layer(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of one training step: a recurrent layer measured as a whole step
    (`train_step`, sweep.TRAINING_STEP) counts that call alone, not its passes measured apart
    too; one measured in both forward passes counts the one training runs (`fwd_train`,
    sweep.TRAINING_FORWARD), not inference's `fwd` too."""
    direction = df["direction"].astype(str)
    if not direction.isin((TRAINING_FORWARD, TRAINING_STEP)).any():
        return df
    # pandas 3's str keeps a missing descriptor missing (a `--problem` row may have none)
    keys = df[LAYER_KEYS].astype(str).fillna("").agg("|".join, axis=1)
    stepped = keys.isin(set(keys[direction == TRAINING_STEP]))
    trained = keys.isin(set(keys[direction == TRAINING_FORWARD]))
    dropped = (stepped & (direction != TRAINING_STEP)) | (trained & (direction == "fwd"))
    return df[~dropped]


def with_candidate(df: pd.DataFrame) -> pd.DataFrame:
    """`backend:algorithm` as one column, unless the caller already named its candidates."""
    return df if "candidate" in df.columns else df.assign(
        candidate=df["backend"].astype(str) + ":" + df["algorithm"].astype(str))


def layer_labels(df: pd.DataFrame) -> pd.Series:
    """One readable name per layer (per LAYER_KEYS): the name, else the shape's text; a name used
    for several shapes gets its batch, or its whole shape where the batch does not tell them
    apart."""
    shape = df["descriptor"].astype("string").fillna("?")
    name = df["layer"].astype("string")
    name = name.where(name.notna() & (name != ""), shape).fillna("?")
    shapes = shape.groupby(name, sort=False).transform("nunique")
    batch = name + " n" + df["batch"].astype("string").fillna("?")
    by_batch = shape.groupby(batch, sort=False).transform("nunique")
    label = name.where(shapes <= 1, batch.where(by_batch <= 1, name + " " + shape))
    return label.astype(str)


def best_per_point(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point (in order of first appearance): how many candidates were tried and
    verified, the fastest verified (`best_*`), the runner-up (`runner_*`: another candidate)
    and the speed-up over it. A candidate counts once at a point where it has two rows (a
    graph-API plan asked for fp32 and for tf32 that computes at tf32 both times). A point where
    nothing was verified keeps a row with n_ok 0; wrong, failed or unsupported rows never count
    as best."""
    df = with_candidate(ranked(df))
    points = df.drop_duplicates(POINT_KEYS)[[*POINT_KEYS, "multiplicity"]]
    tried = df.groupby(POINT_KEYS, sort=False, dropna=False)["candidate"].nunique()
    tried = tried.rename("n_tried")
    fastest = (verified(df).sort_values("median_ms", kind="stable")
               .drop_duplicates([*POINT_KEYS, "candidate"]))
    n_ok = fastest.groupby(POINT_KEYS, sort=False, dropna=False).size().rename("n_ok")
    first = fastest.drop_duplicates(POINT_KEYS).set_index(POINT_KEYS)
    second = (fastest[fastest.duplicated(POINT_KEYS)].drop_duplicates(POINT_KEYS)
              .set_index(POINT_KEYS))
    out = (points.set_index(POINT_KEYS).join(tried).join(n_ok)
           .join(first[_BEST_COLUMNS].add_prefix("best_"))
           .join(second[["candidate", "median_ms"]].add_prefix("runner_")))
    out["n_ok"] = out["n_ok"].fillna(0).astype(int)
    out["speedup_runner"] = out["runner_median_ms"] / out["best_median_ms"]
    return out.reset_index()


def status_counts(df: pd.DataFrame) -> pd.Series:
    return df["status"].value_counts()
