"""A harness module as it was at an earlier commit, imported on its own, so a benchmark can time
the code before a change beside the code after it in one process (no frozen copy in the tree).

BEFORE is the commit before issue 16's CPU rework (phase planes in im2col, GEMM-shaped Winograd
blocks); its modules import today's harness.backends.cpu._common, which that rework left alone.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "73e3a4e"


def module_at(path: str, name: str, commit: str = BEFORE,
              renames: dict[str, str] | None = None) -> ModuleType:
    """`renames` maps modules it imports to modules loaded earlier with module_at (e.g. a helper
    module at the same commit): `from OLD import` becomes `from NEW import`."""
    source = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    for old, new in (renames or {}).items():
        source = source.replace(f"from {old} import", f"from {new} import")
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module      # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module
