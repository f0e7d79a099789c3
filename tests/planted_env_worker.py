"""A `convbench ab` environment with a regression planted in it, which an A/B run must catch
(tests/test_ab.py, benchmarks/ab_power.py). Test-only. An ENV wrapper script execs it in place
of `python -m harness.env_worker FD`, so its last argument is the socket's descriptor.

CONVBENCH_PLANT says what is planted: unset or "fake", the fake backend's `exact` 25% slower;
"cpu:FRACTION:EVERY", the real `cpu` backend's launches FRACTION slower on every EVERY-th
point (planted_backends.planted_share)."""
from __future__ import annotations

import os
import sys

import planted_backends  # this file's folder is on sys.path when it is run as a script

from harness import backends, env_worker


def _planted() -> dict[str, str]:
    plant = os.environ.get("CONVBENCH_PLANT", "fake")
    if plant == "fake":
        return {"fake": "planted_backends:SlowerExactBackend"}
    _, fraction, every = plant.split(":")
    planted_backends.SomeSlowCpuBackend.slowdown = float(fraction)
    planted_backends.SomeSlowCpuBackend.every = int(every)
    return {"cpu": "planted_backends:SomeSlowCpuBackend"}


if __name__ == "__main__":
    planted = _planted()
    register_all = backends.register_all
    # The parent sends its registry (the real backends): the planted one must stay.
    backends.register_all = lambda registry: register_all({**registry, **planted})
    env_worker.serve(int(sys.argv[-1]))
