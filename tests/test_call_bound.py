"""A candidate raced out on what its verified call already showed (harness/call_bound.py): the
bounds themselves, the timer that never runs for a candidate that lost by them alone, and what
the row says. Runs without a GPU: the timer and the SM clock are stand-ins."""
from __future__ import annotations

import pytest

from harness import call_bound, point_timing, stopping
from harness.race import Race
from harness.stream_hold import UNHELD
from harness.sweep import TimingOptions
from harness.timer import Timing


def test_the_busy_time_is_the_union_of_the_kernels_intervals():
    assert call_bound.busy([]) == 0.0
    assert call_bound.busy([(0, 10), (20, 25)]) == 15.0          # apart: their sum
    assert call_bound.busy([(20, 30), (0, 10), (5, 12)]) == 22.0  # overlapping, unsorted
    assert call_bound.busy([(0, 30), (5, 10), (12, 20)]) == 30.0  # nested in another stream's


def test_the_events_bound_leaves_out_what_the_host_took_to_issue_the_call():
    bound = call_bound.from_events(events_ms=100.0, host_ms=30.0)
    assert (bound.at_least_ms, bound.sample_ms, bound.gpu_timer) == (70.0, 100.0, UNHELD)
    # a host-bound call (the plain loop): the GPU may have waited all along
    assert call_bound.from_events(events_ms=50.0, host_ms=60.0).at_least_ms == 0.0


def test_the_longer_bound_decides_and_the_kernels_span_is_the_sample_where_known():
    events = call_bound.from_events(100.0, 95.0)          # at least 5 ms
    kernels = call_bound.from_kernels(40.0, 95.0)         # at least 40 ms
    assert call_bound.combined(events, kernels) == kernels
    assert call_bound.combined(events, None) == events
    device_bound = call_bound.from_events(100.0, 1.0)     # at least 99 ms
    both = call_bound.combined(device_bound, kernels)
    assert (both.at_least_ms, both.words) == (99.0, device_bound.words)
    assert (both.sample_ms, both.gpu_timer) == (40.0, call_bound.PROFILED_KERNELS)


class _Prepared:
    device, stream, calls = "cuda", None, 0

    def own_timing(self, options):
        return None

    def launch(self):
        self.calls += 1


@pytest.fixture
def timed(monkeypatch) -> list:
    """The GPU timer's calls, each answering a full timing of 1 ms samples."""
    seen = []

    def time_gpu(prepared, options, flush, bound=None):
        seen.append(options)
        return Timing((1.0,) * 5, "noise_target", 0.1, gpu_timer="cuda_graph")
    monkeypatch.setattr(point_timing, "time_gpu", time_gpu)
    monkeypatch.setattr(point_timing, "sm_clock", lambda: (1980, 1980))
    return seen


BAR = TimingOptions(race_bar_ms=1.2)        # the fastest so far: 1 ms, plus RACE_MARGIN


@pytest.mark.parametrize("bound_ms, raced", [
    (1.2 * stopping.PROBE_RACE_FACTOR + 0.06, True),    # over the probe's bar: never timed
    (1.2 * stopping.PROBE_RACE_FACTOR + 0.04, False),   # within the stream allowance: timed
    (1.0, False)])
def test_a_candidate_whose_verified_call_lost_the_race_is_not_timed(timed, bound_ms, raced):
    prepared = _Prepared()
    bound = call_bound.from_kernels(bound_ms, host_ms=0.5)
    timing = point_timing.PointTimer().time(prepared, BAR, bound)
    assert (timing.stop_reason == stopping.RACED_OUT) is raced
    assert len(timed) == (0 if raced else 1) and prepared.calls == 0
    if raced:
        assert timing.samples_ms == (bound_ms,) and timing.host_ms == 0.5
        assert timing.gpu_timer == call_bound.PROFILED_KERNELS
        assert timing.sm_clock_mhz == (1980, 1980)


def test_no_bar_no_race_and_a_later_process_times_what_it_is_given(timed):
    """Without a bar (the first candidate, --no-race) or in a later timing process (it times
    only what the first did not race out) the bound changes nothing."""
    bound = call_bound.from_events(events_ms=500.0, host_ms=1.0)
    for options in (TimingOptions(), TimingOptions(race_bar_ms=1.2, replicate=1)):
        timing = point_timing.PointTimer().time(_Prepared(), options, bound)
        assert timing.stop_reason == "noise_target"
    assert len(timed) == 2


def test_the_row_says_what_raced_it_out_and_by_how_much():
    race = Race()
    race.finished("nn_rnn", "fp16", Timing((31.0,) * 12, "noise_target"), 0)
    timing = call_bound.from_kernels(424.0, host_ms=1260.0).raced_out()
    columns, note = race.row_notes("fp16", timing, None)
    assert columns == {"raced_out_by": pytest.approx(424 / 31), "raced_against": "nn_rnn"}
    assert note.startswith("raced out on its profiled call (its kernels kept the GPU busy "
                           "424 ms): 424 ms, 13.68x the fastest plan timed before it (nn_rnn")
    assert "a plan whose call may take under 2.4x of that plus 50 us is timed" in note
    # not a bar: a raced-out candidate never becomes the fastest so far
    race.finished("plain_loop", "fp16", timing, 0)
    assert race.timing(TimingOptions(), "fp16", None).race_bar_ms == pytest.approx(31 * 1.2)
