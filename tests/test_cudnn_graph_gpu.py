"""cuDNN graph-API engines (cudnn-frontend) on a real GPU (marked `gpu`; skipped elsewhere)."""
from __future__ import annotations

import re
from collections import Counter

import pytest
from conv3d_gpu_cases import PROBLEMS_3D, check_3d, run_3d  # tests/ is on sys.path

from harness import backends, epilogue
from harness.problem import ConvProblem
from harness.stopping import stopped_by_probe
from harness.stream_hold import UNHELD
from harness.sweep import DIRECTIONS, LAYOUTS, AlgorithmChoice, Sweep

pytestmark = pytest.mark.gpu
SMALL = ConvProblem(2, 16, 12, 12, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1,
                    name="small3x3")
PRECISIONS = ("fp32", "fp16")
NOTE_NAMES = {"tensor_core", "down_convert_inputs", "reduced_precision_reduction", "fft",
              "winograd", "nondeterministic"}


@pytest.fixture(autouse=True, scope="module")
def _needs_frontend():
    reason = backends.get("cudnn_graph").unavailable_reason()
    if reason:
        pytest.skip(f"GPU test skipped: {reason}")


def _sweep(problem, backends_=("cudnn_graph",), **axes) -> Sweep:
    # cudnn_graph means its engines here; the unfused algorithm has tests of its own (test_ops_*)
    choices = tuple(AlgorithmChoice(b, ("engines",) if b == "cudnn_graph" else ())
                    for b in backends_)
    return Sweep("graph-test", (problem,), backends=choices, **axes)


@pytest.fixture(scope="module")
def rows(run_fast) -> list:
    """Every plan of SMALL in every direction, precision and layout, with and without workspace:
    the rows five tests below read."""
    return run_fast(_sweep(SMALL, directions=DIRECTIONS, precisions=PRECISIONS, layouts=LAYOUTS,
                           workspace_limits=(0, None)))


def _setting(m) -> tuple[str, str, str]:
    return m.point.direction, m.point.precision, m.point.layout


def test_every_setting_has_an_ok_plan(rows):
    unlimited = [m for m in rows if m.point.workspace_limit is None]
    by_setting: dict[tuple, list] = {}
    for m in unlimited:
        by_setting.setdefault(_setting(m), []).append(m)
    for setting, here in sorted(by_setting.items()):
        statuses = Counter(m.status for m in here)
        fastest = (min((m.median_ms, m.point.algorithm) for m in here if m.ok)
                   if statuses['ok'] else None)
        print(f"{setting}: {len(here)} plans {dict(statuses)}; fastest ok {fastest}")
    assert set(by_setting) == {(d, p, lay) for d in DIRECTIONS for p in PRECISIONS
                               for lay in LAYOUTS}
    for setting, here in by_setting.items():
        assert any(m.ok for m in here), (setting, [(m.point.algorithm, m.reason) for m in here])
    crashed = [(m.point.point_id, m.reason) for m in rows if m.status == "crashed"]
    assert not crashed, crashed


def test_rows_are_named_by_plan_and_carry_plan_facts(rows):
    for m in rows:
        assert re.match(r"eng\d+", m.point.algorithm), m.point.algorithm
        assert m.planned_point_id.endswith("|engines|" + (
            "inf" if m.point.workspace_limit is None else "0") + "|warm"), m.planned_point_id
        if m.ok:
            assert m.median_ms > 0 and m.setup_ms > 0
            # tolerance is the asked precision's; a plan asked for fp32 may deliver tf32
            assert (m.rel_error <= m.tolerance
                    or m.effective_precision == "tf32" != m.point.precision)
            assert m.extras["engine_id"] == int(m.point.algorithm[3:].split("_")[0])
            notes = {n for n in m.extras["numerical_notes"].split(",") if n}
            assert notes <= NOTE_NAMES, notes
            # each row's family and tolerance follow its own plan's notes
            expected = "fft" if "fft" in notes else "winograd" if "winograd" in notes else "engine"
            assert m.family == expected, (m.point.algorithm, m.family, notes)
            # a plan raced out by its probe stops there, timed in stream order (harness/race.py),
            # or before it on its verified call's events (harness/call_bound.py)
            probed = stopped_by_probe(m.stop_reason, m.samples_ms, m.extras.get("gpu_timer"))
            assert m.extras["gpu_timer"] in (("held_stream", UNHELD) if probed
                                             else ("cuda_graph",)), (
                m.extras.get("capture_error"), m.reason)
            assert m.workspace_bytes is not None and m.workspace_bytes >= 0
        elif m.status == "unsupported":
            assert m.reason, m
    names = [m.point.algorithm for m in rows
             if m.point.workspace_limit is None and _setting(m) == ("fwd", "fp32", "NCHW")]
    assert len(names) == len(set(names)), "plan names must be unique within a setting"
    ranks = [m.extras.get("graph_heuristic_rank") for m in rows if m.ok]
    assert 0 in ranks, "mode A's first plan should be among the measured plans"


