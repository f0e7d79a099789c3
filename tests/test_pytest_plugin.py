"""The `convbench` pytest fixture inside real pytest runs (pytester): harness samples become
pytest-benchmark's samples, --benchmark-compare-fail catches a planted slowdown and passes an
A/A run, non-ok measurements skip or fail with their reason.

The inner runs plant a stand-in for harness.runner.run_point (in their conftest) that returns
seeded synthetic samples, so the verdicts are deterministic on any machine."""
from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

# pytester's in-process runs drop modules first imported inside them; numpy cannot be imported
# twice in one process, so everything the inner runs use is imported here first.
import harness.backends.fake
import harness.env
import harness.runner  # noqa: F401

pytest_plugins = ["pytester"]
pytest.importorskip("pytest_benchmark")

CONFTEST = '''
import os

import numpy as np
import pytest

import harness.runner
from harness.measurement import Measurement


def planted_run_point(point, seed=0):
    """Lognormal samples (1% noise) around 2 ms, times 1 + CONVBENCH_TEST_SLOWDOWN, drawn from
    CONVBENCH_TEST_RUN's seed; status CONVBENCH_TEST_STATUS."""
    status = os.environ.get("CONVBENCH_TEST_STATUS", "ok")
    if status != "ok":
        return Measurement(point, status, "planted " + status, family="direct")
    factor = 1.0 + float(os.environ.get("CONVBENCH_TEST_SLOWDOWN", "0"))
    rng = np.random.default_rng(int(os.environ.get("CONVBENCH_TEST_RUN", "0")))
    samples = 2.0 * factor * rng.lognormal(0.0, 0.01, 25)
    return Measurement(point, "ok", family="direct", samples_ms=tuple(samples.tolist()),
                       stop_reason="planted", extras={"sm_clock_mhz": 1980.0})


@pytest.fixture(autouse=True)
def _plant(monkeypatch):
    monkeypatch.setattr(harness.runner, "run_point", planted_run_point)
'''

