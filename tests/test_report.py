"""The report: renders from GPU-like and CPU-like frames and from files, shows numbers that match
the data recomputed here independently, and loads every image in a real browser (how fast it
renders a ResNet-50-sized sweep is benchmarks/report_speed.py)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from harness import store
from harness.measurement import STATUSES
from harness.report import PolicyError, computed, figures, render_report
from harness.report.tables import fmt_bytes, fmt_ms, fmt_ratio

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import (H200_PEAKS, MIB, SHARED_REASON, checked_cpu_frame, cpu_frame,
                                 expected_best, gpu_frame)
except ImportError:
    from tests.report_fixtures import (H200_PEAKS, MIB, SHARED_REASON, checked_cpu_frame, cpu_frame,
                                       expected_best, gpu_frame)


@pytest.fixture(scope="module")
def small() -> pd.DataFrame:
    return gpu_frame("small")


@pytest.fixture(scope="module")
def gpu_report(small: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory):
    return render_report(small, tmp_path_factory.mktemp("gpu") / "report")


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory):
    return render_report(cpu_frame(), tmp_path_factory.mktemp("cpu") / "report")


# ---- reading the pages back -------------------------------------------------------------------
class _Tables(HTMLParser):
    """Every <table> as (title of the <h3> before it, rows of cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self._title, self._text, self._row = "", None, None
        self._in_h3 = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "h3":
            self._in_h3, self._title = True, ""
        elif tag == "table":
            self.tables.append((self._title, []))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._text = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "h3":
            self._in_h3 = False
        elif tag in ("td", "th") and self._row is not None:
            self._row.append(self._text.strip())
            self._text = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1][1].append(self._row)
            self._row = None
        elif tag == "table":
            self._title = ""

    def handle_data(self, data: str) -> None:
        if self._in_h3:
            self._title += data
        if self._text is not None:
            self._text += data


def html_tables(path: Path) -> list[tuple[str, list[list[str]]]]:
    parser = _Tables()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser.tables


def markdown_tables(path: Path) -> list[tuple[str, list[list[str]]]]:
    tables: list[tuple[str, list[list[str]]]] = []
    title, current = "", None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            title = line[4:].strip()
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|").replace("\\*", "*")
                     for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if current is None:
                current = []
                tables.append((title, current))
            if not set("".join(cells)) <= set("-:"):
                current.append(cells)
        else:
            current = None
    return tables


def find_row(tables: list[tuple[str, list[list[str]]]], title: str,
             cells: list[str]) -> dict[str, str]:
    """The row of the table titled `title` that starts with `cells`, keyed by header."""
    for name, rows in tables:
        if name == title:
            header = rows[0]
            for row in rows[1:]:
                if row[:len(cells)] == cells:
                    return dict(zip(header, row))
    raise AssertionError(f"no row starting {cells} in a table titled {title!r}")


# ---- rendering -----------------------------------------------------------------------------------
def test_import_harness_does_not_import_matplotlib() -> None:
    code = ("import sys, harness, harness.report, harness.report.computed; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_gpu_report_has_every_section_and_figure(gpu_report) -> None:
    html = gpu_report.html.read_text(encoding="utf-8")
    for anchor in ("totals", "selection", "best", "heatmap", "workspace", "accuracy", "roofline",
                   "environment"):
        assert f'id="{anchor}"' in html
    names = {p.name for p in gpu_report.figures}
    assert {"network_totals.png", "workspace_totals.png", "accuracy_vs_speed.png",
            "roofline.png"} <= names
    assert sum(n.startswith("heatmap_") for n in names) == 6      # 2 precisions x 3 limits
    assert sum(n.startswith("pareto_") for n in names) == 2
    assert "NVIDIA H200" in html and "580.159" in html and "91900" in html   # environment
    assert "noise_target" in html                                          # stop reasons


def test_selection_section_shows_what_selection_computes(gpu_report, small) -> None:
    from harness.analysis import selection
    from harness.report import computed
    markdown = gpu_report.markdown.read_text(encoding="utf-8")
    assert "## Who picks the fastest algorithm" in markdown
    picks = selection.selection(computed.prepare(small))
    summary = selection.policy_summary(picks)
    assert set(summary["policy"]) >= {"cudnn_heuristic", "cudnn_find", "pytorch"}
    for _, row in summary.iterrows():
        line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {row['policy']} |"))
        assert f"{row['geomean_regret']:.3f}" in line and f"{row['picks_oracle_pct']:.1f}%" in line
    versus = selection.versus_pytorch(picks)
    for _, row in versus.iterrows():
        assert f"| {row['effective_precision']} | {row['layout']} | {row['points']} | " \
               f"{row['geomean_oracle_over_pytorch']:.3f} |" in markdown


def test_pages_fetch_nothing_and_link_only_existing_figures(gpu_report) -> None:
    html = gpu_report.html.read_text(encoding="utf-8")
    markdown = gpu_report.markdown.read_text(encoding="utf-8")
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<link" not in html and "<script src" not in html
    linked = set(re.findall(r'<img src="([^"]+)"', html))
    assert linked == set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown))
    assert linked == {f"figures/{p.name}" for p in gpu_report.figures}
    assert all((gpu_report.out_dir / path).stat().st_size > 1000 for path in linked)


