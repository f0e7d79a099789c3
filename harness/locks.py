"""One writer per results file: an OS file lock beside it, held for the whole run.

The lock is `flock` on a hidden `.NAME.lock` file next to the results. The kernel drops it when the
holder exits, however it exits (kill -9 included), so a crashed run never leaves a stale lock. The
file records who holds it (pid, start time, command), for the refusal message of a second writer.
The holder removes the file when it is done; a run that opened the file just before that removal
notices it has locked an unlinked file and tries again, so two runs can never both hold it.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path


class OutputBusy(RuntimeError):
    """Another process is writing the same results file; the message names it."""


def lock_path(results: Path) -> Path:
    return results.with_name(f".{results.name}.lock")


class OutputLock:
    """Holds the lock of `results` from construction until `release()`."""

    def __init__(self, results: Path):
        self.path = lock_path(Path(results))
        self._fd: int | None = None
        for _ in range(100):     # only a holder releasing at this very moment makes us go round
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise OutputBusy(f"{results} is being written by another convbench run "
                                 f"({holder}); wait for it, or write elsewhere with --out"
                                 ) from None
            if _still_linked(fd, self.path):
                self._fd = fd
                _write_holder(fd)
                return
            os.close(fd)
        raise OutputBusy(f"could not lock {results}: its lock file keeps changing")

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)     # while still holding it: see the module docstring
        os.close(self._fd)                    # closing drops the flock
        self._fd = None


def _still_linked(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _write_holder(fd: int) -> None:
    holder = {"pid": os.getpid(),
              "started": datetime.now(UTC).isoformat(timespec="seconds"),
              "command": " ".join(sys.argv)[:300]}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pid {holder['pid']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError, OSError):
        return "holder unknown"
