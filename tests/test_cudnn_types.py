"""The legacy cuDNN backend's data types and quantized refusals (issue 17), without a GPU: the
type configuration of each precision and direction (int8: INT8_EXT_CONFIG), the alpha / beta
scalars' C type, the refusals of fp8 and of int8 outside INT8_EXT_CONFIG, and cuDNN's own choices
when its heuristic and Find name no int8 algorithm."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from harness import precision
from harness.backends.cudnn import legacy as cudnn
from harness.backends.cudnn import lib
from harness.backends.cudnn.data_types import (NO_LEGACY, PRECISION_CONFIG, TypeConfig, scalar_type,
                                               type_config)
from harness.problem import ConvProblem
from harness.sweep import DIRECTIONS, Point

PAD = dict(pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
FOURS = ConvProblem(2, 16, 8, 8, 32, 3, 3, **PAD)               # channels in fours
ODD_IN = ConvProblem(2, 6, 8, 8, 16, 3, 3, **PAD)               # 6 input channels
ODD_OUT = ConvProblem(2, 16, 8, 8, 18, 3, 3, **PAD)             # 18 output channels
GROUPED_TWOS = ConvProblem(2, 8, 8, 8, 8, 3, 3, groups=4, **PAD)    # 2 and 2 per group
GROUPED_FOURS = ConvProblem(2, 16, 8, 8, 16, 3, 3, groups=4, **PAD)  # 4 and 4 per group
BACKEND = cudnn.CudnnBackend()          # algorithms only: no session, so no GPU is touched
FWD_ALGOS = [a.name for a in BACKEND.algorithms() if "fwd" in a.directions]


def _refusal(algorithm: str, precision_: str, layout: str = "NHWC", direction: str = "fwd",
             problem: ConvProblem = FOURS) -> str | None:
    """What the executor asks first: the shared rules, then the algorithm's own."""
    point = Point(problem, direction, precision_, layout, "cudnn", algorithm)
    return BACKEND.algorithm(algorithm).refusal(point)


def test_cudnn_enum_values_are_the_headers():
    # cudnnDataType_t (shared/reference/cudnn-api.md 1.5): INT8 = 3, INT32 = 4
    assert (lib.FLOAT, lib.DOUBLE, lib.HALF, lib.INT8, lib.INT32) == (0, 1, 2, 3, 4)
    assert lib.BFLOAT16 == 9


def test_int8_is_int8_ext_config():
    """x and w INT8, INT32 compute, y FLOAT (int8 sums written as fp32), tensor-op math."""
    t = type_config("int8", "fwd")
    assert (t.operands, t.compute, t.output, t.math) == (lib.INT8, lib.INT32, lib.FLOAT,
                                                         lib.TENSOR_OP_MATH)
    assert t.descriptor_types("fwd") == (lib.INT8, lib.INT8, lib.FLOAT)     # x, w, y


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name, data, compute, math", [
    ("fp32", lib.FLOAT, lib.FLOAT, lib.FMA_MATH), ("tf32", lib.FLOAT, lib.FLOAT, lib.DEFAULT_MATH),
    ("fp16", lib.HALF, lib.FLOAT, lib.TENSOR_OP_MATH),
    ("bf16", lib.BFLOAT16, lib.FLOAT, lib.TENSOR_OP_MATH),
    ("fp64", lib.DOUBLE, lib.DOUBLE, lib.DEFAULT_MATH)])
def test_floating_precisions_keep_one_data_type_for_every_tensor(direction, name, data, compute,
                                                                 math):
    t = type_config(name, direction)
    assert (t.operands, t.compute, t.output, t.math) == (data, compute, data, math)
    assert t.descriptor_types(direction) == (data, data, data)


def test_the_result_descriptor_is_the_directions_output():
    """Which of x, w, y takes the result type: y forward, x (dx) backward data, w (dw)
    backward filter (checked on a made-up config whose two types differ)."""
    t = TypeConfig(operands=7, compute=0, output=8, math=0)
    assert t.descriptor_types("fwd") == (7, 7, 8)
    assert t.descriptor_types("bwd_data") == (8, 7, 7)
    assert t.descriptor_types("bwd_filter") == (7, 8, 7)


def test_every_precision_has_a_legacy_config_or_a_reason():
    for name in precision.NAMES:
        assert (name in PRECISION_CONFIG) != (name in NO_LEGACY), name
        if name in PRECISION_CONFIG:
            for direction in DIRECTIONS:
                if precision.output_precision(name, direction) is not None:
                    type_config(name, direction)       # the result precision has a type too


@pytest.mark.parametrize("name, kind", [("fp64", ctypes.c_double), ("fp32", ctypes.c_float),
                                        ("fp16", ctypes.c_float), ("bf16", ctypes.c_float),
                                        ("int8", ctypes.c_float)])
