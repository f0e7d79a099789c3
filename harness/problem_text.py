"""Convolution problems as text: benchdnn descriptors (read and written) and DeepBench tuples.
Every error names the text and the rule it broke (ProblemError)."""
from __future__ import annotations

import re
from collections.abc import Sequence

from harness.problem import (MAX_DIGITS, Axis, ConvProblem, ProblemError, end_pad_for_output,
                             output_size)


def to_benchdnn(p: ConvProblem) -> str:
    """The problem as a benchdnn descriptor (0-based dilation; output sizes imply end padding).
    Depth entries appear only for a 3-D problem, so a 2-D descriptor reads as it always did."""
    d = p.is_3d
    text = (f"g{p.groups}mb{p.batch}ic{p.in_channels}{f'id{p.in_d}' if d else ''}"
            f"ih{p.in_h}iw{p.in_w}oc{p.out_channels}{f'od{p.out_d}' if d else ''}"
            f"oh{p.out_h}ow{p.out_w}{f'kd{p.kernel_d}' if d else ''}kh{p.kernel_h}kw{p.kernel_w}"
            f"{f'sd{p.stride_d}' if d else ''}sh{p.stride_h}sw{p.stride_w}"
            f"{f'pd{p.pad_front}' if d else ''}ph{p.pad_top}pw{p.pad_left}"
            f"{f'dd{p.dilation_d - 1}' if d else ''}dh{p.dilation_h - 1}dw{p.dilation_w - 1}")
    if p.name or p.multiplicity > 1:
        suffix = f"*{p.multiplicity}" if p.multiplicity > 1 else ""
        text += f'n"{p.name}{suffix}"'
    return text


# ---- parsing: benchdnn descriptors ------------------------------------------------------------
# The grammar is oneDNN benchdnn's (tests/benchdnn/conv/conv_aux.cpp, str2desc):
#   gX mbX icX idX ihX iwX ocX odX ohX owX kdX khX kwX sdX shX swX pdX phX pwX ddX dhX dwX nNAME
# in any order, `_` allowed between entries, the name last. Depth entries that are all trivial
# (or absent) give a 2-D problem; any other makes it 3-D.

_ENTRY = re.compile(r"(mb|ic|oc|g|[iokspd][dhw])([-+]?\d*)")
_NON_NEGATIVE_KEYS = frozenset(("pd", "ph", "pw", "dd", "dh", "dw"))
_SPATIAL_FIELDS = ("i", "o", "k", "s", "p", "d")
# benchdnn's defaults for an axis nobody mentions (a 1-D problem gets a trivial height this way).
_TRIVIAL_AXIS = {"i": 1, "o": 1, "k": 1, "s": 1, "p": 0, "d": 0}
_MULTIPLICITY = re.compile(r"(.*)\*(\d+)", re.DOTALL)


def parse_benchdnn(text: str) -> ConvProblem:
    """A ConvProblem from a benchdnn conv descriptor such as `mb32ic64ih56oc64oh56kh3ph1n"x:y*3"`.

    Follows benchdnn: g=1, mb=2, stride 1 and 0-based dilation 0 by default; an axis nobody
    mentions copies the other one (h from d, w from h); a missing output is computed, missing
    padding deduced from the output. A trailing `*K` in the name is the layer's multiplicity."""
    desc = text.strip()
    values, raw_name = _tokenize(desc)
    try:
        d_values, h_values, w_values = _promote(values)
        depth = _resolve_axis(d_values, "d") if d_values else Axis(1, 1, 1, 1, 0, 0)
        height = _resolve_axis(h_values, "h")
        width = _resolve_axis(w_values, "w")
        name, multiplicity = _split_name(raw_name)
        for key in ("ic", "oc"):
            if key not in values:
                raise ProblemError(f"{key} is missing; every descriptor needs ic and oc")
        return ConvProblem(
            batch=values.get("mb", 2), in_channels=values["ic"], in_h=height.size,
            in_w=width.size, out_channels=values["oc"], kernel_h=height.kernel,
            kernel_w=width.kernel, stride_h=height.stride, stride_w=width.stride,
            pad_top=height.pad_begin, pad_left=width.pad_begin, pad_bottom=height.pad_end,
            pad_right=width.pad_end, dilation_h=height.dilation, dilation_w=width.dilation,
            groups=values.get("g", 1), name=name, multiplicity=multiplicity, in_d=depth.size,
            kernel_d=depth.kernel, stride_d=depth.stride, pad_front=depth.pad_begin,
            pad_back=depth.pad_end, dilation_d=depth.dilation)
    except ProblemError as error:
        raise ProblemError(f"descriptor {desc!r}: {error}") from None