TESTS = '''
from harness.problem import ConvProblem

def test_res2a(convbench):
    m = convbench('mb2ic8ih8oc8oh8kh3ph1n"resnet_50:res2a_branch2b"', backend="fake",
                  algorithm="exact", direction="fwd", precision="fp32", layout="NCHW")
    assert m.ok

def test_as_problem(convbench):
    convbench(ConvProblem(2, 4, 6, 6, 4, 1, 1, name="pw"), backend="fake", algorithm="exact_slow",
              direction="bwd_data")
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("CONVBENCH_TEST_SLOWDOWN", "CONVBENCH_TEST_RUN", "CONVBENCH_TEST_STATUS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_convs=TESTS)
    return pytester


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # hypothesis' plugin imports hypothesis afresh in every in-process run (2 s); not needed here
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args)


def test_samples_reach_pytest_benchmark_as_given(suite):
    result = _run(suite, "--benchmark-json=out.json")
    result.assert_outcomes(passed=2)
    out = json.loads((suite.path / "out.json").read_text())
    bench = {b["name"]: b for b in out["benchmarks"]}["test_res2a"]
    expected = (2.0 * np.random.default_rng(0).lognormal(0.0, 0.01, 25) / 1e3).tolist()
    assert bench["stats"]["data"] == expected           # seconds, exactly the harness's samples
    assert bench["stats"]["median"] == pytest.approx(statistics.median(expected))
    assert bench["stats"]["rounds"] == 25 and bench["stats"]["iterations"] == 1
    assert bench["options"]["timer"] == "convbench_replay"
    info = bench["extra_info"]
    assert (info["status"], info["backend"], info["algorithm"]) == ("ok", "fake", "exact")
    assert info["stop_reason"] == "planted" and info["sm_clock_mhz"] == 1980.0
    assert "gpu_name" in info["env"] and info["descriptor"].startswith("g1mb2ic8ih8")
    assert bench["group"] == "resnet_50:res2a_branch2b fwd fp32 NCHW"
    assert "cpu_model" in out["machine_info"]["convbench"]


def test_compare_fail_catches_a_slowdown_and_passes_an_aa_run(suite, monkeypatch):
    _run(suite, "--benchmark-autosave").assert_outcomes(passed=2)
    compare = ("--benchmark-compare", "--benchmark-compare-fail=median:5%")

    monkeypatch.setenv("CONVBENCH_TEST_RUN", "1")          # A/A: fresh noise, same distribution
    aa = _run(suite, *compare)
    aa.assert_outcomes(passed=2)
    assert aa.ret == 0
    assert "Comparing against benchmarks from" in aa.stdout.str() + aa.stderr.str()
    assert "Performance has regressed" not in aa.stdout.str() + aa.stderr.str()

    monkeypatch.setenv("CONVBENCH_TEST_SLOWDOWN", "0.10")  # planted +10%
    slow = _run(suite, *compare)
    assert slow.ret != 0
    assert "Performance has regressed" in slow.stdout.str() + slow.stderr.str()
    assert "test_res2a" in slow.stderr.str() + slow.stdout.str()


@pytest.mark.parametrize("status, outcome", [
    ("wrong", "failed"), ("failed", "failed"), ("crashed", "failed"),
    ("unsupported", "skipped"), ("workspace_exceeded", "skipped")])
def test_non_ok_measurements_fail_or_skip_with_the_reason(suite, monkeypatch, status, outcome):
    monkeypatch.setenv("CONVBENCH_TEST_STATUS", status)
    result = _run(suite, "-rsf")
    result.assert_outcomes(**{outcome: 2})
    result.stdout.fnmatch_lines([f"*fake/exact fwd fp32 {status}: planted {status}*"])
    assert "was not used" not in result.stdout.str() + result.stderr.str()


def test_bad_arguments_name_the_value(pytester):
    pytester.makepyfile("""
        def test_bad(convbench):
            convbench('mb2ic8ih8oc8oh8kh3ph1', backend="fake", algorithm="exact",
                      precision="int4")
    """)
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*precision='int4' must be one of fp32, tf32, fp16, bf16, fp64*"])


def test_unavailable_backend_skips(pytester, monkeypatch):
    pytester.makepyfile("""
        from harness import backends
        from harness.backends.fake import FakeBackend

        class Gone(FakeBackend):
            name = "gone"
            def unavailable_reason(self):
                return "no GPU here"

        def test_gone(convbench, monkeypatch):
            monkeypatch.setitem(backends._instances, "gone", Gone())
            monkeypatch.setitem(backends._REGISTRY, "gone", "x:Gone")
            convbench('mb2ic8ih8oc8oh8kh3ph1', backend="gone", algorithm="exact")
    """)
    result = _run(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*backend 'gone' is unavailable here: no GPU here*"])


def test_through_the_real_runner_on_the_fake_backend(pytester):
    """No stand-in: harness.runner.run_point verifies and 'times' the fake backend."""
    pytester.makepyfile("""
        def test_real(convbench):
            m = convbench('mb2ic4ih6oc4oh6kh3ph1n"t:c"', backend="fake", algorithm="exact")
            assert m.ok and len(m.samples_ms) >= 10

        def test_planted_wrong(convbench):
            convbench('mb2ic4ih6oc4oh6kh3ph1n"t:c"', backend="fake", algorithm="wrong_fast")
    """)
    result = _run(pytester, "--benchmark-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*fake/wrong_fast fwd fp32 wrong: relative L2 error*"])
    (bench,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert bench["stats"]["rounds"] == bench["extra_info"]["n_samples"] >= 10


def test_backend_and_algorithm_names_are_case_insensitive():
    """The README's example spells cuDNN's enum (IMPLICIT_PRECOMP_GEMM); convbench's names are
    lowercase. Resolving needs no GPU: the cudnn backend's algorithm list is static."""
    from harness.pytest_plugin import make_point
    point = make_point('mb2ic8ih8oc8oh8kh3ph1', backend="CuDNN",
                       algorithm="IMPLICIT_PRECOMP_GEMM", precision="fp16")
    assert (point.backend, point.algorithm) == ("cudnn", "implicit_precomp_gemm")
    # cudnn_graph's expanding algorithm takes variant names only the GPU knows: passed on as is
    assert make_point('mb2ic8ih8oc8oh8kh3ph1', backend="cudnn_graph",
                      algorithm="eng0_k2=1").algorithm == "eng0_k2=1"
    assert make_point('mb2ic8ih8oc8oh8kh3ph1', backend="cudnn_graph",
                      algorithm="ENG70").algorithm == "eng70"
    # ...but only names of a variant's form: a typo of `engines` fails on a CPU runner too
    with pytest.raises(ValueError, match="'engnes' is not one of backend 'cudnn_graph'"):
        make_point('mb2ic8ih8oc8oh8kh3ph1', backend="cudnn_graph", algorithm="engnes")


@pytest.mark.parametrize("backend, algorithm, message", [
    ("cudnn", "implicit_precomp_gem",
     "*algorithm='implicit_precomp_gem' is not one of backend 'cudnn'*: implicit_gemm, *"),
    ("cudann", "gemm", "*backend='cudann' is unknown; known: cpu, torch_cpu, cudnn*"),
])
def test_unknown_names_fail_even_where_the_backend_is_unavailable(pytester, backend, algorithm,
                                                                  message):
    """On a CPU runner the cudnn backend is unavailable and its tests skip; a misspelt name must
    fail there too instead of hiding until a GPU runner."""
    pytester.makepyfile(f"""
        def test_typo(convbench):
            convbench('mb2ic8ih8oc8oh8kh3ph1', backend={backend!r}, algorithm={algorithm!r})
    """)
    result = _run(pytester, "-rsf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message])


def test_uppercase_names_run_as_their_registered_spelling(suite):
    suite.makepyfile(test_upper='''
        def test_upper(convbench):
            m = convbench('mb2ic8ih8oc8oh8kh3ph1', backend="FAKE", algorithm="Exact")
            assert (m.point.backend, m.point.algorithm) == ("fake", "exact")
    ''')
    result = _run(suite, "test_upper.py")
    result.assert_outcomes(passed=1)