def test_fp16_plans_are_fp16_and_fp32_plans_are_labelled_by_accuracy(rows):
    ok = [m for m in rows if m.ok and m.point.workspace_limit is None]
    assert {m.effective_precision for m in ok if m.point.precision == "fp16"} == {"fp16"}
    fp32 = [m for m in ok if m.point.precision == "fp32"]
    labels = Counter(m.effective_precision for m in fp32)
    print(f"fp32 plans by effective precision: {dict(labels)}")
    assert set(labels) <= {"fp32", "tf32"}
    for m in fp32:
        if m.effective_precision == "tf32":
            assert "delivers tf32" in m.reason
    tensor_core = [m for m in ok if "tensor_core" in m.extras["numerical_notes"]]
    assert any(m.point.precision == "fp16" for m in tensor_core)
    # The notes read through select_numeric_notes agree with the measured accuracy: TF32-level
    # error on fp32 data comes from tensor-core plans only.
    crosstab = Counter((m.point.direction, m.effective_precision,
                        "tensor_core" in m.extras["numerical_notes"]) for m in fp32)
    print(f"fp32 plans by (direction, effective precision, tensor_core note): {dict(crosstab)}")
    assert not [m.point.point_id for m in fp32 if m.effective_precision == "tf32"
                and "tensor_core" not in m.extras["numerical_notes"]]


def test_workspace_limit_zero_refuses_plans_that_need_workspace(rows):
    zero = [m for m in rows if m.point.workspace_limit == 0]
    assert zero
    for m in zero:
        if m.workspace_bytes:
            assert m.status == "workspace_exceeded", m
    assert any(m.ok for m in zero)


def test_asymmetric_padding_and_fp64_give_rows_with_reasons(run_fast):
    asym = ConvProblem(2, 8, 9, 9, 8, 3, 3, pad_top=0, pad_left=1, pad_bottom=2, pad_right=1,
                       name="asym")
    for label, results in (("asym", run_fast(_sweep(asym))),
                           ("fp64", run_fast(_sweep(SMALL, precisions=("fp64",))))):
        reasons = {m.reason[:120] for m in results if not m.ok}
        print(label, dict(Counter(m.status for m in results)), reasons)
        assert results
        for m in results:
            assert m.status in ("ok", "unsupported", "workspace_exceeded", "failed"), (m.status,
                                                                                        m.reason)
            assert m.ok or m.reason


def test_selection_over_measured_rows(rows, run_fast):
    """Legacy cuDNN, graph plans and PyTorch on the same points, through store and selection."""
    from harness import store
    from harness.analysis import selection
    others = run_fast(_sweep(SMALL, ("cudnn", "torch_gpu"), directions=("fwd",),
                             precisions=PRECISIONS, layouts=LAYOUTS))
    graph = [m for m in rows if m.point.workspace_limit is None and m.point.direction == "fwd"]
    df = store.frame(store.to_row(m, "gpu-test", "graph-test", {}, "") for m in graph + others)
    sel = selection.selection(df)
    print(selection.format_selection(sel))
    assert set(sel["policy"]) == set(selection.POLICIES)
    assert sel["oracle_ms"].notna().all() and (sel["regret"].dropna() > 0).all()
    assert not sel["oracle_backend"].isin(["torch_gpu"]).any()
    kept = sel[(sel["policy"] != "pytorch") & sel["precision_kept"].fillna(False).astype(bool)]
    assert (kept["regret"].dropna() >= 1.0).all(), kept


@pytest.fixture(scope="module")
def rows_3d(run_fast) -> list:
    return run_3d(run_fast, "cudnn_graph")


@pytest.mark.parametrize("problem", PROBLEMS_3D, ids=lambda p: p.name)
def test_3d_every_setting_has_a_verified_plan(rows_3d, problem):
    """5-D tensors and three-entry geometry: every direction, fp32 / fp16, NCDHW / NDHWC."""
    check_3d(rows_3d, problem)


