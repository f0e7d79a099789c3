"""Reports people would rather look at than read: an HTML page and a Markdown page with PNG
figures, from one or more results frames or files.

    render_report(["results/h200.parquet"], "reports/h200", baseline_policy="heuristic")

writes reports/h200/index.html, reports/h200/index.md and reports/h200/figures/*.png, and lists
them in reports/h200/.convbench-report.json: a later report there deletes only what that list
names (harness/report/folder.py). Nothing is fetched from the network; matplotlib is imported only
when a report is drawn.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.analysis.policies import PolicyError
from harness.report.folder import FolderRefused, refuse_root_and_home

__all__ = ["render_report", "ReportPaths", "PolicyError", "EmptyResults", "PeaksError",
           "FolderRefused", "refuse_root_and_home", "load_frames", "read_peaks"]


class EmptyResults(ValueError):
    """The given results hold no rows."""


class PeaksError(ValueError):
    """A peaks table that is not {precision: TFLOP/s, "bandwidth_gbps": GB/s}."""


# What a peaks table may hold: the precisions' matrix rates and the copy bandwidth.
PEAK_KEYS = ("fp32", "tf32", "fp16", "bf16", "fp64", "bandwidth_gbps")

FrameOrPath = pd.DataFrame | str | Path
FIGURES = "figures"


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    html: Path
    markdown: Path
    figures: tuple[Path, ...]


def render_report(frames_or_paths: FrameOrPath | Iterable[FrameOrPath], out_dir: str | Path,
                  baseline_policy: str | None = None, *, peaks: dict[str, float] | None = None,
                  title: str | None = None, embed_images: bool = False,
                  jobs: int = 1, force: bool = False) -> ReportPaths:
    """Write index.html, index.md and figures/*.png for the given results into `out_dir`.

    baseline_policy: what the best algorithm is compared against: "heuristic" (cuDNN's
    heuristic pick), "find" (cudnnFind's pick), "torch", a backend ("cpu") or a
    "backend:algorithm" ("cpu:im2col"). None takes the first of heuristic, find, torch the data
    has. A policy that matches no row raises PolicyError naming what exists.
    peaks: measured ceilings {precision: TFLOP/s, "bandwidth_gbps": GB/s} for the roofline.
    embed_images: put the PNGs inside index.html as data URIs (one mailable file) instead of
    linking figures/ beside it; the PNG files are written either way for index.md.
    jobs: worker processes drawing figures. Workers are spawned and re-import `__main__`, so
    pass more than 1 only from a guarded entry point (the CLI; `if __name__ == "__main__"`).
    force: write into a folder that holds other files but no earlier report (FolderRefused
    without it). Either way only files an earlier report listed in its manifest are deleted;
    the filesystem root and the home folder are always refused.
    """
    from harness.report import computed, document, figures, folder, html, markdown, sections

    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be a positive integer")
    raw = load_frames(frames_or_paths)
    df = computed.prepare(raw)
    if df.empty:
        raise EmptyResults("no result rows to report on")
    baseline = _resolve_baseline(df, baseline_policy)
    _check_peaks(peaks)
    out = Path(out_dir)
    earlier = folder.open_folder(out, force, FIGURES)
    fig_dir = out / FIGURES
    with figures.Renderer(jobs) as renderer:
        doc = sections.build(df, fig_dir, baseline, peaks, title or _default_title(df), renderer,
                             repeats=len(raw) - len(df))
    # The figures this report drew are the ones its pages show; any other file in figures/
    # is an earlier report's (deleted below when its manifest lists it) or someone else's.
    shown = sorted({image.path for block in (doc.intro, *(s.blocks for s in doc.sections))
                    for image in document.images(block)})
    paths = ReportPaths(out, out / "index.html", out / "index.md",
                        tuple(out / name for name in shown))
    folder.write_text(paths.html, html.render(doc, out, embed_images))
    folder.write_text(paths.markdown, markdown.render(doc))
    folder.close_folder(out, [paths.html.name, paths.markdown.name, *shown], earlier)
    return paths


def load_frames(frames_or_paths: FrameOrPath | Iterable[FrameOrPath]) -> pd.DataFrame:
    """One frame from frames and result files/folders (anything harness.store.load reads)."""
    from harness.store import COLUMNS, load
    items = [frames_or_paths] if isinstance(frames_or_paths, (pd.DataFrame, str, Path)) \
        else list(frames_or_paths)
    if not items:
        raise ValueError("no results given")
    parts = [item if isinstance(item, pd.DataFrame) else load(item) for item in items]
    df = pd.concat(parts, ignore_index=True)
    # Frames built by hand may lack columns the report reads; they are simply unknown.
    missing = {name: None for name in COLUMNS if name not in df.columns}
    return df.assign(**missing) if missing else df


def _resolve_baseline(df: pd.DataFrame, policy: str | None) -> str | None:
    from harness.analysis import policies
    from harness.report import computed
    if policy is None:
        return computed.default_baseline(df)
    policies.check(df, policy)
    return None if policy == policies.ORACLE else policies.canonical(policy)


def read_peaks(path: str | Path) -> dict[str, float]:
    """The peaks table in a JSON file (as `convbench peaks` caches it), checked; PeaksError
    names the file and what is wrong with it."""
    import json
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        # JSONDecodeError is a ValueError; a file nested thousands deep is a RecursionError
        raise PeaksError(f"{path}: not a readable JSON file: {type(err).__name__}: "
                         f"{err}") from None
    if not isinstance(data, dict):
        raise PeaksError(f"{path}: expected a JSON object such as "
                         f'{{"fp32": 51.0, "bandwidth_gbps": 4220}}, got {type(data).__name__}')
    try:
        _check_peaks(data)
    except PeaksError as err:
        raise PeaksError(f"{path}: {err}") from None
    return data


def _check_peaks(peaks: dict[str, float] | None) -> None:
    for name, value in (peaks or {}).items():
        if name not in PEAK_KEYS:
            raise PeaksError(f"unknown peak {name!r}; expected keys among "
                             f"{', '.join(PEAK_KEYS)}")
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0):
            raise PeaksError(f"peaks[{name!r}]={value!r} must be a positive number "
                             "(TFLOP/s per precision, GB/s for bandwidth_gbps)")


def _default_title(df: pd.DataFrame) -> str:
    machine = next((v for col in ("env_gpu_name", "env_cpu_model")
                    for v in df[col].dropna().astype(str) if v), "unknown machine")
    suites = ", ".join(str(s) for s in dict.fromkeys(df["suite"].dropna())) or "results"
    return f"convbench: {suites} on {machine}"
