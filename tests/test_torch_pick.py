"""PyTorch's pick per worker process (issue 38): the kernel names PyTorch's profiler reports after
the autotuner, shortened for a row, and the stability answer that counts unstable picks. Runs
without a GPU: profiler results are hand-made events."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.backends.torch import cuda
from harness.report import answers, text

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame, row
except ImportError:
    from tests.report_fixtures import frame, row

CUDA, CPU = "cuda", "cpu"      # stand-ins for torch.autograd.DeviceType members


def _event(name: str, us: float = 10.0, device=CUDA, start: float = 0.0) -> SimpleNamespace:
    """A raw Kineto event's shape (torch.autograd.profiler's kineto_results.events())."""
    return SimpleNamespace(name=lambda: name, device_type=lambda: device,
                           start_ns=lambda: start * 1e3, end_ns=lambda: (start + us) * 1e3)


@pytest.mark.parametrize("name, label", [
    # legacy cuDNN: the template values are the tile configuration, so they stay
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>"
     "(int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
     "unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
     "implicit_convolve_sgemm<float,float,128,5,5,3,3,3,1,false,false,true>"),
    ("void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, float,"
     " float>(cudnn::cnn::GroupedDirectFpropParams, float const*, float*)",
     "conv2d_grouped_direct_kernel<false,true,false,false,0,0,int,float,float>"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>"
     "(cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4::Params)",
     "Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>"),
    # cuDNN 9's engine kernels carry no signature: kept whole
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
     "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn",
     "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
     "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn"),
    # PyTorch's elementwise functors name no algorithm: their arguments collapse
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
     "vectorized_elementwise_kernel<...>"),
    ("void at::native::(anonymous namespace)::clamp_kernel<float>(float*, int)",
     "clamp_kernel<float>"),
    ("Memset (Device)", "Memset"),
])
def test_a_kernel_name_is_shortened_to_what_tells_algorithms_apart(name, label):
    assert cuda.kernel_label(name) == label


def test_two_tile_configurations_keep_different_labels():
    small = "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1>(int)"
    large = "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1>(int)"
    assert cuda.kernel_label(small) != cuda.kernel_label(large)


def test_the_summary_keeps_device_events_sorted_unique_and_sums_their_time():
    events = [_event("void winograd<float>(float*)", 30.0),
              _event("Memset (Device)", 2.0, start=55),
              _event("aten::convolution", 500.0, device=CPU),
              _event("void winograd<float>(float*)", 30.0, start=50)]
    # busy [0, 30] and [50, 80]: the memset (another stream's) ran inside the second winograd
    kernels = cuda.device_events(events, CUDA)
    assert len(kernels) == 3
    assert cuda.kernel_summary(kernels) == ("Memset+winograd<float>", pytest.approx(0.062),
                                            pytest.approx(0.060))
    assert cuda.device_events([_event("aten::convolution", device=CPU)], CUDA) == []
    assert cuda.kernel_summary([]) is None


class _Stream:
    cuda_stream = 0

    def synchronize(self) -> None:
        pass


class _Profile:
    """torch.autograd.profiler.profile's shape: a context manager whose kineto_results list
    what it saw; asked for device activity only, through Kineto."""
    seen: list = []
    fails = False

    def __init__(self, **options):
        assert options == {"use_device": "cuda", "use_kineto": True, "use_cpu": False}

    def __enter__(self):
        if self.fails:
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        return self

    def __exit__(self, *exc):
        return False

    @property
    def kineto_results(self):
        return SimpleNamespace(events=lambda: self.seen)


class _StreamContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_torch():
    return SimpleNamespace(cuda=SimpleNamespace(stream=lambda s: _StreamContext()),
                           autograd=SimpleNamespace(DeviceType=SimpleNamespace(CUDA=CUDA),
                                                    profiler=SimpleNamespace(profile=_Profile)))


def test_the_pick_is_recorded_from_one_profiled_call(fake_torch, monkeypatch):
    calls = []
    monkeypatch.setattr(_Profile, "seen", [_event("void gemm<64>(int)", 40.0)])
    extras, busy = cuda.recorded_kernels(fake_torch, _Stream(), lambda: calls.append(1))
    assert extras == {"torch_kernels": "gemm<64>", "torch_kernels_ms": pytest.approx(0.04)}
    assert busy == pytest.approx(0.04)
    assert calls == [1]


def test_a_profiler_that_fails_or_sees_nothing_records_no_pick(fake_torch, monkeypatch):
    unknown = ({"torch_kernels": None, "torch_kernels_ms": None}, None)
    monkeypatch.setattr(_Profile, "seen", [])
    assert cuda.recorded_kernels(fake_torch, _Stream(), lambda: None) == unknown
    monkeypatch.setattr(_Profile, "fails", True)
    calls = []      # a profiler that refuses to start: the call is made all the same
    assert cuda.recorded_kernels(fake_torch, _Stream(), lambda: calls.append(1)) == unknown
    assert calls == [1]


# ---- the stability answer ------------------------------------------------------------------------
def _torch_row(layer: str, stable, **extras) -> dict:
    return row(layer=layer, backend="torch_gpu", algorithm="cudnn_benchmark", ms=1.0,
               samples_ms=[1.0, 1.1], torch_pick_stable=stable, **extras)


def _rendered(df) -> str:
    """The stability answer as a terminal shows it, line breaks undone."""
    return " ".join(text.render(answers.stability_blocks(df)).split())


def test_the_stability_answer_counts_and_lists_unstable_pytorch_picks():
    df = frame(row(layer="L1", ms=1.0, samples_ms=[1.0, 1.1]),
               _torch_row("L1", False, torch_picks="gemm<64> || winograd<4x4>",
                          torch_pick_ms="1.05 2.1"),
               _torch_row("L2", True), _torch_row("L3", None))
    shown = _rendered(df)
    assert "PyTorch's pick is unstable at 1 of 2 points" in shown
    assert "gemm<64> || winograd<4x4>" in shown and "1.05 2.1" in shown


def test_the_stability_answer_says_when_every_pytorch_pick_held_and_nothing_unrecorded():
    stable = _rendered(frame(_torch_row("L1", True)))
    assert "same kernels in every timing process wherever its pick was recorded (1 points)" \
        in stable
    unrecorded = _rendered(frame(_torch_row("L1", None)))
    assert "PyTorch" not in unrecorded


def test_captured_calls_replay_on_their_stream_and_a_refusal_is_capture_failed():
    """cuda.captured, with a stand-in for torch: the launches run inside the capture on the
    given stream, the graph is kept, the replay runs on that stream; PyTorch's RuntimeError
    under capture is the timer's CaptureFailed."""
    from contextlib import contextmanager

    from harness.graph_timer import CaptureFailed
    log = []

    class Graph:
        def replay(self):
            log.append("replay")

    @contextmanager
    def graph(g, stream):
        log.append(("capture on", stream))
        yield

    @contextmanager
    def on(stream):
        log.append(("stream", stream))
        yield
    fake = SimpleNamespace(cuda=SimpleNamespace(CUDAGraph=Graph, graph=graph, stream=on))
    kept = []
    replay = cuda.captured(fake, "s1", 3, lambda: log.append("call"), kept)
    assert log == [("capture on", "s1"), "call", "call", "call"] and len(kept) == 1
    replay()
    assert log[-2:] == [("stream", "s1"), "replay"]

    def refuses():
        raise RuntimeError("operation not permitted when stream is capturing")
    with pytest.raises(CaptureFailed, match="torch.cuda.graph: operation not permitted"):
        cuda.captured(fake, "s1", 2, refuses, kept)
    assert len(kept) == 1