def test_alpha_and_beta_are_double_only_for_a_double_result(name, kind):
    assert scalar_type(type_config(name, "fwd").output) is kind
    alpha, beta = cudnn._scalars(type_config(name, "fwd").output)
    assert ctypes.cast(alpha, ctypes.POINTER(kind)).contents.value == 1.0
    assert ctypes.cast(beta, ctypes.POINTER(kind)).contents.value == 0.0


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fp8_is_refused_by_every_legacy_algorithm(name, direction):
    for algo in BACKEND.algorithms():
        if direction in algo.directions:
            assert _refusal(algo.name, name, direction=direction) == (
                "the legacy API has no fp8 convolution; use cudnn_graph")


@pytest.mark.parametrize("algorithm", FWD_ALGOS)
def test_int8_refusals_name_the_rule(algorithm):
    assert _refusal(algorithm, "int8", layout="NCHW") == "int8 needs NHWC (INT8_EXT_CONFIG)"
    for problem in (ODD_IN, ODD_OUT, GROUPED_TWOS):
        reason = _refusal(algorithm, "int8", problem=problem)
        assert reason.startswith("int8 needs input and output channels per group in multiples "
                                 "of 4 (INT8_EXT_CONFIG)"), reason
    assert "has 2 in and 2 out" in _refusal(algorithm, "int8", problem=GROUPED_TWOS)
    for problem in (FOURS, GROUPED_FOURS):
        reason = _refusal(algorithm, "int8", problem=problem)
        if algorithm == "implicit_precomp_gemm":
            assert reason is None          # left to cuDNN, whose status becomes the row's
        else:
            assert reason == "cuDNN runs int8 only with IMPLICIT_PRECOMP_GEMM"


def test_int8_backward_is_refused_before_the_backend_and_floats_are_untouched():
    assert "forward-only" in _refusal("algo_1", "int8", direction="bwd_data")
    assert "forward-only" in _refusal("algo_1", "int8", direction="bwd_filter")
    for name in precision.FLOATING:
        for layout in ("NCHW", "NHWC"):
            assert _refusal("implicit_gemm", name, layout=layout, problem=ODD_IN) is None


def test_choices_without_any_int8_algorithm_pick_nothing_and_do_not_fail():
    precomp = lib.FWD_ALGOS["implicit_precomp_gemm"]
    not_supported = [(a, 3000, 0) for a in lib.FWD_ALGOS.values()]
    for choices in (cudnn.CudnnChoices([], []),
                    cudnn.CudnnChoices(not_supported, [(a, s, m, -1.0)
                                                       for a, s, m in not_supported])):
        assert choices.heuristic_pick(None) is None and choices.find_pick(0) is None
        assert choices.heuristic_rank(precomp) is None
        assert choices.find_extras(precomp)["find_ms"] is None
        prepared = cudnn.CudnnPrepared((), None, None, None, 0.0, None, 0, choices, precomp)
        assert prepared.extras_for_limit(None) == {"heuristic_pick": False, "find_pick": False,
                                                   "find_pick_warm": False}


def test_find_first_and_second_call_each_flag_their_own_pick_and_time():
    """The first Find call ranked implicit_precomp_gemm behind implicit_gemm (its host work
    timed in); the second call ranks it first: each call's flag marks its own pick."""
    gemm, precomp = lib.FWD_ALGOS["implicit_gemm"], lib.FWD_ALGOS["implicit_precomp_gemm"]
    first = [(gemm, 0, 0, 0.05), (precomp, 0, 1024, 0.19)]
    warm = [(precomp, 0, 1024, 0.012), (gemm, 0, 0, 0.05)]
    choices = cudnn.CudnnChoices([], first, warm, find_workspace=4096)
    flags = {algo: cudnn.CudnnPrepared((), None, None, None, 0.0, None, 0, choices,
                                       algo).extras_for_limit(None) for algo in (gemm, precomp)}
    assert flags[gemm]["find_pick"] and not flags[gemm]["find_pick_warm"]
    assert flags[precomp]["find_pick_warm"] and not flags[precomp]["find_pick"]
    # under a limit that precomp's workspace exceeds, both calls' picks are implicit_gemm
    limited = cudnn.CudnnPrepared((), None, None, None, 0.0, None, 0, choices, gemm)
    assert limited.extras_for_limit(512)["find_pick_warm"]
    extras = choices.find_extras(precomp)
    assert (extras["find_ms"], extras["find_ms_warm"]) == (0.19, 0.012)
    assert extras["find_workspace_bytes"] == 4096 and extras["find_module_loading"]


class _Buffer(SimpleNamespace):
    def __init__(self, size: int = 0):
        super().__init__(data=SimpleNamespace(ptr=4096), size=size)


