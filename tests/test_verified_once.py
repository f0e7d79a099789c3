"""Verify once, time twice (harness/verified_once.py): a later timing process that computes
the same output bits takes the first process's verdict and only times; other bits, or an output
that does not repeat, are verified in full as before."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from harness import backends, runner, verified_once
from harness.executor import PointExecutor
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions

PROBLEM = ConvProblem(2, 4, 8, 8, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                      name="l")
TIMING = TimingOptions(min_samples=5, max_samples=9, budget_ms=100.0, gpu_processes=2)


@pytest.fixture
def point():
    backends.register("process_gpu", "planted_backends:ProcessGpuBackend")
    return Point(PROBLEM, "fwd", "fp32", "NCHW", "process_gpu", "exact", None, TIMING)


def _rows(point, verified=None):
    return [row for unit in PointExecutor().units([point], verified=verified)
            for row in unit.measure()]


def test_the_fingerprint_sees_a_changed_moved_or_negated_value():
    out = np.arange(12, dtype=np.float32).reshape(3, 4)
    same = verified_once.checksum(out.copy())
    assert verified_once.checksum(out) == same
    changed, moved = out.copy(), out.copy()
    changed[1, 2] += 1e-6
    moved[0, :2] = moved[0, 1::-1]
    assert verified_once.checksum(changed) != same and verified_once.checksum(moved) != same


def test_the_fingerprint_sees_what_plain_sums_of_words_miss():
    """A review's counterexamples to the first fingerprint (sums of the words, plain and by
    position, modulo 2^64), on float64 outputs as the backends hand them over."""
    from harness.precision import round_to
    rng = np.random.default_rng(0)
    out = rng.standard_normal(1 << 20)
    base = verified_once.checksum(out)
    flipped = out.copy()
    flipped[[2, 4]] *= -1                       # two signs of one parity: 2 x 2^63
    assert verified_once.checksum(-out) != base and verified_once.checksum(flipped) != base
    narrow = round_to(out, "bf16")              # 45 trailing zero bits a value
    swapped = np.concatenate([narrow[1 << 19:], narrow[:1 << 19]])
    assert verified_once.checksum(swapped) != verified_once.checksum(narrow)
    assert verified_once.checksum(out.reshape(2, -1)) != base    # the shape counts


def test_a_later_process_with_the_same_bits_takes_the_verdict_and_only_times(point,
                                                                            monkeypatch):
    (first,) = _rows(point)
    assert first.ok and first.extras[verified_once.CHECKSUM]
    settled = verified_once.from_rows([first])

    def no_reference(*args, **kwargs):
        raise AssertionError("a settled row must not be verified again")
    monkeypatch.setattr(PointExecutor, "_cached_reference", no_reference)
    (later,) = _rows(point, settled)
    assert later.ok and later.samples_ms
    assert later.extras[verified_once.VERIFIED_IN] == verified_once.EARLIER_PROCESS
    assert (later.rel_error, later.tolerance, later.effective_precision) == \
        (first.rel_error, first.tolerance, first.effective_precision)


def test_other_bits_or_an_output_that_does_not_repeat_are_verified_in_full(point):
    (first,) = _rows(point)
    other = {pid: replace(v, checksum="0.0")
             for pid, v in verified_once.from_rows([first]).items()}
    (later,) = _rows(point, other)
    assert later.ok and verified_once.VERIFIED_IN not in later.extras
    assert verified_once.from_rows([replace(first, deterministic=False)]) == {}


def test_the_second_worker_process_is_handed_the_first_ones_verdicts(point, monkeypatch):
    from harness.worker import WorkerPool
    handed, returned = [], []
    measure_groups = WorkerPool.measure_groups

    def recording(self, requests):
        (request,) = requests
        handed.append(request.verified)
        returned.extend(measure_groups(self, requests))
        return returned[-1:]
    monkeypatch.setattr(WorkerPool, "measure_groups", recording)
    rows: list = []
    runner.run_points([point], rows.append)
    assert handed[0] == {} and set(handed[1]) == {point.point_id}
    (later,) = returned[1]
    assert later.extras[verified_once.VERIFIED_IN] == verified_once.EARLIER_PROCESS
    (row,) = rows
    assert row.ok and row.extras["process_samples"].count(" ") == 1
    assert row.extras[verified_once.VERIFIED_IN] == verified_once.EARLIER_PROCESS


def test_one_timing_process_fingerprints_nothing(point):
    (row,) = _rows(replace(point, timing=replace(TIMING, gpu_processes=1)))
    assert row.ok and verified_once.CHECKSUM not in row.extras


def test_a_verdict_settles_the_output_whatever_a_tighter_limit_made_of_its_row(point):
    """Only the unlimited row was ok in process 1 (the plan is over 0 bytes): the group of both
    limits still takes its verdict; a precision with no verdict is verified in full."""
    (first,) = _rows(point)
    settled = verified_once.from_rows([first])
    tight = replace(point, workspace_limit=0)
    assert set(verified_once.known([tight, point], settled)) == {"fp32"}
    assert verified_once.known([tight], settled) is None
    assert verified_once.known([point, replace(point, precision="tf32")], settled) is None