def parse_benchdnn_lines(text: str, source: str = "<text>") -> list[ConvProblem]:
    """Every descriptor in a benchdnn-style shapes file: one per line, `#` comments, blank lines."""
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        desc = _strip_comment(line).strip()
        if not desc:
            continue
        try:
            problems.append(parse_benchdnn(desc))
        except ProblemError as error:
            raise ProblemError(f"{source}:{number}: {error}") from None
    return problems


def _tokenize(desc: str) -> tuple[dict[str, int], str | None]:
    """Entry values by key, and the raw name text (None when there is no `n` entry)."""
    values: dict[str, int] = {}
    pos = 0
    while pos < len(desc):
        if desc[pos] == "_":
            pos += 1
            continue
        if desc[pos] == "n":
            return values, _name_text(desc, pos + 1)
        match = _ENTRY.match(desc, pos)
        if match is None:
            raise ProblemError(
                f"descriptor {desc!r}: unexpected {desc[pos:pos + 12]!r} at position {pos}; "
                "expected entries such as mb32, ic64, ih56, oc64, kh3, sh2, ph1, dh0 or n\"name\"")
        key, digits = match.groups()
        values[key] = _entry_value(desc, key, digits, values)
        pos = match.end()
    return values, None


def _entry_value(desc: str, key: str, digits: str, seen: dict[str, int]) -> int:
    if not digits or not digits.lstrip("+-"):
        raise ProblemError(f"descriptor {desc!r}: entry {key!r} has no value; write e.g. {key}1")
    if key in seen:
        # benchdnn silently keeps the last; a repeated entry is almost always a typo.
        raise ProblemError(f"descriptor {desc!r}: {key}{digits} repeats {key}{seen[key]}")
    value = _int_text(digits, f"descriptor {desc!r}: {key}")
    lowest = 0 if key in _NON_NEGATIVE_KEYS else 1
    if value < lowest:
        rule = "a non-negative" if lowest == 0 else "a positive"
        raise ProblemError(f"descriptor {desc!r}: {key}{digits}: {key} must be {rule} integer")
    return value


def _name_text(desc: str, start: int) -> str:
    """The text after `n`: `"quoted"` (as in benchdnn's shape files) or the rest of the string."""
    rest = desc[start:]
    if not rest.startswith('"'):
        return rest
    if len(rest) < 2 or not rest.endswith('"') or '"' in rest[1:-1]:
        raise ProblemError(f"descriptor {desc!r}: the name {rest!r} must be one quoted string "
                           "at the end of the descriptor, without quotes inside")
    return rest[1:-1]


def _split_name(raw: str | None) -> tuple[str, int]:
    """`net:layer*K` -> ("net:layer", K): topology files record repeats in the name."""
    if raw is None:
        return "", 1
    match = _MULTIPLICITY.fullmatch(raw)
    if match is None:
        return raw, 1
    multiplicity = _int_text(match.group(2), f"name {raw!r}: multiplicity")
    if multiplicity < 1:
        raise ProblemError(f"name {raw!r}: multiplicity *{match.group(2)} must be at least 1")
    return match.group(1), multiplicity


def _axis_values(values: dict[str, int], axis: str) -> dict[str, int]:
    return {name: values[name + axis] for name in _SPATIAL_FIELDS if name + axis in values}


