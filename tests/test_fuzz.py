"""Random input where input enters: bytes and TOML-ish text to the suite loader (a Sweep or a
SuiteError, nothing else), and argument lists to the command line (exit 0 or 2, 1 only from
compare/check; never an exception, never a traceback). Small sweeps on the fake backend only."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.suite import SuiteError, load_suite, parse_suite
from harness.sweep import Sweep

# ---- the suite loader ---------------------------------------------------------------------------
KEYS = ["name", "description", "layers", "sweep", "timing", "compare", "directions",
        "precisions", "layouts", "workspace_limits", "batch", "backends", "algorithms", "optional",
        "mode", "budget_ms", "min_samples", "max_samples", "noise_target", "warmup", "gpu_timer",
        "gpu_processes",
        "threshold", "deepbench", "multiplicity", "in_channels", "in_h", "in_w", "out_channels",
        "kernel_h", "kernel_w", "stride_h", "pad_top", "pad_bottom", "dilation_w", "groups",
        "nmae", "a b", ""]
WORDS = ["fwd", "bwd_data", "fp32", "fp16", "NCHW", "NHWC", "fake", "cpu", "exact", "warm",
         "cold", "graph", "64MiB", "unlimited", "0", "-1", "1.5GiB", "quick", "../../esc", "a/b",
         "mb2ic4ih8oc4oh8kh3ph1n\"l\"", "ic3ih8oc4kh3", "g2mb1ic4ih5oc4kh3sh2dh1n\"x*3\"",
         "ic3ih99999999999999999999999oc4kh3", "ic0ih8oc4kh3", "\u00e9", "\x07", ""]
INTS = st.one_of(st.integers(-3, 70), st.sampled_from([2**31, 2**62, 2**63, 2**70, -2**63]))
SCALARS = st.one_of(INTS, st.floats(allow_nan=True), st.booleans(), st.sampled_from(WORDS),
                    st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=14)
DOCUMENTS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return json.dumps(value)      # JSON string escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml(document: dict) -> str:
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in document.items())


def _mutated(text: str, cuts: list[tuple[int, int, str]]) -> str:
    for start, length, insert in cuts:
        at = start % (len(text) + 1)
        text = text[:at] + insert + text[at + length:]
    return text


def _loads_or_refuses(text: str) -> None:
    try:
        assert isinstance(parse_suite(text, source="fuzz.toml"), Sweep)
    except SuiteError as error:
        assert str(error).startswith("fuzz.toml: ") and "\n" not in str(error).strip()


FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@FAST
@given(document=DOCUMENTS)
def test_toml_documents_load_or_give_a_suite_error(document):
    _loads_or_refuses(_toml(document))


@FAST
@given(document=DOCUMENTS, cuts=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 5),
                                                   st.sampled_from(["", "[", "]", "{", "\"",
                                                                    "=", "\n", "'''", "#",
                                                                    "\\u", "[[", "9" * 30])),
                                         max_size=4))
def test_mangled_toml_loads_or_gives_a_suite_error(document, cuts):
    _loads_or_refuses(_mutated(_toml(document), cuts))


@FAST
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      DOCUMENTS.map(lambda d: _toml(d).encode("utf-8", "surrogatepass"))))
def test_random_files_load_or_give_a_suite_error_naming_the_file(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random.toml"
        path.write_bytes(data)
        try:
            assert isinstance(load_suite(path), Sweep)
        except SuiteError as error:
            assert str(error).startswith(str(path)), str(error)


# ---- the command line ---------------------------------------------------------------------------
TINY = ("layers = ['mb1ic2ih4oc2oh4kh3ph1n\"l\"']\n[[sweep.backends]]\nname = 'fake'\n"
        "[timing]\nbudget_ms = 1\nmin_samples = 3\nmax_samples = 5\n")
BIG = ("layers = [{batch = 2, in_channels = 4, in_h = 1000000000000, in_w = 8, out_channels = 4, "
       "kernel_h = 3, kernel_w = 3, name = 'huge'}]\n[[sweep.backends]]\nname = 'fake'\n"
       "algorithms = ['exact']\n")

SUITES = ["tiny.toml", "big.toml", "bad.toml", "binary.toml", "esc.toml", "nosuch", "folder",
          "tiny", "a.parquet"]
RESULTS = ["a.parquet", "b.csv", "junk.parquet", "empty.csv", "folder", "nosuch.parquet",
           "*.parquet", "tiny", "tiny.toml", "file.txt", "a.parquet.partial.jsonl"]
OUTS = ["o.parquet", "o.csv", "o.txt", "folder", "file.txt", "new/sub/o.parquet", "a.parquet",
        "file.txt/o.parquet"]
JUNK = ["", "-", "--", "-x", "--nope", "abc", "-1", "0", "nan", "inf", "1e999", str(2**70),
        "\u00e9", "\udcff", "a,,b", "=", "../x", "%"]   # \udcff: a byte no UTF-8 decodes
RUN_FLAGS = {
    "--backend": ["fake", "cpu", "cudaa", "fake,fake", "fake,"],
    "--algorithm": ["exact", "fake:exact", "bogus", "cpu:", "exact,crash"],
    "--direction": ["fwd", "bwd_data,bwd_filter", "up"],
    "--precision": ["fp32", "fp64", "fp16", "int4"],
    "--layout": ["NCHW", "NHWC", "nchw"],
    "--batch": ["1", "2", "0", "-1", str(2**70), "100000", "abc"],
    "--layer": ["l", "huge", "nosuch", "l,l"],
    "--workspace-limit": ["0", "64MiB", "unlimited", "-1", "lots", "0,0"],
    "--budget-ms": ["1", "0", "-1", "nan", "inf"],
    "--timing-mode": ["warm", "cold", "hot"],
    "--gpu-timer": ["graph", "stream", "cupti"],
    "--gpu-processes": ["1", "2", "0", "9", "abc"],
    "--out": OUTS,
    "--resume": None, "--append": None, "--force": None,
    "--seed": ["0", "-1", str(2**70), "abc"],
}
COMPARE_FLAGS = {
    "--threshold": ["5%", "0.05", "5", "-1", "abc", "nan"],
    "--layer-threshold": ["l=5%", "junk", "=", "l=abc", "l=-5%"],
    "--alpha": ["0.002", "0", "2", "nan", "abc"],
    "--correction": ["bh", "holm", "none", "junk"],
    "--allow-env-mismatch": None,
    "--report": ["r.md", "folder", "file.txt/r.md"],
    "--verdicts": ["v.csv", "folder"],
}
CHECK_FLAGS = {**RUN_FLAGS, **COMPARE_FLAGS, "--baseline": RESULTS,
               "--confirm": ["0", "1", "-1", "abc"], "--min-samples": ["1", "3", "0", "abc"]}
REPORT_FLAGS = {
    "--out": ["rep", "file.txt", "file.txt/sub", "folder"],
    "--baseline-policy": ["heuristic", "fake", "fake:exact", "junk", "fake:"],
    "--peaks": ["peaks.json", "bad_peaks.json", "list_peaks.json", "nosuch.json", "binary.toml"],
    "--embed-images": None,
    "--title": ["<b>x</b>", "[a](javascript:alert(1))", ""],
    "--jobs": ["1", "0", "-1", "abc"],
    "--force": None,
}
# subcommand -> (positional pools, flag vocabulary)
COMMANDS = {
    "run": ([SUITES], RUN_FLAGS),
    "check": ([SUITES], CHECK_FLAGS),
    "table": ([RESULTS, RESULTS], {"--selection": None}),
    "compare": ([RESULTS, RESULTS], COMPARE_FLAGS),
    "report": ([RESULTS, RESULTS], REPORT_FLAGS),
    "shapes": ([SUITES], {"--batch": RUN_FLAGS["--batch"]}),
    "list": ([], {}),
    "env": ([], {}),
    "peaks": ([], {"--refresh": None}),
    "bogus": ([], {}),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """Files every fuzzed command line may name; each example works on a fresh copy."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "tiny.toml").write_text(TINY)
    (root / "big.toml").write_text(BIG)
    (root / "bad.toml").write_text("layers = [\n")
    (root / "binary.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (root / "esc.toml").write_text("name = '../../esc'\n" + TINY)
    (root / "folder").mkdir()
    (root / "file.txt").write_text("not a folder")
    (root / "junk.parquet").write_text("not parquet")
    (root / "empty.csv").write_text("")
    (root / "peaks.json").write_text('{"fp32": 0.5, "bandwidth_gbps": 40}')
    (root / "bad_peaks.json").write_text("{bad")
    (root / "list_peaks.json").write_text("[1, 2]")
    with _inside(root), _quiet():
        assert main(["run", "tiny.toml", "--out", "a.parquet"]) == 0
        assert main(["run", "tiny.toml", "--out", "b.csv", "--seed", "1"]) == 0
    (root / "a.parquet.partial.jsonl").write_text('{"torn": \n')
    return root


@contextlib.contextmanager
def _inside(folder: Path):
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _pick(draw, pool: list[str]) -> str:
    """Half the time the pool's first (usable) value, so commands get past argument checks and
    reach the code behind them; otherwise any value, now and then plain junk."""
    if draw(st.booleans()):
        return pool[0]
    return draw(st.sampled_from(JUNK if draw(st.integers(0, 5)) == 0 else pool))


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    pools, flags = COMMANDS[command]
    argv = [command] + [_pick(draw, pool) for pool in pools[:draw(
        st.integers(min(1, len(pools)), len(pools)))]]
    for flag in draw(st.lists(st.sampled_from(sorted(flags) or ["--help"]), max_size=4)):
        argv.append(flag)
        if flags.get(flag) is not None:
            argv.append(_pick(draw, flags[flag]))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(JUNK)))
    if command == "check" and "--baseline" not in argv:
        argv += ["--baseline", "a.parquet"]
    if command == "report" and "--jobs" not in argv:
        argv += ["--jobs", "1"]      # one process: spawning figure workers costs seconds
    return argv


