"""ONNX model import: Conv attributes and inferred input sizes become the right ConvProblems.

Every model is built here with onnx.helper and written to tmp_path; every expected shape is
worked out by hand in the comments, never by the code under test."""
from __future__ import annotations

import sys

import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import tests need the onnx package "
                                          "(pip install onnx)")
import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from harness.models import ModelError, import_model  # noqa: E402
from harness.models.onnx_models import capture  # noqa: E402


# ---- building models --------------------------------------------------------------------------
def weight(name: str, shape: tuple[int, ...]):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def save(tmp_path, nodes, initializers, input_dims, name="model.onnx", domains=()):
    """One graph input "x" of `input_dims` (ints or dim_param names); the last node's output is
    the graph output, shape left for inference. `domains`: custom op domains the nodes use."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_dims))],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        initializer=initializers)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def conv_chain(tmp_path, layers, input_dims=(1, 3, 8, 8), name="model.onnx"):
    """Convs one after another; each layer is (node name, weight shape, Conv attributes)."""
    nodes, initializers, x = [], [], "x"
    for i, (node_name, shape, attrs) in enumerate(layers):
        initializers.append(weight(f"w{i}", shape))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"y{i}"], name=node_name, **attrs))
        x = f"y{i}"
    return save(tmp_path, nodes, initializers, input_dims, name)


def geometry(p):
    """Everything but batch, name and multiplicity, in ConvProblem's field order."""
    return (p.in_channels, p.in_h, p.in_w, p.out_channels, p.kernel_h, p.kernel_w, p.stride_h,
            p.stride_w, p.pad_top, p.pad_left, p.pad_bottom, p.pad_right, p.dilation_h,
            p.dilation_w, p.groups)


def inferred_output_hw(path, node_output):
    """The H, W ONNX itself infers for a node's output: an independent check of our padding."""
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    for info in (*model.graph.value_info, *model.graph.output):
        if info.name == node_output:
            return tuple(d.dim_value for d in info.type.tensor_type.shape.dim[2:])
    raise AssertionError(f"no inferred shape for {node_output}")


# ---- one Conv, attribute by attribute ---------------------------------------------------------
# Each case: input CxHxW, weight shape, attributes, and the geometry worked out by hand as
# (C, H, W, M, kh, kw, sh, sw, top, left, bottom, right, dh, dw, groups).
SINGLE = {
    # 3x3 pad 1 keeps 8x8.
    "plain": ((3, 8, 8), (16, 3, 3, 3), dict(pads=[1, 1, 1, 1]),
              (3, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)),
    # 9x12, stride (2,3), pad 1: out (9+2-3)//2+1 = 5, (12+2-3)//3+1 = 4.
    "strided": ((3, 9, 12), (8, 3, 3, 3), dict(strides=[2, 3], pads=[1, 1, 1, 1]),
                (3, 9, 12, 8, 3, 3, 2, 3, 1, 1, 1, 1, 1, 1, 1)),
    # TensorFlow-style: nothing at the top/left, one row/column at the bottom/right.
    "asymmetric": ((3, 8, 8), (4, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1]),
                   (3, 8, 8, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 1)),
    # 7x9, kernel 3x2, stride 2: out ceil(7/2)=4, ceil(9/2)=5. Total padding H: 3*2+3-7 = 2
    # -> 1 and 1; W: 4*2+2-9 = 1 -> SAME_UPPER puts it at the end: left 0, right 1.
    "same_upper": ((3, 7, 9), (4, 3, 3, 2), dict(strides=[2, 2], auto_pad="SAME_UPPER"),
                   (3, 7, 9, 4, 3, 2, 2, 2, 1, 0, 1, 1, 1, 1, 1)),
    # SAME_LOWER puts W's one column at the start: left 1, right 0, which gives the same 5
    # outputs as right 1 ((9+2-2)//2+1 = 5), so ConvProblem stores the symmetric 1, 1.
    "same_lower": ((3, 7, 9), (4, 3, 3, 2), dict(strides=[2, 2], auto_pad="SAME_LOWER"),
                   (3, 7, 9, 4, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1)),
    # VALID: no padding; 8x8 with a 3x3 kernel -> 6x6.
    "valid": ((3, 8, 8), (4, 3, 3, 3), dict(auto_pad="VALID"),
              (3, 8, 8, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1)),
    # Dilation (2,3) makes a 3x3 kernel span 5x7; pads (2,3) keep 9x12.
    "dilated": ((3, 9, 12), (4, 3, 3, 3), dict(dilations=[2, 3], pads=[2, 3, 2, 3]),
                (3, 9, 12, 4, 3, 3, 1, 1, 2, 3, 2, 3, 2, 3, 1)),
    # group 2: the weight's second dim is 8/2 = 4 input channels per group.
    "grouped": ((8, 8, 8), (16, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1]),
                (8, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2)),
    # depthwise: group = C = 8, one input channel per filter.
    "depthwise": ((8, 8, 8), (8, 1, 3, 3), dict(group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
                  (8, 8, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 8)),
    # kernel_shape given explicitly, 1x7 (Inception-style), pad (0,3).
    "kernel_shape": ((3, 8, 8), (4, 3, 1, 7), dict(kernel_shape=[1, 7], pads=[0, 3, 0, 3]),
                     (3, 8, 8, 4, 1, 7, 1, 1, 0, 3, 0, 3, 1, 1, 1)),
}


