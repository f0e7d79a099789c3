"""Whether the host gave a multi-threaded CPU point its cores (harness/host_cores.py): a fixed
GEMM's parallel speedup against what the process usually reads, and a point timed in a spell
without them timed again, then contended with its reason."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from harness import host_cores, runner, threads
from harness.host_cores import CapacityFile, HostCores, Reading
from harness.point_timing import time_cpu_alone
from harness.measurement import Measurement, Status
from harness.process_split import merge
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions


class ScriptedHost:
    """A host whose sync probe's parallel speedup follows a script, one entry a reading (the
    last repeats); the sync probe takes 1 ms at one thread, contention's probe 0.5 ms."""

    def __init__(self, speedups: list[float]):
        self.speedups = list(speedups)
        self.syncs: list[int] = []
        self.probes: list[int] = []

    def probe(self, cores: int) -> float:
        self.probes.append(cores)
        return 0.5

    def sync(self, cores: int) -> float:
        self.syncs.append(cores)
        if cores == 1:
            return 1.0
        speedup = self.speedups.pop(0) if len(self.speedups) > 1 else self.speedups[0]
        return 1.0 / speedup


SEEDS = host_cores.SEED_READS


def _host(speedups: list[float], store: CapacityFile | None = None
          ) -> tuple[HostCores, ScriptedHost]:
    scripted = ScriptedHost(speedups)
    clock = iter(range(10_000))             # half a second a reading: WAIT_S allows four
    return HostCores(scripted.probe, scripted.sync, clock=lambda: next(clock) / 2,
                     sleep=lambda s: None, store=store), scripted


def test_the_capacity_is_a_high_quantile_of_the_readings_and_two_well_under_it_withhold():
    host, _ = _host([1.9] * SEEDS + [1.85, 1.0, 1.1])
    quiet = host.read(2, 2)                     # the seed reads, then this one
    assert quiet.speedup == pytest.approx(1.85) and quiet.probe_ms == 0.5
    assert host.capacity(2) == pytest.approx(1.9)
    assert host.withheld(2, quiet) is None
    slow, slower = host.read(2, 2), host.read(2, 2)
    assert host.withheld(2, quiet, slow) is None     # one low reading: a spell of a moment
    why = host.withheld(2, slow, slower)
    assert why is not None and "at most 1.10x one thread" in why and "reads 1.90x" in why
    assert host.withheld(2, Reading(1.0, host_cores.WITHHELD_SHARE * 1.9 + 0.01)) is None


def test_an_outlier_does_not_raise_the_capacity():
    host, _ = _host([1.9, 2.8, 1.9, 1.9, 1.9, 1.9])
    host.read(2, 2)
    host.read(2, 2)
    assert host.capacity(2) == pytest.approx(1.9)


def test_a_process_that_starts_in_a_spell_judges_by_what_earlier_processes_stored(tmp_path):
    store = CapacityFile(tmp_path / "host-cores.json")
    quiet, _ = _host([1.8], store)
    for _ in range(host_cores.STORE_AFTER):
        quiet.read(2, 2)
    assert store.load() == {2: [pytest.approx(1.8)]}
    spell, _ = _host([1.1], store)
    low = spell.read(2, 2)
    assert spell.capacity(2) == pytest.approx(1.8) and spell.withheld(2, low, low) is not None


def test_the_store_keeps_the_last_processes_and_a_bad_file_counts_as_empty(tmp_path):
    store = CapacityFile(tmp_path / "host-cores.json")
    for capacity in (1.5, 1.6, 1.7, 1.8, 1.9, 2.0):
        store.add(2, capacity)
    assert store.load() == {2: [1.6, 1.7, 1.8, 1.9, 2.0]}
    for text in ("{not json", '["a list"]', '{"2": ["1.8"]}', '{"2": [true]}', '{"x": [1.8]}'):
        store.path.write_text(text)
        assert store.load() == {}, text
    store.add(2, 1.7)
    assert store.load() == {2: [1.7]}
    unwritable = CapacityFile(tmp_path / "file" / "host-cores.json")
    (tmp_path / "file").write_text("a file where the folder would be")
    unwritable.add(2, 1.7)                    # said nowhere, kept nowhere, never raised
    assert unwritable.load() == {}


def test_a_process_that_starts_in_a_spell_judges_by_it_until_quiet_readings_come():
    host, _ = _host([1.1] * (SEEDS + 1) + [1.8] * 20)
    low = host.read(2, 2)
    assert host.withheld(2, low, low) is None          # the module docstring's limitation
    for _ in range(20):
        host.read(2, 2)
    assert host.withheld(2, low, low) is not None


def test_one_core_or_no_speedup_read_is_never_withheld():
    host, scripted = _host([1.0])
    assert host.read(2, 1).speedup is None and scripted.syncs == []
    assert host.withheld(2, Reading(1.0, None)) is None
    assert host.withheld(1, Reading(1.0, 0.1)) is None


