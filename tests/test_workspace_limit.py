"""The one text and encoding of a workspace limit (harness.workspace_limit), as every surface shows
it: the report, the command line's tables and the suite checker's messages (issue 37)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.suite import SuiteError, parse_suite
from harness.workspace_limit import UNLIMITED_BYTES, limit_from_column, limit_text, limit_to_column


@pytest.mark.parametrize("value, text", [
    (None, "unlimited"), (UNLIMITED_BYTES, "unlimited"), (math.nan, "unlimited"),
    (pd.NA, "unlimited"), (0, "0 B"), (1000, "1000 B"), (64 << 20, "64 MiB"),
    (3 << 30, "3 GiB"), (1536, "1.5 KiB"), (1000 << 20, "1000 MiB"), (1023 << 20, "1023 MiB"),
    (1 << 40, "1024 GiB"), ((64 << 20) + 1, "64 MiB"), (int(1.234 * 2**30), "1.23 GiB")])
def test_a_limit_reads_the_same_everywhere(value, text):
    assert limit_text(value) == text


def test_the_column_encoding_round_trips():
    for limit in (None, 0, 64 << 20):
        assert limit_from_column(limit_to_column(limit)) == limit


def test_every_surface_uses_the_one_text():
    from harness.cli import tables as cli_tables
    from harness.report import tables as report_tables
    assert report_tables.fmt_limit(64 << 20) == cli_tables.limit_text(64 << 20) == "64 MiB"
    with pytest.raises(SuiteError, match=r"repeats an earlier limit \(64 MiB = 67108864 bytes\)"):
        parse_suite("layers = ['mb1ic4ih8oc4oh8kh3ph1']\n"
                    "[sweep]\nworkspace_limits = ['64MiB', 67108864]\n")
