"""cuDNN graph-API convolution engines through cudnn-frontend 1.16 (`import cudnn`).

One expanding algorithm, "engines": for each point it builds the convolution graph, asks the
heuristics in modes A, B and FALLBACK for engine configurations, and names every distinct plan
("eng28_k2=1_k3=0": engine global index and knob choices). Each plan is then measured like an
algorithm of its own; its name is the algorithm column of the row.

Plans are built one by one in `prepare` (`build_plan_at_index`), which is what build policy ALL
does in a loop, so that a plan's build cost (run-time compilation for some engines) lands in its
own row's setup_ms, and a plan that fails to build is an `unsupported` row with the frontend's
reason rather than a silent omission.

Numerical notes: 1.16's Python API has no per-plan notes getter. A note is read by building the
candidate list again with `select_numeric_notes([note])`: the frontend refuses a plan the filter
removed ("Deselecting execution plan") before any other check, so with the workspace cap at -1
every other plan fails the cheaper workspace check and nothing is built; plans match by name.
Checked on an H100 (cuDNN 9.19): select and deselect give complementary sets, and on fp32 data
exactly the TENSOR_CORE plans deliver TF32-level error. (`get_workspace_size_plan_at_index`
raises for a plan not yet built, so it is asked only after `build_plan_at_index`.)

Precisions: fp32 and tf32 build the same graph (io and compute FLOAT; no switch forbids TF32
tensor cores), so one run of a plan gives both rows (Algorithm.computed_as); a plan asked for
fp32 that delivers tf32 accuracy is labelled tf32. fp16/bf16 and fp8 compute in FLOAT, int8 in
INT32, fp64 in DOUBLE; fp8 and int8 results are written wider, or as a point's output asks
(precision.output_precision; 8-bit ones scaled: fused_tail). A 3-D problem is the same graph
with 5-D tensors (NCDHW or NDHWC strides) and three-entry geometry lists (`conv_geometry`).

Ops (issue 17): "engines" offers the plans of one fused forward graph (conv, bias, residual add,
ReLU); "unfused" runs the plain conv's own plan, then separate kernels (graph_epilogue.py).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from harness import epilogue
from harness.backends.base import Algorithm, Backend, Unsupported, require_fits
from harness.backends.cudnn import frontend
from harness.backends.cudnn import lib as cudnn_lib
from harness.backends.cudnn.device_buffers import (DeviceTensors, element_strides, logical_view,
                                                   poison_value)
from harness.backends.cudnn.graph_epilogue import UnfusedAlgorithm, epilogue_pack, fused_tail
# The storage conventions (bf16 as raw uint16, physical layouts, NaN poison, float64 logical
# views) are the legacy backend's; sharing them keeps both backends' buffers identical.
from harness.backends.cudnn.legacy import CudnnFailed, DeviceOutput, cuda_unavailable_reason
from harness.plan_cache import PlanCache
from harness.precision import output_precision
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

# precision -> (io data type, compute data type), as cudnn.data_type member names
PRECISION_TYPES = {"fp32": ("FLOAT", "FLOAT"), "tf32": ("FLOAT", "FLOAT"),
                   "fp16": ("HALF", "FLOAT"), "bf16": ("BFLOAT16", "FLOAT"),
                   "fp64": ("DOUBLE", "DOUBLE"), "fp8_e4m3": ("FP8_E4M3", "FLOAT"),
                   "fp8_e5m2": ("FP8_E5M2", "FLOAT"), "int8": ("INT8", "INT32")}
HEURISTIC_MODES = ("A", "B", "FALLBACK")
# Notes that say how a plan computes; the Winograd tile notes only refine WINOGRAD.
NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD",
         "NONDETERMINISTIC")
DESELECTED = "Deselecting execution plan"   # the frontend's refusal of a note-filtered plan
# Tensor uids by role; the output of bwd_data is dx (uid of x), of bwd_filter dw (uid of w).
UID_X, UID_W, UID_Y = 1, 2, 3
GRAPH_CACHE_SIZE = 24      # (3 directions + 3 fused ops) x 2 layouts x 2 storage types


@dataclass(frozen=True)
class PlanInfo:
    """What is known of one plan before it is built."""
    index: int                          # position in the A + B + FALLBACK candidate list
    engine_id: int | None
    notes: tuple[str, ...]              # numerical notes, lower case
    behavior: tuple[str, ...]           # behaviour notes, lower case (runtime_compilation, ...)
    heuristic_rank: int | None          # position in heuristic mode A's list (0 = its pick)

    @property
    def family(self) -> str:
        if "fft" in self.notes:
            return "fft"
        if "winograd" in self.notes:
            return "winograd"
        return "engine"

    @property
    def error_factor(self) -> float:
        # As for the legacy backend: transform-based algorithms round in a transformed domain
        # (Winograd ~5x a dot product's error in fp32 on an H200), so 4x keeps them in.
        return 4.0 if self.family in ("fft", "winograd") else 1.0

    def extras(self) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "numerical_notes": ",".join(self.notes),
                "behavior_notes": ",".join(self.behavior),
                "graph_heuristic_rank": self.heuristic_rank}


@dataclass
class PlanSet:
    """One built operation graph and its candidate plans, by unique name in heuristic order;
    `op` is what the graph computes (its epilogue's operands join the variant pack)."""
    graph: Any
    plans: dict[str, PlanInfo]
    op: str = epilogue.CONV


class EnginesAlgorithm(Algorithm):
    backend = "cudnn_graph"
    name = "engines"
    expands = True
    family = "engine"      # each prepared plan says its own family and error factor
    runs_3d = True         # 5-D tensors and three-entry geometry lists (conv_geometry)
    computed_as = {"tf32": "fp32"}  # one graph for both (module docstring): measured once
    ops = epilogue.OPS     # an epilogue is fused into the forward graph (graph_epilogue.py)
    description = ("every execution plan the graph-API heuristics (modes A, B, FALLBACK) "
                   "offer, one row each")

    def __init__(self, owner: CudnnGraphBackend):
        self._owner = owner

    def supports(self, point: Point) -> str | None:
        if point.precision not in PRECISION_TYPES:
            return f"precision {point.precision} has no graph-API data type here"
        return None   # everything else (layout, padding, groups) is the library's to refuse

    def variants(self, point: Point, data: ProblemData) -> list[str]:
        return list(self._owner.session().plan_set(point).plans)

    def engine_of(self, variant: str) -> str | None:
        match = re.match(r"eng\d+", variant)
        return match.group(0) if match else None

    def prepare(self, point: Point, data: ProblemData) -> GraphPrepared:
        session = self._owner.session()
        plan_set = session.plan_set(point)
        info = plan_set.plans.get(point.algorithm)
        if info is None:
            raise Unsupported(f"the heuristics offer no plan {point.algorithm} for this point")
        return session.prepare(point, data, plan_set, info)


@dataclass
class GraphPrepared(DeviceOutput):
    execute: Any                        # the graph's bound _execute_plan_at_index
    variant_pack: dict[int, int]        # uid -> device pointer, built once
    workspace: Any
    index: int
    handle: int
    errors: tuple[type, ...]
    output_buffer: Any
    output_view: Any
    poison_value: Any
    stream: Any
    workspace_bytes: int
    family: str = "engine"
    error_factor: float = 1.0
    keepalive: list = field(default_factory=list)
    device: str = "cuda"
    extras: dict[str, Any] = field(default_factory=dict)

    def launch(self) -> None:
        try:
            self.execute(self.variant_pack, self.workspace.data.ptr, self.index, self.handle)
        except self.errors as err:
            raise CudnnFailed(f"execute_plan_at_index({self.index}) failed: {err}",
                              frontend_status(err)) from None

    def release(self) -> None:
        super().release()
        self.workspace = None


class CudnnGraphBackend(Backend):
    name = "cudnn_graph"
    device = "cuda"
    description = "cuDNN graph-API engine configurations (cudnn-frontend execution plans)"

    def __init__(self) -> None:
        self._algorithms = [EnginesAlgorithm(self), UnfusedAlgorithm(self)]
        self._session: _Session | None = None

    def unavailable_reason(self) -> str | None:
        reason = cuda_unavailable_reason()
        if reason:
            return reason
        return frontend.planning_refusal()

    def algorithms(self) -> list[Algorithm]:
        return list(self._algorithms)

    def session(self) -> _Session:
        if self._session is None:
            self._session = _Session()
        return self._session


class _Session:
    """One stream and frontend handle, device copies of the current problem's tensors, and the
    built graphs of the last few (problem, direction, storage type, layout) keys."""

    def __init__(self) -> None:
        import cupy
        refusal = frontend.refusal()
        if refusal:
            raise Unsupported(refusal)
        cudnn = frontend.load()
        self.cudnn = cudnn
        self.cupy = cupy
        self.errors = (cudnn.cudnnGraphNotSupportedError, RuntimeError)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=self.stream.ptr)
        self.tensors = DeviceTensors(self.cupy)
        self._plan_sets: OrderedDict[str, PlanSet] = OrderedDict()
        self._plan_cache = PlanCache()      # the run's, where it keeps one

    # ---- graphs and plans ---------------------------------------------------------------------
    def plan_set(self, point: Point) -> PlanSet:
        key = _plan_set_key(point)
        if key not in self._plan_sets:
            self._plan_sets[key] = self._enumerate(point, key)
            while len(self._plan_sets) > GRAPH_CACHE_SIZE:
                self._plan_sets.popitem(last=False)
        self._plan_sets.move_to_end(key)
        return self._plan_sets[key]

    def _enumerate(self, point: Point, key: str) -> PlanSet:
        graph = self._candidates(point, HEURISTIC_MODES)
        names: dict[str, int] = {}
        for index in range(graph.get_execution_plan_count()):
            # A + B + FALLBACK repeat configurations; the first occurrence stands for them.
            names.setdefault(graph.get_plan_name_at_index(index), index)
        labels = self._plan_cache.lookup(key, list(names))
        if labels is None:      # asked afresh: 30 of a plan set's 36 ms (harness/plan_cache)
            ranks, notes = self._mode_a_ranks(point), self._notes(point, set(names))
            labels = {name: (tuple(sorted(notes[name])), self._behavior(graph, index),
                             ranks.get(name)) for name, index in names.items()}
            self._plan_cache.store(key, labels)
        plans = {name: PlanInfo(index, _engine_id(name), *labels[name])
                 for name, index in names.items()}
        return PlanSet(graph, plans, point.op)

    def _candidates(self, point: Point, modes: tuple[str, ...]) -> Any:
        """A validated operation graph with its heuristic candidates, nothing built yet."""
        graph = _conv_graph(self.cudnn, self.handle, point)
        try:
            graph.validate()
            graph.build_operation_graph()
            graph.create_execution_plans([getattr(self.cudnn.heur_mode, m) for m in modes])
        except self.errors as err:
            raise Unsupported(f"the graph API offers no engine for this point: "
                              f"{_reason(err)}") from None
        return graph

    def _mode_a_ranks(self, point: Point) -> dict[str, int]:
        try:
            graph = self._candidates(point, ("A",))
        except Unsupported:
            return {}     # mode A alone may offer nothing where B or FALLBACK do
        ranks: dict[str, int] = {}
        for index in range(graph.get_execution_plan_count()):
            ranks.setdefault(graph.get_plan_name_at_index(index), len(ranks))
        return ranks

    def _notes(self, point: Point, names: set[str]) -> dict[str, set[str]]:
        notes: dict[str, set[str]] = {name: set() for name in names}
        for note in NOTES:
            for name in self._plans_with_note(point, note):
                if name in notes:
                    notes[name].add(note.lower())
        return notes

    def _plans_with_note(self, point: Point, note: str) -> list[str]:
        """Names of the candidates that survive select_numeric_notes([note]), found without
        building any plan (see the module docstring)."""
        graph = self._candidates(point, HEURISTIC_MODES)
        graph.select_numeric_notes([getattr(self.cudnn.numerical_note, note)])
        graph.deselect_workspace_greater_than(-1)
        kept = []
        for index in range(graph.get_execution_plan_count()):
            try:
                graph.build_plan_at_index(index)
            except self.errors as err:
                if DESELECTED in str(err):
                    continue
            kept.append(graph.get_plan_name_at_index(index))
        return kept

    def _behavior(self, graph: Any, index: int) -> tuple[str, ...]:
        try:
            notes = graph.get_behavior_notes_for_plan_at_index(index)
        except self.errors:
            return ()
        return tuple(sorted(n.name.lower() for n in notes))

    # ---- binding one plan to the point's buffers ----------------------------------------------
    def prepare(self, point: Point, data: ProblemData, plan_set: PlanSet,
                info: PlanInfo) -> GraphPrepared:
        graph = plan_set.graph
        try:
            graph.build_plan_at_index(info.index)   # idempotent: a built plan is reused
        except self.errors as err:
            raise Unsupported(f"plan {point.algorithm} does not build: {_reason(err)}") from None
        needed = int(graph.get_workspace_size_plan_at_index(info.index))
        require_fits(needed, point.workspace_limit)
        tensors = self.tensors.get(point, data)
        workspace = self.cupy.empty(max(needed, 1), dtype=self.cupy.uint8)
        pack, out_buffer = _variant_pack(point.direction, tensors, plan_set.op)
        return GraphPrepared(
            execute=graph._execute_plan_at_index, variant_pack=pack, workspace=workspace,
            index=info.index, handle=self.handle, errors=self.errors, output_buffer=out_buffer,
            output_view=logical_view(point, out_buffer),
            poison_value=poison_value(point.result_precision), stream=self.stream,
            workspace_bytes=needed, family=info.family, error_factor=info.error_factor,
            keepalive=[graph], extras=info.extras())


