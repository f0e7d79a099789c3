"""The 2-D and 3-D convolutions of an ONNX model, at the input sizes ONNX shape inference gives.

No runtime is needed: the graph is read with the `onnx` package, its image input fixed to a
concrete size, and `onnx.shape_inference` propagates that size to every Conv node. Weights are
never read, only their shapes.
"""
from __future__ import annotations

import math
from pathlib import Path

from harness.models.common import Capture, ModelError, conv_problem
from harness.problem import ConvProblem, ProblemError

_STANDARD_DOMAINS = ("", "ai.onnx")
_QUANTIZED = ("QLinearConv", "ConvInteger")

# A tensor shape; None for a dimension inference could not fix.
Shape = tuple[int | None, ...]


def capture(path: Path, input_chw: tuple[int, ...] | None) -> Capture:
    """Every 2-D and 3-D Conv of the model at `path` in graph order; ModelError on a bad
    model. The capture's batch is the input's static batch dimension, if it has one."""
    try:
        import onnx
    except ImportError:
        raise ModelError("reading ONNX models needs the onnx package: pip install onnx") from None
    model = _load(onnx, path)
    batch = _fix_input(model, path, input_chw)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as error:  # onnx raises its own InferenceError/ValidationError types
        raise ModelError(f"{path}: ONNX shape inference failed: {_first_line(error)}") from None
    shapes = _known_shapes(model.graph)
    convs: list[ConvProblem] = []
    skipped: dict[str, int] = {}
    for node in model.graph.node:
        kind = _unsupported_kind(node, shapes)
        if kind:
            skipped[kind] = skipped.get(kind, 0) + 1
        elif node.op_type == "Conv" and node.domain in _STANDARD_DOMAINS:
            convs.append(_problem(onnx, node, shapes, path, f"conv{len(convs)}"))
    # Convs inside If/Loop bodies or model-local functions run at sizes the top-level inference
    # does not give; list them rather than drop them silently.
    nested = _nested_convs(model)
    if nested:
        skipped["Conv in a subgraph or function"] = nested
    return Capture(tuple(convs), skipped, "onnx shape inference", batch)


def _load(onnx, path: Path):
    if not path.is_file():
        raise ModelError(f"{path}: no such ONNX file")
    try:
        # Only shapes are needed: external weight files are left unread (and may be absent).
        model = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError, or anything else a bad file raises
        raise ModelError(f"{path}: not a valid ONNX model ({_first_line(error)})") from None
    # protobuf reads an empty file as an empty message without complaint: a model has a graph.
    if not model.HasField("graph") or not model.ir_version:
        raise ModelError(f"{path}: not a valid ONNX model (no graph or no IR version)")
    return model


