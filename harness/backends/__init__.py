"""The backend registry. Backends are imported lazily, so `import harness` needs no GPU library."""
from __future__ import annotations

import difflib
import importlib

from harness.backends.base import Backend, BackendUnavailable

# name -> "module:Class". Adding a backend is one line here and one module.
_REGISTRY = {
    "cpu": "harness.backends.cpu:CpuBackend",
    "torch_cpu": "harness.backends.torch.cpu:TorchCpuBackend",
    "cudnn": "harness.backends.cudnn.legacy:CudnnBackend",
    "cudnn_graph": "harness.backends.cudnn.graph:CudnnGraphBackend",
    "torch_gpu": "harness.backends.torch.gpu:TorchGpuBackend",
    "cudnn_rnn": "harness.backends.cudnn.rnn:CudnnRnnBackend",
}
# The seeded `fake` backend (harness/backends/fake.py) is not listed: tests register it
# (tests/conftest.py), so users never see its planted faults as an available backend.

_instances: dict[str, Backend] = {}


def register(name: str, target: str) -> None:
    """Add a backend given as "module:Class" (tests plant faulty GPU backends this way)."""
    _REGISTRY[name] = target
    _instances.pop(name, None)


def register_all(names_to_targets: dict[str, str]) -> None:
    """Register what another process's registry() returned (worker processes get the backends
    the parent registered, tests' planted ones included); unchanged names keep their instance."""
    for name, target in names_to_targets.items():
        if _REGISTRY.get(name) != target:
            register(name, target)


def registry() -> dict[str, str]:
    """The current name -> "module:Class" map, handed to worker processes."""
    return dict(_REGISTRY)


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Backend:
    """The backend called `name`; an unknown name raises KeyError with a did-you-mean hint."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"unknown backend {name!r}{hint}; known: {', '.join(_REGISTRY)}")
    if name not in _instances:
        module_name, class_name = _REGISTRY[name].split(":")
        module = importlib.import_module(module_name)
        _instances[name] = getattr(module, class_name)()
    return _instances[name]


def available() -> dict[str, str | None]:
    """Every backend with None when usable here, or the reason it is not."""
    return {name: get(name).unavailable_reason() for name in _REGISTRY}


def require(name: str) -> Backend:
    """The backend, or BackendUnavailable naming why it cannot run here."""
    backend = get(name)
    reason = backend.unavailable_reason()
    if reason:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {reason}")
    return backend