def test_waiting_for_the_cores_polls_until_they_are_back_or_the_time_is_up_unrecorded(
        monkeypatch):
    host, scripted = _host([1.9] * SEEDS + [1.0, 1.0, 1.8, 1.0])
    host.wait(2)
    assert scripted.syncs.count(2) == SEEDS + 3              # 1.0, 1.0, then 1.8: back
    monkeypatch.setattr(host_cores, "WAIT_S", 20.0)          # forty polls of a long spell
    host, scripted = _host([1.9] * SEEDS + [1.0])
    host.wait(2)
    assert 38 <= scripted.syncs.count(2) - SEEDS <= 42       # at half a second a poll
    assert host.capacity(2) == pytest.approx(1.9)            # the polls count not


@dataclass
class _Launch:
    count: int = 0

    def launch(self) -> None:
        self.count += 1


_OPTIONS = TimingOptions(budget_ms=1.0, min_samples=3, max_samples=3, noise_target=0.0,
                         warmup=0)


MACHINE_CORES = threads.available_cores


@pytest.fixture(autouse=True)
def _two_cores_and_no_process_host(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(host_cores, "_PROCESS", None)    # made in the test's cache folder


def test_a_point_the_host_gave_its_cores_is_timed_once_and_records_the_speedup():
    host, scripted = _host([1.9])
    timing = time_cpu_alone(_Launch(), _OPTIONS, None, host, 2)
    assert timing.contention is None and timing.host_speedup == pytest.approx(1.9)
    assert scripted.syncs.count(2) == SEEDS + 2         # seeds, before and after


def test_a_point_timed_without_its_cores_is_timed_again_when_they_are_back():
    # seeds, the first timing between two low readings, then quiet
    host, _ = _host([1.9] * SEEDS + [1.0, 1.0, 1.9])
    once, twice = _Launch(), _Launch()
    time_cpu_alone(once, _OPTIONS, None, _host([1.9])[0], 2)
    timing = time_cpu_alone(twice, _OPTIONS, None, host, 2)
    assert timing.contention is None and timing.host_speedup == pytest.approx(1.9)
    assert twice.count >= 2 * once.count


def test_a_point_timed_twice_without_its_cores_is_contended_and_says_why():
    host, _ = _host([1.9] * SEEDS + [1.0])
    timing = time_cpu_alone(_Launch(), _OPTIONS, None, host, 2)
    assert timing.contention is not None
    assert "withheld cores" in timing.contention and "timed once more" in timing.contention
    assert timing.host_speedup == pytest.approx(1.0)


def test_a_second_timing_is_judged_by_the_reading_after_it():
    # first timing low / low, the wait's poll quiet, the second timing quiet / low: contended
    host, _ = _host([1.9] * SEEDS + [1.0, 1.0, 1.9, 1.9, 1.0])
    timing = time_cpu_alone(_Launch(), _OPTIONS, None, host, 2)
    assert timing.contention is not None and "withheld cores" in timing.contention


def test_the_speedup_is_read_at_the_points_own_cores(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    host, scripted = _host([1.9])
    time_cpu_alone(_Launch(), _OPTIONS, None, host, 2)
    assert set(scripted.syncs) == {1, 2} and set(scripted.probes) == {4}


def test_a_one_thread_point_reads_no_speedup():
    host, scripted = _host([1.0])
    timing = time_cpu_alone(_Launch(), _OPTIONS, None, host, 1)
    assert scripted.syncs == [] and timing.host_speedup is None and timing.contention is None


def test_a_point_with_one_low_reading_is_timed_once():
    host, scripted = _host([1.9] * SEEDS + [1.0, 1.9])
    timing = time_cpu_alone(_Launch(), _OPTIONS, None, host, 2)
    assert timing.contention is None and timing.host_speedup == pytest.approx(1.9)
    assert scripted.syncs.count(2) == SEEDS + 2


def test_one_host_reads_for_every_executor_of_a_process():
    assert host_cores.this_process() is host_cores.this_process()


def test_rounds_merge_to_their_lowest_speedup():
    point = _point(threads.ALL)
    rounds = [[Measurement(point, Status.OK, samples_ms=(1.0,), extras={"host_speedup": value})]
              for value in (1.8, 1.2)]
    assert merge([point], rounds)[0].extras["host_speedup"] == 1.2


def _point(count: int) -> Point:
    problem = ConvProblem(2, 16, 16, 16, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1, name="small")
    return Point(problem, "fwd", "fp32", "NCHW", "cpu", "im2col", threads=count,
                 timing=TimingOptions(budget_ms=5.0, min_samples=3))


def test_a_real_point_on_every_core_records_the_speedup_and_one_thread_does_not(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", MACHINE_CORES)
    if threads.available_cores() < 2:
        pytest.skip("one core here: no point runs on several")
    every = runner.run_point(_point(threads.ALL))
    one = runner.run_point(_point(1))
    print(f"speedup {every.extras['host_speedup']:.2f}; {every.reason}")
    assert every.extras["host_speedup"] > 0 and every.extras["host_probe_ms"] > 0
    assert one.extras.get("host_speedup") is None and one.extras["host_probe_ms"] > 0