def test_cpu_report_skips_what_the_data_cannot_show(cpu_report) -> None:
    html = cpu_report.html.read_text(encoding="utf-8")
    assert "Roofline" in html and "Skipped: no measured peaks" in html
    assert "No algorithm reported a workspace" in html
    names = {p.name for p in cpu_report.figures}
    assert names == {"heatmap_fp32_NCHW_unlimited_warm.png", "accuracy_vs_speed.png"}
    assert "AMD EPYC 7B13" in html and "heuristic pick" not in html   # no baseline in the data


def test_renders_from_parquet_and_csv_files(tmp_path: Path) -> None:
    df = cpu_frame()
    store.write(df.iloc[:20], tmp_path / "a.parquet")
    store.write(df.iloc[20:], tmp_path / "b.csv")
    paths = render_report([tmp_path / "a.parquet", str(tmp_path / "b.csv")], tmp_path / "out",
                          baseline_policy="cpu:im2col")
    tables = markdown_tables(paths.markdown)
    row = find_row(tables, "fwd · fp32", ["conv1"])
    assert row["cpu:im2col pick"] in ("same", "cpu:im2col")


def test_a_point_measured_in_two_runs_shows_the_latest(tmp_path: Path) -> None:
    first = cpu_frame()
    later = first.assign(run_id="run-2", finished_at="2026-11-23T10:00:00",
                         median_ms=first.median_ms * 2)
    paths = render_report([later, first], tmp_path)
    markdown = paths.markdown.read_text(encoding="utf-8")
    assert f"{len(first)} repeated measurements" in markdown
    best = expected_best(later, "conv1", "fwd", "fp32")
    assert find_row(markdown_tables(paths.markdown), "fwd · fp32",
                    ["conv1"])["Median ms"] == fmt_ms(best.median_ms)


def test_embedded_images_make_one_self_contained_file(tmp_path: Path) -> None:
    paths = render_report(cpu_frame(), tmp_path, embed_images=True)
    html = paths.html.read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == len(paths.figures) == 2
    assert 'src="figures/' not in html


def test_figure_workers_draw_the_same_files(tmp_path: Path, small: pd.DataFrame,
                                            gpu_report) -> None:
    paths = render_report(small, tmp_path, jobs=2)
    assert [p.name for p in paths.figures] == [p.name for p in gpu_report.figures]
    assert paths.html.read_text(encoding="utf-8") == gpu_report.html.read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="jobs=0"):
        render_report(small, tmp_path, jobs=0)


def test_figures_are_saved_with_a_palette(gpu_report) -> None:
    """Figures are palette PNGs (a third of matplotlib's RGBA bytes; the committed reports must
    fit what a lent GPU machine takes), and the heatmap keeps more than a handful of colours."""
    from PIL import Image
    heatmap = next(p for p in gpu_report.figures if p.name.startswith("heatmap_"))
    for path in gpu_report.figures:
        with Image.open(path) as image:
            assert image.mode == "P", path.name
    with Image.open(heatmap) as image:
        assert len(image.getcolors(256) or ()) > 16


def test_a_rerender_removes_stale_figures(tmp_path: Path, small: pd.DataFrame) -> None:
    render_report(small, tmp_path)
    paths = render_report(cpu_frame(), tmp_path)
    assert {p.name for p in (tmp_path / "figures").glob("*.png")} == {p.name for p in paths.figures}


