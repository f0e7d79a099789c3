"""The report's sections, in the order a reader asks their questions: which algorithm, how much it
matters, what it costs in workspace and accuracy, how close to the hardware, on what machine."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import policies
from harness.analysis.ceilings import has_ceilings
from harness.analysis.policies import meaning
from harness.report import (answers, ceilings, computed, depth, figures, fusion, quantized,
                            recurrent, tables)
from harness.report import sharing as shared_cpu
from harness.report.document import Block, Document, Fold, Image, Section, Text
from harness.report.figures.recurrent import MOST_PANELS

SHOWN_FIGURES = 2      # figures of one kind shown open; the rest are folded


def build(df: pd.DataFrame, fig_dir: Path, baseline: str | None,
          peaks: dict[str, float] | None, title: str, renderer: figures.Renderer,
          repeats: int = 0) -> Document:
    """The whole report for a prepared frame; hands the figures for `fig_dir` to `renderer`."""
    shown = [policies.ORACLE, *policies.available(df)]
    if baseline and baseline not in shown:
        shown.append(baseline)
    totals = computed.network_totals(df, shown)
    rel = fig_dir.name
    sections = (     # the headline first: how much the whole network gains
        network_section(totals, shown, fig_dir, rel, renderer, df),
        *selection_section(df),
        Section("Cost of determinism", "determinism", tuple(answers.determinism_blocks(df))),
        Section("Pick stability and near-ties", "stability", tuple(answers.stability_blocks(df))),
        *([Section("Fused epilogues", "fusion", tuple(fusion.fusion_blocks(df)))]
          if fusion.has_epilogues(df) else []),
        *([Section("3-D layers", "conv3d", tuple(depth.conv3d_blocks(df)))]
          if depth.has_3d(df) else []),
        *([Section("Quantized precisions", "quantized",
                   tuple(quantized.quantized_blocks(df)))]
          if quantized.has_quantized(df) else []),
        *([recurrent_section(df, fig_dir, rel, renderer)] if recurrent.has_recurrent(df) else []),
        *([Section("CPU algorithms against their ceilings", "ceilings",
                   tuple(ceilings.ceiling_blocks(df)))] if has_ceilings(df) else []),
        best_section(df, baseline),
        heatmap_section(df, fig_dir, rel, renderer),
        workspace_section(df, totals, fig_dir, rel, renderer),
        accuracy_section(df, fig_dir, rel, renderer),
        roofline_section(df, peaks, fig_dir, rel, renderer),
        environment_section(df),
    )
    return Document(title, tuple(intro(df, baseline, repeats)), sections)


def intro(df: pd.DataFrame, baseline: str | None, repeats: int = 0) -> list[Block]:
    counts = {name: df[name].nunique()
              for name in ("layer_label", "direction", "effective_precision")}
    blocks: list[Block] = [Text(
        f"{len(df):,} measurements: {counts['layer_label']} layers, "
        f"directions {_listed(df, 'direction')}, precisions {_listed(df, 'effective_precision')}, "
        f"layouts {_listed(df, 'layout')}, backends {_listed(df, 'backend')}, workspace limits "
        f"{', '.join(tables.fmt_limit(v) for v in dict.fromkeys(df['workspace_limit']))}.")]
    if repeats:
        runs = df["run_id"].nunique()
        blocks.append(Text(f"{repeats:,} repeated measurements of points measured again in a later "
                           f"run were left out: each point shows its latest measurement "
                           f"({runs} runs contribute). Compare runs with `convbench compare`."))
    if baseline:
        blocks.append(Text(f"Baseline policy: {baseline}, {policies.meaning(baseline)}."))
    if computed.machines(df) > 1:
        blocks.append(Text(f"Warning: these rows come from {computed.machines(df)} different "
                           "machines; rankings mix them. Compare machines with `convbench "
                           "compare` instead."))
    throttled = int(df["throttled"].sum())
    if throttled:
        rows = "row was" if throttled == 1 else "rows were"
        blocks.append(Text(f"Warning: {throttled} {rows} timed with the SM clock under 90% of "
                           "its maximum (throttled); those times are pessimistic."))
    # Here, not in the best tables' section: an all-contended run ranks nothing, and its tables
    # of dashes would not say why.
    return blocks + shared_cpu.intro_blocks(df)


def _listed(df: pd.DataFrame, column: str) -> str:
    return ", ".join(str(v) for v in dict.fromkeys(df[column]))


def _figure_blocks(items: list[tuple[str, Path]], rel: str, caption: str) -> list[Block]:
    """The first few figures open, the rest folded by their label."""
    blocks: list[Block] = []
    for i, (label, path) in enumerate(items):
        image = Image(f"{rel}/{path.name}", f"{caption}: {label}")
        blocks.append(image if i < SHOWN_FIGURES else Fold(label, (image,)))
    return blocks


# ---- sections ------------------------------------------------------------------------------------
def best_section(df: pd.DataFrame, baseline: str | None) -> Section:
    best = computed.best_per_point(df, baseline)
    text = ("Only verified rows (status ok: the output matched the float64 reference within "
            "tolerance) compete; wrong, failed and unsupported rows never win. Speed-up = the "
            "other's median time / the best median time (vs runner-up, vs the baseline); \"same\": "
            "the baseline picks the best. Mult. = how often the layer occurs in the network. "
            "Verified = verified / tried candidates. [asked fp32] after a name: asked for fp32, "
            "its error shows it computed at the lower precision of the table it is in, where it "
            "competes (it never ranks as fp32).")
    text = " ".join(filter(None, (text, shared_cpu.best_note(df))))
    return Section("Best verified algorithm per layer", "best",
                   (Text(text), *tables.best_tables(best, baseline)))


def heatmap_section(df: pd.DataFrame, fig_dir: Path, rel: str,
                    renderer: figures.Renderer) -> Section:
    reference = computed.reference_limit(df)
    items = figures.heatmaps(df, fig_dir, renderer)
    main = [(_label(i), p) for i, p in items if i["workspace_limit"] == reference]
    other = [(_label(i), p) for i, p in items if i["workspace_limit"] != reference]
    text = ("Each cell: median time / the best time at that layer (1 = best). Cells without a "
            "time say why: U unsupported, W workspace limit exceeded, X wrong result, F failed, "
            "C crashed, N not tried (its engine hung on another setting), – not run.")
    text = " ".join(filter(None, (text, shared_cpu.heatmap_note(df))))
    blocks: list[Block] = [Text(text), *_figure_blocks(main, rel, "Time relative to the best")]
    if other:
        images = tuple(Image(f"{rel}/{p.name}", f"Time relative to the best: {label}")
                       for label, p in other)
        blocks.append(Fold(f"Other workspace limits ({len(images)} figures)", images))
    return Section("Time relative to the best, every algorithm", "heatmap", tuple(blocks))


def _label(info: dict[str, Any]) -> str:
    return " · ".join(figures.figure_parts(info, limit_prefix="workspace "))


def workspace_section(df: pd.DataFrame, totals: pd.DataFrame, fig_dir: Path, rel: str,
                      renderer: figures.Renderer) -> Section:
    blocks: list[Block] = [Text(
        "How much time a workspace buys. The network total sums, over layers and directions, the "
        "best verified time × layer multiplicity under each limit; a red ring (and ≥ in the "
        "table) marks a total missing points that had no verified algorithm under that limit.")]
    if totals["workspace_limit"].nunique() > 1:
        path = figures.workspace_totals_figure(totals, fig_dir, renderer)
        blocks.append(Image(f"{rel}/{path.name}", "Network total under each workspace limit"))
        blocks.append(tables.maybe_fold("Network total under each workspace limit",
                                        tables.workspace_totals_table(totals)))
    if not (df["workspace_bytes"].astype(float) > 0).any():
        blocks.append(Text("No algorithm reported a workspace (CPU algorithms allocate what they "
                           "need), so there is no workspace/time trade-off to draw."))
        return Section("Workspace vs time", "workspace", tuple(blocks))
    pareto = [(_label(i), p) for i, p in figures.pareto_figures(df, fig_dir, renderer)]
    blocks += _figure_blocks(pareto, rel, "Workspace vs time per layer, Pareto fronts")
    fronts = computed.pareto_fronts(df, figures.PARETO_KEYS)
    blocks.append(Fold("Pareto fronts as a table", (tables.pareto_table(fronts),)))
    return Section("Workspace vs time", "workspace", tuple(blocks))


def accuracy_section(df: pd.DataFrame, fig_dir: Path, rel: str,
                     renderer: figures.Renderer) -> Section:
    path = figures.accuracy_figure(df, fig_dir, renderer)
    if path is None:
        return Section("Accuracy vs speed", "accuracy", (Text("No row recorded an error."),))
    text = ("Relative L2 error against a float64 reference, per precision; colours are algorithm "
            "families, crosses are results that failed verification, dashed lines the tolerance. "
            f"Exact results (error 0) are drawn at {figures.ZERO_ERROR:g}.")
    return Section("Accuracy vs speed", "accuracy",
                   (Text(text), Image(f"{rel}/{path.name}", "Relative error against time")))


def recurrent_section(df: pd.DataFrame, fig_dir: Path, rel: str,
                      renderer: figures.Renderer) -> Section:
    """The recurrent answer's table, then every algorithm's time against its error per layer."""
    blocks: list[Block] = recurrent.recurrent_blocks(df)
    drawn = figures.recurrent_figure(df, fig_dir, renderer)
    if drawn is not None:
        path, left_out = drawn
        more = (f" The first {MOST_PANELS} layers are drawn; {left_out} more are in the table."
                if left_out else "")
        blocks += [Text("Time of each pass against its largest error, every verified algorithm "
                        "(circles: inference; squares: a training step). An algorithm to the "
                        f"left at the same height is faster at no cost in accuracy.{more}"),
                   Image(f"{rel}/{path.name}", "Recurrent layers: time against error")]
    return Section("Recurrent layers", "recurrent", tuple(blocks))


def roofline_section(df: pd.DataFrame, peaks: dict[str, float] | None, fig_dir: Path,
                     rel: str, renderer: figures.Renderer) -> Section:
    source = "the peaks table given"
    if not peaks:
        peaks, source = computed.implied_ceilings(df), "implied by the roofline_pct column"
    path = figures.roofline_figure(df, peaks, fig_dir, renderer) if peaks else None
    if path is None:
        return Section("Roofline", "roofline", (Text(
            "Skipped: no measured peaks for these precisions (pass a peaks table, e.g. "
            "{'fp32': 51, 'bandwidth_gbps': 4220}, or record roofline_pct)."),))
    bandwidth = peaks.get("bandwidth_gbps")
    ceilings = ", ".join(f"{k} {v:.4g} TFLOP/s" for k, v in peaks.items() if k != "bandwidth_gbps")
    ceilings += f"; bandwidth {bandwidth:.4g} GB/s" if bandwidth else "; no bandwidth ceiling"
    return Section("Roofline", "roofline", (
        Text(f"Achieved rate of verified rows against arithmetic intensity. Ceilings ({source}): "
             f"{ceilings}."),
        Image(f"{rel}/{path.name}", "Roofline")))


def network_section(totals: pd.DataFrame, names: list[str], fig_dir: Path, rel: str,
                    renderer: figures.Renderer, df: pd.DataFrame) -> Section:
    meanings = "; ".join(f"{p}: {meaning(p)}" for p in names)
    blocks: list[Block] = [Text(
        "Sum over layers and directions of each policy's pick × layer multiplicity. " + meanings
        + ". ≥ marks a total missing points where the policy gave no verified result; ratios "
          "are shown only where both totals are complete.")]
    # With the oracle alone a bar chart would only repeat the table.
    path = (figures.network_figure(totals, names, fig_dir, renderer) if len(names) > 1
            else None)
    if path is not None:
        blocks.append(Image(f"{rel}/{path.name}", "Network totals per selection policy, "
                            "relative to the oracle" if len(names) > 1 else "Network totals"))
    limit = computed.reference_limit(totals)
    headline = totals[totals["workspace_limit"] == limit]
    blocks.append(tables.network_table(headline, names,
                                       f"Workspace {tables.fmt_limit(limit)}"))
    if len(headline) < len(totals):
        blocks.append(Fold("Every workspace limit",
                           (tables.network_table(totals, names, "Every workspace limit"),)))
    blocks += answers.networks_blocks(df)
    return Section("Network totals per selection policy", "totals", tuple(blocks))


def selection_section(df: pd.DataFrame) -> tuple[Section, ...]:
    """How close each policy comes to the oracle (harness/analysis/selection.py); none without
    picks."""
    from harness.analysis import selection
    picks = selection.selection(df)
    if picks.empty:
        return ()
    blocks: list[Block] = [Text(
        "The oracle is the fastest verified row of the harness's own cuDNN backends (legacy and "
        "graph API) at the same effective precision, layout and workspace limit; PyTorch is "
        "never part of it. Regret = the policy's pick time / the oracle's time; within 1% "
        "counts as picking the oracle; \"or a near-tie\" also counts a pick the samples cannot "
        "tell from the oracle (Pick stability, below), and the tie-aware regret is then 1. A "
        "pick that computed at lower precision than asked (an "
        "fp32 request served at TF32 accuracy) gets no regret and is counted as precision "
        "lowered."), tables.policy_table(selection.policy_summary(picks))]
    versus = selection.versus_pytorch(picks)
    if len(versus):
        blocks += [Text("Oracle time / PyTorch autotuner time per precision and layout (below 1: "
                        "the harness's search finds faster algorithms than PyTorch runs; above "
                        "1 at a point: PyTorch ran something the search missed or mis-timed)."),
                   tables.versus_pytorch_table(versus)]
    return (Section("Who picks the fastest algorithm", "selection", tuple(blocks)),)


def environment_section(df: pd.DataFrame) -> Section:
    return Section("Environment and method", "environment", (
        tables.env_table(df), tables.method_table(df), tables.backend_cost_table(df)))

