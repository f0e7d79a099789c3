"""Capture the convolutions of a PyTorch model: `torchvision:NAME`, `timm:NAME` or
`module.path:callable`.

The model is built on the meta device, so parameters have shapes but no storage: a model with a
billion parameters builds in seconds and nothing is downloaded. torch.export traces one forward
pass at batch 2 (batch 1 can be specialised away) and the exported graph gives every 2-D and 3-D
convolution with the input size it really sees, padding done inside forward included. Where
export fails, forward hooks on the conv modules are the fallback. torch is imported inside
functions only.
"""
from __future__ import annotations

import collections
import contextlib
import difflib
import importlib
import inspect
import io
import re
import sys

from harness.models.common import DEFAULT_INPUT, Capture, ModelError, conv_problem
from harness.problem import ConvProblem, ProblemError

CAPTURE_BATCH = 2
MISSING_TORCH = "importing PyTorch models needs torch: pip install torch torchvision"

# aten ops that are a convolution. Export keeps the op the model called (conv2d, conv2d.padding
# for padding="same", conv_transpose2d, conv1d); the others appear in lower-level graphs.
_ATEN_CONVS = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "_convolution_mode", "convolution_overrideable",
    "cudnn_convolution", "cudnn_convolution_transpose", "mkldnn_convolution",
    "miopen_convolution", "miopen_convolution_transpose", "miopen_depthwise_convolution"})
_QUANTIZED_CONV = re.compile(r"conv(_transpose)?(\d)d")
_CONV_KINDS = ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
               "Conv1d", "Conv2d", "Conv3d")


def capture(source: str, input_chw: tuple[int, ...] | None) -> Capture:
    """Build `source` without weights and list its convolutions; ModelError on bad input."""
    torch = _torch()
    model = _construct(torch, source, _builder(source))
    chw = tuple(input_chw or _model_input(model) or _clip_input(source) or DEFAULT_INPUT)
    # Quantized kernels do not exist on meta; such a model stays on the CPU and runs for real.
    device = "cpu" if any(_module_kind(torch, m, "Quantized") for m in model.modules()) else "meta"
    try:
        model = model.to(device)
    except (NotImplementedError, RuntimeError) as exc:  # meta parameters in a quantized model
        raise ModelError(f"{source}: cannot put the model on {device}: {_why(exc)}") from None
    example = torch.zeros(CAPTURE_BATCH, *chw, device=device)
    try:
        exported = _export(torch, model, example)
    except Exception as export_error:  # any tracing failure: try hooks
        try:
            return _hook_capture(torch, source, model, example)
        except ModelError:
            raise
        except Exception as hook_error:
            raise ModelError(f"{source}: torch.export failed ({_why(export_error)}) and so did a "
                             f"forward pass at input {'x'.join(map(str, chw))} "
                             f"({_why(hook_error)})") from None
    return _graph_capture(source, exported.graph)


def _torch():
    try:
        import torch
        import torch.export  # a submodule `import torch` may not load
    except ImportError:
        raise ModelError(MISSING_TORCH) from None
    return torch


def _export(torch, model, example):
    """torch.export with its stderr held back: on failure it prints the partial graph (thousands
    of lines for a detection model), noise next to the one-line error or the fallback's result."""
    held = io.StringIO()
    with contextlib.redirect_stderr(held):
        exported = torch.export.export(model, (example,), strict=False)
    sys.stderr.write(held.getvalue())
    return exported


# ---- building the model ------------------------------------------------------------------------
def _builder(source: str):
    """A zero-argument callable that returns the model `source` names."""
    prefix, _, name = source.partition(":")
    if prefix == "torchvision":
        try:
            import torchvision.models as tv
        except ImportError:
            raise ModelError(f"{source}: torchvision is not installed: "
                             f"pip install torchvision") from None
        if name not in tv.list_models():
            raise ModelError(f"{source}: no torchvision model {name!r}"
                             f"{_did_you_mean(name, tv.list_models())}")
        # weights=None: no download. Segmentation and detection models also fetch an ImageNet
        # backbone unless given weights_backbone=None.
        extra = {"weights_backbone": None} if "weights_backbone" in inspect.signature(
            tv.get_model_builder(name)).parameters else {}
        return lambda: tv.get_model(name, weights=None, **extra)
    if prefix == "timm":
        try:
            import timm
        except ImportError:
            raise ModelError(f"{source}: timm is not installed: pip install timm") from None
        if not timm.is_model(name):
            raise ModelError(f"{source}: no timm model {name!r}"
                             f"{_did_you_mean(name, timm.list_models())}")
        return lambda: timm.create_model(name, pretrained=False)
    return _user_builder(source)