# ---- numbers recomputed independently ---------------------------------------------------------
@pytest.mark.parametrize("page", ["html", "markdown"])
def test_cells_match_numbers_recomputed_from_the_data(gpu_report, small: pd.DataFrame,
                                                      page: str) -> None:
    tables = (html_tables(gpu_report.html) if page == "html"
              else markdown_tables(gpu_report.markdown))
    # The best verified algorithm, its time and the speed-up over the runner-up and the heuristic.
    # At this point the planted wrong WINOGRAD_NONFUSED result is the fastest row: it must not win.
    at = small[(small.layer == "res3a_branch2b") & (small.direction == "fwd")
               & (small.precision == "fp32") & (small.workspace_limit == store.UNLIMITED_BYTES)]
    wrong = at[at.status == "wrong"]
    assert len(wrong) and wrong.median_ms.min() < at[at.status == "ok"].median_ms.min()
    ok = at[at.status == "ok"].sort_values("median_ms")
    best, runner = ok.iloc[0], ok.iloc[1]
    heuristic = at[at.heuristic_pick.fillna(False).astype(bool)].iloc[0]
    row = find_row(tables, "fwd · fp32", ["res3a_branch2b", "4", "unlimited"])
    assert row["Best verified"] == f"{best.backend}:{best.algorithm}"
    assert row["Median ms"] == fmt_ms(best.median_ms)
    assert row["vs runner-up"] == fmt_ratio(runner.median_ms / best.median_ms)
    assert row["vs cudnn_heuristic"] == fmt_ratio(heuristic.median_ms / best.median_ms)
    assert row["Verified"] == f"{len(ok)}/{len(at)}"

    # A workspace-limited point: the best that fits in 64 MiB, and the workspace it used.
    limited = expected_best(small, "res4a_branch2b", "bwd_data", "fp16", limit=64 * MIB)
    row = find_row(tables, "bwd_data · fp16", ["res4a_branch2b", "6", "64 MiB"])
    assert row["Best verified"] == f"{limited.backend}:{limited.algorithm}"
    assert row["Median ms"] == fmt_ms(limited.median_ms)
    assert row["Workspace"] == fmt_bytes(limited.workspace_bytes)

    # The network total: sum over layers and directions of the best time x multiplicity.
    fp32 = small[(small.precision == "fp32") & (small.status == "ok")
                 & (small.workspace_limit == store.UNLIMITED_BYTES)]
    fastest = fp32.groupby(["layer", "direction"]).agg(ms=("median_ms", "min"),
                                                       mult=("multiplicity", "first"))
    total = float((fastest.ms * fastest.mult).sum())
    row = find_row(tables, "Workspace unlimited", ["fp32"])
    assert row["oracle ms"] == fmt_ms(total)
    # ... and what it saves over cuDNN's heuristic, whose pick x multiplicity sums to its total
    picks = small[(small.precision == "fp32") & (small.workspace_limit == store.UNLIMITED_BYTES)
                  & small.heuristic_pick.fillna(False).astype(bool)]
    assert set(picks.status) == {"ok"}
    theirs = float((picks.median_ms * picks.multiplicity).sum())
    assert row["cudnn_heuristic / oracle (oracle saves)"] == (
        f"{fmt_ratio(theirs / total)} ({fmt_ms(theirs - total)} ms, "
        f"{100 * (theirs - total) / theirs:.1f}%)")


# ---- the pieces ---------------------------------------------------------------------------------
def test_heatmap_cells_carry_every_non_ok_status(small: pd.DataFrame) -> None:
    df = computed.prepare(small)
    seen: set[str] = set()
    for _, part in df.groupby(["effective_precision", "layout", "workspace_limit", "timing_mode"]):
        ratio, status = computed.relative_matrix(part, ["direction", "layer_label"])
        assert not (ratio.isna() & (status == "ok")).to_numpy().any()
        seen |= set(status.to_numpy().ravel())
    assert set(STATUSES) <= seen
    assert set(STATUSES) - {"ok"} <= set(figures.STATUS_MARKS)
    letters = [mark[0] for mark in figures.STATUS_MARKS.values()]
    assert len(set(letters)) == len(letters)


