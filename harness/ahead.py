"""Setup steps run ahead of their point, on one background thread of a worker process (issue 40).

cuDNN's PERSIST_DYNAMIC compiles its kernel at run time: 110 s of the 795 s the DeepBench
train_step fp16 sweep took on an H200, 0.8-15 s a layer, all of it host work (NVRTC) while the GPU
sat idle (evidence/runs/deepbench_rnn_training-train_step-fp16-07f74b7-nvidia-h200-2026-11-28).
A worker that is told which points come next (harness.worker's prefetch) starts such a step here
while it, or its sibling timing process, measures the points before them; the point's own
prepare then claims the step: it waits for one under way or done, and runs one still queued
itself, as it would have without this thread.

One thread, steps in the order asked: a step that runs long (a build past its budget) delays the
steps queued behind it, never the claims of those, which take them off the queue. The thread is a
daemon: a worker killed or closing does not wait for it.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

# Steps remembered (queued, running or done and not yet claimed); the oldest done one is dropped
# past this: a point that never came (a resumed run's, or a candidate left out) holds nothing.
STEPS_KEPT = 8


class Step:
    """One step: queued, then running, then done with its value or its exception."""

    def __init__(self, work: Callable[[], Any]):
        self.work = work
        self.started = False
        self.ms: float | None = None    # how long the work took, once done
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def run(self) -> None:
        began = time.perf_counter()
        try:
            self._value = self.work()
        except BaseException as err:    # the claimant meets it as if it had run the work
            self._error = err
        self.ms = (time.perf_counter() - began) * 1e3
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> Any:
        """The work's value once done (waiting for it), or its exception raised here."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Ahead:
    """A queue of keyed steps and the one thread that runs them; `on_thread` runs first on the
    thread (what it must set for itself, e.g. its CUDA capture mode)."""

    def __init__(self, on_thread: Callable[[], None] = lambda: None):
        self._on_thread = on_thread
        self._steps: OrderedDict[Hashable, Step] = OrderedDict()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, key: Hashable, work: Callable[[], Any]) -> None:
        """Queue `work` under `key`, unless a step of that key is already known."""
        with self._ready:
            if key in self._steps:
                return
            self._steps[key] = Step(work)
            self._forget_oldest_done()
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="convbench-ahead")
                self._thread.start()
            self._ready.notify()

    def claim(self, key: Hashable) -> Step | None:
        """The key's step, running or done, to take the result of (Step.result); None where none
        was asked for or it had not started: it is taken off the queue, and the caller runs the
        work itself."""
        with self._ready:
            step = self._steps.get(key)
            if step is None:
                return None
            del self._steps[key]
            return step if step.started else None

    def _serve(self) -> None:
        self._on_thread()
        while True:
            with self._ready:
                step = self._next()
                while step is None:
                    self._ready.wait()
                    step = self._next()
                step.started = True
            step.run()

    def _next(self) -> Step | None:
        return next((s for s in self._steps.values() if not s.started), None)

    def _forget_oldest_done(self) -> None:
        done = [key for key, step in self._steps.items() if step.done]
        while len(self._steps) > STEPS_KEPT and done:
            del self._steps[done.pop(0)]
