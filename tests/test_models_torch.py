"""harness.models.torch_models: PyTorch models built on the meta device and captured with
torch.export (forward hooks as the fallback). Shapes are checked against an independent walk with
forward hooks written here, against the shipped resnet50 suite, and on a user's own module with
padding done in forward, grouped dilated convs and kinds convbench skips."""
from __future__ import annotations

import itertools
import sys
import textwrap
import time
import warnings
from collections import Counter
from dataclasses import replace

import pytest

torchvision = pytest.importorskip(
    "torchvision", reason="torchvision is not installed (pip install torch torchvision): "
                          "PyTorch model import is not tested")
import torch  # noqa: E402 - torchvision brings it

from harness.models import ModelError, import_model, torch_models  # noqa: E402
from harness.problem_text import parse_benchdnn  # noqa: E402
from harness.suite import REPO_SUITES, load_suite  # noqa: E402

_names = itertools.count()


def _row(p):
    """A captured conv in the form the independent walk gives."""
    return (p.name, p.in_channels, p.in_h, p.in_w, p.out_channels, (p.kernel_h, p.kernel_w),
            (p.stride_h, p.stride_w), (p.pad_top, p.pad_left), (p.dilation_h, p.dilation_w),
            p.groups)


def _hook_rows(model, chw):
    """Every nn.Conv2d call in order, read by forward hooks on a meta forward pass: an
    independent check of the export capture (it shares no code with torch_models)."""
    rows = []

    def hook_for(path):
        def hook(module, inputs, output):
            _, c, h, w = inputs[0].shape
            rows.append((path, c, h, w, module.out_channels, tuple(module.kernel_size),
                         tuple(module.stride), tuple(module.padding), tuple(module.dilation),
                         module.groups))
        return hook

    handles = [m.register_forward_hook(hook_for(path)) for path, m in model.named_modules()
               if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(2, *chw, device="meta"))
    for handle in handles:
        handle.remove()
    return rows


def _user_module(tmp_path, monkeypatch, body: str) -> str:
    """Write `body` as a fresh module on sys.path; its name is unique so no test sees another's."""
    name = f"convbench_user_net_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


# ---- torchvision against an independent walk ---------------------------------------------------
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_export_capture_equals_an_independent_hook_walk(name):
    capture = torch_models.capture(f"torchvision:{name}", None)
    with torch.device("meta"):
        model = torchvision.models.get_model(name, weights=None).eval()
    expected = _hook_rows(model, (3, 224, 224))
    assert capture.method == "torch.export"
    assert capture.skipped == {}
    assert [_row(p) for p in capture.convs] == expected
    assert all(p.batch == torch_models.CAPTURE_BATCH for p in capture.convs)


def test_an_input_size_given_is_the_one_captured():
    capture = torch_models.capture("torchvision:resnet50", (3, 160, 128))
    with torch.device("meta"):
        model = torchvision.models.get_model("resnet50", weights=None).eval()
    assert [_row(p) for p in capture.convs] == _hook_rows(model, (3, 160, 128))
    assert capture.convs[-1].in_h == 5 and capture.convs[-1].in_w == 4


def test_mobilenet_v2_depthwise_convs_are_captured_as_such():
    capture = torch_models.capture("torchvision:mobilenet_v2", None)
    grouped = [p for p in capture.convs if p.groups > 1]
    assert len(grouped) == 17                      # one 3x3 depthwise conv per inverted residual
    assert all(p.depthwise and p.groups == p.in_channels == p.out_channels for p in grouped)
    assert all((p.kernel_h, p.kernel_w) == (3, 3) for p in grouped)
    assert grouped[0].name == "features.1.conv.0.0" and grouped[0].in_channels == 32
    layers = import_model("torchvision:mobilenet_v2", batch=32).layers
    assert {p.groups for p in layers if p.depthwise} == {32, 96, 144, 192, 384, 576, 960}


# ---- resnet50 against the shipped suite ----------------------------------------------------------
def _shapes(problems) -> Counter:
    return Counter({replace(p.with_batch(32), name="", multiplicity=1): p.multiplicity
                    for p in problems})


def _suite_shapes() -> Counter:
    return _shapes(load_suite("resnet50", search_dirs=[REPO_SUITES]).problems)


