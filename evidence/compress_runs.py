"""Rewrites the lab's committed Parquet files with zstd (level 19) in place, and only where the
file shrinks and reads back identical (data, schema and its metadata).

Why: the device tool copies the whole tracked tree to a lent GPU machine and refuses a tree over
64 MiB; the lab's runs are most of it. Parquet's default (snappy) left 57.4 MiB of runs on
2026-11-27 and zstd 19 left 43.5 MiB (the time samples are floats that barely compress, so the
gain is about a quarter). Run it after adding runs:

    python evidence/compress_runs.py              # every tracked *.parquet under evidence/
    python evidence/compress_runs.py FILE...      # only these
"""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq


def recompress(path: str) -> tuple[int, int]:
    """(bytes before, bytes after) of `path`, rewritten only if smaller and equal on reading."""
    table = pq.read_table(path)
    temporary = path + ".zstd-tmp"
    pq.write_table(table, temporary, compression="zstd", compression_level=19,
                   write_page_checksum=True)
    if not pq.read_table(temporary).equals(table, check_metadata=True):
        os.remove(temporary)
        raise SystemExit(f"{path}: reads back different after zstd; left as it was")
    before, after = os.path.getsize(path), os.path.getsize(temporary)
    if after < before:
        os.replace(temporary, path)
        return before, after
    os.remove(temporary)
    return before, before


def main(paths: list[str]) -> int:
    if not paths:
        listed = subprocess.run(["git", "ls-files", "evidence/*.parquet"], check=True,
                                capture_output=True, text=True).stdout
        paths = listed.split()
    before = after = 0
    for path in paths:
        b, a = recompress(path)
        before, after = before + b, after + a
    print(f"{len(paths)} files: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