@pytest.mark.parametrize("case", SINGLE)
def test_single_conv_geometry(tmp_path, case):
    chw, shape, attrs, expected = SINGLE[case]
    path = conv_chain(tmp_path, [(case, shape, attrs)], (1, *chw))
    result = capture(path, None)
    assert result.method == "onnx shape inference" and result.skipped == {}
    (conv,) = result.convs
    assert geometry(conv) == expected
    assert (conv.name, conv.multiplicity, conv.batch) == (case, 1, 1)
    # ONNX's own output size agrees with the one our pads give.
    assert (conv.out_h, conv.out_w) == inferred_output_hw(path, "y0")


def test_unnamed_nodes_are_numbered(tmp_path):
    path = conv_chain(tmp_path, [("", (4, 3, 3, 3), {}), ("", (4, 4, 1, 1), {})])
    assert [c.name for c in capture(path, None).convs] == ["conv0", "conv1"]


def test_second_conv_sees_the_size_inferred_from_the_first(tmp_path):
    # 3x9x12, 3x3 stride 2 pad 1 -> 16 x 5 x 6 ((9+2-3)//2+1 = 5, (12+2-3)//2+1 = 6).
    path = conv_chain(tmp_path, [("a", (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
                                 ("b", (32, 16, 3, 3), {})], (1, 3, 9, 12))
    a, b = capture(path, None).convs
    assert geometry(a) == (3, 9, 12, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1)
    assert geometry(b) == (16, 5, 6, 32, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1)


def depth(p):
    """The depth fields of a 3-D problem: (D, kd, sd, front, back, dd)."""
    return (p.in_d, p.kernel_d, p.stride_d, p.pad_front, p.pad_back, p.dilation_d)


def test_3d_and_2d_convs_are_imported_and_the_others_counted_as_skipped(tmp_path):
    # Conv3d 3x4x8x8 pad 1 -> 4x4x8x8; Reshape -> 16x8x8; Conv2d 1x1 -> 8x8x8;
    # ConvTranspose2d stride 2 -> 4x16x16, not run.
    nodes = [
        helper.make_node("Conv", ["x", "w3d"], ["v"], name="c3d", pads=[1] * 6),
        helper.make_node("Reshape", ["v", "shape"], ["r"], name="flatten_depth"),
        helper.make_node("Conv", ["r", "w2d"], ["y"], name="c2d"),
        helper.make_node("ConvTranspose", ["y", "wt"], ["t"], name="up", strides=[2, 2]),
    ]
    initializers = [weight("w3d", (4, 3, 3, 3, 3)), weight("w2d", (8, 16, 1, 1)),
                    weight("wt", (8, 4, 2, 2)),
                    numpy_helper.from_array(np.array([1, 16, 8, 8], np.int64), "shape")]
    path = save(tmp_path, nodes, initializers, (1, 3, 4, 8, 8))
    result = capture(path, None)
    c3d, c2d = result.convs
    assert (geometry(c3d), depth(c3d)) == ((3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),
                                           (4, 3, 1, 1, 1, 1))
    assert c3d.is_3d and not c2d.is_3d
    assert geometry(c2d) == (16, 8, 8, 8, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1)
    assert result.skipped == {"ConvTranspose2d": 1}


def test_3d_conv_attributes_map_depth_height_width_in_order(tmp_path):
    # Input 3x8x10x12, kernel 3x1x5, strides (2,1,3), dilations (1,1,2), pads
    # [front 1, top 0, left 4, back 1, bottom 0, right 4] (ONNX: every begin, then every end).
    # Out: D (8+2-3)//2+1 = 4, H (10-1)+1 = 10, W (12+8-9)//3+1 = 4; a C3D-style 1x3x3 with
    # SAME_UPPER follows on 4x10x4: pads 0/0, 1/1, 1/1.
    path = conv_chain(tmp_path, [
        ("odd", (6, 3, 3, 1, 5), dict(strides=[2, 1, 3], dilations=[1, 1, 2],
                                      pads=[1, 0, 4, 1, 0, 4])),
        ("spatial", (6, 6, 1, 3, 3), dict(auto_pad="SAME_UPPER"))], (2, 3, 8, 10, 12))
    odd, spatial = capture(path, None).convs
    assert geometry(odd) == (3, 10, 12, 6, 1, 5, 1, 3, 0, 4, 0, 4, 1, 2, 1)
    assert depth(odd) == (8, 3, 2, 1, 1, 1)
    assert (odd.out_d, odd.out_h, odd.out_w) == (4, 10, 4)
    assert geometry(spatial) == (6, 10, 4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    assert depth(spatial) == (4, 1, 1, 0, 0, 1)
    # ONNX's own output size agrees with the one our pads give.
    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    (y0,) = [i for i in model.graph.value_info if i.name == "y0"]
    assert tuple(d.dim_value for d in y0.type.tensor_type.shape.dim[2:]) == (4, 10, 4)


def test_a_5d_input_of_symbolic_size_takes_input_cdhw(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3, 3), dict(pads=[1] * 6))],
                      ("N", "C", "D", "H", "W"))
    with pytest.raises(ModelError, match=r"dims \[N, C, D, H, W\].*CxDxHxW for a 5-D input"):
        capture(path, None)
    (conv,) = capture(path, (3, 16, 20, 24)).convs
    assert (conv.in_d, conv.in_h, conv.in_w, conv.batch) == (16, 20, 24, 1)
    with pytest.raises(ModelError, match=r"--input 3x20x24 needs a 4-D NCHW input"):
        capture(path, (3, 20, 24))


