"""What the graph API said of each plan of a point, remembered across runs (issue 39).

Listing a graph-API point's plans (harness/backends/cudnn/graph.py) asks the heuristics eight
times: the candidates in modes A, B and FALLBACK, mode A alone for its ranking, and once per
numerical note, because the frontend has no per-plan notes getter. On an H100 that took 36.5 ms
a plan set over ResNet-50's layers (`evidence/logs/issue39-stop56-...`, call 2), of which the
candidates themselves were 6.2 ms; each timing process lists every point again, and so does
every later run. This file keeps the rest: each plan's numerical and behaviour notes and mode A
rank, by point.

Only labels come from here, never the plans measured: every listing still asks the heuristics
for the candidates, and a remembered entry is used only where it names exactly the plans they
offer now; otherwise the plan set is labelled afresh and the entry replaced. Notes decide a
row's family and error factor, so an entry is as trustworthy as its scope: one file per GPU,
driver, CUDA, cuDNN and cudnn-frontend version (cache_dir.scoped), so another version never
reads it.

The run's main process checks the file (`check`: a corrupt one, or one of another format or
scope, is named in a note and removed, so the workers build it afresh) and hands it and its
scope to its worker processes (`for_run`, WorkerPool's `plan_cache`); with `--no-cache` it
hands none, and nothing is read or written. Workers append one line per plan set they
label, under a file lock (two timing processes write to one file), and read the lines the other
appended when they miss.
"""
from __future__ import annotations

import fcntl
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import cache_dir

FORMAT = 1
# One plan's labels: its numerical notes, its behaviour notes, its place in mode A's list.
Labels = tuple[tuple[str, ...], tuple[str, ...], int | None]


def path(env: Mapping[str, Any]) -> Path:
    return cache_dir.scoped(env, "plan-sets", ".jsonl")


@dataclass(frozen=True)
class CacheFile:
    """A run's file and the scope it is for, handed to its worker processes (WorkerPool)."""
    where: str
    scope: dict[str, Any]


def for_run(env: Mapping[str, Any]) -> CacheFile:
    """This scope's file, for the run's workers; a worker creates it when it first has a plan
    set to keep, so a run with no graph-API point leaves nothing behind."""
    return CacheFile(str(path(env)), cache_dir.scope(env))


# The worker process's file (harness.worker sets it from its start-up arguments; None: no cache).
_here: CacheFile | None = None


def open_here(cache: CacheFile | None) -> None:
    """Make `cache` the file the graph sessions this process starts read and append to."""
    global _here
    _here = cache


def check(env: Mapping[str, Any]) -> tuple[int, str | None]:
    """How many plan sets the file remembers, and a note where it was there but unusable (it is
    then removed: the workers write it afresh)."""
    where = path(env)
    try:
        with open(where) as source:
            fcntl.flock(source, fcntl.LOCK_SH)     # no worker appends while it is read
            text = source.read()
    except FileNotFoundError:
        return 0, None
    except (OSError, UnicodeDecodeError) as err:
        return 0, f"{where}: cannot be read ({err}); ignored"
    try:
        return len(_entries(text, env)), None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        try:
            where.unlink()
        except OSError:
            pass
        return 0, f"{where}: {err}; ignored, and written afresh by this run"


def _entries(text: str, env: Mapping[str, Any]) -> dict[str, dict[str, Labels]]:
    """Every entry of a whole file, checked: the header's format and scope, then each line."""
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()         # a line another run's worker is still writing: not this check's
    if not lines:
        return {}
    head = json.loads(lines[0])
    if head.get("format") != FORMAT:
        raise ValueError(f"format {head.get('format')!r}, not {FORMAT}")
    if head.get("scope") != cache_dir.scope(env):
        raise ValueError("written for another GPU, driver or library version")
    entries: dict[str, dict[str, Labels]] = {}
    for number, line in enumerate(lines[1:], start=2):
        entry = _entry(line, number)
        if entry is not None:
            entries[entry[0]] = entry[1]
    return entries


def _entry(line: str | bytes, number: int) -> tuple[str, dict[str, Labels]] | None:
    """One line's plan set, None for a header (two processes that started the file at once
    each wrote one); raises where the line is not what a worker writes."""
    body = json.loads(line)
    if "format" in body:
        return None
    if not isinstance(body["key"], str):
        raise ValueError(f"line {number}: the key is not text")
    return body["key"], _plans(body["plans"], number)


def _plans(plans: Any, number: int) -> dict[str, Labels]:
    labelled: dict[str, Labels] = {}
    for name, (notes, behavior, rank) in plans.items():
        if not (isinstance(notes, list) and isinstance(behavior, list)
                and all(isinstance(n, str) for n in (*notes, *behavior))
                and (rank is None or (isinstance(rank, int) and not isinstance(rank, bool)))):
            raise ValueError(f"line {number}: plan {name!r} is not labelled as a plan is")
        labelled[name] = (tuple(notes), tuple(behavior), rank)
    return labelled


class PlanCache:
    """A worker's view of its run's file (open_here; none: nothing is kept); `scope` is what
    the file's first line says it is for."""

    def __init__(self, where: str | Path | None = None, scope: dict[str, Any] | None = None):
        if where is None and _here is not None:
            where, scope = _here.where, _here.scope
        self.where = None if where is None else Path(where)
        self.scope = scope
        self._entries: dict[str, dict[str, Labels]] = {}
        self._read_to = 0        # bytes of the file read so far

    def lookup(self, key: str, names: list[str]) -> dict[str, Labels] | None:
        """The remembered labels of the point's plans, where they are for exactly `names`."""
        if self.where is None:
            return None
        if key not in self._entries:
            self._read_new_lines()
        labels = self._entries.get(key)
        return labels if labels is not None and set(labels) == set(names) else None

    def store(self, key: str, labels: dict[str, Labels]) -> None:
        """Remember a freshly labelled plan set (a failure to write leaves it unremembered)."""
        if self.where is None:
            return
        self._entries[key] = labels
        line = json.dumps({"key": key, "plans": {name: [list(notes), list(behavior), rank]
                                                 for name, (notes, behavior, rank)
                                                 in labels.items()}})
        try:
            self.where.parent.mkdir(parents=True, exist_ok=True)
            with open(self.where, "a") as out:
                fcntl.flock(out, fcntl.LOCK_EX)
                if out.tell() == 0:     # a new file's first line says what it is for
                    out.write(json.dumps({"format": FORMAT, "scope": self.scope}) + "\n")
                out.write(line + "\n")
        except OSError:
            pass

    def _read_new_lines(self) -> None:
        """Entries other processes appended since the last read: a line still being written
        (no newline yet) is left for the next read, and one that does not parse is passed
        over (that plan set is labelled afresh)."""
        try:
            with open(self.where, "rb") as source:
                source.seek(self._read_to)
                chunk = source.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind(b"\n") + 1]
        for number, raw in enumerate(complete.splitlines()):
            try:
                entry = _entry(raw, number)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if entry is not None:
                self._entries[entry[0]] = entry[1]
        self._read_to += len(complete)
