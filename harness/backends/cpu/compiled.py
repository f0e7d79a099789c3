"""Compiled CPU kernels through numba (issue 42), an optional extra (`pip install
'convbench[compiled]'`; the test extras include it). Without numba, or where it fails to load
or compile, the NumPy paths run and the row says why (`cpu_kernel`).

The kernels run on convbench's own CPU threads, never numba's threading layers
(harness/backends/cpu/direct_compiled.py says why). Kernels are compiled with cache=True: the
first process on a machine compiles (seconds, counted as the point's setup, never as a
sample), later ones load the cache.
"""
from __future__ import annotations

import importlib.util
from types import ModuleType

MISSING = "numba is not installed (pip install 'convbench[compiled]')"
_state: dict[str, object] = {}


def unavailable_reason() -> str | None:
    """None where compiled kernels can run here, else why not (without importing numba)."""
    if "failed" in _state:
        return str(_state["failed"])
    return None if importlib.util.find_spec("numba") is not None else MISSING


def kernels(module: str = "harness.backends.cpu.direct_compiled") -> ModuleType | None:
    """A module of numba kernels (the compiled direct convolution's by default; im2col's
    col2im: harness.backends.cpu.im2col.col2im_compiled), imported on first use; None where
    unavailable_reason() says why."""
    if unavailable_reason() is not None:
        return None
    if module not in _state:
        try:
            _state[module] = importlib.import_module(module)
        except Exception as error:      # a broken numba install: one reason, the NumPy path
            _state["failed"] = f"numba could not be loaded: {type(error).__name__}: {error}"
            return None
    return _state[module]     # type: ignore[return-value]


def failed(error: BaseException) -> str:
    """Remember that compiling failed (every later point takes the NumPy path); the reason."""
    _state["failed"] = f"numba could not compile the kernel: {type(error).__name__}: {error}"
    return str(_state["failed"])


def version() -> str:
    """The installed numba, read without importing it (a second's import for `convbench list`)."""
    from harness.env import installed_version
    return f"numba {installed_version('numba')}"


def label() -> str:
    """What a compiled row says it ran."""
    import numba
    return f"numba {numba.__version__}, on the CPU threads"
