"""Issue 39, stop 64: a trace of the graph timer's stages in every worker process (a study, not
the product). On PYTHONPATH as sitecustomize, with CB_TRACE=FILE, each process appends one line
per held batch (calls, hold, enqueue, held or missed), per probe, capture and time_cuda_graph, with
the wall time each took, to FILE.<pid>."""
import os
import time

if os.environ.get("CB_TRACE"):
    import functools

    _out = None

    def _log(*words):
        global _out
        if _out is None:
            _out = open(f"{os.environ['CB_TRACE']}.{os.getpid()}", "a", buffering=1)
        _out.write(" ".join(str(w) for w in words) + "\n")

    def _timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                extra = {k: v for k, v in kwargs.items() if k in ("batch_calls", "host_ms",
                                                                  "host_probe_calls",
                                                                  "long_call_host_ms")}
                if name == "probe":             # _probe(launch, stream, options, long_call)
                    extra["long_call_host_ms"] = args[3]
                _log(name, f"{(time.perf_counter() - start) * 1e3:.3f}ms", extra)
        return wrapper

    import harness.graph_timer as graph_timer
    import harness.timer as timer
    import harness.stream_hold as stream_hold

    _batch = timer._timed_batch

    def _traced_batch(launch, stream, calls, hold_ms, flush, cupy, pairs=1):
        start = time.perf_counter()
        batch, enqueue_ms = _batch(launch, stream, calls, hold_ms, flush, cupy, pairs)
        _log("batch", calls, pairs, f"hold={hold_ms:.3f}", f"enqueue={enqueue_ms:.3f}",
             "held" if batch is not None else "MISSED",
             f"{(time.perf_counter() - start) * 1e3:.3f}ms")
        return batch, enqueue_ms
    timer._timed_batch = _traced_batch
    timer.measure_host_ms = _timed("host_probe", timer.measure_host_ms)
    timer.time_cuda = _timed("time_cuda", timer.time_cuda)
    graph_timer._probe = _timed("probe", graph_timer._probe)
    graph_timer.capture_calls = _timed("capture", graph_timer.capture_calls)
    graph_timer.time_cuda_graph = _timed("graph", graph_timer.time_cuda_graph)
