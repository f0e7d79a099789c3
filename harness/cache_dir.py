"""Where convbench keeps what it learnt once and reuses in later runs on the same machine (the
measured peaks, the engines that hung, the graph API's plan lists, the host's parallel capacity:
harness/host_cores.py): $CONVBENCH_CACHE_DIR, else
$XDG_CACHE_HOME/convbench, else ~/.cache/convbench. Results never go here: they are the user's
files (results/)."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# What a remembered engine or plan list depends on: the GPU, its driver, and the CUDA, cuDNN and
# cudnn-frontend versions that chose and ran the kernels (env.fingerprint's fields).
SCOPE_FIELDS = ("gpu_name", "gpu_driver", "cuda_runtime", "cudnn", "cudnn_frontend")


def folder() -> Path:
    explicit = os.environ.get("CONVBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "convbench"


def scope(env: Mapping[str, Any]) -> dict[str, Any]:
    return {name: env.get(name) for name in SCOPE_FIELDS}


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: other processes (a run's workers, another run) may
    read it meanwhile. OSError where the folder cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def scoped(env: Mapping[str, Any], stem: str, suffix: str) -> Path:
    """The file `stem` keeps for this scope: a run with any other scope reads and writes another
    file, so a stale entry is never read."""
    digest = hashlib.sha256(json.dumps(scope(env), sort_keys=True).encode()).hexdigest()[:16]
    return folder() / f"{stem}-{digest}{suffix}"
