"""cudnn-frontend, the graph API's Python module, loaded for harness/backends/cudnn/graph.py.

Importing it imports torch (its wrapper does), 2-4 s of a process (issue 38's quick run on an
H100), so the planning process, which only asks whether the graph API can run, looks for the
module without importing it; the worker processes, which build the plans, import it before
their first one, and an import that fails there makes the rows `unsupported` with the reason.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any

from harness.backends.cudnn import lib as cudnn_lib

INSTALL = "pip install --no-deps nvidia-cudnn-frontend==1.16.0"


def load() -> Any:
    """The frontend module, with cuDNN loaded first from the nvidia wheel the legacy backend
    uses: the frontend looks for libcudnn only under sysconfig's purelib and then by soname,
    which finds a library already loaded from elsewhere."""
    cudnn_lib.library()
    import cudnn
    return cudnn


def refusal() -> str | None:
    """Why the frontend cannot be imported here (cuDNN missing, or the module), or None."""
    try:
        load()
    except cudnn_lib.CudnnUnavailable as err:
        return str(err)
    except ImportError as err:
        return f"cudnn-frontend is not importable ({err}); {INSTALL}"
    return None


def planning_refusal() -> str | None:
    """refusal() without importing the frontend where it is installed and not yet imported:
    cuDNN itself is still loaded (a ctypes load, cheap), and a missing module still named."""
    try:
        cudnn_lib.library()
    except cudnn_lib.CudnnUnavailable as err:
        return str(err)
    if "cudnn" not in sys.modules and importlib.util.find_spec("cudnn") is not None:
        return None
    return refusal()
