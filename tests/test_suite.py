"""Suite files: the shipped suites, name resolution, the format's errors, and CLI overrides."""
from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from harness.problem_text import parse_benchdnn
from harness.suite import (REPO_SUITES, SuiteError, available_suites, load_suite, parse_size,
                           parse_suite)
from harness.suite.overrides import OVERRIDE_FLAGS, Overrides, sweep_with_overrides
from harness.sweep import DIRECTIONS, AlgorithmChoice, TimingOptions

SHIPPED = ["alexnet", "cpu_compare", "deepbench_train", "mobilenet_v1", "quick", "resnet50",
           "vgg16"]


# ---- shipped suites ---------------------------------------------------------------------------
def test_every_shipped_suite_is_listed():
    assert set(SHIPPED) <= set(available_suites([REPO_SUITES]))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_suite_loads(name):
    sweep = load_suite(name, search_dirs=[REPO_SUITES])
    assert sweep.name == name
    assert sweep.problems and len(set(sweep.problems)) == len(sweep.problems)
    assert all(p.name for p in sweep.problems), "every shipped layer has a name"


def test_resnet50_suite():
    sweep = load_suite(REPO_SUITES / "resnet50.toml")
    assert len(sweep.problems) == 20
    assert sum(p.multiplicity for p in sweep.problems) == 53
    assert {p.batch for p in sweep.problems} == {32}
    assert sweep.directions == DIRECTIONS and sweep.precisions == ("fp32",)
    assert sweep.layouts == ("NCHW",)
    assert sweep.backends == (AlgorithmChoice("cpu", (), True), AlgorithmChoice("cudnn", (), True))
    first = sweep.problems[0]
    assert first.name == "resnet_50:conv1" and (first.out_h, first.kernel_h) == (112, 7)
    assert "resnet_50:res2a_branch2b" in {p.name for p in sweep.problems}


def test_vgg16_suite():
    sweep = load_suite(REPO_SUITES / "vgg16.toml")
    assert len(sweep.problems) == 9
    assert sum(p.multiplicity for p in sweep.problems) == 13
    assert all((p.kernel_h, p.kernel_w, p.pad_top, p.out_h) == (3, 3, 1, p.in_h)
               for p in sweep.problems)


def test_mobilenet_suite():
    sweep = load_suite(REPO_SUITES / "mobilenet_v1.toml")
    depthwise = [p for p in sweep.problems if p.depthwise]
    assert len(sweep.problems) == 20 and len(depthwise) == 9
    assert all(p.batch == 1 for p in depthwise)
    assert sweep.problems[10].out_channels == 5  # conv11: 1024 -> 5


def test_alexnet_suite():
    sweep = load_suite(REPO_SUITES / "alexnet.toml")
    assert [p.out_channels for p in sweep.problems] == [64, 192, 384, 256, 256]
    assert [p.out_h for p in sweep.problems] == [55, 27, 13, 13, 13]
    assert {p.batch for p in sweep.problems} == {128}


def test_deepbench_train_suite():
    sweep = load_suite(REPO_SUITES / "deepbench_train.toml")
    assert len(sweep.problems) == 94
    assert [p.name for p in sweep.problems] == [f"deepbench:train_{i:02d}" for i in range(1, 95)]
    first, row45 = sweep.problems[0], sweep.problems[44]
    assert (first.in_w, first.in_h, first.kernel_w, first.kernel_h) == (700, 161, 20, 5)
    assert (row45.kernel_h, row45.pad_top, row45.stride_h, row45.out_h) == (1, 3, 2, 7)
    assert round(sum(p.flops for p in sweep.problems) / 1e9, 1) == 562.5


