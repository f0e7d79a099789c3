"""Where convbench keeps what it learnt once and reuses in later runs on the same machine (the
measured peaks, the engines that hung): $CONVBENCH_CACHE_DIR, else $XDG_CACHE_HOME/convbench,
else ~/.cache/convbench. Results never go here: they are the user's files (results/)."""
from __future__ import annotations

import os
from pathlib import Path


def folder() -> Path:
    explicit = os.environ.get("CONVBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "convbench"
