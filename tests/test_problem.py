"""ConvProblem validation, benchdnn descriptor parsing and DeepBench tuples."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.problem import ConvProblem, ProblemError
from harness.problem_text import parse_benchdnn, parse_benchdnn_lines, parse_deepbench, to_benchdnn


def square(**changes) -> ConvProblem:
    fields = dict(batch=2, in_channels=4, in_h=8, in_w=8, out_channels=4, kernel_h=3, kernel_w=3)
    fields.update(changes)
    return ConvProblem(**fields)


# ---- ConvProblem validation -------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [
    ("batch", 0), ("in_channels", -1), ("in_h", 0), ("in_w", 0), ("out_channels", 0),
    ("kernel_h", 0), ("kernel_w", -3), ("stride_h", 0), ("stride_w", 0), ("dilation_h", 0),
    ("dilation_w", 0), ("groups", 0), ("multiplicity", 0), ("batch", True), ("in_h", 2.0),
])
def test_non_positive_sizes_are_rejected_naming_the_value(field, value):
    with pytest.raises(ProblemError, match=re.escape(f"{field}={value!r}")):
        square(**{field: value})


@pytest.mark.parametrize("field", ["pad_top", "pad_left", "pad_bottom", "pad_right"])
def test_negative_padding_is_rejected(field):
    with pytest.raises(ProblemError, match=f"{field}=-1 must be a non-negative integer"):
        square(**{field: -1})


def test_kernel_larger_than_padded_input_is_rejected():
    with pytest.raises(ProblemError, match=r"dilated kernel height 9 .*padded input height 8"):
        square(kernel_h=9)
    with pytest.raises(ProblemError, match=r"dilated kernel width 7 .*dilation_w=3.*width 6"):
        square(in_w=6, dilation_w=3)
    square(in_h=5, kernel_h=7, pad_top=1, pad_bottom=1)  # fits exactly once padded


def test_channels_not_divisible_by_groups_are_rejected():
    with pytest.raises(ProblemError, match="in_channels=6 is not divisible by groups=4"):
        square(in_channels=6, out_channels=8, groups=4)
    with pytest.raises(ProblemError, match="out_channels=6 is not divisible by groups=4"):
        square(in_channels=8, out_channels=6, groups=4)


def test_problem_name_appears_in_validation_message():
    with pytest.raises(ProblemError, match="problem 'net:bad'"):
        square(kernel_h=0, name="net:bad")


# ---- benchdnn grammar -------------------------------------------------------------------------
def test_defaults_are_benchdnn_defaults():
    p = parse_benchdnn("ic3ih10oc4kh3")
    assert (p.groups, p.batch, p.stride_h, p.stride_w) == (1, 2, 1, 1)
    assert (p.dilation_h, p.dilation_w) == (1, 1)
    assert (p.pad_top, p.pad_left, p.out_h) == (0, 0, 8)
    assert (p.name, p.multiplicity) == ("", 1)


def test_width_is_promoted_from_height():
    p = parse_benchdnn('mb50ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3"')
    assert p == ConvProblem(50, 64, 56, 56, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                            pad_right=1, name="resnet_50:res2a_branch2b", multiplicity=3)


def test_stride_and_dilation_are_promoted_too():
    p = parse_benchdnn("ic2ih20oc2kh3sh2dh1ph2")
    assert (p.stride_w, p.dilation_w, p.pad_left, p.in_w) == (2, 2, 2, 20)


def test_a_missing_height_makes_a_one_dimensional_problem():
    p = parse_benchdnn("ic3iw100oc4kw5sw2")
    assert (p.in_h, p.kernel_h, p.stride_h, p.out_h) == (1, 1, 1, 1)
    assert (p.in_w, p.kernel_w, p.stride_w, p.out_w) == (100, 5, 2, 48)


def test_dilation_is_zero_based():
    p = parse_benchdnn("ic1ih20oc1kh3dh0")
    assert p.dilation_h == 1 and p.out_h == 18
    p = parse_benchdnn("ic1ih20oc1kh3dh1")
    assert p.dilation_h == 2 and p.effective_kernel_h == 5 and p.out_h == 16
    assert "dh1dw1" in to_benchdnn(p)


def test_output_is_deduced_with_benchdnn_formula():
    # o = (i - ((k-1)*(d+1)+1) + 2p)/s + 1
    p = parse_benchdnn("ic3ih224iw200oc8kh7kw5sh2sw3ph3pw1dh1dw0")
    assert p.out_h == (224 - 13 + 6) // 2 + 1
    assert p.out_w == (200 - 5 + 2) // 3 + 1
    assert p.symmetric_padding


def test_padding_is_deduced_from_the_output():
    p = parse_benchdnn("ic64ih56oc64oh56kh3")
    assert (p.pad_top, p.pad_bottom) == (1, 1)
    # p = ((o-1)*s - i + k)/2 truncates to 2; the end padding then makes up the 112th output.
    p = parse_benchdnn("ic3ih224oc64oh112kh7sh2")
    assert (p.pad_top, p.pad_bottom, p.out_h) == (2, 3, 112)


def test_given_output_sets_the_end_padding():
    p = parse_benchdnn("ic1ih10oc1oh10kh3ph0")  # asymmetric: nothing on top, 2 at the bottom
    assert (p.pad_top, p.pad_bottom, p.out_h) == (0, 2, 10)
    p = parse_benchdnn("ic256ih56oc512oh28kh1sh2ph0")  # benchdnn's negative right pad: none here
    assert (p.pad_bottom, p.out_h) == (0, 28)


def test_underscores_may_separate_entries():
    text = 'mb32_g1ic3oc32_ih224oh112kh3sh2dh0ph1_iw224ow112kw3sw2dw0pw1_n"mobilenet:conv1*3"'
    p = parse_benchdnn(text)
    assert (p.batch, p.out_h, p.out_w, p.stride_w, p.name, p.multiplicity) == (
        32, 112, 112, 2, "mobilenet:conv1", 3)
    assert parse_benchdnn("_mb2_ic3__ih10_oc4_kh3_") == parse_benchdnn("mb2ic3ih10oc4kh3")


def test_names_and_multiplicity():
    assert parse_benchdnn('ic1ih4oc1kh1n"a:b"').name == "a:b"
    assert parse_benchdnn("ic1ih4oc1kh1nplain_name*2").name == "plain_name"  # unquoted, benchdnn
    p = parse_benchdnn('ic1ih4oc1kh1n"x*y:z*12"')
    assert (p.name, p.multiplicity) == ("x*y:z", 12)
    p = parse_benchdnn('ic1ih4oc1kh1n"*4"')
    assert (p.name, p.multiplicity) == ("", 4)
    assert parse_benchdnn('ic1ih4oc1kh1n"has # and spaces"').name == "has # and spaces"


def test_groups_and_depthwise():
    p = parse_benchdnn('g32mb1ic32ih112iw112oc32oh112ow112kh3kw3sh1sw1ph1pw1n"mobilenet:dw"')
    assert p.depthwise and p.groups == 32 and p.weight_shape == (32, 1, 3, 3)


def test_trivial_depth_entries_are_accepted():
    assert parse_benchdnn("ic3id1ih10oc4od1kd1sd1pd0dd0kh3") == parse_benchdnn("ic3ih10oc4kh3")


@pytest.mark.parametrize("text, fragment", [
    ("ic3ih10oc4kh3x", "unexpected 'x'"),
    ("ic3ih10oc4kh", "'kh' has no value"),
    ("ic3ih-1oc4kh3", "ih-1: ih must be a positive integer"),
    ("ic3ih10oc4kh3ph-1", "ph-1: ph must be a non-negative integer"),
    ("ic3ih10oc4kh0", "kh0: kh must be a positive integer"),
    ("g0ic3ih10oc4kh3", "g0: g must be a positive integer"),
    ("ic3ih10ih12oc4kh3", "ih12 repeats ih10"),
    ("ic3id8ih10oc4kh3", "kd is missing; the d axis has id8"),
    ("ic3ih10oc4kh3kd3", "id is missing; the d axis has kd3"),
    ("mb2ic3oc4", "no spatial entries"),
    ("ic3oc4ih10", "kh is missing"),
    ("ic3ih10iw10oc4kh3", "kw is missing"),
    ("ih10oc4kh3", "ic is missing"),
    ("ic3ih10kh3", "oc is missing"),
    ("ic3ih10oc4kh20", "kh20 with dh0 spans 20, more than ih10"),
    ("ic3ih10oc4kh3dh5", "kh3 with dh5 spans 13"),
    ("ic3ih10oc4oh4kh3", "oh4 cannot come from ih10"),
    ("ic3ih10oc4oh2kh3ph1", "oh2 is inconsistent"),
    ("ic3ih10oc4kh3ph1pw0", "pw0 conflicts with the value copied from ph"),
    ("ic3ih10oc4kh3sh2sw1", "sw1 conflicts"),
    ("g2ic3ih10oc4kh3", "in_channels=3 is not divisible by groups=2"),
    ('ic3ih10oc4kh3n"a"b"', "must be one quoted string"),
    ('ic3ih10oc4kh3n"unterminated', "must be one quoted string"),
    ('ic3ih10oc4kh3n"a*0"', "multiplicity *0 must be at least 1"),
])
def test_bad_descriptors_name_the_text_and_the_rule(text, fragment):
    with pytest.raises(ProblemError) as info:
        parse_benchdnn(text)
    message = str(info.value)
    assert f"descriptor {text!r}" in message
    assert fragment in message


def test_lines_skip_comments_and_blank_lines():
    text = """# resnet_50