def _fix_input(model, path: Path, input_chw: tuple[int, ...] | None) -> int | None:
    """Give the image input concrete dims in place (`model` is ours: freshly loaded): C,(D,)H,W
    from `input_chw` if given, and 1 for a symbolic batch (import_model sets the real batch
    later). Returns the input's static batch, None where it is symbolic."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if not inputs:
        raise ModelError(f"{path}: the graph has no input (every input is an initializer)")
    name, tensor = inputs[0].name, inputs[0].type.tensor_type
    dims = tensor.shape.dim
    static_batch = dims[0].dim_value if tensor.HasField("shape") and dims else 0
    if input_chw is not None:
        rank = 1 + len(input_chw)
        if tensor.HasField("shape") and len(dims) != rank:
            raise ModelError(f"{path}: input {name!r} has dims {_dims_text(dims)}; --input "
                             f"{'x'.join(map(str, input_chw))} needs a {rank}-D "
                             f"{'NCHW' if rank == 4 else 'NCDHW'} input")
        while len(dims) < rank:
            dims.add()
        for dim, value in zip(dims[1:], input_chw):
            dim.dim_value = value  # dim_value/dim_param are a oneof: this clears the name
    elif not tensor.HasField("shape") or (len(dims) in (4, 5)
                                          and any(d.dim_value <= 0 for d in dims[1:])):
        raise ModelError(f"{path}: input {name!r} has dims {_dims_text(dims)}, not a fixed "
                         f"image size; pass --input CxHxW (CxDxHxW for a 5-D input)")
    # Inputs of another rank (a 1-D conv's N,C,L) are left as they are: their convs are skipped.
    if dims and dims[0].dim_value <= 0:
        dims[0].dim_value = 1
    return static_batch if static_batch > 0 else None


def _known_shapes(graph) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.HasField("shape"):
            shapes[info.name] = tuple(d.dim_value if d.dim_value > 0 else None
                                      for d in tensor.shape.dim)
    for init in graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _spatial_rank(node, shapes: dict[str, Shape]) -> int | None:
    """1, 2 or 3 for a 1-D/2-D/3-D conv: from kernel_shape, else the weight's or input's rank."""
    for attr in node.attribute:
        if attr.name == "kernel_shape":
            return len(attr.ints)
    for name in reversed(node.input[:2]):
        if name in shapes:
            return len(shapes[name]) - 2
    return None


def _unsupported_kind(node, shapes: dict[str, Shape]) -> str | None:
    if node.domain not in _STANDARD_DOMAINS:
        # Vendor ops (com.microsoft FusedConv, NhwcConv, ...) are convs convbench cannot read.
        return f"{node.domain}.{node.op_type}" if _conv_like(node.op_type) else None
    if node.op_type in _QUANTIZED:
        return node.op_type
    if node.op_type == "ConvTranspose":
        return f"ConvTranspose{_spatial_rank(node, shapes) or '?'}d"
    if node.op_type == "Conv" and _spatial_rank(node, shapes) not in (2, 3, None):
        return f"Conv{_spatial_rank(node, shapes)}d"
    return None


def _problem(onnx, node, shapes: dict[str, Shape], path: Path, fallback: str) -> ConvProblem:
    name = node.name or fallback
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
    if x is None or len(x) not in (4, 5) or None in x[1:]:
        raise ModelError(f"{path}: Conv node {name!r}: shape inference could not find the size "
                         f"of its input {node.input[0]!r} ({_shape_text(x)})")
    if w is None or len(w) != len(x) or None in w:
        raise ModelError(f"{path}: Conv node {name!r}: the shape of its weight {node.input[1]!r} "
                         f"is unknown or not of its input's rank ({_shape_text(w)})")
    rank = len(x) - 2          # spatial axes: 2, or 3 with depth first (N, C, D, H, W)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    kernel = list(attrs.get("kernel_shape", w[2:]))
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(x[2:], kernel, strides, dilations, upper=auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        pads = [0] * 2 * rank
    else:
        pads = list(attrs.get("pads", [0] * 2 * rank))  # every axis' begin, then every end
    if [len(kernel), len(strides), len(dilations), len(pads)] != [rank, rank, rank, 2 * rank]:
        raise ModelError(f"{path}: Conv node {name!r}: kernel_shape {kernel}, strides {strides}, "
                         f"dilations {dilations} or pads {pads} is not of a {rank}-D conv")
    # ConvProblem cannot see the weight; a C that disagrees with it means a wrong --input.
    if x[1] != w[1] * attrs.get("group", 1):
        raise ModelError(f"{path}: Conv node {name!r}: its input has {x[1]} channels, its weight "
                         f"{_shape_text(w)} with group={attrs.get('group', 1)} expects "
                         f"{w[1] * attrs.get('group', 1)}")
    try:        # ONNX pads: every axis' begin, then every end
        return conv_problem(x[0] or 1, x[1], x[2:], w[0], kernel, strides, pads[:rank],
                            pads[rank:], dilations, attrs.get("group", 1), name)
    except ProblemError as error:
        raise ModelError(f"{path}: Conv node {name!r}: {error}") from None


def _same_pads(sizes, kernel, strides, dilations, upper: bool) -> list[int]:
    """ONNX auto_pad SAME_*: output = ceil(in / stride); the odd pixel of padding goes at the
    end for SAME_UPPER, at the beginning for SAME_LOWER."""
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def _nested_convs(model) -> int:
    count = sum(_conv_like(n.op_type) for f in model.functions for n in f.node)
    graphs = [g for node in model.graph.node for g in _subgraphs(node)]
    while graphs:
        graph = graphs.pop()
        count += sum(_conv_like(node.op_type) for node in graph.node)
        graphs += [g for node in graph.node for g in _subgraphs(node)]
    return count


def _subgraphs(node) -> list:
    """The bodies of If/Loop/Scan and the like."""
    graphs = []
    for attr in node.attribute:
        graphs += ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
    return graphs


def _conv_like(op_type: str) -> bool:
    return "Conv" in op_type and "Convert" not in op_type


def _dims_text(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.dim_value > 0 else (d.dim_param or "?")
                           for d in dims) + "]"


def _shape_text(shape: Shape | None) -> str:
    if shape is None:
        return "no shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
