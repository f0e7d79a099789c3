"""The environment fingerprint stored with every row. A probe that fails records None, never raises:
a missing GPU library is a fact about the machine, not an error."""
from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import cpu_memory

ENV_FIELDS = (
    "hostname", "os", "python", "cpu_model", "cpu_cores", "blas", "blas_threads",
    "numpy", "pandas", "torch", "cupy", "cudnn", "cudnn_frontend", "git_commit",
    "gpu_name", "gpu_sm_count", "gpu_l2_bytes", "gpu_memory_bytes", "gpu_max_sm_clock_mhz",
    "gpu_sm_clock_mhz", "gpu_max_mem_clock_mhz", "gpu_driver", "cuda_runtime", "gpu_ecc",
    "gpu_mig", "malloc",
    # set by a run with CPU points (harness/cpu_peaks.py), not by fingerprint()
    "cpu_fma_peak_gflops", "cpu_fma_peak_1t_gflops",
)
# What must match before two runs' timings are compared (compare refuses otherwise).
COMPARABILITY_FIELDS = ("cpu_model", "gpu_name", "gpu_driver", "cudnn", "cupy", "cuda_runtime")
# Those of them that describe the GPU and its libraries: compared between GPU rows only. A CPU
# row records them too (the probes run in every process), but they do not move its times, and
# installing PyTorch, whose wheel bundles a cuDNN, would otherwise make every CPU baseline made
# before it incomparable.
GPU_FIELDS = ("gpu_name", "gpu_driver", "cudnn", "cupy", "cuda_runtime")


def fingerprint(include_gpu: bool = True) -> dict[str, Any]:
    """Everything known about this machine and its libraries; unknown values are None."""
    env: dict[str, Any] = {name: None for name in ENV_FIELDS}
    env.update(_host())
    env["malloc"] = cpu_memory.current()
    if include_gpu:
        for probe in _GPU_PROBES:
            env.update(_quietly(probe))
    return env


@lru_cache(maxsize=1)
def _host() -> dict[str, Any]:
    return {
        "hostname": platform.node(), "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(), **_quietly(_blas), "numpy": installed_version("numpy"),
        "pandas": installed_version("pandas"), "torch": installed_version("torch"),
        "cupy": (installed_version("cupy-cuda13x") or installed_version("cupy-cuda12x")
                 or installed_version("cupy")),
        "cudnn_frontend": installed_version("nvidia-cudnn-frontend"), "git_commit": _git_commit(),
    }


def _quietly(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return probe()
    except Exception:  # a probe that fails records nothing (documented above)
        return {}


def installed_version(distribution: str) -> str | None:
    """An installed distribution's version, read without importing it; None where absent."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _blas() -> dict[str, Any]:
    import numpy as np
    config = np.show_config(mode="dicts")
    blas = config.get("Build Dependencies", {}).get("blas", {})
    name = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    return {"blas": name, "blas_threads": threads or os.cpu_count()}


def _git_commit(here: Path | None = None) -> str | None:
    """HEAD's short hash, with "+dirty" where tracked files differ from it: such a run is not
    that commit's (a lent GPU machine's copy of a tree kept the session's first .git, and its
    rows named a commit hours older than the code they ran: evidence/README.md, stop 61)."""
    try:
        here = here or Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=5)
        commit = out.stdout.strip() or None
        if commit and subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=here,
                                     capture_output=True, timeout=5).returncode == 1:
            commit += "+dirty"
        return commit
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_visible() -> bool:
    """Whether the machine shows an NVIDIA GPU to this process, read from the device files and
    CUDA_VISIBLE_DEVICES without loading CUDA: cheap, and true where CuPy or cuDNN is missing,
    so a run can say which GPU backend could not use the GPU and why."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def _gpu_from_cupy() -> dict[str, Any]:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    runtime = cupy.cuda.runtime.runtimeGetVersion()
    return {
        "gpu_name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "gpu_sm_count": props["multiProcessorCount"], "gpu_l2_bytes": props["l2CacheSize"],
        "gpu_memory_bytes": props["totalGlobalMem"],
        "cuda_runtime": f"{runtime // 1000}.{runtime % 1000 // 10}",
    }


def _gpu_from_nvml() -> dict[str, Any]:
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(_visible_device_index())
    info: dict[str, Any] = {
        "gpu_driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        "gpu_max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "gpu_sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "gpu_max_mem_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
    }
    info.update(_quietly(lambda: {"gpu_ecc": pynvml.nvmlDeviceGetEccMode(handle)[0]}))
    info.update(_quietly(lambda: {"gpu_mig": pynvml.nvmlDeviceGetMigMode(handle)[0]}))
    return info


def _cudnn_version() -> dict[str, Any]:
    from harness.backends.cudnn.lib import library_version
    return {"cudnn": library_version()}


@lru_cache(maxsize=1)
def _nvml_handle() -> Any:
    import pynvml
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(_visible_device_index())


def sm_clock_mhz() -> tuple[int, int] | None:
    """(current, max) SM clock through NVML, or None where NVML cannot tell."""
    try:
        import pynvml
        return pynvml.nvmlDeviceGetClockInfo(_nvml_handle(), pynvml.NVML_CLOCK_SM), _max_sm_clock()
    except Exception:  # no NVML: clocks are simply unknown
        return None


@lru_cache(maxsize=1)
def _max_sm_clock() -> int:
    """The board's maximum SM clock: a constant, read once per process (an NVML read costs
    ~1.6 ms on an H100, and every GPU row asks)."""
    import pynvml
    return pynvml.nvmlDeviceGetMaxClockInfo(_nvml_handle(), pynvml.NVML_CLOCK_SM)


def _visible_device_index() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return int(visible) if visible.isdigit() else 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_GPU_PROBES = (_gpu_from_cupy, _gpu_from_nvml, _cudnn_version)
