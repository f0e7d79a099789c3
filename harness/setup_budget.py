"""A setup step with a budget (issue 40): one slow enough that waiting it out costs a sweep more
than its row can tell.

cuDNN's PERSIST_DYNAMIC compiles its kernel at run time (cudnnBuildRNNDynamic). On DeepBench's
training set that took 0.8-3.3 s a layer, 5.9-11.0 s for the LSTMs of hidden 2048, and 112.6 s for
the LSTM of hidden 4096 on an H200: 112.6 of the 420 s the train_step fp16 sweep ran
(evidence/runs/deepbench_rnn_training-train_step-fp16-partial-4b24919-nvidia-h200-2026-11-28,
...-cudnn_rnn-train_step-partial-5635376-nvidia-h100-2026-11-28).

A backend runs such a step inside `watched(key, what, budget_s)`. In a worker process
(harness.worker) that tells the pool the step started and ended; the pool kills a worker whose step
runs past its budget, and the unit's rows are `not_tried`, naming the step and the budget. The
pool remembers the step's key for the rest of the run: a later step with the same key (the key
names what the step's cost depends on) is not started, and its unit's rows are `not_tried` too,
naming the point where it ran over. In-process (no worker) a step runs unwatched. The memory is
the run's pools' (runner.Measurer): a resumed run, or another Dask worker of a cluster, pays the
budget once more for a key.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

SETUP, SETUP_DONE = "setup", "setup_done"     # the worker's messages around a watched step

# The longest cudnnBuildRNNDynamic a row waits for: 2.7x the slowest build that returned under
# hidden 4096 (11.0 s, an H100), and well under the 112.6 s one of hidden 4096.
RNN_BUILD_BUDGET_S = 30.0
LONGER = " (--build-budget-s waits longer)"     # where a row over its budget says what to do

Key = tuple


class OverBudget(Exception):
    """A watched step that is not started: its key ran past its budget earlier in this run."""


_send: Callable[[tuple[str, Any]], None] | None = None
_over: Mapping[Key, str] = {}


def open_here(send: Callable[[tuple[str, Any]], None] | None) -> None:
    """Make `send` (a worker's pipe to its pool) the channel this process's steps report on."""
    global _send
    _send = send


def known_over(over: Mapping[Key, str]) -> None:
    """The steps the pool knows ran past their budget in this run, and where."""
    global _over
    _over = dict(over)


def is_over(key: Key) -> bool:
    """Whether a step of this key ran past its budget earlier in this run."""
    return key in _over


@contextmanager
def watched(key: Key, what: str, budget_s: float) -> Iterator[None]:
    """Run the step in the body under `budget_s`, or raise OverBudget where its key ran over."""
    if key in _over:
        raise OverBudget(f"not tried: {what} ran past its {budget_s:g} s budget on "
                         f"{_over[key]} in this run{LONGER}")
    if _send is None:
        yield
        return
    _send((SETUP, (key, what, budget_s)))
    try:
        yield
    finally:
        _send((SETUP_DONE, None))


def over_reason(what: str, budget_s: float) -> str:
    """The row of the unit whose step the pool stopped."""
    return f"not measured: {what} ran past its {budget_s:g} s budget: worker killed{LONGER}"


class Clock:
    """The pool's clock for the unit under way (WorkerPool._collect): the cap runs from the last
    message that was not a step's (a step's messages must not restart it) and stands still while
    a step runs; the step's budget runs from the step's start. So a step is stopped by its own
    budget alone (which may be longer than the cap: --build-budget-s), and a unit's wall time is
    bounded by its cap plus its steps' budgets."""

    def __init__(self) -> None:
        self.step: tuple | None = None      # (key, what, budget_s) of the step under way
        self._since = self._step_since = time.monotonic()
        self._paused_at: float | None = None     # since when the cap stands still

    def heard(self, kind: str, payload: Any) -> bool:
        """Take a message; True where it was a step's (nothing else to do with it)."""
        now = time.monotonic()
        if kind == SETUP:       # a step within a step (none today) keeps the cap paused
            self.step, self._step_since = payload, now
            self._paused_at = now if self._paused_at is None else self._paused_at
        elif kind == SETUP_DONE:
            if self._paused_at is not None:
                self._since += now - self._paused_at        # the cap stood still meanwhile
            self.step = self._paused_at = None
        else:
            self._since = now
            if self._paused_at is not None:
                self._paused_at = now
            return False
        return True

    def wait(self, cap_s: float) -> tuple[float, bool]:
        """How long to wait for the next message, and whether the step's budget (rather than
        the cap) is what that wait runs out."""
        now = time.monotonic()
        if self.step is not None:
            return max(0.0, self.step[2] - (now - self._step_since)), True
        return max(0.0, cap_s - (now - self._since)), False
