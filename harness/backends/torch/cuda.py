"""What PyTorch's GPU algorithms share (torch_gpu's convolutions, harness/backends/torch/gpu.py,
and its recurrent layers, rnn_gpu.py): torch loaded lazily, the check that it can run on this
GPU, the TF32 switches, and the record of which kernels one call ran (PyTorch's profiler)."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from harness import call_bound
from harness.backends.base import Unsupported
from harness.sweep import Point


def load_torch() -> Any:
    import torch  # lazy: heavy, optional
    return torch


def torch_for(point: Point) -> Any:
    """torch, ready to run `point` on the GPU: loaded, its CUDA checked (Unsupported, with the
    reason, where it cannot run), and TF32 allowed only where the point asks for tf32."""
    torch = load_torch()
    refusal = cuda_refusal(torch)
    if refusal:
        raise Unsupported(refusal)
    allow_tf32(torch, point.precision == "tf32")
    return torch


def captured(torch: Any, stream: Any, calls: int, launch: Callable[[], None],
             kept: list) -> Callable[[], None]:
    """`calls` launches captured into a CUDA graph through PyTorch on `stream` (the graph timer's
    capture for a library whose allocator must know: PyTorch keeps what the calls allocate in
    the graph's private pool, so the graph goes into `kept`, held until its results are let
    go); returns the replay. Raises CaptureFailed where PyTorch cannot capture the calls (the
    held stream then times them)."""
    from harness.graph_timer import CaptureFailed
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                launch()
    except RuntimeError as err:
        raise CaptureFailed(f"torch.cuda.graph: {err}") from err
    kept.append(graph)

    def replay() -> None:
        with torch.cuda.stream(stream):
            graph.replay()
    return replay


def cuda_refusal(torch: Any) -> str | None:
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU"
    if not torch.backends.cudnn.is_available():
        return f"torch {torch.__version__} has no cuDNN"
    return None


def allow_tf32(torch: Any, allowed: bool) -> None:
    """TF32 for convolutions and matmuls, through the fp32_precision switches where this torch
    has them (2.9+, where allow_tf32 is deprecated), else through allow_tf32."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        mode = "tf32" if allowed else "ieee"
        conv.fp32_precision = mode
        torch.backends.cuda.matmul.fp32_precision = mode
    else:
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = allowed


def recorded_kernels(torch: Any, stream: Any,
                     call: Callable[[], Any]) -> tuple[dict[str, Any], float | None]:
    """The kernels one call runs (`torch_kernels`) and their summed device time, seen by
    PyTorch's profiler (Kineto, CUPTI): for a convolution, the autotuner's pick, which sits in
    PyTorch's per-process cache that no API shows (two worker processes may pick differently:
    harness/process_split.py compares them); for a recurrent layer, the cuDNN RNN kernels
    PyTorch's choice of algorithm ran. None where the profiler fails or sees no kernel: the row
    then says the kernels were not recorded. Also the time they kept the GPU busy (their
    intervals' union: harness/call_bound.py), or None."""
    ran = False

    def counted() -> None:
        nonlocal ran
        call()
        ran = True
    try:
        # torch.autograd's profiler, which torch.profiler.profile wraps (device activity only,
        # through Kineto, is what profile(activities=[CUDA]) asks of it): the wrapper's first
        # use imports torch._inductor, _dynamo and sympy, 1.2 s with bytecode cached and 5-8 s
        # without, in every worker process (issue 38's quick profile on an H100).
        with torch.autograd.profiler.profile(use_device="cuda", use_kineto=True,
                                             use_cpu=False) as prof:
            with torch.cuda.stream(stream):
                counted()
            stream.synchronize()
        kernels = device_events(prof.kineto_results.events(), torch.autograd.DeviceType.CUDA)
    # Kineto/CUPTI missing or refusing (another profiler attached) raises RuntimeError, its
    # results' reading others: the pick is only a note, so any failure leaves it unknown and
    # the row still times PyTorch's call. The call is made all the same (a caller reads what
    # it allocated: rnn_gpu._profiled).
    except Exception:
        kernels = []
        if not ran:
            with torch.cuda.stream(stream):
                call()
            stream.synchronize()
    summary = kernel_summary(kernels)
    text, ms, busy = summary if summary else (None, None, None)
    return {"torch_kernels": text, "torch_kernels_ms": ms}, busy


def device_events(events: Any, cuda: Any) -> list[tuple[str, float, float]]:
    """(name, start ns, end ns) of the device events among the profiler's raw Kineto events
    (`cuda`: their device type, torch.autograd.DeviceType.CUDA). Read raw, not as the
    profiler's `function_events`, whose tree it builds in Python event by event: a plain-loop
    GRU of 1,500 steps runs ~140,000 kernels, and its prepare took 17.4 s on an H200
    (evidence/logs/issue40-stop59-nvidia-h200-2026-11-28.txt)."""
    return [(e.name(), e.start_ns(), e.end_ns()) for e in events if e.device_type() == cuda]


def kernel_summary(kernels: list[tuple[str, float, float]]) -> tuple[str, float, float] | None:
    """Device events (device_events) -> (their sorted unique short names joined by "+", their
    summed device time in ms, the ms at least one of them ran); None when there is none."""
    if not kernels:
        return None
    # each distinct name labelled once: a plain-loop GRU step of 375 steps ran 34,501 kernels
    # of a few names, and labelling each took 4.3 s of a 30.7 s row on an H200
    # (evidence/logs/issue40-stop58-nvidia-h200-2026-11-28.txt)
    names = sorted({kernel_label(name) for name in {name for name, _, _ in kernels}})
    spans = [(start, end) for _, start, end in kernels]
    return ("+".join(names), sum(end - start for start, end in spans) / 1e6,
            call_bound.busy(spans) / 1e6)


def kernel_label(name: str) -> str:
    """A kernel's name short enough for a row that still tells algorithms apart: no return type,
    parameter list or namespace; template arguments kept where they are plain values (types and
    tile sizes tell kernel configurations apart), else `<...>` (the functors and lambdas of
    PyTorch's elementwise kernels run to hundreds of characters and name no algorithm)."""
    name = _without_parameters(name.strip().removeprefix("void ").strip())
    base, bracket, args = name.partition("<")
    base = base.rsplit("::", 1)[-1].strip()
    if not bracket:
        return base
    args = args.rsplit(">", 1)[0]
    if not re.fullmatch(r"[\w\s,.:+-]*", args):
        return f"{base}<...>"
    plain = re.sub(r"\s+", "", re.sub(r"\w+::", "", args))
    return f"{base}<{plain}>"


def _without_parameters(name: str) -> str:
    """`name` less its trailing parenthesised group (a demangled kernel's parameter list, or a
    memset's "(Device)"), found by balancing parentheses from the end."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip()
    return name
