"""Where runs are written and how they are found again.

Every run gets a file of its own, `results/<suite>-<machine>-<run id>.parquet`, with a run id of
UTC time plus a random part, so two runs (even two started in the same second, on one machine or
sharing a folder) never write the same file. Names that came from users (suite names) are made
safe before they become part of a path, and the file always lands inside the results folder.

Readers (`table`, `report`, `compare`) take a file, a folder, a glob, or a suite name, which
means the latest finished run of that suite on this machine.
"""
from __future__ import annotations

import glob
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.store import RESULT_SUFFIXES, journal_path

RESULTS_DIR = Path("results")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_GLOB_CHARS = set("*?[")


class RunNotFound(ValueError):
    """A name that is no results file, folder, glob match or run of a known suite."""


def new_run_id() -> str:
    """UTC time to the second, then 6 random hex digits: unique, and sorts by start time."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def machine_label(env: dict[str, Any]) -> str:
    """'nvidia-h100-80gb-hbm3' for a GPU machine, 'cpu' otherwise."""
    return safe_name(str(env.get("gpu_name") or "cpu")).lower()


def safe_name(text: str) -> str:
    """A user's name as one harmless path component: no separators, no leading dots."""
    cleaned = _UNSAFE.sub("-", text).strip("-.")
    return cleaned[:80] or "unnamed"


def run_stem(suite: str, env: dict[str, Any]) -> str:
    return f"{safe_name(suite)}-{machine_label(env)}-"


def new_run_path(suite: str, env: dict[str, Any], run_id: str, tag: str = "",
                 folder: Path = RESULTS_DIR) -> Path:
    """The file a new run of `suite` writes: results/<suite>-<machine>-<run id>[-tag].parquet."""
    suffix = f"-{safe_name(tag)}" if tag else ""
    return folder / f"{run_stem(suite, env)}{run_id}{suffix}.parquet"


def latest_unfinished(suite: str, env: dict[str, Any], folder: Path = RESULTS_DIR
                      ) -> Path | None:
    """The results file of the newest run of `suite` on this machine that left a journal."""
    journals = [p for p in _runs_of(suite, env, folder, ".partial.jsonl")]
    if not journals:
        return None
    newest = max(journals, key=lambda p: p.stat().st_mtime)
    return newest.with_name(newest.name.removesuffix(".partial.jsonl"))


def latest_finished(suite: str, env: dict[str, Any], folder: Path = RESULTS_DIR
                    ) -> Path | None:
    files = [p for suffix in RESULT_SUFFIXES for p in _runs_of(suite, env, folder, suffix)]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def _runs_of(suite: str, env: dict[str, Any], folder: Path, suffix: str) -> list[Path]:
    if not folder.is_dir():
        return []
    stem = run_stem(suite, env)
    return [p for p in folder.iterdir()
            if p.name.startswith(stem) and p.name.endswith(suffix) and p.is_file()]


def resolve(argument: str, env_of_this_machine, folder: Path = RESULTS_DIR) -> list[Path]:
    """The results files an argument names: an existing file or folder, a glob (in the order
    of the names), or a suite name (its latest finished run here). `env_of_this_machine` is
    called only for suite names: it may probe the GPU."""
    path = Path(argument)
    if path.exists() or journal_path(path).exists():
        return [path]
    if _GLOB_CHARS & set(argument):
        matches = sorted(Path(m) for m in glob.glob(argument)
                         if m.endswith(RESULT_SUFFIXES + (".partial.jsonl",)))
        if not matches:
            raise RunNotFound(f"no results files match {argument!r}")
        return matches
    if path.suffix in RESULT_SUFFIXES or path.name != argument:
        raise RunNotFound(f"no results file {argument}")
    env = env_of_this_machine()
    latest = latest_finished(argument, env, folder)
    if latest is None:
        raise RunNotFound(f"{argument!r} is no results file, folder or glob, and {folder}/ has "
                          f"no finished run of a suite called {argument!r} on this machine "
                          f"({machine_label(env)})")
    return [latest]
