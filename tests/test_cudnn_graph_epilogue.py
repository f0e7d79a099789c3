"""cudnn_graph's epilogues (issue 17), checked without a GPU: the fused graph's calls on a
recording stand-in for the frontend, the bias tensor's dims and strides, the variant pack, the
unfused steps' broadcasting on NumPy buffers in both layouts, and the unfused algorithm's
refusals. Their runs are tests/test_cudnn_graph_gpu.py's test_ops_*."""
from __future__ import annotations

import numpy as np
import pytest

from harness import backends, epilogue, reference, schema
from harness.backends.cudnn import graph as cudnn_graph
from harness.backends.cudnn.device_buffers import physical_axes
from harness.backends.cudnn.graph_epilogue import (UID_BIAS, UID_RESIDUAL, bias_dims, bias_strides,
                                                   epilogue_pack, epilogue_steps)
from harness.problem import ConvProblem
from harness.sweep import Point

P2 = ConvProblem(2, 3, 5, 5, 4, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
P3 = ConvProblem(1, 2, 4, 4, 6, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                 in_d=3, kernel_d=1)


def _point(problem, op, layout="NCHW", precision="fp16", direction="fwd",
           algorithm="engines") -> Point:
    return Point(problem, direction, precision, layout, "cudnn_graph", algorithm, op=op)


@pytest.mark.parametrize("problem, layout, dims, strides", [
    (P2, "NCHW", (1, 4, 1, 1), (4, 1, 1, 1)),
    (P2, "NHWC", (1, 4, 1, 1), (4, 1, 4, 4)),
    (P3, "NCHW", (1, 6, 1, 1, 1), (6, 1, 1, 1, 1)),
    (P3, "NHWC", (1, 6, 1, 1, 1), (6, 1, 6, 6, 6)),
])
def test_bias_tensor_is_one_value_per_channel_with_channel_stride_one(problem, layout, dims,
                                                                      strides):
    assert bias_dims(problem) == dims
    assert bias_strides(problem, layout) == strides


class _Tensor:
    """A frontend tensor: records its attributes, chains like the real one."""

    def __init__(self, **attrs):
        self.attrs = dict(attrs)

    def __getattr__(self, name):
        if not name.startswith("set_"):
            raise AttributeError(name)

        def setter(value):
            self.attrs[name[4:]] = value
            return self
        return setter


class _Graph:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls: list[tuple[str, dict]] = []
        self.results: list[_Tensor] = []      # each node's output, in order

    def _node(self, kind, **kwargs):
        self.calls.append((kind, kwargs))
        self.results.append(_Tensor(virtual=True))
        return self.results[-1]

    def tensor(self, **kwargs):
        self.calls.append(("tensor", kwargs))
        return _Tensor(**kwargs)

    def conv_fprop(self, **kwargs):
        return self._node("conv_fprop", **kwargs)

    def bias(self, **kwargs):
        return self._node("bias", **kwargs)

    def add(self, **kwargs):
        return self._node("add", **kwargs)

    def relu(self, **kwargs):
        return self._node("relu", **kwargs)


class _Frontend:
    class data_type:
        FLOAT, HALF, BFLOAT16, DOUBLE = "FLOAT", "HALF", "BFLOAT16", "DOUBLE"

    def pygraph(self, **kwargs):
        return _Graph(**kwargs)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", epilogue.OPS)
def test_fused_graph_chains_the_epilogue_and_outputs_only_its_last_tensor(op, layout):
    point = _point(P2, op, layout)
    graph = cudnn_graph._conv_graph(_Frontend(), handle=0, point=point)
    kinds = [kind for kind, _ in graph.calls if kind != "tensor"]
    expected = ["conv_fprop"] + {"conv": [], "conv_bias": ["bias"],
                                 "conv_bias_relu": ["bias", "relu"],
                                 "conv_bias_add_relu": ["bias", "add", "relu"]}[op]
    assert kinds == expected
    tensors = {kw["uid"]: kw for kind, kw in graph.calls if kind == "tensor"}
    assert set(tensors) == {1, 2} | ({UID_BIAS} if epilogue.needs_bias(op) else set()) | (
        {UID_RESIDUAL} if epilogue.needs_residual(op) else set())
    y_strides = list(cudnn_graph.element_strides(P2.output_shape, layout))
    if epilogue.needs_bias(op):
        assert tensors[UID_BIAS]["dim"] == [1, 4, 1, 1]
        assert tensors[UID_BIAS]["stride"] == list(bias_strides(P2, layout))
        assert tensors[UID_BIAS]["data_type"] == "HALF"
    if epilogue.needs_residual(op):
        assert tensors[UID_RESIDUAL]["dim"] == list(P2.output_shape)
        assert tensors[UID_RESIDUAL]["stride"] == y_strides
    nodes = [kw for kind, kw in graph.calls if kind != "tensor"]
    for node in nodes[1:]:
        assert node["compute_data_type"] == "FLOAT"
        first = node.get("input", node.get("a"))
        # the step's input is the previous node's virtual output, in the compute type
        assert first.attrs["virtual"] and "output" not in first.attrs
        assert first.attrs["data_type"] == "FLOAT" and first.attrs["stride"] == y_strides
    if op != "conv":
        assert nodes[1]["bias"].attrs["uid"] == UID_BIAS
    if epilogue.needs_residual(op):
        assert nodes[2]["b"].attrs["uid"] == UID_RESIDUAL


@pytest.mark.parametrize("op", epilogue.OPS)
def test_only_the_last_tensor_is_the_output_with_the_io_type_and_ys_uid(op):
    graph = cudnn_graph._conv_graph(_Frontend(), 0, _point(P2, op, "NHWC"))
    *inner, last = graph.results
    assert last.attrs["output"] is True and last.attrs["uid"] == 3
    assert last.attrs["data_type"] == "HALF" and last.attrs["dim"] == list(P2.output_shape)
    assert last.attrs["stride"] == list(cudnn_graph.element_strides(P2.output_shape, "NHWC"))
    assert not any("output" in t.attrs for t in inner)


class _Buffer:
    def __init__(self, ptr):
        self.data = type("Ptr", (), {"ptr": ptr})()


def test_variant_pack_names_exactly_the_graphs_tensors():
    tensors = {name: _Buffer(ptr) for ptr, name in enumerate(
        ("x", "w", "y", "dx", "dw", "dy", "bias", "residual"), start=100)}
    pack, out = cudnn_graph._variant_pack("fwd", tensors, "conv_bias_add_relu")
    assert pack == {1: 100, 2: 101, 3: 102, UID_BIAS: 106, UID_RESIDUAL: 107}
    assert out is tensors["y"]
    # the unfused algorithm binds the plain graph to a fused point's tensors
    assert cudnn_graph._variant_pack("fwd", tensors)[0] == {1: 100, 2: 101, 3: 102}
    assert epilogue_pack("conv_bias_relu", tensors) == {UID_BIAS: 106}


@pytest.mark.parametrize("problem", [P2, P3], ids=["2d", "3d"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", epilogue.OPS[1:])
def test_unfused_steps_broadcast_the_bias_over_the_physical_layout(op, layout, problem):
    data = reference.make_data(problem, "fp64", seed=3, op=op)
    conv = reference.reference(problem, "fwd", data)
    order = physical_axes(conv.ndim, layout)
    y = np.ascontiguousarray(conv.transpose(order))          # the buffer as cuDNN writes it
    residual = (None if data.residual is None
                else np.ascontiguousarray(data.residual.transpose(order)))
    steps = epilogue_steps(np, op, y, data.bias.copy(), residual, layout)
    assert len(steps) == 1 + epilogue.needs_residual(op) + epilogue.has_relu(op)
    before = y.ctypes.data
    for step in steps:
        step()
    assert y.ctypes.data == before                            # in place, nothing allocated
    logical = y.transpose(np.argsort(order))
    np.testing.assert_allclose(logical, reference.reference(problem, "fwd", data, op=op),
                               rtol=1e-12, atol=1e-12)


def test_unfused_refuses_plain_convolution_backward_and_bf16():
    algo = backends.get("cudnn_graph").algorithm("unfused")
    assert algo.directions == ("fwd",) and algo.runs_3d
    assert "plain convolution" in algo.refusal(_point(P2, "conv", algorithm="unfused"))
    assert "forward direction only" in algo.refusal(
        _point(P2, "conv_bias", direction="bwd_data", algorithm="unfused"))
    assert "bf16" in algo.refusal(_point(P2, "conv_bias", precision="bf16",
                                         algorithm="unfused"))
    for op in epilogue.OPS[1:]:
        for layout in ("NCHW", "NHWC"):
            assert algo.refusal(_point(P3, op, layout, algorithm="unfused")) is None


def test_engines_take_every_op_and_the_backend_lists_both_without_cupy():
    backend = backends.get("cudnn_graph")
    assert [a.name for a in backend.algorithms()] == ["engines", "unfused"]
    engines = backend.algorithm("engines")
    assert engines.ops == epilogue.OPS
    for op in epilogue.OPS:
        assert engines.refusal(_point(P2, op)) is None
    assert schema.EXTRA_COLUMNS["conv_plan"] == "string"


def test_a_plain_convolution_sweep_plans_no_unfused_rows():
    """`unfused` means nothing for plain convolution or the backward directions: no row at all
    there (a refusal per forward point would bloat every cudnn_graph sweep), a row for ops."""
    from harness import runner
    p = ConvProblem(1, 8, 8, 8, 8, 3, 3)
    planned = {(d, op): runner._exists(Point(p, d, "fp16", "NHWC", "cudnn_graph", "unfused", op=op))
               for d in ("fwd", "bwd_data") for op in ("conv", "conv_bias_relu")}
    assert planned == {("fwd", "conv"): False, ("bwd_data", "conv"): False,
                       ("fwd", "conv_bias_relu"): True, ("bwd_data", "conv_bias_relu"): False}
    assert runner._exists(Point(p, "bwd_data", "fp16", "NHWC", "cudnn_graph", "engines"))
