"""The SM clock each GPU row records (harness.env.sm_clock_mhz): the current clock read every
time, the board's maximum read once per process (a constant that cost ~1.6 ms a row)."""
from __future__ import annotations

import sys
from types import SimpleNamespace

from harness import env


def test_current_clock_is_read_every_time_and_the_maximum_once(monkeypatch):
    reads = {"current": 0, "max": 0}

    def current(handle, kind):
        reads["current"] += 1
        return 1500 + reads["current"]

    def maximum(handle, kind):
        reads["max"] += 1
        return 1980

    fake = SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
                           NVML_CLOCK_SM=0, nvmlDeviceGetClockInfo=current,
                           nvmlDeviceGetMaxClockInfo=maximum)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    env._nvml_handle.cache_clear()
    env._max_sm_clock.cache_clear()
    try:
        assert [env.sm_clock_mhz() for _ in range(3)] == [(1501, 1980), (1502, 1980),
                                                          (1503, 1980)]
        assert reads == {"current": 3, "max": 1}
    finally:
        env._nvml_handle.cache_clear()
        env._max_sm_clock.cache_clear()
