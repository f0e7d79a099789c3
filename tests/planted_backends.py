"""Backends planted by tests that run convbench in a subprocess: a slow one, so a sweep can be
killed half-way on purpose."""
from __future__ import annotations

import time

from harness.backends.fake import FakeBackend, FakeExact


class SlowExact(FakeExact):
    """Correct, and 30 ms to prepare: a 60-point sweep takes seconds, long enough to kill."""
    backend = "slow"
    name = "exact"

    def prepare(self, point, data):
        time.sleep(0.03)
        return super().prepare(point, data)


class SlowBackend(FakeBackend):
    name = "slow"

    def algorithms(self):
        return [SlowExact()]


class Plans(FakeExact):
    """Expanding: stands for the two 'plans' of every problem, like graph-API engines."""
    backend = "plans"
    name = "all_plans"
    expands = True
    _speed = {"plan_fast": 300.0, "plan_slow": 30.0}

    def variants(self, point, data):
        return list(self._speed)

    def prepare(self, point, data):
        prepared = super().prepare(point, data)
        prepared.gflops = self._speed[point.algorithm]
        return prepared


class PlansBackend(FakeBackend):
    name = "plans"

    def algorithms(self):
        return [Plans()]