g1mb50ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3n"resnet_50:conv1"
mb50ic64ih56oc256oh56kh1ph0n"resnet_50:res2a_branch1*4"   # trailing comment
# mb50ic64ih56oc256oh56kh1ph0n"resnet_50:res2a_branch2c"        # res2a_branch1
   mb50ic64ih56oc64oh56kh1ph0n"resnet_50:res2a # not a comment"
"""
    problems = parse_benchdnn_lines(text)
    assert [p.name for p in problems] == ["resnet_50:conv1", "resnet_50:res2a_branch1",
                                          "resnet_50:res2a # not a comment"]
    assert problems[1].multiplicity == 4


def test_lines_report_the_line_number():
    with pytest.raises(ProblemError, match=r"^shapes_x:3: descriptor 'ic3ih10oc4kh99'"):
        parse_benchdnn_lines("# x\nic3ih10oc4kh3\nic3ih10oc4kh99\n", source="shapes_x")


# The 20 active lines of oneDNN's shapes_resnet_50 (its comment lines are exercised above).
RESNET_50 = """
g1mb50ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3n"resnet_50:conv1"
mb50ic64ih56oc256oh56kh1ph0n"resnet_50:res2a_branch1*4"
mb50ic64ih56oc64oh56kh1ph0n"resnet_50:res2a_branch2a"
mb50ic64ih56oc64oh56kh3ph1n"resnet_50:res2a_branch2b*3"
mb50ic256ih56oc64oh56kh1ph0n"resnet_50:res2b_branch2a*2"
g1mb50ic256ih56iw56oc512oh28ow28kh1kw1sh2sw2ph0pw0n"resnet_50:res3a_branch1"
g1mb50ic256ih56iw56oc128oh28ow28kh1kw1sh2sw2ph0pw0n"resnet_50:res3a_branch2a"
mb50ic128ih28oc128oh28kh3ph1n"resnet_50:res3a_branch2b*4"
mb50ic128ih28oc512oh28kh1ph0n"resnet_50:res3a_branch2c*4"
mb50ic512ih28oc128oh28kh1ph0n"resnet_50:res3b_branch2a*3"
g1mb50ic512ih28iw28oc1024oh14ow14kh1kw1sh2sw2ph0pw0n"resnet_50:res4a_branch1"
g1mb50ic512ih28iw28oc256oh14ow14kh1kw1sh2sw2ph0pw0n"resnet_50:res4a_branch2a"
mb50ic256ih14oc256oh14kh3ph1n"resnet_50:res4a_branch2b*6"
mb50ic256ih14oc1024oh14kh1ph0n"resnet_50:res4a_branch2c*6"
mb50ic1024ih14oc256oh14kh1ph0n"resnet_50:res4b_branch2a*5"
g1mb50ic1024ih14iw14oc2048oh7ow7kh1kw1sh2sw2ph0pw0n"resnet_50:res5a_branch1"
g1mb50ic1024ih14iw14oc512oh7ow7kh1kw1sh2sw2ph0pw0n"resnet_50:res5a_branch2a"
mb50ic512ih7oc512oh7kh3ph1n"resnet_50:res5a_branch2b*3"
mb50ic512ih7oc2048oh7kh1ph0n"resnet_50:res5a_branch2c*3"
mb50ic2048ih7oc512oh7kh1ph0n"resnet_50:res5b_branch2a*2"
"""


def test_resnet_50_file_parses_to_53_layers():
    problems = parse_benchdnn_lines(RESNET_50)
    assert len(problems) == 20 and len(set(problems)) == 20
    assert sum(p.multiplicity for p in problems) == 53
    assert all(p.batch == 50 for p in problems)
    # 3.86 GMAC per image forward: the usual count for ResNet-50 v1's convolutions
    gmacs = sum(p.flops * p.multiplicity for p in problems) / 2 / 50 / 1e9
    assert round(gmacs, 2) == 3.86


# ---- round trip -------------------------------------------------------------------------------
_NAMES = st.text(st.characters(blacklist_characters='"', blacklist_categories=("Cs",)),
                 max_size=12).filter(lambda name: not re.search(r"\*\d+$", name))


@st.composite
def conv_problems(draw) -> ConvProblem:
    groups = draw(st.integers(1, 4))
    axes = []
    for _ in range(2):
        kernel, dilation = draw(st.integers(1, 7)), draw(st.integers(1, 3))
        stride = draw(st.integers(1, 4))
        pad_begin, pad_end = draw(st.integers(0, 4)), draw(st.integers(0, 8))
        extent = (kernel - 1) * dilation + 1
        size = draw(st.integers(max(1, extent - pad_begin - pad_end), 40))
        axes.append((size, kernel, stride, dilation, pad_begin, pad_end))
    (ih, kh, sh, dh, pt, pb), (iw, kw, sw, dw, pl, pr) = axes
    return ConvProblem(
        batch=draw(st.integers(1, 64)), in_channels=groups * draw(st.integers(1, 8)),
        in_h=ih, in_w=iw, out_channels=groups * draw(st.integers(1, 8)), kernel_h=kh,
        kernel_w=kw, stride_h=sh, stride_w=sw, pad_top=pt, pad_left=pl, pad_bottom=pb,
        pad_right=pr, dilation_h=dh, dilation_w=dw, groups=groups, name=draw(_NAMES),
        multiplicity=draw(st.integers(1, 30)))


@settings(max_examples=400, deadline=None)
@given(conv_problems())
def test_benchdnn_round_trip(problem):
    assert parse_benchdnn(to_benchdnn(problem)) == problem


@settings(max_examples=200, deadline=None)
@given(conv_problems())
def test_deduced_output_matches_conv_problem(problem):
    """Leaving the output out: benchdnn's formula and ConvProblem agree (symmetric padding)."""
    p = problem
    text = (f"g{p.groups}mb{p.batch}ic{p.in_channels}ih{p.in_h}iw{p.in_w}oc{p.out_channels}"
            f"kh{p.kernel_h}kw{p.kernel_w}sh{p.stride_h}sw{p.stride_w}"
            f"dh{p.dilation_h - 1}dw{p.dilation_w - 1}ph{p.pad_top}pw{p.pad_left}")
    try:
        expected = ConvProblem(**{**p.__dict__, "name": "", "multiplicity": 1,
                                  "pad_bottom": p.pad_top, "pad_right": p.pad_left})
    except ProblemError:
        with pytest.raises(ProblemError):
            parse_benchdnn(text)
        return
    assert parse_benchdnn(text) == expected


