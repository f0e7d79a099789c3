"""torch_gpu's availability check in the planning process reads torch's build record instead of
importing torch (3-6 s of every GPU run; issue 38), and still refuses a CPU-only build."""
from __future__ import annotations

import importlib.machinery
import subprocess
import sys

import pytest

from harness.backends.torch import gpu


def _fake_torch(tmp_path, monkeypatch, cuda: str) -> None:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text(
        "from typing import Optional\n__version__ = '9.9.9+x'\ndebug = False\n"
        f"cuda: Optional[str] = {cuda}\nhip: Optional[str] = None\n")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    real = importlib.util.find_spec
    monkeypatch.setattr(gpu.importlib.util, "find_spec",
                        lambda name, *a: spec if name in ("torch", "cupy") else real(name, *a))
    monkeypatch.delitem(sys.modules, "torch", raising=False)


def test_a_cpu_only_torch_is_refused_without_importing_it(tmp_path, monkeypatch):
    _fake_torch(tmp_path, monkeypatch, "None")
    assert gpu.TorchGpuBackend().unavailable_reason() == (
        "torch 9.9.9+x is a CPU-only build (no CUDA)")
    assert "torch" not in sys.modules


def test_a_cuda_build_passes_to_the_workers_full_check(tmp_path, monkeypatch):
    _fake_torch(tmp_path, monkeypatch, "'13.0'")
    assert gpu.TorchGpuBackend().unavailable_reason() is None
    assert "torch" not in sys.modules


def test_the_installed_torch_is_read_without_importing_it():
    torch = pytest.importorskip("torch")
    code = ("import sys; from harness.backends.torch import gpu; "
            "print(repr(gpu._build_refusal())); print('torch' in sys.modules)")
    refusal, imported = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                       text=True, check=True).stdout.splitlines()
    assert imported == "False"
    expected = None if torch.version.cuda else (
        f"torch {torch.__version__} is a CPU-only build (no CUDA)")
    assert refusal == repr(expected)
