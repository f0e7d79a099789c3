"""3-D convolution (issue 17): depth fields on ConvProblem, benchdnn's id/kd/sd/pd/dd entries, the
depth columns, the float64 oracle against torch's conv3d, torch_cpu's conv3d, the NumPy direct
algorithm in 3-D, a row with a reason (never a crash) from every algorithm that does not run 3-D
yet, and the arguments the GPU backends' 3-D code builds (their runs are the GPU test files'
test_3d_* tests). 2-D problems must not move: their point ids, descriptors and columns are
pinned to what main wrote before depth existed."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from harness import backends, reference, runner, store, verdict
from harness.backends.base import WorkspaceExceeded
from harness.backends.cpu import direct
from harness.cli import main
from harness.problem import DEPTH_DEFAULTS, DEPTH_FIELDS, ConvProblem, ProblemError
from harness.threads import available_cores
from harness.problem_text import parse_benchdnn, to_benchdnn
from harness.schema import frame, to_row
from harness.suite import load_suite, parse_suite
from harness.sweep import Point

TORCH_REASON = backends.get("torch_cpu").unavailable_reason()
needs_torch = pytest.mark.skipif(TORCH_REASON is not None,
                                 reason=f"torch_cpu test skipped: {TORCH_REASON}")

# (suite, layer index, descriptor, bwd_data cpu/direct point id, short shape, flops, flops without
# padding), printed by main at 100ed59 before depth fields existed.
PINNED_2D = [
    ("resnet50", 0, 'g1mb32ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3dh0dw0n"resnet_50:conv1"',
     "resnet_50:conv1|n32c3h224w224k64r7s7u2v2p3.3.3.3d1.1g1|bwd_data|fp32|NCHW|cpu|direct|inf|warm",
     "3x224x224->64 k7x7 s2", 7552892928, 7437729792),
    ("mobilenet_v1", 1,
     'g1mb32ic32ih112iw112oc64oh112ow112kh1kw1sh1sw1ph0pw0dh0dw0n"mobilenet:conv2*4"',
     "mobilenet:conv2|n32c32h112w112k64r1s1u1v1p0.0.0.0d1.1g1|bwd_data|fp32|NCHW|cpu|direct|inf|"
     "warm", "32x112x112->64 k1x1 s1", 1644167168, 1644167168),
    ("deepbench_train", 0,
     'g1mb4ic1ih161iw700oc32oh79ow341kh5kw20sh2sw2ph0pw0dh0dw0n"deepbench:train_01"',
     "deepbench:train_01|n4c1h161w700k32r5s20u2v2p0.0.0.0d1.1g1|bwd_data|fp32|NCHW|cpu|direct|inf|"
     "warm", "1x161x700->32 k5x20 s2", 689638400, 689638400),
    ("large_kernel", 0,
     'g1mb1ic64ih56iw56oc64oh56ow56kh5kw5sh1sw1ph2pw2dh0dw0n"large_kernel:c64_56_k5"',
     "large_kernel:c64_56_k5|n1c64h56w56k64r5s5u1v1p2.2.2.2d1.1g1|bwd_data|fp32|NCHW|cpu|direct|"
     "inf|warm", "64x56x56->64 k5x5 s1", 642252800, 615022592),
    ("alexnet", 0, 'g1mb128ic3ih224iw224oc64oh55ow55kh11kw11sh4sw4ph2pw2dh0dw0n"alexnet:conv1"',
     "alexnet:conv1|n128c3h224w224k64r11s11u4v4p2.2.2.2d1.1g1|bwd_data|fp32|NCHW|cpu|direct|inf|"
     "warm", "3x224x224->64 k11x11 s4", 17990860800, 17812881408),
]

# Odd 3-D shapes: stride per axis, asymmetric padding, dilation, groups, batch 1.
ODD_3D = [
    ConvProblem(1, 3, 7, 6, 4, 3, 2, in_d=5, kernel_d=3, pad_front=1, pad_back=1,
                pad_top=1, pad_bottom=1),
    ConvProblem(2, 4, 9, 8, 6, 3, 3, stride_h=2, stride_w=3, pad_top=2, pad_left=0,
                pad_bottom=1, pad_right=2, groups=2, in_d=7, kernel_d=2, stride_d=2,
                pad_front=0, pad_back=1, dilation_d=2),
    ConvProblem(1, 6, 8, 7, 6, 2, 3, dilation_h=2, dilation_w=1, groups=6, in_d=6, kernel_d=3,
                stride_d=1, pad_front=2, pad_back=0, dilation_d=2),
]


def _point(problem: ConvProblem, direction: str, backend: str, algorithm: str,
           layout: str = "NCHW") -> Point:
    return Point(problem, direction, "fp64", layout, backend, algorithm)


# ---- 2-D stays byte-identical -------------------------------------------------------------------
@pytest.mark.parametrize("suite, index, descriptor, point_id, short, flops, flops_np", PINNED_2D)
def test_2d_problems_keep_their_ids_descriptors_and_counts(suite, index, descriptor, point_id,
                                                           short, flops, flops_np):
    p = load_suite(suite).problems[index]
    assert not p.is_3d and len(p.input_shape) == 4
    assert to_benchdnn(p) == descriptor
    assert _point(p, "bwd_data", "cpu", "direct").point_id.replace("fp64", "fp32") == point_id
    assert (p.short_shape, p.flops, p.flops_no_padding) == (short, flops, flops_np)
    assert parse_benchdnn(descriptor) == p


def test_a_2d_row_has_flat_depth_columns_and_older_files_read_as_2d(tmp_path):
    from harness.measurement import Measurement
    p = load_suite("quick").problems[0]
    row = to_row(Measurement(_point(p, "fwd", "cpu", "direct"), "ok", ""), "r", "quick", {}, "t")
    assert {name: row[name] for name in DEPTH_FIELDS} == DEPTH_DEFAULTS and row["out_d"] == 1
    old = frame([row]).drop(columns=[*DEPTH_FIELDS, "out_d"])
    old.assign(samples_ms="").to_csv(tmp_path / "old.csv", index=False)
    loaded = store.load(tmp_path / "old.csv")
    assert loaded.loc[0, list(DEPTH_FIELDS)].to_dict() == DEPTH_DEFAULTS
    assert loaded.loc[0, "out_d"] == 1


# ---- the problem --------------------------------------------------------------------------------
def test_depth_enters_shapes_and_counts():
    p = ConvProblem(2, 4, 10, 12, 8, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    in_d=6, kernel_d=3, stride_d=2, pad_front=1, pad_back=1)
    assert p.is_3d and p.out_d == 3
    assert (p.input_shape, p.weight_shape, p.output_shape) == (
        (2, 4, 6, 10, 12), (8, 4, 3, 3, 3), (2, 8, 3, 10, 12))
    assert p.flops == 2 * 2 * 8 * 4 * 27 * 3 * 10 * 12
    assert p.flops_no_padding == 2 * 2 * 8 * 4 * _valid_taps_brute(p)
    assert p.reduction_length("fwd") == 4 * 27 and p.reduction_length("bwd_filter") == 2 * 360
    assert p.bytes_moved(4) == 4 * (2 * 4 * 720 + 8 * 4 * 27 + 2 * 8 * 360)


def _valid_taps_brute(p: ConvProblem) -> int:
    """(output position, tap) pairs over all spatial axes that land on real input."""
    total = 1
    for a in p.spatial:
        total *= sum(0 <= o * a.stride - a.pad_begin + t * a.dilation < a.size
                     for o in range(a.out) for t in range(a.kernel))
    return total


@pytest.mark.parametrize("fields, named", [
    ({"in_d": 0}, "in_d=0"), ({"kernel_d": -1}, "kernel_d=-1"), ({"stride_d": 0}, "stride_d=0"),
    ({"dilation_d": 0}, "dilation_d=0"), ({"pad_front": -1}, "pad_front=-1"),
    ({"in_d": 3, "kernel_d": 5}, "kernel_d=5"), ({"in_d": 3, "kernel_d": 2, "dilation_d": 3},
                                                "dilation_d=3"),
])
def test_bad_depth_fields_are_refused_by_name(fields, named):
    with pytest.raises(ProblemError, match=named):
        ConvProblem(1, 2, 5, 5, 2, 3, 3, **fields)


# ---- descriptors --------------------------------------------------------------------------------
def test_3d_descriptors_parse_with_promotion_and_print_back():
    p = parse_benchdnn('mb2ic3id16ih112oc64kd3kh3pd1ph1n"c3d:conv1a"')
    assert (p.in_d, p.in_h, p.in_w, p.kernel_d, p.kernel_w, p.pad_front, p.pad_back) == (
        16, 112, 112, 3, 3, 1, 1)
    assert to_benchdnn(p) == ("g1mb2ic3id16ih112iw112oc64od16oh112ow112kd3kh3kw3sd1sh1sw1pd1ph1pw1"
                              'dd0dh0dw0n"c3d:conv1a"')
    # depth only: h and w copy it (d -> h -> w), as benchdnn promotes
    cube = parse_benchdnn("mb1ic4id8oc8kd3pd1dd1")
    assert cube.input_shape == (1, 4, 8, 8, 8) and cube.dilation_h == cube.dilation_d == 2
    for q in [*ODD_3D, p, cube]:
        assert parse_benchdnn(to_benchdnn(q)) == q


@pytest.mark.parametrize("text, named", [
    ("ic3id3ih5oc4kd5kh3", "kd5 with dd0 spans 5, more than id3"),
    ("ic3id8ih5oc4od3kd3pd0kh3", "od3 is inconsistent"),
    ("ic3id8ih5oc4od1kd3kh3", "od1 cannot come from id8"),
    ("ic3id4ih5oc4kd3kh3dd2", "kd3 with dd2 spans 7"),
    ("ic3ih5oc4kh3od2", "id is missing; the d axis has od2"),
    ("ic3ih5oc4kh3sd2", "id is missing; the d axis has sd2"),
    ("ic3id4ih5oc4kh3", "kd is missing"),
])
def test_contradicting_depth_entries_name_the_entry(text, named):
    with pytest.raises(ProblemError, match=named):
        parse_benchdnn(text)


def test_contradicting_depth_in_a_suite_exits_2_with_one_line(tmp_path, capsys):
    suite = tmp_path / "bad3d.toml"
    suite.write_text("layers = ['mb1ic3id3ih5oc4kd5kh3n\"v:x\"']\n")
    assert main(["run", str(suite), "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convbench: error:") and "kd5" in err[0], err


# ---- the oracle against torch's conv3d ---------------------------------------------------------
def _torch_conv3d(p: ConvProblem, direction: str, data) -> np.ndarray:
    """torch.nn.functional.conv3d in float64 on an explicitly padded input, and its autograd."""
    import torch
    f = torch.nn.functional
    x = torch.tensor(data.x, dtype=torch.float64, requires_grad=True)
    w = torch.tensor(data.w, dtype=torch.float64, requires_grad=True)
    pads = [pad for a in reversed(p.spatial) for pad in (a.pad_begin, a.pad_end)]
    y = f.conv3d(f.pad(x, pads), w, stride=[a.stride for a in p.spatial],
                 dilation=[a.dilation for a in p.spatial], groups=p.groups)
    if direction == "fwd":
        return y.detach().numpy()
    y.backward(torch.tensor(data.dy, dtype=torch.float64))
    return (x.grad if direction == "bwd_data" else w.grad).numpy()


@needs_torch
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("index", range(len(ODD_3D)))
def test_oracle_matches_torch_conv3d(index, direction):
    p = ODD_3D[index]
    data = reference.make_data(p, "fp64", seed=index)
    got = reference.reference(p, direction, data)
    assert got.shape == {"fwd": p.output_shape, "bwd_data": p.input_shape,
                         "bwd_filter": p.weight_shape}[direction]
    np.testing.assert_allclose(got, _torch_conv3d(p, direction, data), rtol=1e-12, atol=1e-12)


# ---- backends: torch_cpu runs 3-D, the others give a reason ------------------------------------
@needs_torch
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("index", range(len(ODD_3D)))
def test_torch_cpu_runs_3d(index, direction, layout):
    p = ODD_3D[index]
    data = reference.make_data(p, "fp64", seed=index)
    algo = backends.get("torch_cpu").algorithm("conv2d")
    prepared = algo.prepare(_point(p, direction, "torch_cpu", "conv2d", layout), data)
    prepared.launch()
    np.testing.assert_allclose(prepared.output(), reference.reference(p, direction, data),
                               rtol=1e-10, atol=1e-10)


# ---- cpu direct runs 3-D ------------------------------------------------------------------------
# Beyond ODD_3D: a different stride on each axis with asymmetric padding on each, and a depthwise
# layer with two filters per channel, dilation on every axis and batch 3.
DIRECT_3D = [*ODD_3D,
             ConvProblem(1, 2, 7, 9, 3, 2, 3, stride_h=3, stride_w=2, pad_top=0, pad_bottom=2,
                         pad_left=2, pad_right=1, in_d=8, kernel_d=3, stride_d=2, pad_front=2,
                         pad_back=0),
             ConvProblem(3, 3, 6, 7, 6, 2, 2, dilation_h=2, dilation_w=3, pad_top=1, pad_left=1,
                         groups=3, in_d=5, kernel_d=2, dilation_d=3, pad_back=1)]


def _direct_3d(p: ConvProblem, direction: str, precision: str, seed: int) -> tuple[float, float]:
    """(relative error against the oracle, the runner's tolerance) of one poisoned launch."""
    algo = backends.get("cpu").algorithm("direct")
    data = reference.make_data(p, precision, seed=seed)
    prepared = algo.prepare(replace(_point(p, direction, "cpu", "direct"), precision=precision),
                            data)
    prepared.poison()
    prepared.launch()
    judged = verdict.check(p, direction, data, prepared.output(), precision, algo.error_factor)
    return judged.rel_error, judged.tolerance


@pytest.mark.parametrize("precision", ["fp64", "fp32"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("index", range(len(DIRECT_3D)))
def test_cpu_direct_3d_matches_the_oracle(index, direction, precision):
    error, tolerance = _direct_3d(DIRECT_3D[index], direction, precision, seed=index)
    assert error <= tolerance, (error, tolerance)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_cpu_direct_3d_in_small_blocks(direction, monkeypatch):
    """Blocks small enough to cut the forward pass into single images and partial depth slabs."""
    monkeypatch.setattr(direct, "BLOCK_BYTES", 1500)
    for index, p in enumerate(DIRECT_3D):
        error, tolerance = _direct_3d(p.with_batch(2), direction, "fp32", seed=index)
        assert error <= tolerance, (p, error, tolerance)


def test_cpu_direct_3d_workspace_counts_the_padded_volume():
    """fwd's scratch: the NumPy kernel's padded input, window + product + accumulator of one
    block (here the whole batch) and the tap-major weights, or the compiled kernel's phases; a
    limit one byte short is refused."""
    p = DIRECT_3D[1]
    data = reference.make_data(p, "fp32")
    algo = backends.get("cpu").algorithm("direct")
    point = replace(_point(p, "fwd", "cpu", "direct"), precision="fp32")
    prepared = algo.prepare(point, data)
    used = prepared.workspace_bytes
    if prepared.extras["cpu_kernel"].startswith("numba"):
        # the compiled kernel's buffers (harness/backends/cpu/direct_compiled.py): the input split
        # into its stride's column phases (with their zero margins and tails), the packed
        # weights, and each thread's offsets of a row's reads (int64)
        from harness.backends.cpu import direct_compiled as kernels
        per = kernels.phase_length(p.in_w, p.out_w, p.kernel_w, p.dilation_w, p.pad_left,
                                   p.stride_w)
        phases = p.batch * p.in_channels * p.in_d * p.in_h * p.stride_w * per
        groups, blocks, reads, block = kernels.packed_shape(data.w, p.groups)
        offsets = 2 * 8 * reads * available_cores()
        assert used == 4 * (phases + groups * blocks * reads * block) + offsets
    else:
        padded = p.batch * p.in_channels * p.padded_d * p.padded_h * p.padded_w
        outputs = p.batch * p.out_d * p.out_h * p.out_w
        weights = p.out_channels * p.channels_per_group * p.kernel_d * p.kernel_h * p.kernel_w
        assert used == 4 * (padded + (p.in_channels + 2 * p.out_channels) * outputs + weights)
    with pytest.raises(WorkspaceExceeded):
        algo.prepare(replace(point, workspace_limit=used - 1), data)


def test_algorithms_without_3d_give_the_reason():
    for algo in backends.get("cpu").algorithms():
        reason = algo.refusal(_point(ODD_3D[0], "fwd", "cpu", algo.name))
        if algo.name == "direct":
            assert reason is None
        else:
            assert reason == f"3-D convolution: not yet supported by cpu ({algo.name})"


# ---- the GPU backends' 3-D code, checked without a GPU ------------------------------------------
# (their runs are tests/test_*_gpu.py's test_3d_*, on the cases in tests/conv3d_gpu_cases.py)
@pytest.mark.parametrize("backend", ["cudnn", "cudnn_graph", "torch_gpu"])
def test_gpu_backends_take_3d_points(backend):
    """Every convolution algorithm of a GPU backend (torch_gpu's recurrent ones take no
    convolution at all) runs 3-D points."""
    convolutions = [a for a in backends.get(backend).algorithms()
                    if a.exists_for(_point(ODD_3D[0], "fwd", backend, a.name))]
    assert convolutions
    for algo in convolutions:
        assert algo.runs_3d
        point = _point(ODD_3D[0], "fwd", backend, algo.name)
        assert algo.refusal(point) is None or "3-D" not in algo.refusal(point)


@pytest.mark.parametrize("backend, algorithm, words", [
    ("cudnn", "implicit_gemm", "cuDNN's legacy API cannot express asymmetric padding "),
    ("torch_gpu", "cudnn_benchmark",
     "PyTorch convolutions take one padding per axis; asymmetric padding "),
])
def test_asymmetric_3d_padding_is_refused_naming_the_depth_pads(backend, algorithm, words):
    # symmetric in height and width, asymmetric in depth only
    p = ConvProblem(1, 2, 5, 5, 2, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    in_d=5, kernel_d=3, pad_front=0, pad_back=2)
    reason = backends.get(backend).algorithm(algorithm).refusal(_point(p, "fwd", backend,
                                                                       algorithm))
    assert reason.startswith(words + "(front 0 / back 2, top 1 / bottom 1, left 1 / right 1)")
    flat = ConvProblem(1, 2, 5, 5, 2, 3, 3, pad_top=0, pad_left=1, pad_bottom=2, pad_right=1)
    assert backends.get(backend).algorithm(algorithm).refusal(_point(flat, "fwd", backend,
                                                                     algorithm)) \
        .startswith(words + "(top 0 / bottom 2, left 1 / right 1)")   # 2-D text as before


# Hand-written: x 2x4x5x6x7 (N C D H W), w 8x2x3x2x1 (groups 2), stride (2, 1, 3), dilation
# (1, 2, 1), pads (1, 2, 0); y depth (5+2-3)//2+1 = 3, height (6+4-3)//1+1 = 8, width
# (7+0-1)//3+1 = 3.
ND_PROBLEM = ConvProblem(2, 4, 6, 7, 8, 2, 1, stride_h=1, stride_w=3, pad_top=2, pad_bottom=2,
                         dilation_h=2, groups=2, in_d=5, kernel_d=3, stride_d=2, pad_front=1,
                         pad_back=1)


# NCDHW: packed in that order; NDHWC: c innermost (1), then w (C), h (W*C), d (H*W*C), n.
@pytest.mark.parametrize("layout, x_strides, y_strides, w_format", [
    ("NCHW", (840, 210, 42, 7, 1), (576, 72, 24, 3, 1), 0),
    ("NHWC", (840, 1, 168, 28, 4), (576, 1, 192, 24, 8), 1),
])
def test_legacy_nd_descriptor_arguments(layout, x_strides, y_strides, w_format):
    from harness.backends.cudnn import lib as cudnn_lib
    from harness.backends.cudnn.legacy import nd_arguments
    a = nd_arguments(ND_PROBLEM, layout)
    assert a.x_dims == (2, 4, 5, 6, 7) and a.x_strides == x_strides
    assert a.y_dims == (2, 8, 3, 8, 3) and a.y_strides == y_strides
    # the filter keeps logical K, C, T, R, S dims; NHWC format means stored K T R S C
    assert a.w_format == w_format == getattr(cudnn_lib, layout) and a.w_dims == (8, 2, 3, 2, 1)
    assert (a.pads, a.strides, a.dilations) == ((1, 2, 0), (2, 1, 3), (1, 2, 1))


def test_graph_geometry_lists_have_one_entry_per_axis():
    from harness.backends.cudnn.graph import conv_geometry
    assert conv_geometry(ND_PROBLEM) == {"pre_padding": [1, 2, 0], "post_padding": [1, 2, 0],
                                         "stride": [2, 1, 3], "dilation": [1, 2, 1]}
    # asymmetric depth padding goes through as it is (the graph API takes pre / post lists)
    assert conv_geometry(ODD_3D[2])["pre_padding"] == [2, 0, 0]
    assert conv_geometry(ODD_3D[2])["post_padding"] == [ODD_3D[2].pad_back, 0, 0]
    flat = ConvProblem(1, 2, 9, 9, 2, 3, 3, stride_h=2, pad_top=0, pad_left=1, pad_bottom=2,
                       pad_right=1, dilation_w=2)
    assert conv_geometry(flat) == {"pre_padding": [0, 1], "post_padding": [flat.pad_bottom, 1],
                                   "stride": [2, 1], "dilation": [1, 2]}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 4, 5, 6)])