def test_torchvision_resnet50_differs_from_the_v1_suite_only_where_v1_5_moves_the_stride():
    """The shipped suite is ResNet-50 v1 (benchdnn's shapes_resnet_50: the stride-2 of each
    stage's first block on the 1x1 branch2a); torchvision's resnet50 is v1.5 (stride-2 on the 3x3
    conv2). Same 53 layers; 23 unique shapes against the suite's 20, differing exactly so."""
    imported = import_model("torchvision:resnet50", batch=32)
    mine, suite = _shapes(imported.layers), _suite_shapes()
    assert imported.convs == sum(mine.values()) == sum(suite.values()) == 53
    assert (len(mine), len(suite)) == (23, 20)
    v1_only = {parse_benchdnn(d) for d in (      # res3a/res4a/res5a_branch2a: 1x1 stride 2
        "mb32ic256ih56oc128oh28kh1sh2ph0", "mb32ic512ih28oc256oh14kh1sh2ph0",
        "mb32ic1024ih14oc512oh7kh1sh2ph0")}
    v1_5_only = {parse_benchdnn(d) for d in (    # layer2/3/4.0.conv1 (1x1 s1), .conv2 (3x3 s2)
        "mb32ic256ih56oc128oh56kh1ph0", "mb32ic128ih56oc128oh28kh3sh2ph1",
        "mb32ic512ih28oc256oh28kh1ph0", "mb32ic256ih28oc256oh14kh3sh2ph1",
        "mb32ic1024ih14oc512oh14kh1ph0", "mb32ic512ih14oc512oh7kh3sh2ph1")}
    assert set(suite) - set(mine) == v1_only
    assert set(mine) - set(suite) == v1_5_only
    # The stage's first 3x3 is stride 2 in v1.5, so one fewer stride-1 3x3 per stage.
    fewer = {s: suite[s] - mine[s] for s in set(mine) & set(suite) if suite[s] != mine[s]}
    assert sorted((s.in_channels, s.kernel_h, n) for s, n in fewer.items()) == [
        (128, 3, 1), (256, 3, 1), (512, 3, 1)]
    assert all(mine[s] == 1 for s in v1_5_only)


def test_resnet50_v1_from_a_user_callable_equals_the_shipped_suite(tmp_path, monkeypatch):
    module = _user_module(tmp_path, monkeypatch, """
        import torchvision

        def resnet50_v1():
            # v1: the stride-2 of each stage's first block on the 1x1 conv1, not the 3x3 conv2.
            model = torchvision.models.resnet50(weights=None)
            for stage in (model.layer2, model.layer3, model.layer4):
                stage[0].conv1.stride, stage[0].conv2.stride = (2, 2), (1, 1)
            return model
        """)
    imported = import_model(f"{module}:resnet50_v1", batch=32)
    assert imported.method == "torch.export" and imported.convs == 53
    assert _shapes(imported.layers) == _suite_shapes()
    assert len(imported.layers) == 20
    assert [(p.name, p.multiplicity) for p in imported.layers[:4]] == [
        ("conv1", 1), ("layer1.0.conv1", 1), ("layer1.0.conv2", 3), ("layer1.0.conv3", 4)]


# ---- a user's own module -----------------------------------------------------------------------
USER_NET = """
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, stride=2)
            self.grouped = nn.Conv2d(16, 32, 3, padding=2, dilation=2, groups=4)
            self.temporal = nn.Conv1d(32, 8, 3)
            self.volume = nn.Conv3d(1, 4, 1)
            self.up = nn.ConvTranspose2d(32, 8, 2, stride=2)

        def forward(self, x):
            x = self.stem(F.pad(x, (0, 1, 0, 1)))   # TF-style "same": the extra pixel right/bottom
            x = self.grouped(x)
            return self.up(x), self.temporal(x.flatten(2)), self.volume(x[:, :1].unsqueeze(1))

    def build():
        return Net()
    """