def _user_builder(source: str):
    module_name, _, attr = source.rpartition(":")
    if not module_name or not attr:
        raise ModelError(f"model {source!r}: expected module.path:callable")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(f"{source}: cannot import module {module_name!r}: {_why(exc)}") from None
    except Exception as exc:  # a module that raises while importing
        raise ModelError(f"{source}: importing module {module_name!r} raised {_why(exc)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"{source}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelError(f"{source}: {attr!r} is {type(obj).__name__} {_short(obj)}, "
                         f"not a callable")
    return obj


def _construct(torch, source: str, builder):
    what = f"{source.rpartition(':')[2]}()"
    try:
        model = _build(torch, builder)
    except ModelError:
        raise
    except Exception as exc:  # the user's code: report whatever it raised
        raise ModelError(f"{source}: {what} raised {_why(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{source}: {what} returned {type(model).__name__} {_short(model)}, "
                         f"not a torch.nn.Module")
    return model.eval()


def _build(torch, builder):
    """Build with meta as the default device. A constructor that reads a tensor's values (regnet's
    stage widths, `torch.linspace(...).tolist()` drop-path rates) fails there: build again on the
    CPU with each parameter moved to meta as it is registered, so init still runs on meta; a
    quantized model (prepacking needs real weights) is built on the CPU as it is."""
    attempts = (lambda: torch.device("meta"), lambda: _parameters_on_meta(torch),
                contextlib.nullcontext)
    for i, attempt in enumerate(attempts):
        try:
            with attempt():
                return builder()
        except (NotImplementedError, RuntimeError) as exc:
            if i == len(attempts) - 1 or "meta" not in str(exc).lower():
                raise


@contextlib.contextmanager
def _parameters_on_meta(torch):
    original = torch.nn.Module.register_parameter

    def register(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original


def _clip_input(source: str) -> tuple[int, ...] | None:
    """torchvision's video models (3-D convolutions) take 16-frame 112x112 RGB clips."""
    prefix, _, name = source.partition(":")
    if prefix != "torchvision":
        return None
    import torchvision.models as tv
    return (3, 16, 112, 112) if name in tv.list_models(module=tv.video) else None


def _model_input(model) -> tuple[int, int, int] | None:
    """timm models say their input size (pretrained_cfg, formerly default_cfg)."""
    for attr in ("pretrained_cfg", "default_cfg"):
        cfg = getattr(model, attr, None)
        size = cfg.get("input_size") if isinstance(cfg, dict) else None
        if size is not None and len(size) == 3:
            return tuple(int(v) for v in size)
    return None


# ---- torch.export: walk the graph ------------------------------------------------------------
def _graph_capture(source: str, graph) -> Capture:
    convs: list[ConvProblem] = []
    skipped: collections.Counter[str] = collections.Counter()
    for node in graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "_schema"):
            continue
        namespace, op = node.target.namespace, node.target._schema.name.split("::")[-1]
        quantized = _QUANTIZED_CONV.search(op) if namespace == "quantized" else None
        if quantized:  # the weight is packed and opaque; the op's name says the kind
            skipped[f"QuantizedConv{'Transpose' if quantized[1] else ''}{quantized[2]}d"] += 1
        elif namespace == "aten" and op in _ATEN_CONVS:
            args = _named_args(node)
            in_shape = tuple(int(v) for v in node.args[0].meta["val"].shape)
            weight = tuple(int(v) for v in node.args[1].meta["val"].shape)
            transposed = "transpose" in op or bool(args.get("transposed"))
            if transposed or len(weight) not in (4, 5):
                skipped[f"Conv{'Transpose' if transposed else ''}{len(weight) - 2}d"] += 1
                continue
            convs.append(_problem(source, _node_path(node, len(convs)), in_shape, weight,
                                  args.get("stride", 1), args.get("padding", 0),
                                  args.get("dilation", 1), args.get("groups", 1)))
    return Capture(tuple(convs), dict(skipped), "torch.export")


def _named_args(node) -> dict:
    """The node's arguments by schema name, defaults filled in (export omits defaulted ones)."""
    named = {}
    for i, arg in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            named[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            named[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            named[arg.name] = arg.default_value
    return named


def _node_path(node, index: int) -> str:
    """The innermost module's qualified name from nn_module_stack ({key: (path, type)}, outermost
    first); a functional conv called by the root module itself gets "conv<index>"."""
    stack = node.meta.get("nn_module_stack") or {}
    path = str(list(stack.values())[-1][0]) if stack else ""
    # Older torch wrote "L['self'].layer1[0].conv2"; a module called again may carry "@1".
    path = re.sub(r"^L\[['\"]self['\"]\]\.?", "", path)
    path = re.sub(r"\[['\"]?([^\]'\"]+)['\"]?\]", r".\1", path)
    return re.sub(r"@\d+$", "", path).strip(".") or f"conv{index}"


# ---- forward hooks: the fallback -------------------------------------------------------------
def _hook_capture(torch, source: str, model, example) -> Capture:
    """Run forward with hooks on the conv modules. A hook sees only what reaches a module:
    padding a module does inside its own forward (timm's Conv2dSame) is missed, unlike export."""
    found: list[tuple[str, tuple[int, ...], object]] = []
    skipped: collections.Counter[str] = collections.Counter()
    handles = []
    for path, module in model.named_modules():
        kind = _module_kind(torch, module, "Quantized") or _module_kind(torch, module, "")
        if kind in ("Conv2d", "Conv3d"):
            def hook(mod, inputs, output, path=path):
                found.append((path, tuple(int(v) for v in inputs[0].shape), mod))
        elif kind:
            def hook(mod, inputs, output, kind=kind):
                skipped[kind] += 1
        else:
            continue
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    convs = tuple(_problem(source, path, shape, tuple(mod.weight.shape), mod.stride, mod.padding,
                           mod.dilation, mod.groups) for path, shape, mod in found)
    return Capture(convs, dict(skipped), "forward hooks")


def _module_kind(torch, module, prefix: str) -> str | None:
    """The conv class `module` is, as prefix + "Conv2d" etc.; "Quantized": torch.ao.nn.quantized's
    (which do not derive from torch.nn's), "": torch.nn's (subclasses included)."""
    space = torch.ao.nn.quantized if prefix else torch.nn
    for kind in _CONV_KINDS:
        cls = getattr(space, kind, None)
        if cls is not None and isinstance(module, cls):
            return prefix + kind
    return None


# ---- shared ----------------------------------------------------------------------------------
def _problem(source, name, in_shape, weight, stride, padding, dilation, groups) -> ConvProblem:
    """A 2-D (weight O,I,KH,KW) or 3-D (O,I,KD,KH,KW) convolution as a ConvProblem."""
    rank = len(weight) - 2
    strides, dilations = _per_axis(stride, rank), _per_axis(dilation, rank)
    if isinstance(padding, str):
        begins, ends = zip(*(_string_pad(padding, k, d) for k, d in zip(weight[2:], dilations)))
    else:
        begins = ends = _per_axis(padding, rank)
    try:
        return conv_problem(in_shape[0], in_shape[1], in_shape[2:], weight[0], weight[2:],
                            strides, begins, ends, dilations, groups, name)
    except ProblemError as exc:
        raise ModelError(f"{source}: layer {name}: {exc}") from None


def _string_pad(mode: str, kernel: int, dilation: int) -> tuple[int, int]:
    """padding="valid"/"same" as (begin, end); PyTorch puts an odd pixel at the end."""
    total = dilation * (kernel - 1) if mode == "same" else 0
    return total // 2, total - total // 2


def _per_axis(value, rank: int) -> tuple[int, ...]:
    """A stride/padding/dilation argument, one int or one per axis, as `rank` ints (an int, or
    a one-element list as export writes `stride=[2]`, applies to every axis)."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return tuple(values) if len(values) == rank else (values[0],) * rank


def _did_you_mean(name: str, names) -> str:
    close = difflib.get_close_matches(name, list(names), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _why(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