def test_uploaded_buffers_match_the_descriptor_strides(shape, layout):
    """What the GPU backends upload (a packed physical array) holds element [n, c, d, h, w] at
    the offset the descriptors' strides give, and 2-D keeps its old physical shape and strides."""
    from harness.backends.cudnn.device_buffers import element_strides, physical_shape, upload
    values = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    physical = upload(np, values, layout, "fp32")     # numpy stands in for cupy.asarray
    assert physical.shape == physical_shape(shape, layout)
    strides = element_strides(shape, layout)
    flat = physical.reshape(-1)
    for index in [(0,) * len(shape), tuple(s - 1 for s in shape), (1, 2, 1, 3, 4)[:len(shape)]]:
        assert flat[sum(i * s for i, s in zip(index, strides))] == values[index]
    if len(shape) == 4:
        n, c, h, w = shape
        assert physical_shape(shape, layout) == ((n, c, h, w) if layout == "NCHW" else
                                                  (n, h, w, c))
        assert list(strides) == ([c * h * w, h * w, w, 1] if layout == "NCHW" else
                                 [h * w * c, 1, w * c, c])


SMALL_3D_SUITE = """
name = "quick3d"
layers = [
  'ic4id6ih7oc8kd3kh3pd1ph1n"q3:cube"',
""" + (  # a TOML inline table must stay on one line: the line is built from two pieces
    "  { in_channels = 4, in_h = 6, in_w = 5, out_channels = 4, kernel_h = 1, kernel_w = 3, "
    "pad_left = 1, in_d = 5, kernel_d = 3, stride_d = 2, pad_front = 1, groups = 2, "
    "name = \"q3:table\" },\n"
) + """]
[sweep]
batch = 1
directions = ["fwd", "bwd_data", "bwd_filter"]
[[sweep.backends]]
name = "fake"
algorithms = ["exact", "wrong_fast"]
[[sweep.backends]]
name = "cpu"
algorithms = ["direct", "im2col", "fft", "winograd_f2x2_3x3"]
[[sweep.backends]]
name = "torch_cpu"
[timing]
budget_ms = 5
min_samples = 2
max_samples = 3
"""