# ---- DeepBench --------------------------------------------------------------------------------
# Rows of DeepBench's training_set: (row, (W, H, C, N, K, S, R, pad_w, pad_h, str_w, str_h),
# P (output width), Q (output height), fwd GFLOP), as tabulated in the shapes reference.
DEEPBENCH_ROWS = [
    (1, (700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2), 341, 79, 0.690),
    (5, (341, 79, 32, 4, 32, 10, 5, 0, 0, 2, 2), 166, 38, 2.584),
    (8, (341, 79, 32, 32, 32, 10, 5, 0, 0, 2, 2), 166, 38, 20.670),
    (9, (480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1), 480, 48, 0.106),
    (13, (108, 108, 3, 8, 64, 3, 3, 1, 1, 2, 2), 54, 54, 0.081),
    (30, (224, 224, 3, 16, 64, 7, 7, 3, 3, 2, 2), 112, 112, 3.776),
    (36, (7, 7, 832, 16, 128, 5, 5, 2, 2, 1, 1), 7, 7, 4.175),
    (45, (7, 7, 2048, 8, 512, 1, 1, 3, 3, 2, 2), 7, 7, 0.822),
    (55, (700, 161, 1, 16, 64, 5, 5, 1, 1, 2, 2), 349, 80, 1.430),
    (57, (350, 80, 64, 16, 128, 5, 5, 1, 1, 2, 2), 174, 39, 44.473),
    (59, (175, 40, 128, 16, 256, 5, 5, 1, 1, 2, 2), 87, 19, 43.332),
    (61, (84, 20, 256, 16, 512, 5, 5, 1, 1, 2, 2), 41, 9, 38.692),
    (87, (28, 28, 512, 16, 1024, 1, 1, 0, 0, 2, 2), 14, 14, 3.288),
]