# ---- graph construction ---------------------------------------------------------------------
def _conv_graph(cudnn: Any, handle: int, point: Point) -> Any:
    """The point's convolution as a one-node graph; every tensor has explicit dims and strides
    (cuDNN cannot infer the outputs of dgrad and wgrad)."""
    p = point.problem
    io_name, compute_name = PRECISION_TYPES[point.precision]
    io, compute = getattr(cudnn.data_type, io_name), getattr(cudnn.data_type, compute_name)
    own, result = (getattr(cudnn.data_type, PRECISION_TYPES[name][0]) for name in
                   (output_precision(point.precision, point.direction), point.result_precision))
    between = cudnn.data_type.FLOAT if compute_name == "INT32" else compute
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=between,
                          compute_data_type=compute, handle=handle)
    shapes = {UID_X: p.input_shape, UID_W: p.weight_shape, UID_Y: p.output_shape}

    def tensor(uid: int, name: str) -> Any:
        return graph.tensor(name=name, dim=list(shapes[uid]),
                            stride=list(element_strides(shapes[uid], point.layout)),
                            data_type=io, uid=uid)

    geometry = dict(**conv_geometry(p), compute_data_type=compute)
    if point.direction == "fwd":
        out = graph.conv_fprop(image=tensor(UID_X, "x"), weight=tensor(UID_W, "w"), **geometry)
        out = fused_tail(graph, out, point, own, between)  # epilogue and 8-bit scale, if any
        out_uid = UID_Y
    elif point.direction == "bwd_data":
        out = graph.conv_dgrad(loss=tensor(UID_Y, "dy"), filter=tensor(UID_W, "w"), **geometry)
        out_uid = UID_X
    else:
        out = graph.conv_wgrad(image=tensor(UID_X, "x"), loss=tensor(UID_Y, "dy"), **geometry)
        out_uid = UID_W
    out.set_output(True).set_dim(list(shapes[out_uid])).set_data_type(result).set_uid(out_uid)
    out.set_stride(list(element_strides(shapes[out_uid], point.layout)))
    return graph