def test_quantized_and_vendor_convs_are_counted_as_skipped(tmp_path):
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("ConvInteger", ["q", "wq"], ["y"], name="qconv"),
             helper.make_node("FusedConv", ["x", "w"], ["f"], domain="com.microsoft")]
    initializers = [numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
                    numpy_helper.from_array(np.array(0, np.uint8), "zero"),
                    numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.uint8), "wq"),
                    weight("w", (4, 3, 3, 3))]
    path = save(tmp_path, nodes, initializers, (1, 3, 8, 8), domains=["com.microsoft"])
    assert capture(path, None).skipped == {"ConvInteger": 1, "com.microsoft.FusedConv": 1}
    with pytest.raises(ModelError,
                       match=r"no 2-D or 3-D convolution \(only 1 ConvInteger, 1 com\."):
        import_model(str(path))


def test_convs_inside_a_subgraph_are_counted_as_skipped(tmp_path):
    # An If whose branches each hold a Conv: their sizes are not the top graph's to give.
    def branch(tag):
        conv = helper.make_node("Conv", ["x", "w"], [f"out_{tag}"], pads=[1, 1, 1, 1])
        return helper.make_graph([conv], tag, [], [helper.make_tensor_value_info(
            f"out_{tag}", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="top", pads=[1, 1, 1, 1]),
             helper.make_node("If", ["flag"], ["z"], then_branch=branch("then"),
                              else_branch=branch("else"))]
    initializers = [weight("w", (3, 3, 3, 3)),
                    numpy_helper.from_array(np.array(True), "flag")]
    path = save(tmp_path, nodes, initializers, (1, 3, 8, 8))
    result = capture(path, None)
    assert [c.name for c in result.convs] == ["top"]
    assert result.skipped == {"Conv in a subgraph or function": 2}


# ---- the input size ---------------------------------------------------------------------------
def test_symbolic_input_needs_input_chw(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), dict(pads=[1, 1, 1, 1]))],
                      ("N", "C", "H", "W"))
    with pytest.raises(ModelError, match=r"input 'x' has dims \[N, C, H, W\].*--input CxHxW"):
        capture(path, None)
    (conv,) = capture(path, (3, 16, 20)).convs
    assert geometry(conv) == (3, 16, 20, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)
    assert conv.batch == 1