def test_quick_suite_is_small_and_runs_on_the_cpu():
    sweep = load_suite(REPO_SUITES / "quick.toml")
    assert len(sweep.problems) == 3 and {p.batch for p in sweep.problems} == {2}
    assert sweep.directions == DIRECTIONS
    assert sweep.backends[0] == AlgorithmChoice("cpu", ("direct", "im2col"), False)
    assert sweep.backends[1] == AlgorithmChoice("cudnn", (), True)
    assert sweep.timing.budget_ms <= 50
    # 3 directions x 2 algorithms x ~6 runs at a worst-case 20 GFLOP/s: a few seconds
    gflop = sum(p.flops for p in sweep.problems) / 1e9
    assert gflop * 3 * 2 * 6 / 20 < 10


def test_cpu_compare_suite_stays_affordable():
    sweep = load_suite(REPO_SUITES / "cpu_compare.toml")
    assert {p.batch for p in sweep.problems} == {8}
    assert [c.backend for c in sweep.backends] == ["cpu", "torch_cpu"]
    assert sweep.backends[0].algorithms == () and sweep.backends[1].optional
    assert sum(p.flops for p in sweep.problems) / 1e9 < 100  # the budget its header explains
    assert any(p.kernel_w == 20 and p.kernel_h == 5 for p in sweep.problems)


def test_quick_layers_written_three_ways_agree_with_descriptors():
    sweep = load_suite(REPO_SUITES / "quick.toml")
    expected = [
        'mb2ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3"',
        'mb2ic128ih28oc512oh28kh1ph0n"resnet_50:res3a_branch2c*4"',
        'mb2ic256ih14oc256oh14kh3ph1n"resnet_50:res4a_branch2b*6"',
    ]
    assert list(sweep.problems) == [parse_benchdnn(text) for text in expected]


# ---- finding suites ---------------------------------------------------------------------------
def test_a_path_is_loaded_as_given(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("layers = ['ic3ih8oc4kh3']\n")
    sweep = load_suite(str(path))
    assert sweep.name == "mine" and sweep.problems[0].in_channels == 3


def test_names_resolve_in_local_suites_before_the_repository(tmp_path, monkeypatch):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "quick.toml").write_text("name = 'local'\nlayers = ['ic3ih8oc4kh3']\n")
    monkeypatch.chdir(tmp_path)
    assert load_suite("quick").name == "local"
    assert load_suite("resnet50").name == "resnet50"  # falls back to the repository's
    assert {"quick", "resnet50"} <= set(available_suites())


def test_unknown_suite_names_the_choices():
    with pytest.raises(SuiteError, match=r"unknown suite 'resnet5'.*did you mean 'resnet50'"):
        load_suite("resnet5", search_dirs=[REPO_SUITES])


def test_missing_file_path_is_an_error(tmp_path):
    with pytest.raises(SuiteError, match="no such suite file"):
        load_suite(str(tmp_path / "absent.toml"))


def test_repo_suites_is_the_repository_suites_folder():
    # The loader sits two folders below the repository (harness/suite/loader.py); one parent
    # too few would look in harness/suites.
    assert REPO_SUITES == Path(__file__).resolve().parents[1] / "suites"


def test_the_package_exports_what_its_importers_use():
    import harness.suite
    missing = [name for name in harness.suite.__all__ if not hasattr(harness.suite, name)]
    assert not missing
    assert harness.suite.sweep_with_overrides is sweep_with_overrides


# ---- the format -------------------------------------------------------------------------------
def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


def test_defaults_when_only_layers_are_given(tmp_path):
    sweep = load_suite(write(tmp_path, "layers = ['ic3ih8oc4kh3']\n"))
    assert sweep.directions == ("fwd",) and sweep.workspace_limits == (None,)
    assert sweep.backends == (AlgorithmChoice("cpu"),) and sweep.timing == TimingOptions()
    assert sweep.regression_threshold == 0.05


