"""Recurrent layers as points of a sweep (issue 40): suites name them, the runner plans and
verifies them against the float64 oracle (harness/rnn/oracle.py), the CPU algorithms (NumPy's
rnn_loop, PyTorch's nn_rnn) run them, and their rows are stored beside convolution rows."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

from harness import backends, families, store
from harness.backends.cpu import rnn as numpy_rnn
from harness.problem import ConvProblem
from harness.rnn import oracle
from harness.rnn.problem import RnnProblem
from harness.runner import plan, run_points
from harness.suite import SuiteError, parse_suite
from harness.sweep import AlgorithmChoice, Point, Sweep, TimingOptions

HAS_TORCH = importlib.util.find_spec("torch") is not None
# no warm-up: these tests check rows and verdicts, not times, and a warm-up lasts at least
# timer.CPU_SETTLE_MS a point (its slowest test: 27.9 -> 15.9 s on the 2-core VM)
FAST = TimingOptions(budget_ms=5, min_samples=3, max_samples=5, cpu_rounds=1, warmup=0)
CASES = [
    RnnProblem("lstm", 5, 8, 6, 3, name="lstm"),
    RnnProblem("lstm", 5, 8, 6, 3, layers=2, bidirectional=True, proj_size=4, name="lstmp2bi"),
    RnnProblem("gru", 4, 6, 5, 3, layers=2, bidirectional=True, name="gru2bi"),
    RnnProblem("rnn_tanh", 4, 6, 5, 2, bias=False, name="tanh"),
    RnnProblem("rnn_relu", 4, 6, 5, 2, layers=2, name="relu2"),
    RnnProblem("lstm", 4, 6, 7, 3, bidirectional=True, lengths=(7, 3, 5), name="lstm_var"),
    RnnProblem("gru", 4, 6, 7, 3, lengths=(2, 7, 4), name="gru_var"),
]


def _measure(problems, directions, backend_names, precisions=("fp32", "fp64")):
    sweep = Sweep("t", tuple(problems), directions=directions, precisions=precisions,
                  backends=tuple(AlgorithmChoice(b) for b in backend_names), timing=FAST)
    rows = []
    run_points(plan(sweep).points, rows.append)
    return rows


def test_numpy_rnn_loop_forward_is_verified_ok_on_every_kind_of_layer() -> None:
    rows = _measure(CASES, ("fwd", "bwd_data"), ["cpu"])
    # rnn_loop exists for the forward pass only, and no convolution algorithm makes a row
    assert {(m.point.algorithm, m.point.direction) for m in rows} == {("rnn_loop", "fwd")}
    assert len(rows) == 2 * len(CASES)
    bad = [(m.point.problem.name, m.point.precision, m.status, m.reason) for m in rows if not m.ok]
    assert bad == []
    assert all(m.effective_precision == m.point.precision for m in rows)
    assert all(m.point.layout == families.RNN_LAYOUT for m in rows)


def test_a_wrong_gate_order_in_the_numpy_loop_is_caught(monkeypatch) -> None:
    real = numpy_rnn._step

    def swapped(cell, gi, gh, h, c):       # i and f exchanged: a classic gate-order bug
        if cell == "lstm":
            i, f, g, o = np.split(gi, 4, axis=1)
            gi = np.concatenate([f, i, g, o], axis=1)
            i, f, g, o = np.split(gh, 4, axis=1)
            gh = np.concatenate([f, i, g, o], axis=1)
        return real(cell, gi, gh, h, c)
    monkeypatch.setattr(numpy_rnn, "_step", swapped)
    rows = _measure(CASES[:1], ("fwd",), ["cpu"])
    assert [m.status for m in rows] == ["wrong", "wrong"]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_pytorch_layers_and_a_plain_loop_are_verified_ok_in_every_direction() -> None:
    rows = _measure(CASES, ("fwd", "bwd_data", "bwd_filter"), ["torch_cpu"])
    assert {m.point.algorithm for m in rows} == {"nn_rnn", "plain_loop"}
    assert len(rows) == 2 * 3 * 2 * len(CASES)
    bad = [(m.point.problem.name, m.point.direction, m.point.precision, m.reason)
           for m in rows if not m.ok]
    assert bad == []


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_weight_gradients_in_the_wrong_order_are_caught(monkeypatch) -> None:
    import torch
    real = torch.autograd.grad
    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: real(*a, **k)[::-1])
    rows = _measure(CASES[1:2], ("bwd_filter",), ["torch_cpu"], precisions=("fp64",))
    assert [m.status for m in rows] == ["wrong", "wrong"]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_each_pytorch_row_says_which_cpu_implementation_ran() -> None:
    lstm, gru = CASES[0], CASES[2]
    rows = _measure([lstm, gru], ("fwd",), ["torch_cpu"], precisions=("fp32",))
    paths = {(m.point.problem.cell, m.point.algorithm): m.extras.get("torch_rnn_path")
             for m in rows}
    # oneDNN runs PyTorch's fp32 LSTM on the CPU; its GRU is ATen ops; the plain loop says none
    assert paths == {("lstm", "nn_rnn"): "onednn", ("gru", "nn_rnn"): "native",
                     ("lstm", "plain_loop"): None, ("gru", "plain_loop"): None}


def test_oracle_results_are_the_flat_outputs_in_order() -> None:
    p = CASES[0]
    data = oracle.make_data(p, "fp64")
    fwd = oracle.reference(p, "fwd", data)
    assert fwd.shape == (p.seq_len * p.batch * p.hidden_size + 2 * p.batch * p.hidden_size,)
    grads = oracle.reference(p, "bwd_filter", data)
    assert grads.size == sum(int(np.prod(s)) for s in p.weight_shapes(0).values())


def test_a_layers_directions_share_the_oracles_passes(monkeypatch) -> None:
    """fwd, fwd_train, bwd_data, bwd_filter and train_step on one data: two forward passes and
    one backward (not five and three), each result what fresh data gives."""
    from harness.rnn import reference as recurrence
    calls = []
    for name in ("forward", "backward"):
        real = getattr(recurrence, name)
        monkeypatch.setattr(recurrence, name, lambda *a, _real=real, _name=name, **k: (
            calls.append(_name), _real(*a, **k))[1])
    p = RnnProblem("lstm", 4, 5, 6, 3, proj_size=3)
    data = oracle.make_data(p, "fp32")
    directions = ("fwd", "fwd_train", "bwd_data", "bwd_filter", "train_step")
    shared = {d: oracle.reference(p, d, data) for d in directions}
    assert calls == ["forward", "forward", "backward"]
    for d in directions:
        fresh = oracle.make_data(p, "fp32")
        np.testing.assert_array_equal(shared[d], oracle.reference(p, d, fresh))
    other = oracle.make_data(p, "fp32", seed=1)      # other data: its own passes
    assert not np.array_equal(oracle.reference(p, "train_step", other), shared["train_step"])


def test_recurrent_and_convolution_rows_share_one_results_file(tmp_path) -> None:
    conv = ConvProblem(1, 2, 5, 5, 2, 3, 3, name="conv")
    rows = _measure([CASES[5], conv], ("fwd",), ["cpu"], precisions=("fp32",))
    assert {m.point.problem.kind for m in rows} == {"rnn", "conv"}
    path = tmp_path / "r.parquet"
    store.write(store.frame([store.to_row(m, "run", "t", {}, store.finished_now())
                             for m in rows]), path)
    df = store.load(path)
    rnn = df[df["problem"] == "rnn"].iloc[0]
    assert (rnn["cell"], rnn["hidden_size"], rnn["seq_len"], rnn["lengths"]) == \
        ("lstm", 6, 7, "7 3 5")
    assert rnn["in_channels"] == 0 and rnn["bidirectional"]
    assert rnn["descriptor"].startswith("--alg=VANILLA_LSTM --direction=concat l1t7mb3")
    first_conv = df[df["problem"] == "conv"].iloc[0]
    assert pd_isna(first_conv["cell"]) and first_conv["in_channels"] == 2


def pd_isna(value) -> bool:
    import pandas as pd
    return bool(pd.isna(value))


def test_point_ids_tell_every_field_apart() -> None:
    base = CASES[0]
    variants = [base, replace(base, hidden_size=9), replace(base, bias=False),
                replace(base, bidirectional=True), replace(base, lengths=(6, 2, 3)),
                replace(base, lengths=(6, 3, 2)), replace(base, cell="gru")]
    ids = {Point(p, "fwd", "fp32", "TNC", "cpu", "rnn_loop").point_id for p in variants}
    assert len(ids) == len(variants)


SUITE = '''
layers = [
  { cell = "lstm", input_size = 28, hidden_size = 128, seq_len = 28, name = "mnist:row_lstm" },
  { deepbench_rnn = "512, 16, 25, lstm", multiplicity = 2 },
  { benchdnn_rnn = "l2t25mb16_sic512_slc1024_dhc1024_dic512", direction = "concat", \
alg = "VANILLA_LSTM" },
  'mb2ic64ih56oc64oh56kh3ph1n"conv"',
]
[sweep]
batch = 16
'''


def test_suites_name_recurrent_layers_in_three_forms_beside_convolutions() -> None:
    sweep = parse_suite(SUITE)
    kinds = [p.kind for p in sweep.problems]
    assert kinds == ["rnn", "rnn", "rnn", "conv"]
    mnist, deepbench, benchdnn, _ = sweep.problems
    assert (mnist.batch, mnist.input_size, mnist.seq_len) == (16, 28, 28)
    assert (deepbench.hidden_size, deepbench.multiplicity) == (512, 2)
    assert (benchdnn.layers, benchdnn.bidirectional, benchdnn.proj_size) == (2, True, 512)


@pytest.mark.parametrize("entry, words", [
    ('{ cell = "lstm", input_size = 4, hidden_size = 0, seq_len = 3, batch = 2 }',
     "hidden_size 0"),
    ('{ cell = "lstm", input_size = 4, hidden_size = 8, seq_len = 3, batch = 2, proj_size = 8 }',
     "proj_size 8"),
    ('{ cell = "gru", input_size = 4, hidden_size = 8, seq_len = 3, batch = 2, '
     'lengths = [3, 5] }', "length 5"),
    ('{ cell = "lstm", input_size = 4, hidden_size = 8, seq_len = 3 }', "batch"),
    ('{ cell = "lstn", input_size = 4, hidden_size = 8, seq_len = 3, batch = 2 }', "'lstn'"),
    ('{ deepbench_rnn = "512, 16, lstm" }', "512, 16, lstm"),
    ('{ cell = "lstm", input_size = 4, hidden_size = 8, seq_len = 3, batch = 2, '
     'lengths = [3, 2] }', "batch 4"),
])
def test_impossible_recurrent_layers_are_one_line_naming_the_value(entry, words) -> None:
    # the last case's lengths fit its own batch, not the [sweep] batch that replaces it
    text = f"layers = [ {entry} ]\n" + ("[sweep]\nbatch = 4\n" if words == "batch 4" else "")
    with pytest.raises(SuiteError) as error:
        parse_suite(text, source="s.toml")
    message = str(error.value)
    assert "\n" not in message and message.startswith("s.toml: layers[0]")
    assert words in message


def test_a_convolution_only_backend_makes_no_recurrent_rows() -> None:
    algos = backends.get("cpu").algorithms()
    point = Point(CASES[0], "fwd", "fp32", "TNC", "cpu", "direct")
    assert [a.name for a in algos if a.exists_for(replace(point, algorithm=a.name))] == \
        ["rnn_loop"]


def test_pytorch_policy_is_nn_rnn_never_the_hand_written_loop() -> None:
    """What PyTorch runs by default: nn_rnn, never the hand-written loop nor, on the GPU, the
    same module with cuDNN switched off (nn_rnn_native), however fast those are."""
    import pandas as pd

    from harness.analysis import policies
    from harness.backends.torch.rnn_gpu import TorchGpuRnnLoop, TorchGpuRnnNative
    rows = pd.DataFrame({"backend": ["torch_cpu", "torch_cpu", "cpu", "torch_gpu", "torch_gpu",
                                     "torch_gpu"],
                         "algorithm": ["nn_rnn", "plain_loop", "rnn_loop", "nn_rnn",
                                       "nn_rnn_native", "plain_loop"],
                         "family": ["library", "loop", "loop", "library",
                                    TorchGpuRnnNative.family, TorchGpuRnnLoop.family],
                         "median_ms": [2.0, 1.0, 0.5, 3.0, 0.1, 0.2]})
    picked = policies.POLICIES["pytorch"].choose(rows)
    assert list(zip(picked["backend"], picked["algorithm"])) == [("torch_cpu", "nn_rnn"),
                                                                 ("torch_gpu", "nn_rnn")]


def test_pytorch_on_the_gpu_offers_three_recurrent_algorithms_in_every_direction() -> None:
    """torch_gpu's recurrent algorithms exist for recurrent points only, in all four directions
    and every torch precision; its convolution algorithm never takes a recurrent point."""
    algos = backends.get("torch_gpu").algorithms()
    for direction in ("fwd", "fwd_train", "bwd_data", "bwd_filter"):
        point = Point(CASES[0], direction, "fp16", "TNC", "torch_gpu", "nn_rnn")
        assert [a.name for a in algos if a.exists_for(replace(point, algorithm=a.name))] == \
            ["nn_rnn", "nn_rnn_native", "plain_loop"]
    refused = {a.name: a.refusal(Point(CASES[0], "fwd", "int8", "TNC", "torch_gpu", a.name))
               for a in algos[1:]}
    assert all("int8" in why for why in refused.values()), refused


def _answer_rows():
    from report_fixtures import frame, row
    rnn = dict(problem="rnn", layer="lstm", descriptor="d", family="library")
    return frame(
        row(backend="torch_cpu", algorithm="nn_rnn", ms=1.0, direction="fwd", rel_error=1e-7,
            **rnn),
        row(backend="torch_cpu", algorithm="nn_rnn", ms=2.0, direction="bwd_data",
            rel_error=2e-7, **rnn),
        row(backend="torch_cpu", algorithm="nn_rnn", ms=3.0, direction="bwd_filter",
            rel_error=3e-7, **rnn),
        row(backend="torch_cpu", algorithm="plain_loop", ms=7.0, direction="fwd",
            rel_error=1e-7, **{**rnn, "family": "loop"}),
        row(backend="torch_cpu", algorithm="plain_loop", ms=8.0, direction="bwd_data",
            rel_error=1e-7, **{**rnn, "family": "loop"}),
        row(backend="torch_cpu", algorithm="plain_loop", ms=9.0, direction="bwd_filter",
            rel_error=1e-7, **{**rnn, "family": "loop"}),
        row(backend="cpu", algorithm="rnn_loop", ms=0.5, direction="fwd", rel_error=4e-7,
            **{**rnn, "family": "loop"}),
        row(layer="conv", backend="cpu", algorithm="direct", ms=0.1, descriptor="c"))


def test_recurrent_answer_sums_each_candidates_passes_and_never_a_partial_one() -> None:
    from harness.analysis import recurrent
    table = recurrent.answers(_answer_rows()).set_index("passes")
    assert list(table["layer"]) == ["lstm", "lstm"]              # the convolution is left out
    inference, step = table.loc["inference"], table.loc["training step"]
    assert (inference["best_algorithm"], inference["best_ms"]) == ("cpu:rnn_loop", 0.5)
    assert (inference["pytorch_ms"], inference["plain_ms"]) == (1.0, 7.0)
    assert inference["best_over_plain"] == 14.0 and inference["pytorch_over_plain"] == 7.0
    # rnn_loop has no backward rows: the step's best is the fastest per direction, summed
    assert step["best_ms"] == 0.5 + 2.0 + 3.0
    assert step["best_algorithm"] == "cpu:rnn_loop + torch_cpu:nn_rnn"
    assert (step["pytorch_ms"], step["pytorch_error"]) == (6.0, 3e-7)
    assert step["plain_ms"] == 24.0


def test_recurrent_table_and_report_section_show_the_answer(tmp_path) -> None:
    from harness.report import recurrent as section
    from harness.report import text
    rendered = text.render(section.recurrent_blocks(_answer_rows()))
    assert "training step" in rendered and "24" in rendered and "14.00×" in rendered
    assert section.has_recurrent(_answer_rows())


def test_algorithms_of_another_family_only_are_one_line_exit_2(tmp_path) -> None:
    import subprocess
    import sys
    out = tmp_path / "x.parquet"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "rnn_quick", "--backend",
                           "cpu", "--algorithm", "direct", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        "convbench: error: nothing to measure: suite 'rnn_quick' holds recurrent layers and "
        "cpu:direct computes convolution layers only (docs/recurrent.md)"]


def test_a_layout_asked_of_recurrent_layers_says_it_does_not_apply() -> None:
    sweep = Sweep("t", (CASES[0],), layouts=("NHWC",), backends=(AlgorithmChoice("cpu"),))
    planned = plan(sweep)
    assert [p.layout for p in planned.points] == [families.RNN_LAYOUT]
    assert any("whatever the layouts asked" in note for note in planned.notes)


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_the_training_forward_pass_is_verified_and_counted_once_in_a_step() -> None:
    from harness.analysis import recurrent
    rows = _measure(CASES[:1], ("fwd", "fwd_train", "bwd_data", "bwd_filter"), ["cpu", "torch_cpu"],
                    precisions=("fp32",))
    trained = [m for m in rows if m.point.direction == "fwd_train"]
    # PyTorch's layer and the plain loop run it; NumPy's rnn_loop (inference only) does not
    assert sorted(m.point.algorithm for m in trained) == ["nn_rnn", "plain_loop"]
    assert all(m.ok for m in rows), [(m.point.direction, m.reason) for m in rows if not m.ok]
    df = store.frame([store.to_row(m, "run", "t", {}, store.finished_now()) for m in rows])
    step = recurrent.answers(df).set_index("passes").loc["training step"]
    by = {(m.point.algorithm, m.point.direction): m.median_ms for m in rows}
    assert step["pytorch_ms"] == pytest.approx(sum(by[("nn_rnn", d)] for d in
                                                   ("fwd_train", "bwd_data", "bwd_filter")))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_a_convolution_has_no_training_forward_point() -> None:
    conv = ConvProblem(1, 2, 5, 5, 2, 3, 3, name="conv")
    sweep = Sweep("t", (conv, CASES[0]), directions=("fwd_train",),
                  backends=(AlgorithmChoice("cpu"), AlgorithmChoice("torch_cpu")))
    assert {(p.problem.kind, p.algorithm) for p in plan(sweep).points} <= {("rnn", "nn_rnn"),
                                                                            ("rnn", "plain_loop")}


def test_network_totals_count_one_forward_pass_of_a_layer_measured_in_both() -> None:
    from report_fixtures import frame, row

    from harness.analysis import policies
    rnn = dict(problem="rnn", layer="lstm", descriptor="d", family="library",
               backend="torch_cpu", algorithm="nn_rnn")
    df = frame(row(ms=1.0, direction="fwd", **rnn), row(ms=1.5, direction="fwd_train", **rnn),
               row(ms=2.0, direction="bwd_data", **rnn), row(ms=3.0, direction="bwd_filter", **rnn))
    totals = policies.network_totals(df, [policies.ORACLE])
    assert list(totals["total_oracle"]) == [6.5] and list(totals["points"]) == [3]


def test_per_algorithm_totals_and_the_time_versus_error_figure(tmp_path) -> None:
    from harness.analysis import networks, recurrent
    from harness.report.figures import recurrent_figure
    df = _answer_rows()
    points = recurrent.per_algorithm(df).set_index(["candidate", "passes"])
    assert points.loc[("torch_cpu:nn_rnn", "training step"), "ms"] == 6.0
    assert points.loc[("cpu:rnn_loop", "inference"), "ms"] == 0.5
    assert ("cpu:rnn_loop", "training step") not in points.index    # no partial sums
    path, left_out = recurrent_figure(df, tmp_path)
    assert path.exists() and path.stat().st_size > 1000 and left_out == 0
    # the network table's forward column counts the training forward pass of a layer with one
    from report_fixtures import frame, row
    rnn = dict(problem="rnn", layer="lstm", descriptor="d", family="library",
               backend="torch_cpu", algorithm="nn_rnn")
    table = networks.network_table(frame(
        row(ms=1.0, direction="fwd", **rnn), row(ms=1.5, direction="fwd_train", **rnn),
        row(ms=2.0, direction="bwd_data", **rnn), row(ms=3.0, direction="bwd_filter", **rnn)))
    oracle = table[table["policy"] == "oracle"].iloc[0]
    assert (oracle["fwd_ms"], oracle["bwd_ms"], oracle["total_ms"]) == (1.5, 5.0, 6.5)


def test_a_training_step_result_is_the_forward_then_both_gradients() -> None:
    p = CASES[1]
    data = oracle.make_data(p, "fp64")
    parts = [oracle.reference(p, d, data) for d in ("fwd", "bwd_data", "bwd_filter")]
    np.testing.assert_array_equal(oracle.reference(p, "train_step", data), np.concatenate(parts))
    assert p.flops_of("train_step") == 3 * p.flops_of("fwd") == 3 * p.flops
    assert p.bytes_moved(4, direction="train_step") == sum(
        p.bytes_moved(4, direction=d) for d in ("fwd", "bwd_data", "bwd_filter"))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_pytorch_and_the_plain_loop_run_a_whole_training_step_verified() -> None:
    rows = _measure(CASES, ("train_step",), ["cpu", "torch_cpu"], precisions=("fp32",))
    # NumPy's rnn_loop is inference only: no row
    assert sorted({m.point.algorithm for m in rows}) == ["nn_rnn", "plain_loop"]
    assert [(m.point.problem.name, m.reason) for m in rows if not m.ok] == []


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_a_step_with_the_data_gradient_left_out_is_caught(monkeypatch) -> None:
    import torch
    real = torch.autograd.grad

    def no_input_gradient(outputs, inputs, *args, **kwargs):
        grads = list(real(outputs, inputs, *args, **kwargs))
        grads[0] = torch.zeros_like(grads[0])
        return tuple(grads)
    monkeypatch.setattr(torch.autograd, "grad", no_input_gradient)
    rows = _measure(CASES[:1], ("train_step",), ["torch_cpu"], precisions=("fp64",))
    assert [m.status for m in rows] == ["wrong", "wrong"]


def test_a_step_measured_whole_is_the_training_step_not_its_passes_summed() -> None:
    """PyTorch's weight gradients rerun its data pass, so fwd_train + bwd_data + bwd_filter
    counts that pass twice; where the step was measured as one call, that call is the step,
    in the answer and in the network totals alike."""
    from report_fixtures import frame, row

    from harness.analysis import policies, recurrent
    rnn = dict(problem="rnn", layer="lstm", descriptor="d", family="library",
               backend="torch_cpu", algorithm="nn_rnn")
    df = frame(*(row(ms=ms, direction=d, **rnn) for ms, d in (
        (1.5, "fwd_train"), (2.0, "bwd_data"), (3.0, "bwd_filter"), (4.0, "train_step"))))
    step = recurrent.answers(df).set_index("passes").loc["training step"]
    assert step["pytorch_ms"] == 4.0
    totals = policies.network_totals(df, [policies.ORACLE])
    assert list(totals["total_oracle"]) == [4.0] and list(totals["points"]) == [1]
    older = df[df["direction"] != "train_step"]      # results from before the direction
    assert recurrent.answers(older).set_index("passes").loc["training step", "pytorch_ms"] == 6.5


def test_the_answer_sets_cudnn_s_own_algorithms_against_pytorch_native_and_the_loop() -> None:
    from report_fixtures import frame, row

    from harness.analysis import recurrent
    from harness.report import recurrent as section
    from harness.report import text
    rnn = dict(problem="rnn", layer="lstm", descriptor="d", direction="fwd")
    df = frame(row(backend="cudnn_rnn", algorithm="standard", ms=2.0, family="standard", **rnn),
               row(backend="cudnn_rnn", algorithm="persist_static", ms=1.0, family="persistent",
                   **rnn),
               row(backend="torch_gpu", algorithm="nn_rnn", ms=1.5, family="library", **rnn),
               row(backend="torch_gpu", algorithm="nn_rnn_native", ms=4.0, family="cudnn_off",
                   **rnn),
               row(backend="torch_gpu", algorithm="plain_loop", ms=20.0, family="loop", **rnn))
    answer = recurrent.answers(df).set_index("passes").loc["inference"]
    assert (answer["cudnn_algorithm"], answer["cudnn_ms"]) == ("cudnn_rnn:persist_static", 1.0)
    assert answer["pytorch_ms"] == 1.5 and answer["native_ms"] == 4.0
    assert answer["cudnn_over_native"] == 4.0 and answer["cudnn_over_plain"] == 20.0
    rendered = text.render(section.recurrent_blocks(df))
    assert "cuDNN RNN / native" in rendered and "4.00×" in rendered
    cpu = text.render(section.recurrent_blocks(_answer_rows())[1:])  # no cuDNN rows: no columns
    assert "cuDNN RNN" not in cpu and "PyTorch native" not in cpu


def test_recurrent_directions_asked_of_convolutions_alone_are_one_line_exit_2(tmp_path,
                                                                             capsys) -> None:
    """`--direction train_step` on a convolution suite measures nothing: one line, exit 2, no
    results file (it used to write an empty one and exit 0)."""
    from harness.cli import main
    out = tmp_path / "x.parquet"
    assert main(["run", "quick", "--backend", "cpu", "--direction", "train_step",
                 "--out", str(out)]) == 2
    assert not out.exists()
    assert ("nothing to measure: train_step is a direction of recurrent layers and suite "
            "'quick' holds convolution layers only") in capsys.readouterr().err