def _session_without_gpu() -> cudnn._Session:
    """A session whose CuPy, stream and handle are stand-ins: _ask_cudnn's own logic only."""
    session = object.__new__(cudnn._Session)
    session.cupy = SimpleNamespace(empty=lambda size, dtype: _Buffer(size), uint8="uint8")
    session.stream = SimpleNamespace(synchronize=lambda: None)
    session.handle = SimpleNamespace(ptr=None)
    session._choices = {}
    session._heuristics = {}
    return session


def test_no_heuristic_and_a_failing_find_leave_no_pick_and_find_gets_the_workspace(monkeypatch):
    """cudnnGetConvolutionForwardAlgorithm_v7 and Find refusing int8 (any not-supported status)
    is no pick, not a failed row; Find is then given the prepared algorithm's workspace."""
    sizes = []

    def heuristic(*_):
        raise lib.CudnnError(3000, "cudnnGetConvolutionForwardAlgorithm_v7")

    def find(direction, handle, in_a, a_ptr, in_b, b_ptr, conv, out, out_ptr, ws_ptr, size):
        sizes.append(size)
        raise lib.CudnnError(3003, "cudnnFindConvolutionForwardAlgorithmEx")

    monkeypatch.setattr(lib, "heuristic", heuristic)
    monkeypatch.setattr(lib, "find", find)
    descs = SimpleNamespace(in_order=lambda direction: (None, None, None), conv=None)
    tensors = {"x": _Buffer(), "w": _Buffer(), "y": _Buffer()}
    point = Point(FOURS, "fwd", "int8", "NHWC", "cudnn", "implicit_precomp_gemm")
    choices = _session_without_gpu()._ask_cudnn(point, descs, tensors, needed=5120)
    assert (choices.heuristic, choices.found) == ([], [])
    assert sizes == [5120]

    def lost(*_):      # a status saying the CUDA context is gone is not swallowed
        raise lib.CudnnError(5000, "cudnnGetConvolutionForwardAlgorithm_v7")

    monkeypatch.setattr(lib, "heuristic", lost)
    with pytest.raises(lib.CudnnError):
        _session_without_gpu()._ask_cudnn(point, descs, tensors, needed=5120)


def _read_back(descs) -> tuple[int, int, int, int, int, int]:
    """(x, w, y data types, compute type, math type, y's NHWC channel stride) as cuDNN stored them
    in the descriptors: its get calls need the library, not a GPU."""
    cdll = lib.library()
    ints = [ctypes.c_int() for _ in range(10)]
    refs = [ctypes.byref(i) for i in ints]
    types = []
    for desc in (descs.x, descs.y):        # data type, n, c, h, w, then the four strides
        lib.check(cdll.cudnnGetTensor4dDescriptor(desc.ptr, *refs[:9]),
                  "cudnnGetTensor4dDescriptor")
        types.append(ints[0].value)
    y_channel_stride = ints[6].value
    lib.check(cdll.cudnnGetFilter4dDescriptor(descs.w.ptr, *refs[:6]), "cudnnGetFilter4dDescriptor")
    w_type = ints[0].value
    lib.check(cdll.cudnnGetConvolution2dDescriptor(descs.conv.ptr, *refs[:8]),
              "cudnnGetConvolution2dDescriptor")
    compute = ints[7].value
    lib.check(cdll.cudnnGetConvolutionMathType(descs.conv.ptr, refs[0]),
              "cudnnGetConvolutionMathType")
    return types[0], w_type, types[1], compute, ints[0].value, y_channel_stride


@pytest.mark.parametrize("name, layout, expected", [
    ("int8", "NHWC", (lib.INT8, lib.INT8, lib.FLOAT, lib.INT32, lib.TENSOR_OP_MATH, 1)),
    ("fp16", "NCHW", (lib.HALF, lib.HALF, lib.HALF, lib.FLOAT, lib.TENSOR_OP_MATH, 64)),
    ("fp64", "NHWC", (lib.DOUBLE, lib.DOUBLE, lib.DOUBLE, lib.DOUBLE, lib.DEFAULT_MATH, 1))])
def test_cudnn_accepts_and_stores_the_descriptor_types(name, layout, expected):
    """The real library (no GPU needed to set descriptors) takes int8 as INT8_EXT_CONFIG and
    stores the types asked: y FLOAT beside INT8 x and w, INT32 compute, tensor-op math."""
    try:
        lib.library()
    except lib.CudnnUnavailable as err:
        pytest.skip(f"libcudnn cannot be loaded here: {err}")
    problem = ConvProblem(2, 16, 8, 8, 16, 3, 3, **PAD)
    descs = cudnn._Descriptors(Point(problem, "fwd", name, layout, "cudnn",
                                     "implicit_precomp_gemm"))
    assert _read_back(descs) == expected