def test_every_key(tmp_path):
    table = ("{ batch = 1, in_channels = 2, in_h = 9, in_w = 7, out_channels = 2, kernel_h = 3, "
             "kernel_w = 1, pad_top = 1, groups = 2, name = \"b\" }")
    text = """
name = "all"
description = "every key"
layers = ['ic3ih8oc4kh3n"a"', TABLE]
[sweep]
directions = ["bwd_filter", "fwd"]
precisions = ["fp16", "bf16"]
layouts = ["NHWC"]
workspace_limits = [0, "64MiB", "unlimited", 1000]
batch = 4
[[sweep.backends]]
name = "cudnn"
algorithms = ["implicit_gemm", "fft"]
optional = true
[[sweep.backends]]
name = "torch_cpu"
[timing]
mode = "cold"
budget_ms = 12.5
min_samples = 2
max_samples = 9
noise_target = 0.05
warmup = 0
gpu_timer = "stream"
[compare]
threshold = 0.02
""".replace("TABLE", table)
    sweep = load_suite(write(tmp_path, text))
    assert sweep.name == "all"
    assert [p.batch for p in sweep.problems] == [4, 4]
    table = sweep.problems[1]
    assert (table.pad_top, table.pad_bottom, table.pad_left, table.groups) == (1, 1, 0, 2)
    assert sweep.directions == ("bwd_filter", "fwd") and sweep.precisions == ("fp16", "bf16")
    assert sweep.workspace_limits == (0, 64 << 20, None, 1000)
    assert sweep.backends == (AlgorithmChoice("cudnn", ("implicit_gemm", "fft"), True),
                              AlgorithmChoice("torch_cpu", (), False))
    assert sweep.timing == TimingOptions("cold", 12.5, 2, 9, 0.05, 0, "stream")
    assert sweep.regression_threshold == 0.02


def test_array_of_tables_layers_and_backend_shorthand(tmp_path):
    text = """
sweep.backends = ["cpu", "fake"]
[[layers]]
deepbench = [700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2]
name = "speech"
multiplicity = 2
[[layers]]
in_channels = 4
in_h = 5
in_w = 5
out_channels = 4
kernel_h = 3
kernel_w = 3
batch = 3
"""
    sweep = load_suite(write(tmp_path, text))
    assert [(p.name, p.multiplicity, p.kernel_w) for p in sweep.problems] == [
        ("speech", 2, 20), ("", 1, 3)]
    assert [c.backend for c in sweep.backends] == ["cpu", "fake"]


GOOD_LAYER = "layers = ['ic3ih8oc4kh3']\n"