class _Capture(figures.Renderer):
    """Keeps what each figure was handed instead of drawing it."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, tuple] = {}

    def submit(self, job, *args) -> None:
        self.jobs[args[-1].name] = args[:-1]


def test_figures_never_mix_ops_or_result_types(small: pd.DataFrame, tmp_path: Path) -> None:
    """A fused op and an asked result type are other points: each gets its own heatmap and
    Pareto figure, named for it, and the slower variant's times are what its figure shows (one
    figure over both showed, per cell, the faster of the two)."""
    fp16 = small[small["precision"] == "fp16"]
    slower = fp16.assign(op="conv_bias_relu", median_ms=fp16["median_ms"] * 3)
    into_fp32 = fp16.assign(output="fp32", median_ms=fp16["median_ms"] * 5)
    df = computed.prepare(pd.concat([fp16, slower, into_fp32], ignore_index=True))
    capture = _Capture()
    heat = {p.name: info for info, p in figures.heatmaps(df, tmp_path, capture)}
    pareto = {p.name for _, p in figures.pareto_figures(df, tmp_path, capture)}
    assert {"heatmap_fp16_NCHW_unlimited_warm.png",
            "heatmap_fp16_conv_bias_relu_NCHW_unlimited_warm.png",
            "heatmap_fp16_into-fp32_NCHW_unlimited_warm.png"} <= set(heat)
    assert len(heat) == 9 and len(set(heat)) == len(heat)          # 3 kinds x 3 limits
    assert pareto == {"pareto_fp16_NCHW_warm.png", "pareto_fp16_conv_bias_relu_NCHW_warm.png",
                      "pareto_fp16_into-fp32_NCHW_warm.png"}
    for name, factor in (("heatmap_fp16_NCHW_unlimited_warm.png", 1),
                         ("heatmap_fp16_conv_bias_relu_NCHW_unlimited_warm.png", 3),
                         ("heatmap_fp16_into-fp32_NCHW_unlimited_warm.png", 5)):
        (part,) = capture.jobs[name]
        ok = part[part["status"] == "ok"]
        plain = computed.prepare(fp16)
        plain = plain[(plain["status"] == "ok")
                      & (plain["workspace_limit"] == heat[name]["workspace_limit"])]
        assert len(ok) == len(plain) > 0
        assert ok["median_ms"].sum() == pytest.approx(factor * plain["median_ms"].sum())


def test_pareto_front_keeps_only_undominated_candidates() -> None:
    rows = [("a", 0, 5.0), ("b", 10, 3.0), ("c", 20, 4.0), ("d", 30, 1.0), ("e", 0, 6.0)]
    df = pd.DataFrame({"layer": "L", "candidate": [r[0] for r in rows],
                       "workspace_bytes": [r[1] for r in rows],
                       "median_ms": [r[2] for r in rows], "status": "ok"})
    front = computed.pareto_fronts(df, ["layer"])
    assert list(front["candidate"]) == ["a", "b", "d"]


def test_baseline_policies(small: pd.DataFrame) -> None:
    from harness.analysis import policies
    df = computed.prepare(small)
    assert policies.available(df) == ["cudnn_heuristic", "cudnn_find", "pytorch"]
    for policy in ("cudnn_find", "pytorch", "cudnn", "cudnn:IMPLICIT_GEMM"):
        best = computed.best_per_point(df, policy)
        assert (best["speedup_base"].dropna() >= 1.0 - 1e-12).all()   # never beats the oracle
    # the names the report used before the policy table was shared still work
    old = computed.best_per_point(df, "heuristic")["base_median_ms"]
    assert old.equals(computed.best_per_point(df, "cudnn_heuristic")["base_median_ms"])
    with pytest.raises(PolicyError, match="did you mean cudnn:IMPLICIT_GEMM"):
        policies.check(df, "cudnn:IMPLICIT_GEM")


def test_bad_arguments_are_refused_with_the_value(tmp_path: Path, small: pd.DataFrame) -> None:
    with pytest.raises(PolicyError, match="'torchh'"):
        render_report(small, tmp_path, baseline_policy="torchh")
    with pytest.raises(ValueError, match="peaks\\['fp32'\\]=-1"):
        render_report(small, tmp_path, peaks={"fp32": -1})


def test_roofline_uses_a_given_peaks_table(tmp_path: Path) -> None:
    paths = render_report(cpu_frame(), tmp_path, peaks={"fp32": 0.36, "bandwidth_gbps": 40})
    assert "roofline.png" in {p.name for p in paths.figures}
    assert "the peaks table given" in paths.html.read_text(encoding="utf-8")


def test_ceilings_are_recovered_from_roofline_pct(small: pd.DataFrame) -> None:
    peaks = computed.implied_ceilings(computed.prepare(small))
    for precision in ("fp32", "fp16"):
        assert peaks[precision] == pytest.approx(H200_PEAKS[precision], rel=1e-6)
    assert peaks["bandwidth_gbps"] == pytest.approx(H200_PEAKS["bandwidth_gbps"], rel=1e-6)


def test_formatters() -> None:
    assert fmt_ms(0.0096) == "0.0096" and fmt_ms(0.13604) == "0.136" and fmt_ms(12345.6) == "12,346"
    assert fmt_ratio(1.5) == "1.50×" and fmt_ms(None) == "—"
    assert fmt_bytes(24.6 * MIB) == "24.6 MiB" and fmt_bytes(0) == "0 B"


# ---- a real browser ----------------------------------------------------------------------------
def _chromium() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120)


def test_every_image_loads_in_headless_chromium(gpu_report, tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium not found (apt-get install -y chromium): browser check not run")
    url = gpu_report.html.resolve().as_uri()
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", url)
    check = re.search(r'data-render-check="([^"]*)"', dom.stdout)
    assert check, f"the page's check script did not run: {dom.stderr[-2000:]}"
    images = gpu_report.html.read_text(encoding="utf-8").count("<img ")
    assert check.group(1) == f"OK images={images} broken=0 errors=0"
    shot = tmp_path / "report.png"
    _run_chromium(binary, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1400,2000",
                  url)
    assert shot.exists() and shot.stat().st_size > 50_000


# A ResNet-50-sized sweep's render time is a benchmark: benchmarks/report_speed.py.


def test_a_plan_delivering_lower_precision_ranks_there_not_as_asked(small: pd.DataFrame) -> None:
    from harness.report import computed
    df = small.copy()
    fp32_ok = df[(df["precision"] == "fp32") & (df["status"] == "ok")
                 & (df["backend"] == "cudnn")].index[0]
    df.loc[fp32_ok, "effective_precision"] = "tf32"        # asked fp32, computed at TF32
    df.loc[fp32_ok, "median_ms"] = 1e-6                    # and absurdly fast because of it
    row = df.loc[fp32_ok]
    best = computed.best_per_point(computed.prepare(df), None)
    where = ((best["direction"] == row["direction"]) & (best["layout"] == row["layout"])
             & (best["workspace_limit"] == row["workspace_limit"])
             & best["layer_label"].str.contains(row["layer"].split(":")[-1]))
    fp32_best = best[where & (best["effective_precision"] == "fp32")]["best_candidate"]
    tf32_best = best[where & (best["effective_precision"] == "tf32")]["best_candidate"]
    asked = f"cudnn:{row['algorithm']} [asked fp32]"
    assert asked not in set(fp32_best)
    assert set(tf32_best) == {asked}


# ---- CPU points that shared the cores -----------------------------------------------------------
def _pages(paths) -> dict[str, tuple[str, list]]:
    """Each page's text (for the sentence) and its tables, read back as a reader sees them."""
    return {"html": (paths.html.read_text(encoding="utf-8"), html_tables(paths.html)),
            "markdown": (paths.markdown.read_text(encoding="utf-8"),
                         markdown_tables(paths.markdown))}