def test_a_user_callable_is_captured_with_padding_done_in_forward(tmp_path, monkeypatch):
    module = _user_module(tmp_path, monkeypatch, USER_NET)
    capture = torch_models.capture(f"{module}:build", (3, 32, 32))
    assert capture.method == "torch.export"
    assert [_row(p) for p in capture.convs] == [
        ("stem", 3, 33, 33, 16, (3, 3), (2, 2), (0, 0), (1, 1), 1),        # sees the padded 33
        ("grouped", 16, 16, 16, 32, (3, 3), (1, 1), (2, 2), (2, 2), 4),
        ("volume", 1, 16, 16, 4, (1, 1), (1, 1), (0, 0), (1, 1), 1)]    # a Conv3d on depth 1
    assert capture.convs[1].out_h == 16 and not capture.convs[1].depthwise
    assert capture.skipped == {"Conv1d": 1, "ConvTranspose2d": 1}
    imported = import_model(f"{module}:build", batch=8, input_chw=(3, 32, 32))
    assert [p.batch for p in imported.layers] == [8, 8, 8] and imported.convs == 3
    assert imported.skipped == capture.skipped and imported.name == "build"


# ---- 3-D convolutions (issue 37) ----------------------------------------------------------------
NET_3D = """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv3d(3, 8, (3, 5, 7), stride=(1, 2, 2), padding=(1, 2, 3))
            self.dilated = nn.Conv3d(8, 8, 3, padding="same", dilation=(2, 1, 1), groups=4)
            self.flat = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            y = self.dilated(self.stem(x))
            return self.flat(y.mean(2))

    def build():
        return Net()
    """


def _row_3d(p):
    return (p.name, p.in_channels, (p.in_d, p.in_h, p.in_w), p.out_channels,
            (p.kernel_d, p.kernel_h, p.kernel_w), (p.stride_d, p.stride_h, p.stride_w),
            (p.pad_front, p.pad_top, p.pad_left), (p.pad_back, p.pad_bottom, p.pad_right),
            (p.dilation_d, p.dilation_h, p.dilation_w), p.groups)


@pytest.mark.parametrize("method", ["torch.export", "forward hooks"])
def test_conv3d_layers_are_imported_as_3d_problems(tmp_path, monkeypatch, method):
    """Input 3x8x16x16. stem: kernel 3x5x7, stride 1x2x2, pad 1x2x3 -> 8 x (8+2-3+1=8) x
    ((16+4-5)//2+1=8) x ((16+6-7)//2+1=8). dilated: "same" with dilation 2 on depth spans 5,
    so 2 before and 2 after; 1 and 1 on height and width."""
    module = _user_module(tmp_path, monkeypatch, NET_3D)
    if method == "forward hooks":
        def no_export(*args, **kwargs):
            raise RuntimeError("export disabled by the test")
        monkeypatch.setattr(torch_models, "_export", no_export)
    capture = torch_models.capture(f"{module}:build", (3, 8, 16, 16))
    assert capture.method == method and capture.skipped == {}
    stem, dilated, flat = capture.convs
    assert [_row_3d(stem), _row_3d(dilated)] == [
        ("stem", 3, (8, 16, 16), 8, (3, 5, 7), (1, 2, 2), (1, 2, 3), (1, 2, 3), (1, 1, 1), 1),
        ("dilated", 8, (8, 8, 8), 8, (3, 3, 3), (1, 1, 1), (2, 1, 1), (2, 1, 1), (2, 1, 1), 4)]
    assert stem.is_3d and dilated.is_3d and not flat.is_3d
    # PyTorch's own output size agrees with the problem's.
    net = sys.modules[module].build()
    y = net.stem(torch.zeros(1, 3, 8, 16, 16, device="meta"))
    assert tuple(y.shape[2:]) == (stem.out_d, stem.out_h, stem.out_w) == (8, 8, 8)
    assert tuple(net.dilated(y).shape[2:]) == (dilated.out_d, dilated.out_h, dilated.out_w)


def test_the_suite_file_of_a_3d_model_reads_back(tmp_path, monkeypatch):
    from harness.models.suite_file import suite_text
    from harness.suite import parse_suite
    module = _user_module(tmp_path, monkeypatch, NET_3D)
    imported = import_model(f"{module}:build", batch=2, input_chw=(3, 8, 16, 16))
    text = suite_text(imported)
    assert "# 3 convolutions (2-D and 3-D), 3 unique shapes" in text
    assert parse_suite(text, "net.toml").problems == imported.layers


