"""Why is one candidate faster than another at a point? Kernels, workspace and error, side by side.

For one ResNet-50 point this prepares each named candidate (PyTorch's autotuned call, legacy cuDNN
algorithms, graph-API plans by name or `graph:all`), checks its output against the float64
reference, then records 10 back-to-back calls with torch.profiler and prints each kernel's name,
launches per call and mean duration, and the harness's own time. For graph plans it also
re-runs the check with the workspace filled with 0xff bytes and then with zeros: a plan that is
right only on zeroed workspace reads memory it never wrote. `--graph-dot DIR` writes the CUDA
graph of one captured call per candidate (as the graph timer captures it) as Graphviz DOT and
prints its node count by type: where two candidates run the same kernels at different times, the
graph's structure (extra nodes, dependencies) is what differs.

    python benchmarks/explain_point.py conv1 bwd_data fp32 NHWC torch_gpu graph:eng25 \
        graph:eng25_k2=2_k3=0 cudnn:algo_1
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from harness import backends, reference
from harness.executor import PointExecutor, algorithm_for
from harness.suite import load_suite
from harness.sweep import Point, TimingOptions

TIMING = TimingOptions(budget_ms=50, min_samples=10, max_samples=100, noise_target=0.003)


def _point(layer: str, direction: str, precision: str, layout: str, batch: int,
           backend: str, algorithm: str) -> Point:
    problems = {p.name.split(":")[-1]: p for p in load_suite("resnet50").problems}
    return Point(problems[layer].with_batch(batch), direction, precision, layout, backend,
                 algorithm, None, TIMING)


def _candidates(args) -> list[tuple[str, str]]:
    out = []
    for spec in args.candidates:
        backend, _, algorithm = spec.partition(":")
        backend = {"graph": "cudnn_graph", "torch": "torch_gpu"}.get(backend, backend)
        if backend == "torch_gpu":
            algorithm = "cudnn_benchmark"
        if backend == "cudnn_graph" and algorithm == "all":
            point = _point(args.layer, args.direction, args.precision, args.layout, args.batch,
                           backend, "engines")
            engines = backends.get(backend).algorithms()[0]
            data = reference.make_data(point.problem, point.precision)
            out += [(backend, name) for name in engines.variants(point, data)]
        else:
            out.append((backend, algorithm))
    return out


def _kernels(prepared, calls: int = 10) -> list[tuple[str, int, float]]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    prepared.stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            prepared.launch()
        prepared.stream.synchronize()
    found: dict[str, list[float]] = defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            found[e.name].append(e.time_range.elapsed_us())
    return [(name, len(d) // calls, sum(d) / len(d)) for name, d in found.items()]


_NODE_TYPES = ("KERNEL", "MEMSET", "MEMCPY", "EVENT_RECORD", "WAIT_EVENT", "EMPTY", "HOST",
               "MEM_ALLOC", "MEM_FREE", "CONDITIONAL", "GRAPH")


def _graph_dot(prepared, path: str) -> str:
    """One captured call's CUDA graph as DOT, captured the way the graph timer does."""
    capture = getattr(prepared, "capture", None)
    if capture is None:
        from harness.graph_timer import capture_calls
        graph = capture_calls(prepared.launch, prepared.stream, 1)
        text = graph.debug_dot_str()
    else:                            # PyTorch: its own graph object, in debug mode
        import torch
        original = torch.cuda.CUDAGraph

        class _Debug(original):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.enable_debug_mode()
        torch.cuda.CUDAGraph = _Debug
        try:
            capture(1)
        finally:
            torch.cuda.CUDAGraph = original
        prepared._graphs[-1].debug_dump(path)
        return open(path).read()
    with open(path, "w") as f:
        f.write(text)
    return text


def _node_counts(dot: str) -> str:
    import re
    counts = {t: len(re.findall(rf"\b{t}\b", dot)) for t in _NODE_TYPES}
    edges = dot.count("->")
    return ", ".join(f"{n} {t}" for t, n in counts.items() if n) + f"; {edges} edges"


def _use_torch_allocator() -> None:
    import cupy
    import torch

    def allocate(size: int):
        block = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
        memory = cupy.cuda.UnownedMemory(block.data_ptr(), size, block)
        return cupy.cuda.MemoryPointer(memory, 0)
    cupy.cuda.set_allocator(allocate)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layer")
    parser.add_argument("direction")
    parser.add_argument("precision")
    parser.add_argument("layout")
    parser.add_argument("candidates", nargs="+",
                        help="torch_gpu, cudnn:ALGO, graph:PLAN, graph:all")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--graph-dot", metavar="DIR",
                        help="write each candidate's one-call CUDA graph as DOT into DIR")
    parser.add_argument("--torch-allocator", action="store_true",
                        help="allocate CuPy's buffers (the cuDNN backends' operands and workspace)"
                             " from PyTorch's caching allocator, to see whether placement matters")
    args = parser.parse_args()
    if args.torch_allocator:
        _use_torch_allocator()
    executor = PointExecutor()
    for backend, algorithm in _candidates(args):
        point = _point(args.layer, args.direction, args.precision, args.layout, args.batch,
                       backend, algorithm)
        algo = algorithm_for(point)
        m = executor.measure_one(point)
        print(f"\n== {backend}:{algorithm}: {m.status} {m.median_ms and m.median_ms * 1e3:.2f} us"
              f" rel_error {m.rel_error} ws {m.workspace_bytes} timer {m.extras.get('gpu_timer')}"
              f" {m.reason[:160]}")
        if m.status not in ("ok", "wrong"):
            continue
        data = reference.make_data(point.problem, point.precision)
        prepared = algo.prepare(point, data)
        expected = None
        if getattr(prepared, "workspace", None) is not None:
            import cupy
            expected = reference.reference(point.problem, point.direction, data, cupy)
            for label, byte in (("0xff-filled workspace", 255), ("zeroed workspace", 0)):
                prepared.workspace.fill(byte)
                prepared.poison()
                prepared.launch()
                rel, _ = reference.relative_errors(prepared.output(), expected, cupy)
                print(f"   rel_error with {label}: {rel:.3g}")
        for name, per_call, mean_us in _kernels(prepared):
            print(f"   {per_call} x {mean_us:9.2f} us  {name[:150]}")
        if args.graph_dot:
            import os
            os.makedirs(args.graph_dot, exist_ok=True)
            path = os.path.join(args.graph_dot, f"{backend}-{algorithm}.dot")
            try:
                print(f"   graph of one call: {_node_counts(_graph_dot(prepared, path))} ({path})")
            except Exception as err:  # a study script: say what failed, go on
                print(f"   graph of one call: not captured ({type(err).__name__}: {err})")
        prepared.release()


if __name__ == "__main__":
    main()