@pytest.mark.parametrize("row, fields, out_w, out_h, gflop", DEEPBENCH_ROWS)
def test_deepbench_rows_match_the_table(row, fields, out_w, out_h, gflop):
    p = parse_deepbench(fields, name=f"deepbench:train_{row:02d}")
    assert (p.out_w, p.out_h) == (out_w, out_h)
    assert round(p.flops / 1e9, 3) == gflop
    assert p.name == f"deepbench:train_{row:02d}"


def test_deepbench_is_width_first():
    p = parse_deepbench((700, 161, 1, 4, 32, 20, 5, 3, 1, 2, 4))
    assert (p.in_w, p.in_h, p.in_channels, p.batch, p.out_channels) == (700, 161, 1, 4, 32)
    assert (p.kernel_w, p.kernel_h) == (20, 5)
    assert (p.pad_left, p.pad_right, p.pad_top, p.pad_bottom) == (3, 3, 1, 1)
    assert (p.stride_w, p.stride_h) == (2, 4)
    assert p == parse_benchdnn("mb4ic1ih161iw700oc32kh5kw20sh4sw2ph1pw3")


@pytest.mark.parametrize("text", [
    "700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2",
    "(700,161,1,4,32,20,5,0,0,2,2)",
    "std::make_tuple(700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2),",
    "{700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2}",
])
def test_deepbench_text_forms(text):
    assert parse_deepbench(text) == parse_deepbench((700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2))


