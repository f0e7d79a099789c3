"""The commands that read results or the machine (table, list, shapes, env, peaks, compare,
report) and `check` (run, then compare)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from harness.cli.common import (EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, UserError, one_line,
                                say, unusable_path, writing)
from harness.cli.inputs import load_checked, load_results, load_sources, results_paths
from harness.cli.running import (RunOutput, connect_cluster, load_sweep, measure, planned_points,
                                 run_output)
from harness.cli.tables import print_best, print_profile


def cmd_table(args: argparse.Namespace) -> int:
    from harness import analysis
    from harness.report import answers, text
    if args.networks:    # its rows keep machines and files apart themselves
        say(text.render(answers.networks_blocks(load_sources(args.results))))
        return EXIT_OK
    for gpu, part in analysis.by_gpu(load_results(args.results)):
        if gpu is not None:
            say(f"\n== {gpu}: {len(part)} rows ==")
        if args.selection:
            from harness.analysis import selection
            say(selection.format_selection(part))
        elif args.determinism:
            say(text.render(answers.determinism_blocks(part)))
        elif args.profile:
            print_profile(part)
        elif args.stability:
            say(text.render(answers.stability_blocks(part)))
        elif args.conv3d:
            from harness.report import depth
            say(text.render(depth.conv3d_blocks(part)))
        elif args.fusion:
            from harness.report import fusion
            say(text.render(fusion.fusion_blocks(part)))
        elif args.quantized:
            from harness.report import quantized
            say(text.render(quantized.quantized_blocks(part)))
        elif args.recurrent:
            from harness.report import recurrent
            say(text.render(recurrent.recurrent_blocks(part)))
        elif args.ceilings:
            from harness.report import ceilings
            say(text.render(ceilings.ceiling_blocks(part)))
        else:
            print_best(part)
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from harness import backends
    for name, reason in backends.available().items():
        backend = backends.get(name)
        state = "available" if reason is None else f"unavailable: {reason}"
        say(f"{name} ({backend.device}) - {backend.description} [{state}]")
        for algo in backend.algorithms():
            say(f"    {algo.name:<22} {algo.family:<14} {algo.description}")
        say(f"    {_beyond_plain_2d(backend.algorithms())}")
        for note in backend.notes():
            say(f"    ({note})")
    return EXIT_OK


def _beyond_plain_2d(algorithms) -> str:
    """Which of a backend's algorithms run 3-D problems, the epilogue ops (--op) and each
    quantized precision (asked of a forward NHWC 3x3 point with 16 channels, the shape those
    formats want: a backend's own refusal rules, no library call)."""
    from harness.epilogue import CONV
    from harness.precision import QUANTIZED
    from harness.problem import ConvProblem
    from harness.families import CONV as CONV_KIND
    from harness.sweep import Point
    # the convolution algorithms: a recurrent one (harness/families.py) has none of these axes
    algorithms = [a for a in algorithms if CONV_KIND in a.problem_kinds]
    probe = ConvProblem(1, 16, 8, 8, 16, 3, 3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)

    def names(which) -> str:
        chosen = [a.name for a in algorithms if which(a)]
        return ("all" if len(chosen) == len(algorithms) and chosen else
                ", ".join(chosen) or "none")

    def runs(precision: str):   # asked with the last op an algorithm runs (unfused: not conv)
        return lambda a: a.refusal(Point(probe, "fwd", precision, "NHWC", a.backend, a.name,
                                         op=a.ops[-1])) is None
    quantized = "; ".join(f"{q}: {names(runs(q))}" for q in QUANTIZED)
    return (f"(3-D: {names(lambda a: a.runs_3d)}; epilogue ops: "
            f"{names(lambda a: any(op != CONV for op in a.ops))}; {quantized})")


def cmd_shapes(args: argparse.Namespace) -> int:
    from harness import suite as suites
    from harness.families import RNN, descriptor
    from harness.suite.overrides import sweep_with_overrides
    sweep = suites.load_suite(args.suite)
    if args.batch is not None:
        sweep = sweep_with_overrides(sweep, batch=args.batch)
    total = 0.0
    say(f"{'layer':<34} {'x':>3} {'input':>16} {'output':>16} {'kernel':>9} {'GFLOP':>9}  benchdnn")
    for p in sweep.problems:
        gflop = p.flops / 1e9
        total += gflop * p.multiplicity
        kernel = f"{p.cell:<8}" if p.kind == RNN else f"{p.kernel_h}x{p.kernel_w}/s{p.stride_h:<3}"
        say(f"{p.label:<34} {p.multiplicity:>3} {'x'.join(map(str, p.input_shape)):>16} "
            f"{'x'.join(map(str, p.output_shape)):>16} {kernel} "
            f"{gflop:>9.3f}  {descriptor(p)}")
    say(f"{len(sweep.problems)} layers; one forward pass of the network: {total:.3f} GFLOP")
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from harness import env as envmod
    for key, value in envmod.fingerprint().items():
        say(f"{key:<24} {'' if value is None else value}")
    return EXIT_OK


def cmd_peaks(args: argparse.Namespace) -> int:
    """This machine's ceilings: the CPU's always (harness/cpu_peaks.py), the GPU's where there
    is one (harness/peaks.py)."""
    from harness import cpu_peaks, peaks
    from harness import env as envmod
    from harness.backends import get
    from harness.backends.cpu import peaks as measured_peaks
    env = envmod.fingerprint()
    measured = None if args.refresh else cpu_peaks.load_cached(env)
    if measured is None:
        say(f"measuring {env.get('cpu_model')} (numba FMA chains, BLAS SGEMM)...")
        measured = measured_peaks.measure(env)
    say(f"CPU: {cpu_peaks.describe(measured)}")
    say(f"cached at {cpu_peaks.cache_path(env)}")
    reason = get("cudnn").unavailable_reason()
    if reason and "cudnn" not in reason.lower():
        say(f"GPU: not measured ({reason})")
        return EXIT_OK
    gpu = None if args.refresh else peaks.load_cached(env)
    if gpu is None:
        say(f"measuring {env.get('gpu_name')} (cuBLAS GemmEx through CuPy, 1 GiB copy)...")
        gpu = peaks.measure(env)
    say(f"GPU: {peaks.describe(gpu)}")
    say(f"cached at {peaks.cache_path(env)}")
    return EXIT_OK


def compare_options(args: argparse.Namespace, row_threshold: float | None = None):
    """CompareOptions from the flags; `row_threshold` is the suite file's [compare] threshold."""
    from harness import compare
    try:
        threshold = (compare.parse_threshold(args.threshold) if args.threshold is not None
                     else row_threshold if row_threshold is not None
                     else compare.DEFAULT_THRESHOLD)
        return compare.CompareOptions(
            alpha=args.alpha, threshold=threshold,
            layer_thresholds=compare.parse_layer_thresholds(args.layer_threshold or []),
            correction=args.correction, allow_env_mismatch=args.allow_env_mismatch,
            allow_missing=args.allow_missing,
            suite_threshold=(compare.parse_threshold(args.suite_threshold)
                             if args.suite_threshold is not None
                             else compare.DEFAULT_SUITE_THRESHOLD),
            # `check` has no candidate file: its candidate is the run it makes
            labels=(getattr(args, "baseline", None) or "the baseline",
                    getattr(args, "candidate", None) or "this run"))
    except ValueError as err:
        raise UserError(str(err)) from None


def _judge(base, new, options):
    from harness import compare
    try:
        return compare.compare(base, new, options)
    except compare.EnvironmentMismatch as err:
        raise UserError(f"{err} (pass --allow-env-mismatch to compare anyway)") from None


def verdict_exit(comparison, args: argparse.Namespace) -> int:
    from harness.report.compare_summary import markdown_summary
    summary = markdown_summary(comparison)
    say(summary)
    # Only the user's two paths are written here: any OSError is about one of them.
    for path, write in ((args.report, lambda: Path(args.report).write_text(summary)),
                        (args.verdicts,
                         lambda: comparison.to_frame().to_csv(args.verdicts, index=False))):
        try:
            if path:
                write()
        except OSError as err:
            said = unusable_path(err, Path(path)) or f"cannot write {path}: {one_line(err)}"
            raise UserError(said) from None
    return EXIT_REGRESSION if comparison.fails(args.fail_on) else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    base, new = load_results([args.baseline]), load_results([args.candidate])
    return verdict_exit(_judge(base, new, compare_options(args)), args)


def cmd_check(args: argparse.Namespace) -> int:
    """Run the suite, compare with the baseline, re-measure flagged rows up to --confirm times,
    and fail only for regressions that every round confirms."""
    sweep = load_sweep(args)
    timing = replace(sweep.timing, min_samples=max(sweep.timing.min_samples, args.min_samples),
                     max_samples=max(sweep.timing.max_samples, args.min_samples))
    sweep = replace(sweep, timing=timing)
    options = compare_options(args, sweep.regression_threshold)
    base = load_results([args.baseline])
    output = run_output(args, sweep.name, tag="check")
    points = planned_points(sweep)
    with connect_cluster(args, points) as cluster:
        return _check_rounds(args, sweep, points, output, base, options, cluster)


def _check_rounds(args, sweep, points, output: RunOutput, base, options, cluster) -> int:
    from harness import compare
    _wait_for_quiet_host(base)
    new, interrupted, _ = measure(sweep, points, output, args.seed, cluster,
                                  use_cache=not args.no_cache)
    if interrupted:
        return EXIT_INTERRUPTED
    base = _planned_part(base, {p.point_id for p in points})
    comparison = _judge(base, new, options)
    for round_number in range(1, args.confirm + 1):
        flagged = set(compare.flagged_point_ids(comparison))
        if not flagged:
            break
        say(f"confirmation round {round_number}: re-measuring {len(flagged)} flagged points")
        again = [p for p in points if p.point_id in flagged]
        _wait_for_quiet_host(base)
        path = output.path.with_name(f"{output.path.stem}-confirm{round_number}"
                                     f"{output.path.suffix}")
        rerun, interrupted, _ = measure(sweep, again, replace(output, path=path), args.seed,
                                         cluster, use_cache=not args.no_cache)
        if interrupted:
            return EXIT_INTERRUPTED
        comparison = compare.confirm(comparison, base, rerun, options)
    return verdict_exit(comparison, args)


def _wait_for_quiet_host(base) -> None:
    """Before `check` measures (or re-measures what it flagged), wait for a slow spell of the
    host to pass: the baseline's CPU rows recorded the host probe, and rows measured in a spell
    read as regressions (harness/contention.py, SPELL_WAIT_S). GPU-only baselines have none."""
    import pandas as pd
    if "host_probe_ms" not in base.columns:
        return
    probes = pd.to_numeric(base["host_probe_ms"], errors="coerce").dropna()
    if probes.empty:
        return
    from harness import contention, threads
    wait = contention.wait_for_quiet_host(float(probes.median()), threads.available_cores())
    probe = (f"a fixed matmul on every core: {wait.last_ms:.3g} ms, the baseline's "
             f"{wait.reference_ms:.3g} ms")
    if not wait.quiet:
        say(f"the host still runs {wait.slower:.0%} slower than when the baseline was measured "
            f"after {wait.waited_s:.0f} s ({probe}): measuring anyway; rows timed in a slow "
            "spell are judged by the spell rule (docs/regression-checks.md)")
    elif wait.reads > contention.QUIET_READS:
        say(f"waited {wait.waited_s:.0f} s for a slow spell of the host to pass ({probe})")


def _planned_part(base, wanted: set[str]):
    """The baseline's rows of the points this check runs, so that a check narrowed by --layer,
    --backend... finds no MISSING rows in what it left out. A row an expanding algorithm made
    (one per engine) carries its own point id: it counts by the planned point it came from."""
    return base[base["point_id"].isin(wanted) | base["planned_point_id"].isin(wanted)]


def cmd_report(args: argparse.Namespace) -> int:
    from harness import report
    results = results_paths(args.results)
    if args.out is not None and not args.out.strip():
        raise UserError("--out '' names no folder: name the report's folder, or leave --out out")
    out = _report_folder(Path(args.out) if args.out else
                         Path("reports")
                         / Path(results[0].name.removesuffix(".partial.jsonl")).stem,
                         bool(args.out), args.force)
    from harness import analysis
    from harness.runs import machine_label
    try:
        report.refuse_root_and_home(out)   # also where each GPU's report is a subfolder of it
        peaks = report.read_peaks(args.peaks) if args.peaks else None
        # Rows from several GPU models (a mixed cluster run): one report per GPU, in subfolders.
        parts = analysis.by_gpu(report.load_frames([load_checked(path) for path in results]))
        if peaks and len(parts) > 1:
            raise UserError(f"--peaks {args.peaks} holds one GPU's ceilings and these results "
                            f"come from {len(parts)} machines; leave --peaks out (each report "
                            "then takes its GPU's ceilings from the rows' roofline columns)")
        for gpu, part in parts:
            folder = out if gpu is None else out / machine_label({"gpu_name": gpu})
            title = args.title if gpu is None or args.title is None else f"{args.title} ({gpu})"
            with writing(folder):
                paths = report.render_report(part, folder, baseline_policy=args.baseline_policy,
                                             peaks=peaks, embed_images=args.embed_images,
                                             title=title, jobs=args.jobs, force=args.force)
            say(f"wrote {paths.html} and {paths.markdown} with {len(paths.figures)} figures")
    except report.PeaksError as err:
        raise UserError(f"--peaks {err}") from None
    except (report.PolicyError, report.EmptyResults, report.FolderRefused) as err:
        raise UserError(str(err)) from None
    return EXIT_OK


def _report_folder(out: Path, given: bool, replace: bool = False) -> Path:
    """The report's folder; an existing file there (or in its way) is refused, never replaced,
    and so is an earlier report there (its pages, or a per-GPU report in a subfolder) unless
    --force says to replace it."""
    flag = "--out " if given else "the default report folder "
    for folder in (out, *out.parents):
        if folder.exists() and not folder.is_dir():
            what = "" if folder == out else f": {folder} is a file"
            raise UserError(f"{flag}{out} is not a folder{what}; a report is a folder "
                            "(index.html, index.md, figures/): name another with --out")
    earlier = [p for pattern in ("index.html", "index.md", "*/index.html", "*/index.md")
               for p in out.glob(pattern)] if out.is_dir() else []
    if earlier and not replace:
        raise UserError(f"{flag}{out} already holds a report ({earlier[0]}); name another "
                        "folder with --out, or pass --force to replace it")
    return out
