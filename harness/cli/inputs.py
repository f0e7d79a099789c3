"""The results files a command reads (table, compare, check, report, plan), found from what the
user named and checked where they enter: a sample that is not a finite number is bad input, not
something for the statistics downstream to trip over."""
from __future__ import annotations

from pathlib import Path

from harness.cli.common import UserError


def results_paths(arguments: list[str]) -> list[Path]:
    """Files, folders, globs, or suite names (the latest finished run of the suite here)."""
    from harness import env as envmod
    from harness import runs
    return [path for argument in arguments
            for path in runs.resolve(argument, envmod.fingerprint)]


def load_results(arguments: list[str]):
    """One frame of every file the arguments name, each checked."""
    import pandas as pd
    frames = [load_checked(path) for path in results_paths(arguments)]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def load_sources(arguments: list[str]):
    """Every results file as its own source (column `source`: the file's name), so that two
    runs of one suite are never summed into one network."""
    import pandas as pd
    from harness.analysis.networks import SOURCE
    frames = [load_checked(path).assign(**{SOURCE: path.name})
              for path in results_paths(arguments)]
    return pd.concat(frames, ignore_index=True)


def load_checked(path: Path):
    """A results file (or folder) read by harness.store, refused when a row's samples hold NaN
    or an infinity: convbench never writes one (a failed point has no samples), so the file was
    edited or damaged, and a median, a rank test or a plan of it would be nonsense or a crash."""
    import numpy as np
    from harness import store
    df = store.load(path)
    for number, samples in enumerate(df["samples_ms"], start=1):
        values = np.asarray(samples if samples is not None else [], dtype=float)
        if values.size and not np.isfinite(values).all():
            bad, row = values[~np.isfinite(values)][0], df.iloc[number - 1]
            raise UserError(f"{path}: row {number} ({row.layer} {row.direction} {row.backend}:"
                            f"{row.algorithm}) has a sample of {bad} ms; samples are finite "
                            "times: the file was edited or is damaged")
    return df
