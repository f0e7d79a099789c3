"""What every convbench command shares: the exit codes, bad input as one line, printing."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UserError(Exception):
    """Bad input: printed as one line, exit code 2."""


def _say(text: str = "") -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:      # `convbench table ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _warn(text: str) -> None:
    print(f"convbench: {text}", file=sys.stderr, flush=True)


def _csv_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise UserError(f"empty item in list {text!r}")
    return items


def _utf8_text(text: str) -> str:
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


def _count(lowest: int, highest: int | None = None) -> Callable[[str], int]:
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


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__