@pytest.mark.parametrize("fields, fragment", [
    ((700, 161, 1, 4, 32, 20, 5, 0, 0, 2), "has 10 fields, needs 11"),
    ((700, 161, 0, 4, 32, 20, 5, 0, 0, 2, 2), "C (input channels) = 0 must be a positive"),
    ((700, 161, 1, 4, 32, 20, 5, -1, 0, 2, 2), "pad_w (width padding) = -1 must be a non-neg"),
    ((700, 161, 1, 4, 32, 20, 5, 0, 0, True, 2), "wstride (width stride) = True"),
    ((700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2.5), "hstride (height stride) = 2.5"),
    ("700, 161, 1, 4, 32, 20, 5, 0, 0, 2, x", "hstride (height stride) = 'x'"),
    ((7, 7, 3, 1, 4, 9, 1, 0, 0, 1, 1), "dilated kernel width 9"),
])
def test_bad_deepbench_tuples(fields, fragment):
    with pytest.raises(ProblemError, match=r"^DeepBench tuple .*" + re.escape(fragment)):
        parse_deepbench(fields)


# ---- absurd sizes: refused where they enter, counted without loops --------------------------
@pytest.mark.parametrize("field", ["batch", "in_channels", "in_h", "kernel_w", "pad_top",
                                   "multiplicity"])
