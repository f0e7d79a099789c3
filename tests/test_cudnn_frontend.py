"""The graph API's availability in the planning process: cuDNN loaded and the frontend module
looked for, not imported (it imports torch: seconds; issue 38), with every refusal still named."""
from __future__ import annotations

import importlib.machinery
import sys

import pytest

from harness.backends.cudnn import frontend
from harness.backends.cudnn import lib as cudnn_lib


@pytest.fixture
def cudnn_loads(monkeypatch):
    monkeypatch.setattr(cudnn_lib, "library", lambda: object())
    monkeypatch.delitem(sys.modules, "cudnn", raising=False)


def _module_found(monkeypatch, found: bool) -> None:
    spec = importlib.machinery.ModuleSpec("cudnn", None) if found else None
    real = importlib.util.find_spec
    monkeypatch.setattr(frontend.importlib.util, "find_spec",
                        lambda name, *a: spec if name == "cudnn" else real(name, *a))


def test_an_installed_frontend_is_not_imported_to_plan(cudnn_loads, monkeypatch):
    _module_found(monkeypatch, True)
    monkeypatch.setattr(frontend, "load", lambda: pytest.fail("the frontend was imported"))
    assert frontend.planning_refusal() is None


def test_a_missing_frontend_is_named_with_its_install_line(cudnn_loads, monkeypatch):
    _module_found(monkeypatch, False)
    monkeypatch.setitem(sys.modules, "cudnn", None)     # `import cudnn` raises ImportError
    reason = frontend.planning_refusal()
    assert reason.startswith("cudnn-frontend is not importable (") and frontend.INSTALL in reason


def test_missing_cudnn_is_named_before_the_frontend_is_looked_for(monkeypatch):
    def missing():
        raise cudnn_lib.CudnnUnavailable("libcudnn.so.9 not found")
    monkeypatch.setattr(cudnn_lib, "library", missing)
    assert frontend.planning_refusal() == "libcudnn.so.9 not found"
    assert frontend.refusal() == "libcudnn.so.9 not found"