def test_contended_cpu_rows_are_said_at_the_top_and_listed(tmp_path: Path) -> None:
    from harness.analysis.sharing import sharing
    from harness.report.sharing import TITLE
    df = checked_cpu_frame(contended=1)
    shared = df[df["contended"].fillna(False).astype(bool)].iloc[0]
    sentence = sharing(df).sentence()
    assert sentence and "1 point left contended" in sentence
    for page, (text, tables) in _pages(render_report(df, tmp_path)).items():
        contents = text.index("Network totals per selection policy")   # the table of contents
        assert 0 <= text.index(sentence) < contents, page             # said before it
        row = find_row(tables, TITLE, [shared["layer"], shared["direction"]])
        assert row["Backend:algorithm"] == f"cpu:{shared['algorithm']}", page
        assert row["Median ms"] == fmt_ms(shared["median_ms"]), page
        assert row["Reason"] == SHARED_REASON, page
        assert len(next(rows for name, rows in tables if name == TITLE)) == 2, page  # header + 1
        # the point's best table row says why it verified fewer candidates than it tried
        best = find_row(tables, f"{shared['direction']} · fp32", [shared["layer"]])
        assert best["CPU sharing"] == "retaken 3, 1 contended", page
        assert best["Best verified"] != f"cpu:{shared['algorithm']}", page
        other = find_row(tables, f"{shared['direction']} · fp32", ["res4a_branch2c"])
        assert other["CPU sharing"] == "", page                        # measured clean: blank