def _mentioned(given: dict[str, int]) -> bool:
    """benchdnn's test for an axis being present: only non-default values count (conv_aux.cpp)."""
    return any(given.get(name, 0) for name in ("i", "o", "k", "d")) or (
        given.get("s", 1) != 1 or given.get("p", 0) >= 1)


def _promote(values: dict[str, int]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The d, h and w entries after benchdnn's promotion: a missing height copies the depth
    (3-D) and a missing width the height, a missing height without depth (1-D problem) is
    trivial. The depth entries are empty for a 2-D problem (any depth entry with a non-default
    value makes it 3-D; trivial ones, pd0 dd0 sd1, change nothing). An explicit entry the copy
    would overwrite is an error, where benchdnn silently drops it."""
    d_given = _axis_values(values, "d")
    h_given, w_given = _axis_values(values, "h"), _axis_values(values, "w")
    h_here, w_here = _mentioned(h_given), _mentioned(w_given)
    if _mentioned(d_given):
        if not h_here:
            h_given = _copied(d_given, h_given, "d", "h")
        if not w_here:
            w_given = _copied(h_given, w_given, "h", "w")
        return d_given, h_given, w_given
    if not h_here and not w_here:
        raise ProblemError("no spatial entries; give at least ih and kh (iw and kw copy them)")
    if not w_here:
        return {}, h_given, _copied(h_given, w_given, "h", "w")
    if not h_here:
        return {}, _copied(_TRIVIAL_AXIS, h_given, "", "h"), w_given
    return {}, h_given, w_given


def _copied(source: dict[str, int], explicit: dict[str, int], src: str, dst: str) -> dict[str, int]:
    result = dict(source)
    for name, value in explicit.items():
        default = _TRIVIAL_AXIS[name] if name in ("s", "p", "d") else None
        if result.get(name, default) != value:
            origin = f"copied from {name}{src}" if src else "implied for a 1-D problem"
            raise ProblemError(f"{name}{dst}{value} conflicts with the value {origin} "
                               f"({result.get(name, default)}); give the whole {dst} axis "
                               f"(i{dst}, k{dst}, ...) or none of it")
    return result


def _resolve_axis(given: dict[str, int], axis: str) -> Axis:
    """Deduce output or padding as benchdnn does, then the end padding that yields the output."""
    for name in ("i", "k"):
        if name not in given:
            raise ProblemError(f"{name}{axis} is missing; the {axis} axis has "
                               f"{_describe(given, axis)} but needs both i{axis} and k{axis}")
    size, kernel = given["i"], given["k"]
    stride, dilation = given.get("s", 1), given.get("d", 0) + 1
    extent = (kernel - 1) * dilation + 1
    if "o" not in given:
        pad = given.get("p", 0)
        if size + 2 * pad < extent:
            raise ProblemError(f"k{axis}{kernel} with d{axis}{dilation - 1} spans {extent}, more "
                               f"than i{axis}{size} plus padding 2*{pad}")
        return Axis(size, kernel, stride, dilation, pad, pad)
    out = given["o"]
    pad = given["p"] if "p" in given else _c_div((out - 1) * stride - size + extent, 2)
    if pad < 0:
        raise ProblemError(f"o{axis}{out} cannot come from i{axis}{size} k{axis}{kernel} "
                           f"s{axis}{stride} d{axis}{dilation - 1}: the deduced padding is {pad}")
    pad_end = end_pad_for_output(size, out, kernel, stride, dilation, pad)
    actual = output_size(size, kernel, stride, dilation, pad, pad_end)
    if actual != out:
        raise ProblemError(f"o{axis}{out} is inconsistent: i{axis}{size} k{axis}{kernel} "
                           f"s{axis}{stride} p{axis}{pad} d{axis}{dilation - 1} give at least "
                           f"{actual} outputs")
    return Axis(size, kernel, stride, dilation, pad, pad_end)


def _describe(given: dict[str, int], axis: str) -> str:
    return " ".join(f"{name}{axis}{value}" for name, value in given.items()) or "no entries"


def _c_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as benchdnn's C++ does."""
    quotient = abs(numerator) // denominator
    return quotient if numerator >= 0 else -quotient


def _strip_comment(line: str) -> str:
    """The line up to a `#` that is not inside a quoted name."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == "#" and not quoted:
            return line[:index]
    return line


# ---- parsing: DeepBench tuples ----------------------------------------------------------------
# DeepBench's conv_problems.h lists (W, H, C, N, K, S, R, pad_w, pad_h, wstride, hstride):
# WIDTH first, S is the filter width and R the filter height; padding is symmetric.

DEEPBENCH_FIELDS = ("W", "H", "C", "N", "K", "S", "R", "pad_w", "pad_h", "wstride", "hstride")
_DEEPBENCH_MEANING = {
    "W": "input width", "H": "input height", "C": "input channels", "N": "batch",
    "K": "output channels", "S": "filter width", "R": "filter height",
    "pad_w": "width padding", "pad_h": "height padding", "wstride": "width stride",
    "hstride": "height stride"}


def parse_deepbench(fields: Sequence[int] | str, *, name: str = "",
                    multiplicity: int = 1) -> ConvProblem:
    """A ConvProblem from a DeepBench tuple, given as 11 integers or as text such as
    `std::make_tuple(700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2)`."""
    label = repr(fields) if isinstance(fields, str) else f"({', '.join(map(repr, fields))})"
    numbers = _deepbench_numbers(fields, label)
    W, H, C, N, K, S, R, pad_w, pad_h, wstride, hstride = numbers
    try:
        return ConvProblem(batch=N, in_channels=C, in_h=H, in_w=W, out_channels=K, kernel_h=R,
                           kernel_w=S, stride_h=hstride, stride_w=wstride, pad_top=pad_h,
                           pad_left=pad_w, pad_bottom=pad_h, pad_right=pad_w, name=name,
                           multiplicity=multiplicity)
    except ProblemError as error:
        raise ProblemError(f"DeepBench tuple {label}: {error}") from None


def _deepbench_numbers(fields: Sequence[int] | str, label: str) -> list[int]:
    items = _deepbench_items(fields) if isinstance(fields, str) else list(fields)
    if len(items) != len(DEEPBENCH_FIELDS):
        raise ProblemError(f"DeepBench tuple {label}: has {len(items)} fields, needs "
                           f"{len(DEEPBENCH_FIELDS)}: {', '.join(DEEPBENCH_FIELDS)}")
    numbers = []
    for field_name, item in zip(DEEPBENCH_FIELDS, items):
        value = _deepbench_int(item, f"DeepBench tuple {label}: {field_name}")
        lowest = 0 if field_name.startswith("pad") else 1
        if value is None or value < lowest:
            rule = "a non-negative" if lowest == 0 else "a positive"
            raise ProblemError(f"DeepBench tuple {label}: {field_name} "
                               f"({_DEEPBENCH_MEANING[field_name]}) = {item!r} must be {rule} "
                               "integer")
        numbers.append(value)
    return numbers


def _deepbench_items(text: str) -> list[str]:
    # Accept the tuple as it appears in conv_problems.h, trailing comma included.
    body = text.strip().rstrip(",;").strip()
    body = body.removeprefix("std::make_tuple").strip()
    if body[:1] in "({[" and body[-1:] in ")}]":
        body = body[1:-1]
    body = body.strip().rstrip(",")
    return [item.strip() for item in body.split(",")] if body else []


def _deepbench_int(item: object, what: str) -> int | None:
    """An integer field value; None for anything else (bools and floats included)."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, str) and re.fullmatch(r"[-+]?\d+", item.strip()):
        return _int_text(item.strip(), what)
    return None


def _int_text(digits: str, what: str) -> int:
    """int(digits), refusing numbers too long to be a count (int() of 4300+ digits raises a
    plain ValueError; anything over 2**62 is refused by ConvProblem anyway)."""
    if len(digits.lstrip("+-").lstrip("0")) > MAX_DIGITS:
        shown = digits if len(digits) <= 24 else f"{digits[:20]}... ({len(digits)} digits)"
        raise ProblemError(f"{what} {shown} is larger than 2**62")
    return int(digits)
