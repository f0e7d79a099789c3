"""The tables `convbench run` and `table` print from a results frame: the best verified
algorithm per layer, the network totals, and the CPU points that shared the cores."""
from __future__ import annotations

from harness.cli.common import say
from harness.precision import AUTO_OUTPUT
from harness.workspace_limit import limit_text


def print_best(df) -> None:
    from harness import analysis
    best = analysis.best_per_point(df)
    best = best[best["n_ok"] > 0].sort_values(analysis.POINT_KEYS, kind="stable")
    counts = ", ".join(f"{n} {s}" for s, n in analysis.status_counts(df).items())
    if best.empty:
        say(f"no verified results ({counts})")
        _print_sharing(df)
        return
    say("\nbest verified algorithm per layer (" + counts + "):")
    shown = best.assign(
        layer=analysis.layer_labels(best),
        limit=best["workspace_limit"].map(limit_text),
        ms=best["best_median_ms"].map(lambda v: f"{v:.4g}"),
        gflops=best["best_gflops"].map(lambda v: f"{v:.1f}"),
        vs_next=best["speedup_runner"].map(lambda v: "" if v != v or v is None else f"{v:.2f}x"),
        of_peak=_share_of_peak(df, best))
    columns = ["layer", "direction", "effective_precision", "layout", "limit",
               *_varying(best, ["threads", "op", "output"]), "best_candidate",
               "ms", "gflops", *(["of_peak"] if _shown_any(shown, "of_peak") else []),
               "runner_candidate", "vs_next"]
    say(shown[columns].rename(columns={"effective_precision": "precision", "best_candidate": "best",
                                        "runner_candidate": "runner_up"}).to_string(index=False))
    _print_step_totals(df)
    _print_versus_pytorch(df)
    _print_recurrent(df)
    _print_sharing(df)


def _share_of_peak(df, best):
    """The best CPU algorithm's share of its machine's FMA peak at the point's precision and
    thread count (the rows' `peak_gflops`, harness/cpu_peaks.py), as text; "" elsewhere."""
    from harness import analysis
    if "peak_gflops" not in df.columns or df["peak_gflops"].isna().all():
        return ""
    peaks = df.groupby(analysis.POINT_KEYS, dropna=False)["peak_gflops"].max()
    peak = best.join(peaks, on=analysis.POINT_KEYS)["peak_gflops"]
    share = best["best_gflops"] / peak
    return share.map(lambda v: "" if v != v else f"{v:.0%}")


def _shown_any(frame, column: str) -> bool:
    return bool(frame.get(column) is not None and (frame[column].astype(str) != "").any())


def _print_recurrent(df) -> None:
    """Recurrent layers: the best against PyTorch's layer and a plain loop (table --recurrent)."""
    from harness.report import recurrent, text
    if recurrent.has_recurrent(df):
        say("\n" + text.render(recurrent.recurrent_blocks(df)[1:]))


def _print_versus_pytorch(df) -> None:
    """The answer in one line per precision and layout: the best verified cuDNN algorithm's time
    over PyTorch's autotuner's pick, as a geometric mean over the points both measured."""
    from harness.analysis import selection
    if not df["backend"].astype(str).eq("torch_gpu").any():
        return
    versus = selection.versus_pytorch(selection.selection(df))
    if versus.empty:
        return
    say("\nbest verified cuDNN algorithm / PyTorch's autotuner (geometric mean of time ratios; "
        "below 1: the search beats PyTorch):")
    for _, row in versus.iterrows():
        unstable = (f"; PyTorch's pick differed between timing processes at "
                    f"{row['pytorch_unstable']}" if row["pytorch_unstable"] else "")
        say(f"  {row['effective_precision']} {row['layout']}: "
            f"{row['geomean_oracle_over_pytorch']:.3f} over {row['points']} points (best "
            f"{row['best']:.2f}, worst {row['worst']:.2f}: {row['worst_points']}){unstable}")


def _print_sharing(df) -> None:
    """How many CPU points shared the cores, and the contended ones the table left out (marked
    '!'), so a run beside a neighbour never reads as a clean ranking."""
    from harness.analysis import sharing
    sentence = sharing.sharing(df).sentence()
    if sentence is None:
        return
    say(f"\n{sentence}")
    for _, row in sharing.contended_rows(df).iterrows():
        say(f"  ! {row['layer']} {row['direction']} {row['backend']}:{row['algorithm']} "
            f"{row['median_ms']:.4g} ms: {row['reason'][:160]}")


def _varying(frame, names: list[str]) -> list[str]:
    """The columns among `names` whose value differs between rows: shown only then."""
    from harness.report.computed import varying
    shown = varying(frame, [n for n in names if n in frame.columns])
    # a result type asked for is worth saying even when it is the only one
    asked = "output" in names and "output" in frame.columns and "output" not in shown and bool(
        (frame["output"].astype(str) != AUTO_OUTPUT).any())
    return [*shown, "output"] if asked else shown


