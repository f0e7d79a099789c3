"""Measurements <-> pandas, one long-format table with a schema version.

Rows are appended to a JSON-lines journal beside the results file as each point finishes, so a
crash or Ctrl-C loses nothing finished; `finish()` folds the journal into the Parquet file.
Between the rows, a line {"groups_done": [planned point ids]} says a group's points are whole:
an expanding algorithm's plans arrive one by one (harness.runner), so a planned point with rows
but no such line was cut short, and --resume measures only its missing plans. A writer opens
with an empty one, so rows before the first such line come from a run that wrote groups whole.
`load()` reads Parquet, CSV, a folder of them, or a journal left behind by a killed run.
"""
from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import pandas as pd

from harness.locks import OutputLock
from harness.measurement import HungKey, hung_key

# The schema's and the workspace limit's names, each defined once in its module, offered here too
# (callers read and write through store, where they also find the columns and the row format).
from harness.schema import (COLUMNS, EXTRA_COLUMNS, REQUIRED_COLUMNS, SCHEMA_VERSION,
                            ResultsError, finished_now, frame, to_row)
from harness.workspace_limit import UNLIMITED_BYTES, limit_from_column, limit_to_column

__all__ = [
    "COLUMNS", "EXTRA_COLUMNS", "GROUPS_DONE", "JournalRead", "OutputExists", "REQUIRED_COLUMNS",
    "RESULT_SUFFIXES", "ResultWriter", "ResultsError", "SCHEMA_VERSION", "UNLIMITED_BYTES",
    "WriteMode", "check_output", "export_csv", "finished_now", "frame", "journal_path",
    "limit_from_column", "limit_to_column", "load", "read_journal", "read_journal_lines",
    "read_parquet_or_csv", "real_output", "to_row", "write"
]

# ---- writing as we go ---------------------------------------------------------------------------
def journal_path(results: Path) -> Path:
    return results.with_name(results.name + ".partial.jsonl")


RESULT_SUFFIXES = (".parquet", ".csv")


class OutputExists(ResultsError):
    """The output a run was pointed at already holds results, and the user did not say what to do
    with them; the message names the file and the three ways on."""


# A write the disk refused, as opposed to convbench misusing a file (EBADF...).
_DISK_REFUSED = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