def test_find_failing_gives_no_pick_but_a_lost_context_is_raised(monkeypatch):
    """A Find call that fails leaves "no Find pick"; one that lost the CUDA context must end the
    worker (harness/worker.py replaces it), as a failing heuristic call does."""
    session = object.__new__(cudnn._Session)
    session.stream = SimpleNamespace(synchronize=lambda: None)
    lost = next(code for code in range(1, 10000) if lib.is_execution_failed(code))

    def failing(code):
        def find(*args):
            raise lib.CudnnError(code, "cudnnFindConvolutionForwardAlgorithmEx")
        return find
    monkeypatch.setattr(lib, "find", failing(3000))          # NOT_SUPPORTED
    assert session._find(()) == []
    monkeypatch.setattr(lib, "find", failing(lost))
    with pytest.raises(lib.CudnnError):
        session._find(())


def test_a_recurrent_layer_s_directions_share_one_descriptor_and_one_dynamic_build(monkeypatch):
    """cudnnBuildRNNDynamic compiles at run time (a median 1.65 s a layer on an H100): a
    layer's directions at one precision and algorithm reuse the built descriptor."""
    from types import SimpleNamespace

    from harness.backends.cudnn import rnn_lib, rnn_setup
    from harness.rnn.problem import RnnProblem
    from harness.sweep import Point, TimingOptions
    made, builds = [], []
    monkeypatch.setattr(rnn_lib, "RnnDesc", lambda *args: made.append(args) or
                        SimpleNamespace(ptr=len(made)))
    monkeypatch.setattr(rnn_lib, "DropoutDesc", lambda handle: SimpleNamespace(ptr=0))
    monkeypatch.setattr(rnn_lib, "call", lambda name, *args: builds.append((name, args[1:])))
    descriptors = rnn_setup.Descriptors(SimpleNamespace(ptr=0))
    layer = RnnProblem("lstm", 8, 16, 5, 4)
    dynamic = rnn_lib.ALGORITHMS["persist_dynamic"]

    def point(direction, precision="fp16", problem=layer):
        return Point(problem, direction, precision, "TNC", "cudnn_rnn", "persist_dynamic",
                     None, TimingOptions())
    first, built = descriptors.get(dynamic, point("fwd"))
    assert built is not None and builds == [("cudnnBuildRNNDynamic", (1, 4))]
    for direction in ("fwd_train", "bwd_data", "bwd_filter", "train_step"):
        assert descriptors.get(dynamic, point(direction)) == (first, None)
    assert len(made) == 1 and len(builds) == 1
    other, built = descriptors.get(dynamic, point("fwd", "fp32"))    # another precision
    assert other is not first and built is not None and len(builds) == 2
    standard, built = descriptors.get(rnn_lib.ALGORITHMS["standard"], point("fwd"))
    assert built is None and len(builds) == 2 and len(made) == 3


def test_a_dynamic_build_over_its_budget_is_not_started_again_at_another_batch(monkeypatch):
    """Once a PERSIST_DYNAMIC build of a layer's sizes ran past its budget in this run
    (harness/setup_budget.py), the same sizes at another batch are refused before any build;
    other sizes are built."""
    from harness import setup_budget
    from harness.backends.cudnn import rnn_lib, rnn_setup
    from harness.rnn.problem import RnnProblem
    from harness.sweep import Point, TimingOptions
    builds = []
    monkeypatch.setattr(rnn_lib, "RnnDesc", lambda *args: SimpleNamespace(ptr=1))
    monkeypatch.setattr(rnn_lib, "DropoutDesc", lambda handle: SimpleNamespace(ptr=0))
    monkeypatch.setattr(rnn_lib, "call", lambda name, *args: builds.append(args[-1]))
    descriptors = rnn_setup.Descriptors(SimpleNamespace(ptr=0))
    dynamic = rnn_lib.ALGORITHMS["persist_dynamic"]

    def point(batch, hidden=16):
        return Point(RnnProblem("lstm", hidden, hidden, 5, batch), "train_step", "fp16", "TNC",
                     "cudnn_rnn", "persist_dynamic", None, TimingOptions())
    monkeypatch.setattr(setup_budget, "_over", {rnn_setup._build_key(point(16)): "a train_step"})
    with pytest.raises(setup_budget.OverBudget, match=r"^not tried: cudnnBuildRNNDynamic "
                       r"\(lstm, hidden 16, fp16\) ran past its 30 s budget on a train_step"):
        descriptors.get(dynamic, point(64))
    assert builds == []
    descriptors.get(dynamic, point(64, hidden=32))
    assert builds == [64]