def _print_step_totals(df) -> None:
    """Per precision and layout: one pass over every layer and direction measured (a training
    step when all three directions were run) with the best verified algorithm per layer, and
    with each policy the data can answer, and what the best saves over it."""
    from harness.analysis import policies
    names = policies.available(df)
    totals = policies.network_totals(df, [policies.ORACLE, *names])
    totals = totals[totals["missing_oracle"] < totals["points"]]
    if totals.empty:
        return
    from harness.analysis.points import one_step_per_layer
    from harness.sweep import ALL_DIRECTIONS
    summed = set(one_step_per_layer(df)["direction"].astype(str))   # as the totals count
    directions = " + ".join(d for d in ALL_DIRECTIONS if d in summed)
    layers = df[["layer", "descriptor"]].drop_duplicates().shape[0]
    # a row sums only what was measured at its setting (a precision cut short covers fewer)
    say(f"\nnetwork time per pass over the layers measured ({directions}; each layer x its "
        f"multiplicity; layer_dirs: the layer-directions a row sums, of {layers} layers in the "
        f"results), best verified per layer against each policy:")
    shown = totals.assign(limit=totals["workspace_limit"].map(limit_text),
                          layer_dirs=totals["points"],
                          best_ms=totals.apply(lambda r: _total(r, "oracle"), axis=1))
    columns = ["batch", "effective_precision", "layout", "limit",
               *_varying(totals, ["threads", "op"]), "layer_dirs",
               "best_ms"]
    for name in names:
        shown[f"{name}_ms"] = totals.apply(lambda r, n=name: _total(r, n), axis=1)
        shown[f"saving_vs_{name}"] = totals.apply(lambda r, n=name: _saving(r, n), axis=1)
        columns += [f"{name}_ms", f"saving_vs_{name}"]
    say(shown[columns].rename(columns={"effective_precision": "precision"})
        .to_string(index=False))


def _total(row, name: str) -> str:
    total, missing = row[f"total_{name}"], int(row[f"missing_{name}"])
    if missing >= row["points"] or total != total:
        return "-"
    return f">={total:.4g} ({missing} missing)" if missing else f"{total:.4g}"


def _saving(row, name: str) -> str:
    from harness.analysis import policies
    saved = policies.saving(row, name)
    return "-" if saved is None else f"{saved[0]:.4g} ms ({saved[1]:.1f}%)"


def print_stages(df, wall_s: float, whole=None) -> None:
    """One line: where this sitting's wall time went, from its rows' stage columns (`df`; summed
    over each row's processes, so with two GPU processes the stages can add up to more than the
    wall) and the rest (worker start-up, test data, writing). A problem's float64
    reference is computed by its first row's verification, so it counts under verify. What the
    races, runoffs and plan limit left out is said of the whole run (`whole`, default `df`): a
    resumed point's plans are split between its sittings."""
    from harness.measurement import STAGE_COLUMNS
    present = [c for c in STAGE_COLUMNS if c in df.columns]
    totals = {c.removeprefix("stage_").removesuffix("_ms"): float(df[c].fillna(0).sum()) / 1e3
              for c in present}
    totals = {name: s for name, s in totals.items() if s > 0 or name != "list"}  # CPU runs
    if not totals or wall_s <= 0:
        return
    parts = [f"{name} {seconds:.1f} s ({seconds / wall_s:.0%})" for name, seconds in totals.items()]
    rest = wall_s - sum(totals.values())
    if rest >= 0:
        parts.append(f"other {rest:.1f} s ({rest / wall_s:.0%})")
    say(f"\nwhere the {wall_s:.1f} s went (per row: list plans, prepare, verify against "
        f"float64 with the references, time; other: start-up, test data, writing): "
        f"{', '.join(parts)}")
    from harness.analysis.stages import plan_limit_line, race_line, runoff_line
    whole = df if whole is None else whole
    for line in (race_line(whole), runoff_line(whole), plan_limit_line(whole)):
        if line:
            say(line)



def print_profile(df) -> None:
    """`--profile`: the stage seconds per backend and direction, and the costliest rows
    (harness/analysis/stages.py)."""
    from harness.analysis import stages
    table = stages.profile(df)
    if table.empty:
        say("no stage times in these rows (results from before they were recorded)")
        return
    shown = table.assign(share=[f"{v:.0%}" for v in table["share"]])
    say("\nstage seconds per backend and direction (prepare, verify against float64, time):")
    say(shown.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    say("\ncostliest rows (seconds):")
    say(stages.costliest_rows(df).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
