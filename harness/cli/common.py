"""What every convbench command shares: the exit codes, bad input as one line, printing, and the
OSErrors of a user's path that are bad input rather than a convbench bug."""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UserError(Exception):
    """Bad input: printed as one line, exit code 2."""


def say(text: str = "") -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:      # `convbench table ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def warn(text: str) -> None:
    print(f"convbench: {text}", file=sys.stderr, flush=True)


def csv_list(text: str | None, flag: str) -> list[str] | None:
    """A comma list given to `flag`; an empty one (`--layer ''`) or an empty item is refused:
    left as it was, it would mean "no filter" and run everything."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        what = "is empty" if not text.strip() else "has an empty item"
        raise UserError(f"{flag} {text!r} {what}: give a comma list of values")
    return items


def utf8_text(text: str) -> str:
    """An argparse type: text that can be written as UTF-8 (a shell passes undecodable bytes
    as lone surrogates, which no page can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid UTF-8 text") from None
    return text


# The most processes one flag may ask for (--jobs, --workers): far above any machine's cores,
# far below what the OS and multiprocessing take (2^70 jobs overflowed a C int: a traceback).
MOST_PROCESSES = 1024


def count(lowest: int, highest: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= lowest (and <= highest), named in the one-line error when
    not."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {lowest}")
        if highest is not None and value > highest:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {highest}")
        return value
    return parse


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# What an OSError met while writing says about the user's path or disk. Any other errno (EBADF,
# EINVAL...) is convbench misusing a file: it stays an OSError, a bug with a traceback.
_UNUSABLE = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
             errno.EROFS: "the file system is read-only",
             errno.ENOSPC: "the disk is full (no space left on the device)",
             errno.EDQUOT: "the disk quota is used up", errno.EFBIG: "the file is too large",
             errno.ENAMETOOLONG: "the name is too long",
             errno.ELOOP: "too many symbolic links in the path"}


def unusable_path(err: OSError, path: Path) -> str | None:
    """One line saying why `path` cannot be written, or None when `err` says nothing about the
    path or its disk (then it is a bug and must propagate)."""
    if not _about(err, path):
        return None
    if err.errno in (errno.EEXIST, errno.ENOTDIR):      # mkdir or open under a file
        blocker = next((folder for folder in reversed(path.parents)
                        if folder.exists() and not folder.is_dir()), None)
        return None if blocker is None else (f"cannot write {path}: {blocker} is a file, not "
                                             "a folder")
    if err.errno not in _UNUSABLE:
        return None
    other = err.filename is not None and Path(os.fsdecode(err.filename)) != path
    return (f"cannot write {path}{f' ({os.fsdecode(err.filename)})' if other else ''}: "
            f"{_UNUSABLE[err.errno]}")


def _about(err: OSError, path: Path) -> bool:
    """Whether `err` is about `path`: it names no file (a write to an open one), or `path`, a
    file in it (a report folder), a folder above it, or a file beside it (the journal, the lock,
    the temporary file). A file elsewhere (a cache read on the way) is none of the user's."""
    if err.filename is None:
        return True
    named, mine = Path(os.path.abspath(os.fsdecode(err.filename))), Path(os.path.abspath(path))
    return (named == mine or named.parent == mine.parent or mine in named.parents
            or named in mine.parents)


@contextlib.contextmanager
def writing(path: Path | str, then: str = "") -> Iterator[None]:
    """Writes to a path the user chose (or the default results folder): an OSError that says the
    path or its disk is unusable becomes one line naming it (and `then`, what to do next),
    exit 2; any other OSError propagates as the bug it is."""
    try:
        yield
    except OSError as err:
        refusal = unusable_path(err, Path(path))
        if refusal is None:
            raise
        raise UserError(refusal + then) from None