# (suite text, the entry the message must name, fragments it must also contain)
MALFORMED = [
    ("nmae = 'x'\n" + GOOD_LAYER, "nmae", ["unknown key 'nmae'", "did you mean 'name'"]),
    ("name = 3\n" + GOOD_LAYER, "name", ["expected a string", "3"]),
    ("name = 'x'\n", "layers", ["missing"]),
    ("layers = []\n", "layers", ["is empty"]),
    ("layers = 'ic3ih8oc4kh3'\n", "layers", ["expected a list", "'ic3ih8oc4kh3'"]),
    ("layers = [3]\n", "layers[0]", ["expected a benchdnn descriptor", "3"]),
    ("layers = ['ic3ih8oc4kh3', 'ic3ih8oc4kh3x']\n", "layers[1]", ["unexpected 'x'"]),
    ("layers = ['ic3ih8oc4kh3', 'ic3ih5oc4kh7']\n", "layers[1]", ["kh7", "ih5"]),
    ("layers = ['ic3id4ih8oc4kh3']\n", "layers[0]", ["id4", "kd is missing"]),
    ("layers = ['ic3ih8oc4kh3n\"a*0\"']\n", "layers[0]", ["*0", "multiplicity"]),
    ("layers = ['g2ic3ih8oc4kh3']\n", "layers[0]", ["in_channels=3", "groups=2"]),
    ("layers = ['ic3ih8oc4kh3', 'ic3ih8oc4kh3']\n", "layers[1]", ["repeats layers[0]"]),
    ("layers = [{in_chanels = 3, in_h = 8, in_w = 8, out_channels = 4, kernel_h = 3, "
     "kernel_w = 3, batch = 1}]\n", "layers[0].in_chanels",
     ["unknown key 'in_chanels'", "did you mean 'in_channels'"]),
    ("layers = [{batch = 1, in_channels = 3, in_h = 8, out_channels = 4, kernel_h = 3, "
     "kernel_w = 3}]\n", "layers[0].in_w", ["missing"]),
    ("layers = [{batch = 1, in_channels = 3, in_h = 8, in_w = 8, out_channels = 4, "
     "kernel_h = '3', kernel_w = 3}]\n", "layers[0].kernel_h", ["expected an integer", "'3'"]),
    ("layers = [{batch = 1, in_channels = 3, in_h = 8, in_w = 8, out_channels = 4, "
     "kernel_h = 3, kernel_w = 3, groups = 2}]\n", "layers[0]", ["in_channels=3", "groups=2"]),
    ("layers = [{batch = 1, in_channels = 3, in_h = 8, in_w = 8, out_channels = 4, "
     "kernel_h = 3, kernel_w = 3, multiplicity = 0}]\n", "layers[0]", ["multiplicity=0"]),
    ("layers = [{deepbench = [700, 161, 1, 4, 32, 20, 5, 0, 0, 2]}]\n", "layers[0]",
     ["DeepBench", "has 10 fields"]),
    ("layers = [{deepbench = [700, 161, 1, 4, '32', 20, 5, 0, 0, 2, 2]}]\n",
     "layers[0].deepbench[4]", ["expected an integer", "'32'"]),
    ("layers = [{deepbench = [700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2], mult = 2}]\n",
     "layers[0].mult", ["unknown key 'mult'"]),
    ("layers = [{deepbench = [7, 7, 1, 4, 32, 20, 5, 0, 0, 2, 2]}]\n", "layers[0]",
     ["kernel_w=20", "DeepBench"]),
    ("sweep = 3\n" + GOOD_LAYER, "sweep", ["expected a table", "3"]),
    (GOOD_LAYER + "[sweep]\nprecision = ['fp32']\n", "sweep.precision",
     ["unknown key 'precision'", "did you mean 'precisions'"]),
    (GOOD_LAYER + "[sweep]\nprecisions = ['fp32', 'int4']\n", "sweep.precisions[1]",
     ["unknown precision 'int4' (did you mean 'int8'?); expected one of fp32, tf32, fp16, "
      "bf16, fp64, fp8_e4m3, fp8_e5m2, int8"]),
    (GOOD_LAYER + "[sweep]\ndirections = ['fwd', 'bwd']\n", "sweep.directions[1]",
     ["unknown direction 'bwd'", "fwd, fwd_train, bwd_data, bwd_filter"]),
    (GOOD_LAYER + "[sweep]\ndirections = ['fwd', 'fwd']\n", "sweep.directions[1]",
     ["'fwd' is listed twice"]),
    (GOOD_LAYER + "[sweep]\ndirections = []\n", "sweep.directions", ["is empty"]),
    (GOOD_LAYER + "[sweep]\nlayouts = 'NCHW'\n", "sweep.layouts",
     ["expected a list", "'NCHW'"]),
    (GOOD_LAYER + "[sweep]\nlayouts = ['nchw']\n", "sweep.layouts[0]",
     ["unknown layout 'nchw'", "NCHW, NHWC"]),
    (GOOD_LAYER + "[sweep]\nworkspace_limits = ['64XB']\n", "sweep.workspace_limits[0]",
     ["invalid size '64XB'"]),
    (GOOD_LAYER + "[sweep]\nworkspace_limits = [0, -1]\n", "sweep.workspace_limits[1]",
     ["-1", "negative"]),
    (GOOD_LAYER + "[sweep]\nworkspace_limits = ['64MiB', 67108864]\n",
     "sweep.workspace_limits[1]", ["67108864", "repeats"]),
    (GOOD_LAYER + "[sweep]\nworkspace_limits = [1.5]\n", "sweep.workspace_limits[0]",
     ["1.5", "byte count"]),
    (GOOD_LAYER + "[sweep]\nbatch = 0\n", "sweep.batch", ["0 must be a positive integer"]),
    (GOOD_LAYER + "[sweep]\nbatch = true\n", "sweep.batch", ["True must be a positive"]),
    (GOOD_LAYER + "[[sweep.backends]]\nalgorithms = ['direct']\n", "sweep.backends[0].name",
     ["missing"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = ' '\n", "sweep.backends[0].name",
     ["' ' is empty"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\nalgorithms = 'direct'\n",
     "sweep.backends[0].algorithms", ["expected a list", "'direct'"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\nalgorithms = ['direct', '']\n",
     "sweep.backends[0].algorithms[1]", ["'' is empty"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\nalgorithms = []\n",
     "sweep.backends[0].algorithms", ["is empty"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\noptional = 'yes'\n",
     "sweep.backends[0].optional", ["expected true or false", "'yes'"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\n[[sweep.backends]]\nname = 'cpu'\n",
     "sweep.backends[1].name", ["'cpu' is listed twice"]),
    (GOOD_LAYER + "[[sweep.backends]]\nname = 'cpu'\nalgos = ['direct']\n",
     "sweep.backends[0].algos", ["unknown key 'algos'", "did you mean 'algorithms'"]),
    (GOOD_LAYER + "[timing]\nmode = 'hot'\n", "timing.mode", ["unknown timing mode 'hot'"]),
    (GOOD_LAYER + "[timing]\ngpu_timer = 'events'\n", "timing.gpu_timer",
     ["unknown GPU timer 'events'"]),
    (GOOD_LAYER + "[timing]\nbudget_ms = -5\n", "timing.budget_ms",
     ["-5 must be a positive number"]),
    (GOOD_LAYER + "[timing]\nbudget_ms = inf\n", "timing.budget_ms", ["inf"]),
    (GOOD_LAYER + "[timing]\nmin_samples = 2.5\n", "timing.min_samples",
     ["2.5 must be a positive integer"]),
    (GOOD_LAYER + "[timing]\nmin_samples = 10\nmax_samples = 5\n", "timing.max_samples",
     ["5 is less than min_samples=10"]),
    (GOOD_LAYER + "[timing]\nwarmup = -1\n", "timing.warmup", ["-1 must be an integer >= 0"]),
    (GOOD_LAYER + "[timing]\nnoise_target = 5\n", "timing.noise_target",
     ["5 must be a fraction between 0 and 1"]),
    (GOOD_LAYER + "[timing]\nbudget = 5\n", "timing.budget",
     ["unknown key 'budget'", "did you mean 'budget_ms'"]),
    (GOOD_LAYER + "[compare]\nthreshold = 5\n", "compare.threshold",
     ["5 must be a fraction between 0 and 1, e.g. 0.05 for 5%"]),
    (GOOD_LAYER + "[compare]\ntreshold = 0.1\n", "compare.treshold", ["unknown key 'treshold'"]),
]


@pytest.mark.parametrize("text, entry, fragments", MALFORMED,
                         ids=[f"{i:02d}-{case[1]}" for i, case in enumerate(MALFORMED)])
def test_malformed_suites_name_file_entry_and_value(tmp_path, text, entry, fragments):
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as info:
        load_suite(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: {entry}: "), message
    for fragment in fragments:
        assert fragment in message, message
    assert info.value.entry == entry


def test_invalid_toml_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "layers = [\n  'ic3ih8oc4kh3'\n  'x'\n]\n")
    with pytest.raises(SuiteError, match=rf"^{re.escape(str(path))}: not valid TOML: .*line 3"):
        load_suite(str(path))


def test_relative_paths_are_shown_as_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "x.toml").write_text("layers = ['ic3ih8oc4kh3']\n[sweep]\nprecisions"
                                                " = ['fp32', 'int4']\n")
    with pytest.raises(SuiteError) as info:
        load_suite("x")
    assert str(info.value) == ("suites/x.toml: sweep.precisions[1]: unknown precision 'int4' "
                               "(did you mean 'int8'?); expected one of fp32, tf32, fp16, bf16, "
                               "fp64, fp8_e4m3, fp8_e5m2, int8")


def test_parse_suite_from_text():
    sweep = parse_suite("layers = ['ic3ih8oc4kh3']", source="inline", default_name="inline")
    assert sweep.name == "inline"
    with pytest.raises(SuiteError, match="^inline: layers: is empty"):
        parse_suite("layers = []", source="inline")


# ---- sizes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("0", 0), ("65536", 65536), ("64MiB", 64 << 20), ("1GiB", 1 << 30), ("1.5 KiB", 1536),
    ("100MB", 100_000_000), ("2kb", 2000), ("8B", 8), ("unlimited", None), (" Unlimited ", None),
    ("none", None), ("inf", None), ("1tib", 1 << 40),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "64XB", "1.5B", "MiB", "1e6", "64 MiB B"])
def test_parse_size_rejects(text):
    with pytest.raises(SuiteError, match=re.escape(repr(text))):
        parse_size(text)


# ---- overrides --------------------------------------------------------------------------------
@pytest.fixture
def quick():
    return load_suite(REPO_SUITES / "quick.toml")


def test_no_overrides_change_nothing(quick):
    assert sweep_with_overrides(quick) == quick


def test_axis_overrides(quick):
    sweep = sweep_with_overrides(quick, directions=["bwd_data"], precisions=["fp16", "fp32"],
                                 layouts=["NHWC"], workspace_limits=["0", 1024, None, "1GiB"],
                                 budget_ms=5, timing_mode="cold", batch=7)
    assert sweep.directions == ("bwd_data",) and sweep.precisions == ("fp16", "fp32")
    assert sweep.layouts == ("NHWC",) and sweep.workspace_limits == (0, 1024, None, 1 << 30)
    assert (sweep.timing.budget_ms, sweep.timing.mode) == (5.0, "cold")
    assert sweep.timing.min_samples == quick.timing.min_samples
    assert {p.batch for p in sweep.problems} == {7}
    assert [p.name for p in sweep.problems] == [p.name for p in quick.problems]


def test_backend_override_keeps_the_suite_algorithms_and_makes_them_required(quick):
    sweep = sweep_with_overrides(quick, backends=["cudnn", "cpu", "fake"])
    assert sweep.backends == (AlgorithmChoice("cudnn", (), False),
                              AlgorithmChoice("cpu", ("direct", "im2col"), False),
                              AlgorithmChoice("fake", (), False))


def test_algorithm_override_plain_and_qualified(quick):
    sweep = sweep_with_overrides(quick, algorithms=["winograd"])
    assert [c.algorithms for c in sweep.backends] == [("winograd",), ("winograd",)]
    sweep = sweep_with_overrides(quick, algorithms=["cudnn:fft", "cudnn:gemm", "direct"])
    assert [c.algorithms for c in sweep.backends] == [("direct",), ("fft", "gemm")]
    sweep = sweep_with_overrides(quick, backends=["cpu"], algorithms=["cpu:fft"])
    assert sweep.backends == (AlgorithmChoice("cpu", ("fft",), False),)


@pytest.mark.parametrize("overrides, message", [
    (dict(precisions=["int4"]),
     "--precision: unknown precision 'int4' (did you mean 'int8'?); expected one of fp32, "
     "tf32, fp16, bf16, fp64, fp8_e4m3, fp8_e5m2, int8"),
    (dict(directions=["fwd", "fwd"]), "--direction: 'fwd' is listed twice"),
    (dict(directions=[]), "--direction: is empty"),
    (dict(layouts=["nhwc"]), "--layout: unknown layout 'nhwc' (did you mean 'NHWC'?)"),
    (dict(backends=["cpu", ""]), "--backend: '' is empty"),
    (dict(backends=["cpu", "cpu"]), "--backend: 'cpu' is listed twice"),
    (dict(algorithms=["torch_cpu:x"]), "--algorithm: 'torch_cpu:x' names backend 'torch_cpu'"),
    (dict(algorithms=["cpu:"]), "--algorithm: '' is empty"),
    (dict(batch=0), "--batch: 0 must be a positive integer"),
    (dict(budget_ms=0), "--budget-ms: 0 must be a positive number"),
    (dict(budget_ms=float("nan")), "--budget-ms: nan must be a positive number"),
    (dict(workspace_limits=["64XB"]), "--workspace-limit: invalid size '64XB'"),
    # found by tests/test_fuzz.py: 2^70 bytes overflowed the int64 column (a traceback)
    (dict(workspace_limits=[str(2**70)]),
     f"--workspace-limit: '{2**70}' is more than 8 EiB; say 'unlimited'"),
    (dict(workspace_limits=["1KiB", "1024"]), "--workspace-limit: '1024' repeats"),
    (dict(timing_mode="hot"), "--timing-mode: unknown timing mode 'hot'"),
])
def test_override_errors_name_the_flag(quick, overrides, message):
    with pytest.raises(SuiteError) as info:
        sweep_with_overrides(quick, **overrides)
    assert str(info.value).startswith(message), str(info.value)


def test_every_flag_is_a_keyword_and_an_overrides_field():
    """sweep_with_overrides hands its keywords to Overrides one by one: a flag added to one of
    the three and not the others would be refused or silently ignored."""
    keywords = [name for name, parameter in inspect.signature(sweep_with_overrides).parameters
                .items() if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keywords == [field.name for field in dataclasses.fields(Overrides)]
    assert set(keywords) == set(OVERRIDE_FLAGS)
    assert Overrides() == Overrides(**dict.fromkeys(keywords))   # None keeps the suite's
    with pytest.raises(dataclasses.FrozenInstanceError):
        Overrides().batch = 2


# One bad value per flag: each must reach its checker and come back naming that flag.
BAD_OVERRIDES = {
    "backends": ["cpu", "cpu"], "algorithms": ["cpu:"], "directions": ["sideways"],
    "precisions": ["int4"], "layouts": ["nhwc"], "batch": 0, "budget_ms": 0,
    "workspace_limits": ["64XB"], "timing_mode": "hot", "gpu_timer": "sundial",
    "gpu_processes": 0, "cpu_rounds": 0, "threads": [0], "ops": ["conv_relu"],
    "outputs": ["fp128"], "race": "no", "runoff": "no", "plan_limit": 0, "build_budget_s": -1,
}


@pytest.mark.parametrize("key", sorted(BAD_OVERRIDES))
def test_every_override_is_checked_and_names_its_flag(quick, key):
    assert set(BAD_OVERRIDES) == set(OVERRIDE_FLAGS)
    with pytest.raises(SuiteError) as info:
        sweep_with_overrides(quick, **{key: BAD_OVERRIDES[key]})
    assert str(info.value).startswith(f"{OVERRIDE_FLAGS[key]}: "), str(info.value)
    assert info.value.entry == OVERRIDE_FLAGS[key]


def test_batch_override_that_merges_layers_is_an_error(tmp_path):
    sweep = load_suite(write(tmp_path, "layers = ['mb1ic3ih8oc4kh3', 'mb2ic3ih8oc4kh3']\n"))
    with pytest.raises(SuiteError, match="--batch: batch 4 makes layer"):
        sweep_with_overrides(sweep, batch=4)


# ---- input that is not a suite at all, names that would become paths ---------------------------
@pytest.mark.parametrize("content, fragment", [
    (b"layers = ['ic3ih8oc4kh3']\n# caf\xe9\n", "not a UTF-8 text file (byte 31"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a UTF-8 text file (byte 0"),
    (b"\x00\x01\x02layers", "not valid TOML"),
    (b"a = " + b"9" * 5000 + b"\n", "not valid TOML"),
    (b"a = " + b"[" * 50000 + b"\n", "not valid TOML: nested too deeply"),
])
def test_binary_and_non_utf8_files_are_suite_errors_naming_the_file(tmp_path, content, fragment):
    path = tmp_path / "junk.toml"
    path.write_bytes(content)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}: ") and fragment in str(info.value)


@pytest.mark.parametrize("name", ["../../esc", "a/b", "a\\\\b", "..", ".hidden", "-flag",
                                  "x" * 101, "two words", "a..b", "", "caf\u00e9"])
def test_a_suite_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    path = write(tmp_path, f'name = "{name}"\n' + GOOD_LAYER)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert info.value.entry == "name"
    assert repr(name.replace("\\\\", "\\")) in str(info.value)


@pytest.mark.parametrize("name", ["quick", "resnet50-v1.5", "My_Suite", "x" * 100, "1st"])
def test_plain_suite_names_are_kept(tmp_path, name):
    assert load_suite(write(tmp_path, f'name = "{name}"\n' + GOOD_LAYER)).name == name


def test_the_file_name_is_the_default_suite_name(tmp_path):
    assert load_suite(write(tmp_path, GOOD_LAYER)).name == "bad"
    # a name the user never typed is made plain, not refused (a shell passes undecodable
    # bytes as surrogates)
    for stem, plain in (("two words", "two-words"), ("\udcff", "suite"), ("..x", "x")):
        path = tmp_path / f"{stem}.toml"
        path.write_text(GOOD_LAYER)
        assert load_suite(path).name == plain


@pytest.mark.parametrize("text, entry, fragment", [
    ("layers = [{batch = 1, in_channels = 3, in_h = 1180591620717411303424, in_w = 8, "
     "out_channels = 4, kernel_h = 3, kernel_w = 3}]\n", "layers[0]",
     "in_h=1180591620717411303424 is larger than 2**62"),
    ("layers = ['ic3ih" + "9" * 30 + "oc4kh3']\n", "layers[0]", "larger than 2**62"),
    ('layers = ["ic3ih8oc4kh3n\\"a\\u0007b\\""]\n', "layers[0].name", "control character"),
    ("layers = [{batch = 1, in_channels = 3, in_h = 8, in_w = 8, out_channels = 4, "
     "kernel_h = 3, kernel_w = 3, name = \"x\\ud7ff\\n\"}]\n", "layers[0].name",
     "control character"),
])
def test_absurd_layers_name_the_entry(tmp_path, text, entry, fragment):
    with pytest.raises(SuiteError) as info:
        load_suite(write(tmp_path, text))
    assert info.value.entry == entry and fragment in str(info.value), str(info.value)


def test_the_build_budget_is_set_by_the_suite_or_the_flag_and_checked(tmp_path):
    """`[timing] build_budget_s` and --build-budget-s reach every point's timing options (the
    cuDNN RNN backend waits that long for a PERSIST_DYNAMIC build); nonsense names its place."""
    path = tmp_path / "mine.toml"
    path.write_text("name = 'mine'\nlayers = ['ic3ih8oc4kh3']\n[timing]\nbuild_budget_s = 45\n")
    sweep = load_suite(str(path))
    assert sweep.timing.build_budget_s == 45
    assert TimingOptions().build_budget_s == 30
    assert sweep_with_overrides(sweep, build_budget_s=200).timing.build_budget_s == 200
    with pytest.raises(SuiteError, match="--build-budget-s"):
        sweep_with_overrides(sweep, build_budget_s=0)
    with pytest.raises(SuiteError, match="more than a day"):    # Connection.poll would overflow
        sweep_with_overrides(sweep, build_budget_s=1e9)
    path.write_text("name = 'mine'\nlayers = ['ic3ih8oc4kh3']\n[timing]\nbuild_budget_s = 'x'\n")
    with pytest.raises(SuiteError, match="timing.build_budget_s"):
        load_suite(str(path))