def test_an_all_contended_cpu_run_renders_and_says_why_nothing_is_ranked(tmp_path: Path) -> None:
    from harness.report.sharing import NOTHING_RANKED, TITLE
    df = checked_cpu_frame(contended=None)
    shared = int(df["contended"].fillna(False).astype(bool).sum())
    for page, (text, tables) in _pages(render_report(df, tmp_path)).items():
        assert f"{shared} of {shared} CPU points shared the CPU" in text, page
        assert NOTHING_RANKED in text, page
        assert len(next(rows for name, rows in tables if name == TITLE)) == shared + 1, page
        assert find_row(tables, "fwd · fp32", ["conv1"])["Best verified"] == "—", page


def test_the_heatmap_never_times_a_contended_row() -> None:
    """The slice a heatmap worker gets must carry the flag: without it a contended row showed
    as a timed cell, "1" where it was the fastest, ranked in the picture though never in the
    tables."""
    df = computed.prepare(checked_cpu_frame(contended=1))
    shared = df[df["contended"].fillna(False).astype(bool)].iloc[0]
    ratio, status = computed.relative_matrix(df[figures.HEATMAP_COLUMNS],
                                             ["direction", "layer_label"])
    cell = (shared["direction"], shared["layer_label"]), shared["candidate"]
    assert pd.isna(ratio.loc[cell]) and status.loc[cell] == figures.CONTENDED
    assert figures.CONTENDED in figures.STATUS_MARKS
    assert not (ratio.isna() & (status == "ok")).to_numpy().any()


def test_pages_without_checked_cpu_rows_say_nothing_of_sharing(gpu_report, cpu_report) -> None:
    """GPU rows and CPU rows of files older than the contention columns: no sentence, no
    table, no column."""
    for paths in (gpu_report, cpu_report):
        for page, (text, _) in _pages(paths).items():
            for words in ("shared the CPU", "contended", "CPU sharing", "retaken"):
                assert words not in text, (paths.out_dir, page, words)


# ---- hostile names ------------------------------------------------------------------------------
HOSTILE = "[x](javascript:alert(1)) <script>alert(2)</script> _em_ *b* a|b &amp; `c`\n# h"


def test_title_and_layer_names_are_text_on_both_pages(tmp_path: Path) -> None:
    df = cpu_frame()
    df["layer"] = df["layer"].where(df["layer"] != "conv1", HOSTILE)
    paths = render_report(df, tmp_path, title="<b>T</b> [t](javascript:x) *t*")
    assert not re.search(r"(?<!\\)\]\(\s*javascript:", paths.markdown.read_text("utf-8"))
    for page in (paths.markdown, paths.html):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"(href|src)\s*=\s*[\"']?\s*javascript:", text), page.name
        assert "<script>alert" not in text and "<b>" not in text, page.name
    markdown = paths.markdown.read_text(encoding="utf-8")
    assert markdown.startswith("# &lt;b&gt;T&lt;/b&gt; \\[t\\](javascript:x) \\*t\\*\n")
    assert "\\_em\\_" in markdown and "\n# h" not in markdown
    # undoing the escapes gives the name back, with its line break made a space
    row = next(line for line in markdown.splitlines() if line.startswith("| \\[x\\]"))
    cell = re.split(r"(?<!\\)\|", row)[1].strip()
    unescaped = re.sub(r"\\(.)", r"\1", cell).replace("&lt;", "<").replace("&gt;", ">")
    assert unescaped.replace("&amp;", "&") == HOSTILE.replace("\n", " ")


def test_figure_paths_can_only_be_relative() -> None:
    from harness.report.document import Image
    for path in ("javascript:alert(1)", "/etc/passwd", "../x.png", "data:image/png;base64,"):
        with pytest.raises(ValueError, match="must be relative"):
            Image(path, "caption")
    Image("figures/heatmap_fp32.png", "caption")