def test_values_beyond_2_62_are_problem_errors_naming_the_field(field):
    with pytest.raises(ProblemError, match=re.escape(f"{field}={2**70}")):
        square(**{field: 2**70})


@pytest.mark.parametrize("changes, tensor", [
    (dict(in_channels=10**9, out_channels=10**9, in_h=8, in_w=8), "weight"),
    (dict(batch=10**9, in_channels=10**9), "input"),
    (dict(batch=2**40, out_channels=2**22, kernel_h=1, kernel_w=1), "output"),
])
def test_tensors_whose_float64_bytes_overflow_are_refused(changes, tensor):
    with pytest.raises(ProblemError, match=f"the {tensor} tensor"):
        square(**changes)


def test_flops_beyond_2_62_are_refused():
    with pytest.raises(ProblemError, match="FLOPs"):
        square(in_channels=2**20, out_channels=2**20, in_h=2**12, in_w=2**12, kernel_h=2**5,
               kernel_w=2**5)


@pytest.mark.parametrize("text", ["ic3ih" + "9" * 5000 + "oc4kh3",
                                  'ic3ih8oc4kh3n"x*' + "9" * 5000 + '"'])
def test_descriptor_numbers_with_thousands_of_digits_are_problem_errors(text):
    with pytest.raises(ProblemError, match="larger than 2\\*\\*62"):
        parse_benchdnn(text)


def test_deepbench_field_with_thousands_of_digits_is_a_problem_error():
    with pytest.raises(ProblemError, match="DeepBench tuple .*: W"):
        parse_deepbench(", ".join(["9" * 5000] + ["1"] * 10))


def _taps_by_loop(p: ConvProblem) -> int:
    def axis(size, out, kernel, stride, dilation, pad):
        return sum(1 for o in range(out) for t in range(kernel)
                   if 0 <= o * stride - pad + t * dilation < size)
    return (axis(p.in_h, p.out_h, p.kernel_h, p.stride_h, p.dilation_h, p.pad_top)
            * axis(p.in_w, p.out_w, p.kernel_w, p.stride_w, p.dilation_w, p.pad_left))


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 40), kernel=st.integers(1, 9), stride=st.integers(1, 6),
       dilation=st.integers(1, 5), pads=st.tuples(st.integers(0, 12), st.integers(0, 12)))
def test_flops_without_padding_match_counting_every_tap(size, kernel, stride, dilation, pads):
    try:
        p = square(in_h=size, kernel_h=kernel, stride_h=stride, dilation_h=dilation,
                   pad_top=pads[0], pad_bottom=pads[1])
    except ProblemError:
        return   # the dilated kernel is wider than the padded input
    per_tap = p.flops // (p.out_h * p.kernel_h * p.out_w * p.kernel_w)
    assert p.flops_no_padding == per_tap * _taps_by_loop(p)


def test_flops_without_padding_of_a_huge_layer_take_no_time():
    p = square(in_h=10**9, kernel_h=10**4, pad_top=3, pad_bottom=3)   # 10**13 (o, t) pairs
    assert p.flops_no_padding < p.flops   # padding taps left out; returned at once