def test_torchvision_r2plus1d_18_has_the_video3d_suites_layers():
    """suites/video3d.toml writes out R(2+1)D-18's first layers by hand from the paper; the
    import of torchvision's model, at its 16x112x112 clip by default, finds each of them
    (layer1's four blocks included: multiplicity 4)."""
    imported = import_model("torchvision:r2plus1d_18", batch=1)
    assert imported.skipped == {} and all(p.is_3d for p in imported.layers)
    suite = load_suite("video3d", search_dirs=[REPO_SUITES]).problems
    written = [p for p in suite if p.name.startswith("r2plus1d_18:")]
    assert len(written) == 6
    assert _shapes(written) <= _shapes(imported.layers)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_forward_hooks_are_the_fallback_when_export_fails(tmp_path, monkeypatch):
    # A forward returning an object export cannot flatten; eager forward is fine.
    module = _user_module(tmp_path, monkeypatch, """
        import torch.nn as nn

        class Result:
            def __init__(self, tensor):
                self.tensor = tensor

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.same = nn.Conv2d(3, 8, 4, padding="same", dilation=3)
                self.blocks = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8))
                self.up = nn.ConvTranspose2d(8, 8, 2)

            def forward(self, x):
                x = self.blocks(self.same(x))
                self.up(x)
                return Result(x)

        def build():
            return Net()
        """)
    capture = torch_models.capture(f"{module}:build", (3, 20, 20))
    assert capture.method == "forward hooks"
    same, depthwise = capture.convs
    # "same" with an even dilated kernel (span 10): 4 before, 5 after, as PyTorch pads it.
    assert (same.name, same.pad_top, same.pad_bottom, same.pad_left, same.pad_right) == (
        "same", 4, 5, 4, 5)
    assert (same.out_h, same.out_w) == (20, 20)
    assert depthwise.name == "blocks.0" and depthwise.depthwise and depthwise.out_h == 10
    assert capture.skipped == {"ConvTranspose2d": 1}


def test_quantized_convs_are_counted_not_captured(tmp_path, monkeypatch):
    engines = torch.backends.quantized.supported_engines
    engine = next((e for e in ("fbgemm", "x86", "qnnpack") if e in engines), None)
    if engine is None:
        pytest.skip(f"no quantized engine in this torch build ({engines})")
    module = _user_module(tmp_path, monkeypatch, f"""
        import torch
        import torch.nn as nn
        from torch.ao import quantization as q

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.quant, self.dequant = q.QuantStub(), q.DeQuantStub()
                self.qconv = nn.Conv2d(3, 8, 3)
                self.head = nn.Conv2d(8, 4, 1)

            def forward(self, x):
                return self.head(self.dequant(self.qconv(self.quant(x))))

        def build():
            torch.backends.quantized.engine = {engine!r}
            model = Net().eval()
            model.qconfig = q.get_default_qconfig({engine!r})
            model.head.qconfig = None
            q.prepare(model, inplace=True)
            model(torch.randn(1, 3, 16, 16))
            return q.convert(model, inplace=True)
        """)
    previous = torch.backends.quantized.engine
    try:
        with warnings.catch_warnings():   # quantized tensors are deprecated; fine for a test
            warnings.simplefilter("ignore")
            capture = torch_models.capture(f"{module}:build", (3, 16, 16))
    finally:
        torch.backends.quantized.engine = previous
    assert capture.skipped == {"QuantizedConv2d": 1}
    assert [(p.name, p.in_channels, p.in_h) for p in capture.convs] == [("head", 8, 14)]


def test_the_graph_walk_reads_lower_level_and_quantized_conv_ops():
    """Ops export has not produced for the models above: aten.convolution (a `transposed` flag,
    output_padding before groups), cudnn_convolution (padding before stride), conv2d.padding
    ("same"), and quantized ops; plus the older "L['self'].layer1[0]" module-path format."""
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    x.meta["val"] = torch.empty(2, 8, 10, 12, device="meta")
    w.meta["val"] = torch.empty(16, 4, 3, 5, device="meta")
    aten, quantized = torch.ops.aten, torch.ops.quantized
    calls = [
        (aten.convolution.default, (x, w, None, [2, 1], [1, 2], [1, 2], False, [0, 0], 2),
         {"L__self__": ("", "M"), "L__self__body.0@1": ("body.0", "torch.nn.Conv2d")}),
        (aten.cudnn_convolution.default, (x, w, [1, 2], [2, 1], [1, 2], 2, False, False, True),
         {"L__self__": ("", "M"), "x": ("L['self'].layer1[0].conv2", "torch.nn.Conv2d")}),
        (aten.conv2d.padding, (x, w, None, [1, 1], "same", [1, 2], 2), {}),
        (aten.convolution.default, (x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1), {}),
        (quantized.conv2d.new, (x, x, 1.0, 0), {}),
        (quantized.conv2d_relu.new, (x, x, 1.0, 0), {}),
        (quantized.conv_transpose2d.default, (x, x, 1.0, 0), {}),
        (quantized.conv1d.default, (x, x, 1.0, 0), {}),
    ]
    for target, args, stack in calls:
        graph.call_function(target, args).meta["nn_module_stack"] = stack
    capture = torch_models._graph_capture("test", graph)
    strided = ("test", 8, 10, 12, 16, (3, 5), (2, 1), (1, 2), (1, 2), 2)
    assert [_row(p) for p in capture.convs] == [
        ("body.0",) + strided[1:], ("layer1.0.conv2",) + strided[1:],
        ("conv2", 8, 10, 12, 16, (3, 5), (1, 1), (1, 4), (1, 2), 2)]
    assert capture.skipped == {"ConvTranspose2d": 1, "QuantizedConv2d": 2,
                               "QuantizedConvTranspose2d": 1, "QuantizedConv1d": 1}