# Tracebacks the fuzzer found once, kept as plain cases so they stay fixed.
FOUND_BEFORE = {
    "--report under a file": ["compare", "a.parquet", "a.parquet", "--report", "file.txt/r.md"],
    "--verdicts under a file": ["compare", "a.parquet", "a.parquet", "--verdicts", "file.txt/v"],
    "negative --seed": ["run", "tiny.toml", "--seed", "-1"],
}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_random_command_lines_exit_0_1_or_2_without_a_traceback(workspace, argv):
    event(ascii(f"{argv[0]} exit {_exits_cleanly(workspace, argv)}"))


@pytest.mark.parametrize("case", sorted(FOUND_BEFORE))
def test_inputs_the_fuzzer_once_broke_on(workspace, case):
    assert _exits_cleanly(workspace, FOUND_BEFORE[case]) == 2


def _exits_cleanly(workspace: Path, argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        here = Path(folder) / "w"
        shutil.copytree(workspace, here)
        out, err = io.StringIO(), io.StringIO()
        with _inside(here), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    said = out.getvalue() + err.getvalue()
    allowed = {0, 2} | ({1} if argv[0] in ("compare", "check") else set())
    assert isinstance(code, int) and code in allowed, (argv, code, _traceback(said))
    assert "Traceback (most recent call last)" not in said, (argv, said)
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert lines and lines[-1].startswith("convbench: error:"), (argv, said[-2000:])
    return code


def _traceback(said: str) -> str:
    """The saved traceback of an internal error (exit 3), for the failure message."""
    match = re.search(r"full traceback is in (\S+)\)", said)
    if match and Path(match.group(1)).exists():
        return Path(match.group(1)).read_text()[-3000:]
    return said[-2000:]
