"""Setup run ahead on a background thread (harness/ahead.py), and cudnn_rnn's PERSIST_DYNAMIC
build started ahead of its point (rnn_setup.Descriptors.build_ahead), with cuDNN's calls
replaced: the GPU tests run the real build."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from harness import ahead, setup_budget


def test_a_step_claimed_before_it_started_is_handed_back_and_never_run_there():
    gate = threading.Event()
    ran: list[str] = []
    builder = ahead.Ahead()
    builder.submit("first", lambda: gate.wait(5) and ran.append("first"))
    builder.submit("second", lambda: ran.append("second"))
    _wait_for(lambda: builder._steps["first"].started)
    assert builder.claim("second") is None        # still queued: the caller runs it itself
    step = builder.claim("first")
    gate.set()
    assert step is not None and step.result() is None
    assert ran == ["first"] and step.ms is not None
    assert builder.claim("first") is None          # claimed once


def test_a_step_s_error_reaches_its_claimant_and_the_thread_goes_on():
    builder = ahead.Ahead()
    builder.submit("bad", lambda: 1 / 0)
    builder.submit("good", lambda: 42)
    _started(builder, "good")
    bad = builder.claim("bad")
    with pytest.raises(ZeroDivisionError):
        bad.result()
    assert builder.claim("good").result() == 42


def test_a_key_asked_twice_runs_once_and_unclaimed_done_steps_are_dropped_past_the_bound():
    builder, runs = ahead.Ahead(), []
    for _ in range(2):
        builder.submit("k", lambda: runs.append(1))
    _started(builder, "k")
    assert runs == [1]
    for i in range(ahead.STEPS_KEPT + 3):
        builder.submit(i, lambda: None)
        _started(builder, i)
    assert len(builder._steps) <= ahead.STEPS_KEPT


def test_the_thread_sets_itself_up_before_its_first_step():
    seen: list[str] = []
    builder = ahead.Ahead(on_thread=lambda: seen.append(threading.current_thread().name))
    builder.submit("k", lambda: seen.append("step"))
    _started(builder, "k")
    assert seen == ["convbench-ahead", "step"]


def _started(builder: ahead.Ahead, key) -> None:
    """Wait until the thread has run `key`'s step (without claiming it)."""
    def ran() -> bool:
        with builder._ready:
            step = builder._steps.get(key)
        return step is None or step.done
    _wait_for(ran)


def _wait_for(condition) -> None:
    for _ in range(500):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the background thread never got there")


# ---- cudnn_rnn's PERSIST_DYNAMIC build, ahead ------------------------------------------------
@pytest.fixture
def cudnn_calls(monkeypatch):
    """rnn_lib's descriptors and calls replaced: (made descriptors' handles, builds' handles)."""
    from harness.backends.cudnn import rnn_lib
    made, builds = [], []
    monkeypatch.setattr(rnn_lib, "RnnDesc", lambda *args: made.append(args) or
                        SimpleNamespace(ptr=len(made)))
    monkeypatch.setattr(rnn_lib, "DropoutDesc", lambda handle: SimpleNamespace(ptr=handle.ptr))
    monkeypatch.setattr(rnn_lib, "call", lambda name, *args: builds.append(args[0]))
    return made, builds


def _dynamic(batch: int = 4, hidden: int = 16):
    from harness.rnn.problem import RnnProblem
    from harness.sweep import Point, TimingOptions
    return Point(RnnProblem("lstm", 8, hidden, 5, batch), "train_step", "fp16", "TNC",
                 "cudnn_rnn", "persist_dynamic", None, TimingOptions())


def test_a_dynamic_build_started_ahead_is_the_one_its_point_gets_with_its_own_time(cudnn_calls):
    from harness.backends.cudnn import rnn_lib, rnn_setup
    made, builds = cudnn_calls
    descriptors = rnn_setup.Descriptors(SimpleNamespace(ptr=1), lambda: SimpleNamespace(ptr=2))
    dynamic = rnn_lib.ALGORITHMS["persist_dynamic"]
    descriptors.build_ahead(_dynamic())
    descriptors.build_ahead(_dynamic())                 # asked twice: built once
    _started(descriptors._ahead, (dynamic, _dynamic().problem, "fp16"))
    rnn, built = descriptors.get(dynamic, _dynamic())
    assert builds == [2] and len(made) == 1             # on the build thread's handle
    assert rnn.ptr == 1 and built is not None and built >= 0
    assert descriptors.get(dynamic, _dynamic()) == (rnn, None)      # kept, as before
    descriptors.build_ahead(_dynamic())                 # kept: not built again
    assert builds == [2]


def test_no_build_is_started_ahead_for_sizes_that_ran_past_their_budget(cudnn_calls,
                                                                         monkeypatch):
    from harness.backends.cudnn import rnn_setup
    made, builds = cudnn_calls
    descriptors = rnn_setup.Descriptors(SimpleNamespace(ptr=1), lambda: SimpleNamespace(ptr=2))
    monkeypatch.setattr(setup_budget, "_over",
                        {rnn_setup._build_key(_dynamic(16)): "a train_step"})
    descriptors.build_ahead(_dynamic(64))
    descriptors.build_ahead(_dynamic(64, hidden=32))
    key = (rnn_setup.DYNAMIC, _dynamic(64, hidden=32).problem, "fp16")
    _started(descriptors._ahead, key)
    assert builds == [2] and (rnn_setup.DYNAMIC, _dynamic(64).problem,
                              "fp16") not in descriptors._ahead._steps


def test_a_build_that_failed_ahead_fails_its_point_s_prepare(cudnn_calls, monkeypatch):
    from harness.backends.cudnn import lib, rnn_lib, rnn_setup

    def refused(name, *args):
        raise lib.CudnnError(3000, name)
    monkeypatch.setattr(rnn_lib, "call", refused)
    descriptors = rnn_setup.Descriptors(SimpleNamespace(ptr=1), lambda: SimpleNamespace(ptr=2))
    descriptors.build_ahead(_dynamic())
    _started(descriptors._ahead, (rnn_setup.DYNAMIC, _dynamic().problem, "fp16"))
    with pytest.raises(lib.CudnnError):
        descriptors.get(rnn_setup.DYNAMIC, _dynamic())
