"""Issue 17's epilogues on the graph API: the fused graph's tail and the unfused sequence.

Fused ("engines" on an op other than conv): the forward graph is conv_fprop -> bias add ->
(residual add) -> (ReLU), one operation graph, so the heuristics offer plans whose kernels apply
the epilogue before the output leaves the chip. The convolution's result and each step before
the last are virtual tensors in the compute type (never written to memory); only the final
tensor is the graph's output, with y's io type, dims, strides and uid. Frontend calls (the
pybind11 bindings in cudnn-frontend's python/pygraph/pointwise.cpp and its conv + bias + ReLU
test, test/python/conv/graph/test_conv_bias.py): `graph.bias(input=, bias=)` and
`graph.add(a=, b=)` are pointwise ADD, `graph.relu(input=)` is RELU_FWD with the library's
default lower clip of 0, each taking `compute_data_type=` and `name=`.

Unfused ("unfused"): what an eager framework does. The frontend's own plan for the plain
convolution (the plain graph's heuristic mode A first plan: what the frontend would run for it
alone; only that plan, so under a tight workspace limit the row may exceed it) writes y, then
the epilogue runs as separate CuPy kernels on the same stream, in place on y: y += b, y += z,
y = max(y, 0). Each step reads and writes y once more, which is the memory traffic fusion
saves. The steps allocate nothing and never wait on the host, so the timer can capture the
whole launch() into a CUDA graph like a fused plan's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harness import epilogue
from harness.backends.base import Algorithm, Prepared, Unsupported
from harness.backends.cudnn.device_buffers import element_strides, physical_shape
from harness.precision import is_narrow
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

# New tensor uids beside cudnn_graph's x, w, y (1, 2, 3).
UID_BIAS, UID_RESIDUAL, UID_SCALE = 4, 5, 6


def bias_dims(p: ConvProblem) -> tuple[int, ...]:
    """The bias as the graph sees it: one value per output channel, broadcast over the batch and
    every spatial axis ([1, K, 1, 1], or [1, K, 1, 1, 1] for 3-D)."""
    return (1, p.out_channels, *([1] * len(p.spatial)))


def bias_strides(p: ConvProblem, layout: str) -> tuple[int, ...]:
    """Strides of the bias in the point's layout; its K values are contiguous either way (the
    buffer is the plain (K,) vector), but the graph matches tensor layouts by stride order."""
    return element_strides(bias_dims(p), layout)


def fused_tail(graph: Any, conv_out: Any, point: Point, io: Any, compute: Any) -> Any:
    """The epilogue of `point.op` appended to the conv node's output, then, for a result written
    in an 8-bit type, the multiply by its scale (Point.result_scale) that the type
    conversion follows; returns the graph's last tensor (conv_out itself for plain conv into a
    wide type). The caller makes it the output (y's uid). `io` is the type the bias and residual
    are stored in (the precision's own result type), `compute` the epilogue's."""
    p = point.problem
    out = _epilogue(graph, conv_out, point, io, compute)
    if not is_narrow(point.result_precision):
        return out
    rank = len(p.output_shape)
    scale = graph.tensor(name="y_scale", dim=[1] * rank, stride=[1] * rank, data_type=compute,
                         uid=UID_SCALE)
    out = out.set_dim(list(p.output_shape)).set_data_type(compute)
    out.set_stride(list(element_strides(p.output_shape, point.layout)))
    return graph.scale(input=out, scale=scale, compute_data_type=compute, name="y_scale")


def _epilogue(graph: Any, conv_out: Any, point: Point, io: Any, compute: Any) -> Any:
    """fused_tail's bias, residual add and ReLU."""
    op, p = point.op, point.problem
    if not epilogue.needs_bias(op):
        return conv_out
    shape = list(p.output_shape)
    strides = list(element_strides(p.output_shape, point.layout))

    def virtual(t: Any) -> Any:
        # Explicit dims and strides, as every other tensor of the graph has; the type is the
        # compute type, so the intermediate sums are not rounded to fp16 between steps.
        return t.set_dim(shape).set_stride(strides).set_data_type(compute)

    bias = graph.tensor(name="bias", dim=list(bias_dims(p)),
                        stride=list(bias_strides(p, point.layout)), data_type=io, uid=UID_BIAS)
    out = graph.bias(input=virtual(conv_out), bias=bias, compute_data_type=compute,
                     name="bias")
    if epilogue.needs_residual(op):
        residual = graph.tensor(name="residual", dim=shape, stride=strides, data_type=io,
                                uid=UID_RESIDUAL)
        out = graph.add(a=virtual(out), b=residual, compute_data_type=compute,
                        name="residual_add")
    if epilogue.has_relu(op):
        out = graph.relu(input=virtual(out), compute_data_type=compute, name="relu")
    return out


def epilogue_pack(op: str, tensors: dict[str, Any]) -> dict[int, int]:
    """The variant pack's entries for the epilogue operands a graph of `op` reads."""
    pack = {}
    if epilogue.needs_bias(op):
        pack[UID_BIAS] = tensors["bias"].data.ptr
    if epilogue.needs_residual(op):
        pack[UID_RESIDUAL] = tensors["residual"].data.ptr
    if "y_scale" in tensors:                   # an 8-bit result (fused_tail's scale node)
        pack[UID_SCALE] = tensors["y_scale"].data.ptr
    return pack


def epilogue_steps(xp: Any, op: str, y: Any, bias: Any, residual: Any,
                   layout: str) -> list[Callable[[], None]]:
    """The unfused epilogue: one in-place call (one kernel) per step on `y`, the output in its
    physical layout. `bias` is the (K,) vector; `residual` is shaped and laid out like y. Written
    against an array module so NumPy can check it without a GPU."""
    steps: list[Callable[[], None]] = []
    if epilogue.needs_bias(op):
        # The channel is axis 1 of NCHW but the innermost axis of an NHWC buffer: the broadcast
        # view takes the bias dims in the buffer's physical order.
        b = bias.reshape(physical_shape((1, bias.shape[0], *([1] * (y.ndim - 2))), layout))
        steps.append(lambda: xp.add(y, b, out=y))
    if epilogue.needs_residual(op):
        steps.append(lambda: xp.add(y, residual, out=y))
    if epilogue.has_relu(op):
        steps.append(lambda: xp.maximum(y, 0, out=y))
    return steps


class UnfusedAlgorithm(Algorithm):
    backend = "cudnn_graph"
    name = "unfused"
    family = "engine"
    directions = ("fwd",)          # epilogues exist for the forward direction only
    runs_3d = True
    ops = epilogue.OPS             # conv gets supports()'s reason rather than the generic one
    description = ("the frontend's own conv plan, then bias, residual add and ReLU as "
                   "separate kernels")

    def __init__(self, owner: Any):
        self._owner = owner        # the CudnnGraphBackend (its session builds and caches plans)

    def exists_for(self, point: Point) -> bool:
        # plain convolution has nothing to leave unfused: no row (every cudnn_graph sweep of
        # plain convolutions would otherwise carry one refusal per forward point)
        return super().exists_for(point) and point.op != epilogue.CONV

    def supports(self, point: Point) -> str | None:
        if point.op == epilogue.CONV:
            return "plain convolution: the engines rows are this convolution, unfused or not"
        if point.direction != "fwd":
            return f"epilogues exist for the forward direction only, not {point.direction}"
        if point.result_precision == "bf16":
            return "bf16: CuPy has no bfloat16 arithmetic for the separate epilogue kernels"
        if is_narrow(point.result_precision):
            return (f"an {point.result_precision} result: the separate epilogue kernels add in "
                    f"the result's type, and CuPy has no kernel that scales and rounds to it")
        return None

    def prepare(self, point: Point, data: ProblemData) -> UnfusedPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        session = self._owner.session()
        plan_set = session.plan_set(replace(point, op=epilogue.CONV))
        picked = [(name, info) for name, info in plan_set.plans.items()
                  if info.heuristic_rank == 0]
        if not picked:
            raise Unsupported("heuristic mode A offers no plan for the plain convolution")
        name, info = picked[0]
        conv = session.prepare(point, data, plan_set, info)
        tensors = session.tensors.get(point, data)
        steps = epilogue_steps(session.cupy, point.op, conv.output_buffer, tensors.get("bias"),
                               tensors.get("residual"), point.layout)
        # No graph_heuristic_rank: the selection's graph_heuristic policy reads that column, and
        # this row is not one of the heuristics' plans for the fused op.
        extras = {"conv_plan": name, "engine_id": info.engine_id,
                  "numerical_notes": ",".join(info.notes),
                  "behavior_notes": ",".join(info.behavior)}
        return UnfusedPrepared(conv, steps, conv.workspace_bytes, conv.stream, extras,
                               info.family, info.error_factor)


@dataclass
class UnfusedPrepared(Prepared):
    conv: Any                           # the plain convolution's GraphPrepared
    steps: list[Callable[[], None]]
    workspace_bytes: int
    stream: Any
    extras: dict[str, Any] = field(default_factory=dict)
    family: str | None = None
    error_factor: float | None = None
    device: str = "cuda"

    def launch(self) -> None:
        self.conv.launch()
        with self.stream:                # CuPy launches on the current stream: the conv's
            for step in self.steps:
                step()

    def poison(self) -> None:
        self.conv.poison()

    def output(self) -> Any:
        return self.conv.output()

    def release(self) -> None:
        self.steps = []
        self.conv.release()
