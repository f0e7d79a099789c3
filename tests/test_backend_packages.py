"""The backends as packages (issue 37): moving modules into harness/backends/{cpu/*,cudnn,torch}/
must leave every name a user or a results file sees as it was, and keep GPU libraries and torch
out of a process until a backend runs."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from harness import backends

# Names stored in results files and suites: renaming any of them orphans earlier runs.
PRODUCT_BACKENDS = ("cpu", "torch_cpu", "cudnn", "cudnn_graph", "torch_gpu")
CPU_ALGORITHMS = ("direct", "im2col", "fft", "winograd_f2x2_3x3", "winograd_f4x4_3x3", "rnn_loop")
BACKENDS_DIR = Path(backends.__file__).parent


def test_every_registry_target_imports_and_keeps_its_name():
    registry = backends.registry()
    assert set(PRODUCT_BACKENDS) <= set(registry)
    for name in PRODUCT_BACKENDS:
        assert backends.get(name).name == name, registry[name]
    assert tuple(a.name for a in backends.get("cpu").algorithms()) == CPU_ALGORITHMS


def test_no_backend_module_imports_torch_cupy_or_cudnn_when_loaded():
    modules = sorted(".".join(("harness", "backends", *p.relative_to(BACKENDS_DIR).with_suffix(
        "").parts)).removesuffix(".__init__") for p in BACKENDS_DIR.rglob("*.py"))
    assert "harness.backends.cudnn.lib" in modules and "harness.backends.torch.gpu" in modules
    if importlib.util.find_spec("numba") is None:     # the [compiled] extra's kernels need it
        modules.remove("harness.backends.cpu.direct_compiled")
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'cupy', 'cudnn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