@pytest.mark.parametrize("precision, layout", [("fp16", "NHWC"), ("fp32", "NCHW")])
def test_ops_fused_plans_and_the_unfused_sequence_are_verified(run_fast, precision, layout):
    """Issue 17: each epilogue op has a verified fused plan (one graph: conv, bias, residual add,
    ReLU), unless cuDNN offers no engine for it outside fp16 NHWC, and a verified unfused row
    (the plain conv's mode-A plan, then separate kernels, captured into a CUDA graph like the
    plans); no row is wrong or crashed."""
    results = run_fast(Sweep("graph-ops-test", (SMALL,),
                             backends=(AlgorithmChoice("cudnn_graph"),), precisions=(precision,),
                             layouts=(layout,), ops=epilogue.OPS[1:]))
    for op in epilogue.OPS[1:]:
        fused = [m for m in results if m.point.op == op and m.point.algorithm != "unfused"]
        unfused = [m for m in results if m.point.op == op and m.point.algorithm == "unfused"]
        unfused_rows = [(m.status, m.median_ms, m.extras.get('conv_plan'), m.reason)
                        for m in unfused]
        print(f"{op} {precision} {layout}: fused {dict(Counter(m.status for m in fused))}, "
              f"fastest ok {min((m.median_ms for m in fused if m.ok), default=None)}; "
              f"unfused {unfused_rows}")
        # fp16 NHWC is what cuDNN's runtime-fusion engines are built for: every op must fuse.
        # Elsewhere cuDNN may offer no engine (9.19 on an H100: fp32 NCHW conv_bias_add_relu has
        # one, limited to compute capability 10.x-11.x); then the row says so, never wrong/crashed.
        no_engine = all(m.status == "unsupported" and "offers no engine" in m.reason for m in fused)
        assert any(m.ok for m in fused) or (
            no_engine and (precision, layout) != ("fp16", "NHWC")), (
            op, [(m.point.algorithm, m.status, m.reason) for m in fused][:8])
        assert len(unfused) == 1 and unfused[0].ok, (op, unfused[0].status, unfused[0].reason)
        u = unfused[0]
        assert re.match(r"eng\d+", u.extras["conv_plan"]), u.extras
        assert u.extras.get("graph_heuristic_rank") is None
        assert u.extras["gpu_timer"] == "cuda_graph", u.extras.get("capture_error")
        for m in fused + unfused:
            if m.ok:
                assert m.rel_error <= m.tolerance or m.effective_precision == "tf32" != precision
    bad = [(m.point.point_id, m.status, m.reason) for m in results
           if m.status in ("wrong", "crashed")]
    assert not bad, bad


def test_racing_the_plans_keeps_the_best_and_stops_only_plans_that_cannot_win(run_fast):
    """One ResNet-50 point's plans at a floor of 12 samples, raced and timed in full: the best
    is the same plan's time, and a raced-out plan is over 1.2x it (harness/stopping.py)."""
    problem = ConvProblem(32, 64, 56, 56, 64, 3, 3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1, name="res2a_branch2b")
    sweep = _sweep(problem, directions=("fwd",), precisions=("fp16",), layouts=("NHWC",))
    timing = dict(min_samples=12, max_samples=40, budget_ms=25.0)
    raced, full = run_fast(sweep, **timing), run_fast(sweep, **timing, race=False)
    out = [m for m in raced if m.ok and m.stop_reason == "raced_out"]
    in_full = {m.point.algorithm: m.median_ms for m in full if m.ok}
    best = min(in_full.values())
    print(f"{len(out)} of {sum(m.ok for m in raced)} plans raced out; best {best:.4g} ms")
    assert out and not any(m.stop_reason == "raced_out" for m in full)
    assert min(m.median_ms for m in raced if m.ok and m not in out) <= best * 1.03
    for m in out:
        assert len(m.samples_ms) < 12 and m.extras["raced_out_by"] > 1.2, m
        assert in_full[m.point.algorithm] > best * 1.05, (m.point.algorithm, best)


def test_tf32_rows_are_the_fp32_plans_measured_once_and_judged_at_tf32(run_fast):
    """The graph API builds one graph for fp32 and tf32 (graph.py): each plan is measured once
    and gives both rows, the tf32 row judged by tf32's tolerance (Algorithm.computes_as)."""
    rows = run_fast(_sweep(SMALL, directions=("fwd",), precisions=("fp32", "tf32"),
                           layouts=("NCHW",)))
    by = {(m.point.algorithm, m.point.precision): m for m in rows}
    plans = {plan for plan, _ in by}
    assert plans and all((plan, "tf32") in by and (plan, "fp32") in by for plan in plans)
    for plan in plans:
        fp32, tf32 = by[plan, "fp32"], by[plan, "tf32"]
        assert tf32.extras.get("measured_with") == "fp32" and "measured_with" not in fp32.extras
        assert tf32.samples_ms == fp32.samples_ms and tf32.status == fp32.status
        if fp32.ok:
            assert tf32.effective_precision == "tf32" and tf32.tolerance > fp32.tolerance


def test_a_later_session_takes_the_plan_labels_from_the_cache(tmp_path, monkeypatch):
    """harness/plan_cache.py: a second process lists the same plans with the same notes and
    ranks without asking the heuristics for notes or mode A's ranking."""
    from harness import plan_cache
    from harness.backends.cudnn import graph
    from harness.sweep import Point, TimingOptions
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(tmp_path))
    plan_cache.open_here(plan_cache.for_run({"gpu_name": "this GPU"}))
    try:
        point = Point(SMALL, "bwd_data", "fp16", "NHWC", "cudnn_graph", "engines", None,
                      TimingOptions())
        first = graph._Session().plan_set(point).plans
        later = graph._Session()
        monkeypatch.setattr(later, "_notes", lambda *a: pytest.fail("notes asked again"))
        monkeypatch.setattr(later, "_mode_a_ranks", lambda *a: pytest.fail("ranks asked again"))
        assert later.plan_set(point).plans == first and len(first) > 1
        assert any(info.notes for info in first.values())
        assert plan_cache.check({"gpu_name": "this GPU"})[0] == 1
    finally:
        plan_cache.open_here(None)