def conv_geometry(p: ConvProblem) -> dict[str, list[int]]:
    """The conv node's per-axis lists, one entry per spatial axis outermost first ((depth,)
    height, width): 4-D tensors take two, 5-D three. Padding goes as pre / post lists, so
    asymmetric padding is expressed as it is."""
    spatial = p.spatial
    return {"pre_padding": [a.pad_begin for a in spatial],
            "post_padding": [a.pad_end for a in spatial],
            "stride": [a.stride for a in spatial], "dilation": [a.dilation for a in spatial]}


def _variant_pack(direction: str, tensors: dict[str, Any],
                  op: str = epilogue.CONV) -> tuple[dict[int, int], Any]:
    """uid -> device pointer (plain ints are what the frontend takes), and the output buffer;
    `op` is the graph's (the unfused algorithm binds a plain graph to a fused point's tensors)."""
    roles = {"fwd": ("x", "w", "y"), "bwd_data": ("dx", "w", "dy"),
             "bwd_filter": ("x", "dw", "dy")}[direction]
    out = {"fwd": "y", "bwd_data": "dx", "bwd_filter": "dw"}[direction]
    pack = {uid: tensors[name].data.ptr for uid, name in zip((UID_X, UID_W, UID_Y), roles)}
    return {**pack, **epilogue_pack(op, tensors)}, tensors[out]


def _plan_set_key(point: Point) -> str:
    """What a point's plans depend on, in this process and across runs (harness/plan_cache):
    by op too, so a fused point is never given the plain convolution's plans."""
    storage = "/".join(PRECISION_TYPES[point.precision])
    return "|".join((point.problem.shape_id(), point.direction, point.op, storage,
                     str(point.result_precision), point.layout))


def _engine_id(plan_name: str) -> int | None:
    match = re.match(r"eng(\d+)", plan_name)
    return int(match.group(1)) if match else None


def frontend_status(err: BaseException) -> int | None:
    """The cuDNN status of a failed frontend call, as a number. The frontend raises a plain
    RuntimeError whose text names the status (cudnnGetErrorString) after cuDNN's last-error
    text, so the last status name in it is the call's."""
    names = re.findall(r"CUDNN_STATUS_[A-Z0-9_]+", str(err))
    return cudnn_lib.status_code(names[-1]) if names else None


def _reason(err: BaseException, limit: int = 400) -> str:
    """The frontend's message on one line (it spans several), cut to a row-sized reason."""
    text = " | ".join(line.strip() for line in str(err).splitlines() if line.strip())
    text = text or type(err).__name__
    return text if len(text) <= limit else text[:limit] + "..."