@needs_torch
def test_a_small_3d_suite_runs_to_rows_with_statuses():
    sweep = parse_suite(SMALL_3D_SUITE)
    assert all(p.is_3d for p in sweep.problems) and sweep.problems[1].pad_back == 1
    results = []
    runner.run_points(runner.plan(sweep).points, results.append)
    rows = frame(to_row(m, "r", "quick3d", {}, "t") for m in results)
    assert len(rows) == 2 * 3 * 7
    status = {key: set(group["status"]) for key, group in rows.groupby(["backend", "algorithm"])}
    assert status[("fake", "exact")] == {"ok"} and status[("fake", "wrong_fast")] == {"wrong"}
    assert status[("torch_cpu", "conv2d")] == {"ok"}
    assert status[("cpu", "direct")] == {"ok"}
    others = rows[(rows["backend"] == "cpu") & (rows["algorithm"] != "direct")]
    assert set(others["status"]) == {"unsupported"}
    assert all(r.startswith("3-D convolution: not yet supported by cpu") for r in others["reason"])
    ok = rows[rows["status"] == "ok"]
    assert (ok["rel_error"] <= ok["tolerance"]).all()
    assert set(rows["in_d"]) == {6, 5} and set(rows["out_d"]) == {6, 3}
    assert rows["descriptor"].str.contains("id").all()


def test_the_video3d_suite_is_3d_data():
    sweep = load_suite("video3d")
    assert sweep.problems and all(p.is_3d for p in sweep.problems)
    names = [p.name for p in sweep.problems]
    assert len(set(names)) == len(names) and "c3d:conv1a" in names
    assert pd.Series([p.in_channels for p in sweep.problems if p.name.startswith("c3d")]).tolist() \
        == [3, 64, 128, 256, 256, 512, 512]