def test_segmentation_models_download_nothing(monkeypatch):
    def no_download(self, *args, **kwargs):
        raise AssertionError(f"tried to load weights {self}")

    monkeypatch.setattr(torchvision.models.WeightsEnum, "get_state_dict", no_download)
    capture = torch_models.capture("torchvision:lraspp_mobilenet_v3_large", (3, 128, 128))
    assert capture.method == "torch.export" and len(capture.convs) == 66


# ---- bad input ---------------------------------------------------------------------------------
def test_an_unknown_torchvision_name_suggests_close_ones():
    with pytest.raises(ModelError, match=r"torchvision:resnet5\b.*did you mean resnet50"):
        torch_models.capture("torchvision:resnet5", None)


@pytest.mark.parametrize("body, attr, pattern", [
    ("def explode():\n    raise ValueError('boom in the constructor')\n", "explode",
     r"{mod}:explode: explode\(\) raised ValueError: boom in the constructor"),
    ("def number():\n    return 42\n", "number",
     r"{mod}:number: number\(\) returned int 42, not a torch.nn.Module"),
    ("x = 1\n", "missing", r"{mod}:missing: module '{mod}' has no attribute 'missing'"),
    ("x = 1\n", "x", r"{mod}:x: 'x' is int 1, not a callable"),
])
def test_a_bad_user_callable_is_named(tmp_path, monkeypatch, body, attr, pattern):
    module = _user_module(tmp_path, monkeypatch, body)
    with pytest.raises(ModelError, match=pattern.format(mod=module)) as error:
        import_model(f"{module}:{attr}")
    assert "\n" not in str(error.value)


def test_a_module_that_does_not_import_is_named():
    with pytest.raises(ModelError, match=r"no_such_module_xyz:build: cannot import module "
                                         r"'no_such_module_xyz': ModuleNotFoundError"):
        import_model("no_such_module_xyz:build")


def test_missing_timm_and_missing_torch_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ModelError, match=r"timm:resnet50: timm is not installed"):
        torch_models.capture("timm:resnet50", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModelError, match=r"^importing PyTorch models needs torch: pip install"):
        torch_models.capture("torchvision:resnet50", None)


def test_timm_tf_models_show_the_padding_done_in_forward():
    pytest.importorskip("timm", reason="timm is not installed: the timm path is tested only for "
                                       "its error")
    capture = torch_models.capture("timm:tf_mobilenetv3_large_100", None)
    stem = capture.convs[0]
    assert capture.method == "torch.export"
    assert (stem.name, stem.in_h, stem.in_w, stem.pad_top, stem.stride_h) == (
        "conv_stem", 225, 225, 0, 2)
    with pytest.raises(ModelError, match=r"timm:resnet5\b.*did you mean resnet50"):
        torch_models.capture("timm:resnet5", None)


# ---- timing ------------------------------------------------------------------------------------
def test_resnet50_import_time_is_printed():
    start = time.perf_counter()
    imported = import_model("torchvision:resnet50", batch=32)
    elapsed = time.perf_counter() - start
    print(f"\nimport torchvision:resnet50: {elapsed:.2f} s ({imported.method}, "
          f"{imported.convs} convs, {len(imported.layers)} unique shapes)")
