"""The engines that hung, remembered across runs (issue 39).

A graph-API engine that hangs on a kind of problem (efficientnet_b0's depthwise layers on an
H100: about 58 minutes of one model sweep went to waiting out caps) hangs again in the next run
on the same GPU and libraries. A run that meets a hang writes the engine's key
(measurement.hung_key) here; the next run starts with those engines known, so each of their plans
gets the short cap (worker.HUNG_ENGINE_TIMEOUT_S) instead of the unit cap, as the engines that
hung earlier in the same run do. Nothing is skipped on the cache's word alone: a plan of a
remembered engine is still tried, and a plan that returns is measured and verified as any other.

One file per scope: the GPU, its driver, and the CUDA, cuDNN and cudnn-frontend versions that
chose and ran the kernels (env.fingerprint's fields). A run with any other value reads and writes
another file, so a stale entry is never read. A file that cannot be used (corrupt, another
format, another scope in its body) is named in a note, ignored, and written afresh after the
run. `--no-cache` neither reads nor writes it. Where: harness/cache_dir.py.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness import cache_dir
from harness.measurement import HungKey

FORMAT = 1


def path(env: Mapping[str, Any]) -> Path:
    return cache_dir.scoped(env, "hung-engines", ".json")


def load(env: Mapping[str, Any]) -> tuple[set[HungKey], str | None]:
    """The engines remembered for this scope, and a note where a file was there but unusable."""
    where = path(env)
    try:
        text = where.read_text()
    except FileNotFoundError:
        return set(), None
    except OSError as err:
        return set(), f"{where}: cannot be read ({err.strerror or err}); ignored"
    try:
        return _keys(json.loads(text), env), None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return set(), f"{where}: {err}; ignored, and written afresh after this run"


def _keys(body: Any, env: Mapping[str, Any]) -> set[HungKey]:
    if body.get("format") != FORMAT:
        raise ValueError(f"format {body.get('format')!r}, not {FORMAT}")
    if body.get("scope") != cache_dir.scope(env):
        raise ValueError("written for another GPU, driver or library version")
    keys = {tuple(key) for key in body["hung_engines"]}
    if not all(len(key) == 5 and all(isinstance(part, str) for part in key) for key in keys):
        raise ValueError("an entry is not a hung engine's key")
    return keys


def save(env: Mapping[str, Any], hung: Iterable[HungKey]) -> Path | None:
    """Write the engines for this scope (replacing the file in one step); None with nothing to
    remember."""
    keys = sorted(set(hung))
    if not keys:
        return None
    where = path(env)
    cache_dir.replace_text(where, json.dumps({"format": FORMAT, "scope": cache_dir.scope(env),
                                              "hung_engines": [list(key) for key in keys]},
                                             indent=1))
    return where