def real_output(path: Path) -> Path:
    """Where a results path really writes: a symbolic link's target, so that a run writes through
    the link (replacing the link with a file would leave its target stale) and takes the lock
    that every other path to that file takes."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


class WriteMode(StrEnum):
    """What a run may do to an output that already exists. A run never deletes, truncates or
    rewrites results it was not asked to touch."""
    NEW = "new"            # the file and its journal must not exist yet
    RESUME = "resume"      # continue that run: its finished points are skipped
    APPEND = "append"      # keep every row there and add this run's rows as a run of their own
    REPLACE = "replace"    # --force: this run's rows replace the file (atomically, at the end)


class ResultWriter:
    """Owns one results file for one run: holds its lock, appends each row to the journal at once,
    and `finish()` folds the journal into the file (temp file + rename, so a reader never sees
    half a file)."""

    def __init__(self, results: Path, mode: WriteMode = WriteMode.NEW):
        self.results = real_output(results)
        self.journal = journal_path(self.results)
        self.mode = WriteMode(mode)
        self.damaged_lines: tuple[int, ...] = ()    # journal lines that could not be read
        self.results.parent.mkdir(parents=True, exist_ok=True)
        self._lock = OutputLock(self.results)        # refuses while another run writes here
        self._file: IO[str] | None = None
        self.rows_written = 0
        try:
            check_output(self.results, self.mode)
            self._file = _open_for_append(self.journal,
                                          truncate=self.mode is WriteMode.REPLACE)
            self.mark_done([])      # a full disk can refuse the very first line
        except BaseException:
            self.close()
            raise

    def resume_state(self) -> ResumeState:
        """All a resumed run takes from the rows already written, from one read of them."""
        stored, journal = self._parts()
        done = _finished(stored, journal)
        return ResumeState(done, _part_measured(journal.rows, done),
                           hung_engines(stored) | hung_engines(journal.rows),
                           _last_run_id(journal.rows) or _last_run_id(stored))

    def mark_done(self, point_ids: list[str]) -> None:
        """Say these planned points' rows are all in the journal (see the module docstring)."""
        self._file.write(json.dumps({GROUPS_DONE: list(point_ids)}) + "\n")
        self._file.flush()

    def append(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, default=_json_default) + "\n")
        self._file.flush()
        self.rows_written += 1

    def finish(self, annotate: Callable[[pd.DataFrame], pd.DataFrame] | None = None
               ) -> pd.DataFrame:
        """Write the file (its earlier rows, unless replacing, then this run's) and release it.
        `annotate` adds derived columns before the single write."""
        try:
            self._file.close()
            df = self._existing_rows()
            key = ["run_id", "point_id"] if len(df) else "point_id"
            df = df.drop_duplicates(key, keep="last").reset_index(drop=True)
            if annotate is not None:
                df = annotate(df)
            write(df, self.results)
            self.journal.unlink(missing_ok=True)
            return df
        finally:
            self._lock.release()

    def close(self) -> None:
        """Give up the output without folding the journal (it stays for --resume). A line the
        disk refused (the error that made us give up) fails to flush again here: it is lost
        with the run, and the error on its way says why. The lock goes in any case."""
        try:
            if self._file is not None:
                self._file.close()
        except OSError as err:
            if err.errno not in _DISK_REFUSED:
                raise
        finally:
            self._lock.release()

    def _existing_rows(self) -> pd.DataFrame:
        stored, journal = self._parts()
        parts = [p for p in (stored, journal.rows) if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else frame([])

    def _parts(self) -> tuple[pd.DataFrame, JournalRead]:
        """The results file's rows (those of finished runs) and what the journal holds."""
        stored = frame([])
        if self.results.exists() and self.mode is not WriteMode.REPLACE:
            stored = read_parquet_or_csv(self.results)
        journal = JournalRead(frame([]), ())
        if self.journal.exists():
            if not self._file.closed:
                self._file.flush()
            journal = read_journal_lines(self.journal)
            self.damaged_lines = journal.damaged_lines
        return stored, journal


def _finished(stored: pd.DataFrame, journal: JournalRead) -> set[str]:
    """ResumeState.finished of the rows read (the module docstring says why)."""
    done = _point_ids(stored) | _point_ids(journal.rows[:journal.rows_before_marks])
    after = journal.rows[journal.rows_before_marks:]
    plain = after[_planned_ids(after) == ""] if len(after) else after
    return done | set(plain.get("point_id", ())) | set(journal.groups_done)


@dataclass(frozen=True)
class ResumeState:
    """What --resume needs of an earlier run's rows (ResultWriter.resume_state)."""
    finished: set[str]                          # planned points whose rows are all written
    measured_variants: dict[str, set[str]]      # part-measured planned point -> plans it has
    hung_engines: set[HungKey]     # engines seen hanging (measurement.hung_key)
    run_id: str | None = None                   # the last row's, which a resumed run carries on


def _part_measured(rows: pd.DataFrame, done: set[str]) -> dict[str, set[str]]:
    partial: dict[str, set[str]] = {}
    if len(rows):
        for planned, algorithm in zip(_planned_ids(rows), rows["algorithm"]):
            if planned and planned not in done:
                partial.setdefault(planned, set()).add(algorithm)
    return partial


def _last_run_id(rows: pd.DataFrame) -> str | None:
    ids = rows["run_id"].dropna() if len(rows) else ()
    return str(ids.iloc[-1]) if len(ids) else None


def hung_engines(rows: pd.DataFrame) -> set[HungKey]:
    if "hung_engine" not in rows:
        return set()
    hung = rows[rows["hung_engine"].notna()]
    unset = [None] * len(hung)
    return set(map(hung_key, hung["backend"], hung["direction"], hung.get("op", unset),
                   hung["precision"], hung.get("output", unset), hung["hung_engine"]))


def _planned_ids(rows: pd.DataFrame) -> pd.Series:
    """Each row's planned point id, "" for a row that is its planned point."""
    return rows["planned_point_id"].fillna("").astype(str)


def _point_ids(rows: pd.DataFrame) -> set[str]:
    """The points rows written whole stand for: their own and their planned points."""
    if not len(rows):
        return set()
    return set(rows["point_id"]) | set(_planned_ids(rows)) - {""}


def check_output(results: Path, mode: WriteMode) -> None:
    """OutputExists when `mode` may not touch what is at `results` (rechecked under the lock)."""
    journal = journal_path(results)
    file, unfinished = results.exists(), journal.exists()
    if mode is WriteMode.NEW and (file or unfinished):
        what = results if file else journal
        raise OutputExists(
            f"{what} already exists{'' if file else ' (an unfinished run)'}: pass --resume "
            "to continue that run, --append to add this run's rows, --force to replace it, "
            "or leave out --out for a new file")
    if mode is WriteMode.APPEND and unfinished:
        raise OutputExists(f"{journal} holds an unfinished run: finish it with --resume "
                           f"before appending another run to {results}")


def _open_for_append(journal: Path, truncate: bool) -> IO[str]:
    """The journal, opened to append whole lines. A killed run may have left its last line cut
    short; a newline first keeps our first row from being glued onto it."""
    torn = False
    if journal.exists() and not truncate and journal.stat().st_size:
        with journal.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
    handle = journal.open("w" if truncate else "a", encoding="utf-8")
    if torn:
        handle.write("\n")
    return handle


def write(df: pd.DataFrame, path: Path) -> None:
    """Write a results file atomically: a reader sees the old file or the new one, never half."""
    path = real_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.suffix == ".csv":
            export_csv(df, temporary)
        else:
            # Page checksums make a corrupted file fail to load instead of loading changed numbers.
            df.to_parquet(temporary, index=False, write_page_checksum=True)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def export_csv(df: pd.DataFrame, path: Path) -> None:
    """CSV keeps the raw samples as a space-separated list in one cell."""
    out = df.copy()
    out["samples_ms"] = out["samples_ms"].map(
        lambda s: " ".join(repr(float(v)) for v in s) if _is_list(s) else "")
    out.to_csv(path, index=False)


# ---- reading ------------------------------------------------------------------------------------
def load(path: str | Path) -> pd.DataFrame:
    """A results file (Parquet, CSV, or a journal of a killed run) or a folder of them."""
    path = Path(path)
    if path.is_dir():
        files = sorted(list(path.glob("*.parquet")) + list(path.glob("*.csv")))
        if not files:
            raise FileNotFoundError(f"no .parquet or .csv results in folder {path}")
        return pd.concat([load(f) for f in files], ignore_index=True)
    if not path.exists():
        journal = journal_path(path)
        if journal.exists():
            return read_journal(journal)
        raise FileNotFoundError(f"no results file {path}")
    if path.name.endswith(".partial.jsonl"):
        return read_journal(path)
    return read_parquet_or_csv(path)


def read_parquet_or_csv(path: Path) -> pd.DataFrame:
    try:
        df = _read_table(path)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise ResultsError(f"{path} is not a readable convbench results file "
                           f"({type(err).__name__}: {_one_line(err)})") from None
    return _checked(df, path)




def _checked(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A frame of COLUMNS from what a file held, or ResultsError naming what is wrong with it."""
    missing = [name for name in REQUIRED_COLUMNS if name not in df.columns]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6
                                          else "")
        raise ResultsError(f"{path} is not a convbench results file: no column {shown}")
    versions = pd.to_numeric(df["schema_version"], errors="coerce")
    if len(df) and versions.isna().any():
        raise ResultsError(f"{path} has a schema_version that is not a number")
    newest = int(versions.max()) if len(df) else SCHEMA_VERSION
    if newest > SCHEMA_VERSION:
        raise ResultsError(f"{path} has schema version {newest}; this convbench reads up to "
                           f"{SCHEMA_VERSION}: upgrade convbench")
    try:
        return frame(df.to_dict("records"))
    except (ValueError, TypeError) as err:
        raise ResultsError(f"{path} has a column of the wrong type ({_one_line(err)})") from None


def _read_table(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        if "samples_ms" in df.columns:
            df["samples_ms"] = df["samples_ms"].map(
                lambda s: [float(v) for v in str(s).split()] if isinstance(s, str) else [])
    else:
        df = pd.read_parquet(path, page_checksum_verification=True)
        if "samples_ms" in df.columns:
            df["samples_ms"] = df["samples_ms"].map(lambda s: list(s) if _is_list(s) else [])
    return df


# The key of a journal line that marks groups whole rather than holding a row.
GROUPS_DONE = "groups_done"


@dataclass(frozen=True)
class JournalRead:
    rows: pd.DataFrame
    damaged_lines: tuple[int, ...]    # 1-based numbers of lines that were not whole rows
    groups_done: frozenset[str] = frozenset()    # planned points marked whole
    rows_before_marks: int | None = None     # rows written before the first mark (None: all)


def read_journal(path: Path) -> pd.DataFrame:
    """The rows of a journal; ResultsError when it has none and is not empty."""
    journal = read_journal_lines(path)
    if not len(journal.rows) and journal.damaged_lines:
        raise ResultsError(f"{path} holds no readable rows ({len(journal.damaged_lines)} "
                           "damaged lines)")
    return journal.rows


def read_journal_lines(path: Path) -> JournalRead:
    """Every whole row of a journal. A line cut short by a kill, or garbage, is skipped and
    counted, and the rows after it still count (a resumed run appends after a torn line)."""
    rows, damaged, done = [], [], set()
    before_marks = None
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = _journal_line(raw)
            if isinstance(line, list):
                done.update(line)
                before_marks = len(rows) if before_marks is None else before_marks
            elif line is not None:
                rows.append(line)
            elif raw.strip():
                damaged.append(number)
    table = _checked(pd.DataFrame(rows), path) if rows else frame([])
    return JournalRead(table, tuple(damaged), frozenset(done), before_marks)


def _journal_line(raw: bytes) -> dict[str, Any] | list[str] | None:
    """A row (dict), the point ids of a groups-done line (list), or None (torn or garbage)."""
    try:
        line = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(line, dict):
        return None
    if set(line) == {GROUPS_DONE} and isinstance(line[GROUPS_DONE], list):
        return [str(point_id) for point_id in line[GROUPS_DONE]]
    return line if all(name in line for name in REQUIRED_COLUMNS) else None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:200]


def _is_list(value: Any) -> bool:
    return hasattr(value, "__len__") and not isinstance(value, str)


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in a results row")
