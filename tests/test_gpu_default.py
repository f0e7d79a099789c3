"""The GPU default of `convbench run` (harness/cli/gpu_default.py), with the GPU's presence and
the backends' availability stood in for: which backends, precisions, layouts and processes it
sweeps, what each flag keeps, and what a GPU machine without CuPy or cuDNN gets."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness import env, runner
from harness.cli import gpu_default, main
from harness.suite import load_suite



def _args(**given) -> SimpleNamespace:
    flags = dict(backend=None, algorithm=None, precision=None, layout=None, gpu_processes=None,
                 budget_ms=None, cluster=None)
    return SimpleNamespace(**{**flags, **given})


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(env, "gpu_visible", lambda: True)
    monkeypatch.setattr(gpu_default, "_usable_backends", lambda names: (list(names), []))


def test_without_a_gpu_the_suite_is_run_as_it_is(monkeypatch):
    monkeypatch.setattr(env, "gpu_visible", lambda: False)
    quick = load_suite("quick")
    assert gpu_default.with_gpu_default(quick, _args()) == (quick, [])


def test_with_a_gpu_each_precision_runs_in_its_framework_layout_on_the_gpu_backends(gpu):
    sweep, lines = gpu_default.with_gpu_default(load_suite("quick"), _args())
    assert [c.backend for c in sweep.backends] == ["cudnn", "cudnn_graph", "torch_gpu"]
    assert all(c.optional for c in sweep.backends)
    assert sweep.timing.gpu_processes == 1 and sweep.timing.budget_ms == gpu_default.BUDGET_MS
    pairs = {(p.precision, p.layout) for p in sweep.points(lambda backend: ["a"])}
    assert pairs == {("fp32", "NCHW"), ("tf32", "NCHW"), ("fp16", "NHWC"), ("bf16", "NHWC")}
    assert lines == [gpu_default.describe(sweep)]
    assert "fp32 and tf32 in NCHW; fp16 and bf16 in NHWC; 1 timing process, 25 ms" in lines[0]
    assert "cpu for the CPU algorithms" in lines[0]


def test_a_recurrent_suite_is_said_to_run_in_its_own_layout(gpu):
    """rnn_quick lists torch_gpu: on a GPU the default takes it, and its first line names the
    recurrent layout the rows run in, not the convolutions' framework layouts."""
    sweep, lines = gpu_default.with_gpu_default(load_suite("rnn_quick"), _args())
    assert [c.backend for c in sweep.backends] == ["torch_gpu", "cudnn_rnn"]
    assert "fp32, tf32, fp16, bf16 in TNC; 1 timing process" in lines[0], lines[0]
    assert {p.layout for p in sweep.points(lambda backend: ["a"])} == {"TNC"}
    mixed = replace(sweep, problems=sweep.problems + load_suite("quick").problems[:1])
    assert "fp16 and bf16 in NHWC; recurrent layers in TNC;" in gpu_default.describe(mixed)


def test_each_flag_given_keeps_its_part_and_backend_turns_the_default_off(gpu):
    quick = load_suite("quick")
    fp16 = gpu_default.with_gpu_default(replace(quick, precisions=("fp16",)),
                                        _args(precision="fp16"))[0]
    assert fp16.precisions == ("fp16",) and fp16.layouts == ("NHWC",)
    both = gpu_default.with_gpu_default(quick, _args(layout="NCHW"))[0]
    assert both.precision_layouts == () and both.layouts == quick.layouts
    two = gpu_default.with_gpu_default(quick, _args(gpu_processes=2, budget_ms=80))[0]
    assert two.timing.gpu_processes == quick.timing.gpu_processes
    assert two.timing.budget_ms == quick.timing.budget_ms
    for off in (_args(backend="cpu"), _args(algorithm="direct"), _args(cluster="local")):
        assert gpu_default.with_gpu_default(quick, off) == (quick, [])


def test_a_suite_that_names_no_gpu_backend_runs_as_it_is(gpu):
    """cpu_compare compares CPU algorithms with oneDNN: a GPU in the machine changes nothing."""
    study = load_suite("cpu_compare")
    assert gpu_default.with_gpu_default(study, _args()) == (study, [])


def test_a_gpu_without_usable_backends_runs_the_suite_and_says_why(monkeypatch, tmp_path,
                                                                   capsys):
    """A GPU machine without CuPy or cuDNN (this machine, told it has a GPU): the default names
    each GPU backend it could not use and why, runs the suite's own backends, and exits 0."""
    monkeypatch.setattr(env, "gpu_visible", lambda: True)
    monkeypatch.setattr(gpu_default, "_usable_backends",
                        lambda names: ([], [(name, "CuPy is not installed") for name in names]))
    out = tmp_path / "r.parquet"
    assert main(["run", "--layer", "res2a_branch2b", "--direction", "fwd", "--budget-ms", "2",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("cudnn", "cudnn_graph", "torch_gpu"):     # cudnn_rnn: no convolution
        assert f"skipping {name}: CuPy is not installed" in printed
    assert "cudnn_rnn" not in printed
    assert "no GPU backend can use it: running the suite's own backends" in printed
    import pandas as pd
    assert set(pd.read_parquet(out)["backend"]) == {"cpu"}


def test_the_default_plan_on_a_gpu_machine_has_no_cpu_point(gpu, monkeypatch):
    """CPU algorithms run on a GPU machine only when asked: planned with the real runner (the
    GPU backends are stood in for by an available fake)."""
    from harness import backends
    fake = backends.get("fake")
    monkeypatch.setattr(backends, "get", lambda name: fake)
    sweep, _ = gpu_default.with_gpu_default(load_suite("quick"), _args())
    points = runner.plan(sweep).points
    assert points and {p.backend for p in points} == set(gpu_default.GPU_BACKENDS)
