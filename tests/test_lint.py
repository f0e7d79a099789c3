"""The linter configured in pyproject.toml ([tool.ruff]) is clean on the whole tree (issue 37)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    pytest.importorskip("ruff", reason="ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _tracked() -> list[Path]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout: the tracked tree cannot be listed")
    return [ROOT / name for name in done.stdout.decode().split("\0") if name]


def test_the_product_tree_stays_small_and_holds_no_rendered_report():
    # The lab lives in evidence/; a rendered report (HTML, figures) is regenerated, never
    # committed, except the one small example the docs show.
    tracked = [p for p in _tracked() if p.exists()]
    rendered = [str(p.relative_to(ROOT)) for p in tracked if p.suffix in (".html", ".png")
                and not p.relative_to(ROOT).parts[:2] == ("docs", "example-report")]
    assert not rendered, f"rendered report files are tracked: {rendered[:5]}"
    outside = sum(p.stat().st_size for p in tracked if p.relative_to(ROOT).parts[0] != "evidence")
    assert outside < 5 * 2**20, f"the tracked tree outside evidence/ is {outside / 2**20:.1f} MiB"
    users = [str(p.relative_to(ROOT)) for p in tracked if p.relative_to(ROOT).parts[0]
             in ("results", "reports") and p.name != "README.md"]
    assert not users, f"files in the user's output folders are tracked: {users[:5]}"