def test_symbolic_batch_alone_is_set_to_one(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), {})], ("batch", 3, 10, 12))
    (conv,) = capture(path, None).convs
    assert (conv.batch, conv.in_h, conv.in_w) == (1, 10, 12)


def test_input_chw_with_the_wrong_channels_is_refused(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), {})], ("N", "C", "H", "W"))
    with pytest.raises(ModelError, match=r"'c': its input has 4 channels.*expects 3"):
        capture(path, (4, 16, 16))


# ---- bad models -------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"not onnx", b""], ids=["text", "empty"])
def test_not_an_onnx_file(tmp_path, content):
    path = tmp_path / "junk.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelError, match=r"junk\.onnx: not a valid ONNX model") as error:
        capture(path, None)
    assert "\n" not in str(error.value)


def test_missing_onnx_package_is_named(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` raise ImportError
    with pytest.raises(ModelError, match=r"needs the onnx package: pip install onnx"):
        capture(tmp_path / "any.onnx", None)


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match=r"absent\.onnx: no such ONNX file"):
        import_model(str(tmp_path / "absent.onnx"))


def test_model_without_conv_is_refused(tmp_path):
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [], (1, 3, 8, 8))
    with pytest.raises(ModelError, match="no 2-D or 3-D convolution"):
        import_model(str(path))


def test_conv_after_an_unknown_op_names_the_node(tmp_path):
    # A custom-domain op has no shape function, so the Conv's input size stays unknown.
    nodes = [helper.make_node("Mystery", ["x"], ["m"], domain="example.custom"),
             helper.make_node("Conv", ["m", "w"], ["y"], name="after_mystery")]
    path = save(tmp_path, nodes, [weight("w", (4, 3, 3, 3))], (1, 3, 8, 8),
                domains=["example.custom"])
    with pytest.raises(ModelError, match=r"'after_mystery': shape inference could not find"):
        capture(path, None)


def test_failed_shape_inference_is_one_line(tmp_path):
    # A node of a domain the model never imports: ONNX refuses even with strict_mode=False.
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"]),
             helper.make_node("Mystery", ["y"], ["z"], domain="example.custom")]
    path = save(tmp_path, nodes, [weight("w", (4, 3, 3, 3))], (1, 3, 8, 8))
    with pytest.raises(ModelError, match=r"ONNX shape inference failed: .*Mystery") as error:
        capture(path, None)
    assert "\n" not in str(error.value)


def test_impossible_conv_names_the_node(tmp_path):
    # A 5x5 kernel on a 2x2 input with no padding is no convolution.
    path = conv_chain(tmp_path, [("too_big", (4, 3, 5, 5), {})], (1, 3, 2, 2))
    with pytest.raises(ModelError, match=r"'too_big': problem 'too_big': dilated kernel height 5"):
        capture(path, None)


# ---- through import_model ---------------------------------------------------------------------
def test_identical_convs_merge_under_the_first_name(tmp_path):
    same = ((3, 3, 3, 3), dict(pads=[1, 1, 1, 1]))
    path = conv_chain(tmp_path, [("first", *same), ("second", *same),
                                 ("head", (10, 3, 1, 1), {})], name="twins.onnx")
    model = import_model(str(path), batch=8)
    assert (model.name, model.batch, model.convs, model.method) == (
        "twins", 8, 3, "onnx shape inference")
    assert [(p.name, p.multiplicity, p.batch) for p in model.layers] == [
        ("first", 2, 8), ("head", 1, 8)]
    assert geometry(model.layers[0]) == (3, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1)


def test_a_static_batch_is_kept_unless_batch_is_given(tmp_path):
    """Issue 37: a graph exported at batch 4 was imported at batch 32."""
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), {})], (4, 3, 8, 8))
    model = import_model(str(path))
    assert model.batch == 4 and model.layers[0].batch == 4
    assert model.batch_from == "the model's static input batch"
    assert import_model(str(path), batch=16).layers[0].batch == 16
    with pytest.raises(ModelError, match=r"--batch 0: expected a positive integer"):
        import_model(str(path), batch=0)


def test_a_symbolic_batch_takes_the_default(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), {})], ("N", 3, 8, 8))
    model = import_model(str(path))
    assert (model.batch, model.layers[0].batch, model.batch_from) == (32, 32, "the default")


def test_convbench_import_keeps_the_static_batch(tmp_path, capsys):
    from harness.cli import main
    from harness.suite import parse_suite
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), dict(pads=[1, 1, 1, 1]))], (4, 3, 8, 8))
    for argv, batch in (([], 4), (["--batch", "2"], 2)):
        assert main(["import", str(path), *argv]) == 0
        text = capsys.readouterr().out
        assert parse_suite(text, "model.toml").problems[0].batch == batch
        assert f"batch = {batch}\n" in text


def test_import_model_passes_input_chw(tmp_path):
    path = conv_chain(tmp_path, [("c", (8, 3, 3, 3), {})], ("N", "C", "H", "W"))
    (layer,) = import_model(str(path), batch=2, input_chw=(3, 32, 24)).layers
    assert layer.input_shape == (2, 3, 32, 24)


# ---- a model exported by PyTorch --------------------------------------------------------------
# The legacy exporter is deprecated but is the one that needs nothing beyond torch and onnx; the
# torch.export-based one needs onnxscript too. Each runs where it can, and is skipped, with the
# reason, where it cannot.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_torch_export_round_trip(tmp_path, dynamo):
    torch = pytest.importorskip("torch", reason="the PyTorch export test needs torch")
    from torch import nn
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),                    # 3x15x20 -> 8x8x10
        nn.ReLU(),
        nn.Conv2d(8, 16, (3, 5), padding=(1, 2), groups=4),         # -> 16x8x10
        nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16),     # depthwise -> 16x8x10
        nn.Conv2d(16, 4, 1, stride=(2, 1)),                         # -> 4x4x10
    ).eval()
    path = tmp_path / "net.onnx"
    try:
        torch.onnx.export(net, (torch.zeros(1, 3, 15, 20),), str(path), dynamo=dynamo)
    except Exception as error:  # no such exporter in this torch build, or its extra deps missing
        pytest.skip(f"torch.onnx.export(dynamo={dynamo}) is unavailable here: "
                    f"{type(error).__name__}: {error}")
    convs = capture(path, None).convs
    assert [geometry(c) for c in convs] == [
        (3, 15, 20, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1),
        (8, 8, 10, 16, 3, 5, 1, 1, 1, 2, 1, 2, 1, 1, 4),
        (16, 8, 10, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 16),
        (16, 8, 10, 4, 1, 1, 2, 1, 0, 0, 0, 0, 1, 1, 1),
    ]
    assert len({c.name for c in convs}) == 4
