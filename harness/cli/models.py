"""`convbench import` (a model's layers as a suite file), `run --model` (import, then run it) and
`convbench plan` (the fastest verified algorithm per layer and direction, as JSON)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import EXIT_OK, UserError, csv_list, say, warn, writing
from harness.cli.inputs import load_results


def _imported(args: argparse.Namespace):
    from harness import models
    chw = models.parse_input(args.input) if args.input else None
    return models.import_model(args.source, batch=args.batch,
                               input_chw=chw, name=args.name)


def _write_output(args: argparse.Namespace, text: str) -> Path:
    """-o: a file the user may have made is replaced only with --force."""
    path = Path(args.output)
    if path.exists() and not args.force:
        raise UserError(f"-o {path}: the file exists; pass --force to replace it")
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


def _summary(model) -> str:
    from harness.models import skipped_text
    return (f"{model.source}: {model.convs} convolutions, {len(model.layers)} unique shapes "
            f"({model.method}); not imported: {skipped_text(model.skipped)}")


def cmd_import(args: argparse.Namespace) -> int:
    from harness.models.suite_file import suite_text
    model = _imported(args)
    text = suite_text(model, "convbench " + " ".join(sys.argv[1:]))
    if args.output is None:
        sys.stdout.write(text)
        warn(_summary(model))
        return EXIT_OK
    path = _write_output(args, text)
    say(f"{_summary(model)}\nwrote {path}: `convbench run {path}` measures it")
    return EXIT_OK


def suite_for_model(args: argparse.Namespace, results_path: Path) -> Path:
    """`run --model`: the model's suite, written beside its results so the run can be repeated
    (`convbench run <that file>`). A resumed run reuses the file it wrote; a different import
    never overwrites it."""
    from harness.models.suite_file import suite_text
    model = _imported(args)
    path = results_path.with_name(results_path.stem + ".suite.toml")
    text = suite_text(model, "convbench " + " ".join(sys.argv[1:]))
    if path.exists():
        if _layers_of(path.read_text(encoding="utf-8")) != _layers_of(text):
            raise UserError(f"{path} holds other layers than {args.source} imports now; move it "
                            f"away or write the results elsewhere (--out)")
        return path
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    say(f"{_summary(model)}\nsuite: {path}")
    return path


def _layers_of(text: str) -> list[str]:
    """The lines that say what is measured (comments carry the date and the command)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def cmd_plan(args: argparse.Namespace) -> int:
    import json
    from harness import plan
    from harness import suite as suites
    sweep = suites.load_suite(args.suite)
    limit = None
    limits = csv_list(args.workspace_limit, "--workspace-limit")
    if limits is not None:
        if len(limits) > 1:      # a plan names one algorithm per layer: for one limit
            raise UserError(f"--workspace-limit {args.workspace_limit!r}: a plan takes one "
                            "limit, e.g. 64MiB (run `convbench plan` once per limit)")
        (limit,) = suites.checked_workspace_limits(limits, "--workspace-limit", indexed=False)
    document = plan.build(load_results(args.results), sweep, limit, args.precision, args.layout)
    text = json.dumps(document, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    path = _write_output(args, text)
    found = sum(1 for layer in document["layers"] for d in layer["directions"].values() if d)
    say(f"wrote {path}: {len(document['layers'])} layers, {found} layer-directions with a "
        f"verified algorithm")
    return EXIT_OK


def add_parsers(sub) -> None:
    """The `import` and `plan` subcommands; `run --model` is added with run's own flags."""
    imp = sub.add_parser("import", help="a model's convolution layers as a suite file")
    imp.add_argument("source", help="torchvision:NAME, timm:NAME, module.path:callable or a "
                                    "path to an .onnx file")
    _add_model_flags(imp)
    imp.add_argument("-o", "--output", help="suite file to write (default: print it)")
    imp.add_argument("--force", action="store_true", help="replace -o if it exists")
    imp.set_defaults(func=cmd_import)

    plan = sub.add_parser("plan", help="the fastest verified algorithm per layer and direction "
                                       "of a suite, as JSON a framework can apply")
    plan.add_argument("results", nargs="+")
    plan.add_argument("--suite", required=True, help="the suite whose layers the plan covers")
    plan.add_argument("--workspace-limit", help="most workspace an algorithm may use "
                                                "(e.g. 64MiB; default: no limit)")
    plan.add_argument("--precision", help="the precision to plan for (default: the only one)")
    plan.add_argument("--layout", help="the layout to plan for (default: the only one)")
    plan.add_argument("-o", "--output", help="JSON file to write (default: print it)")
    plan.add_argument("--force", action="store_true", help="replace -o if it exists")
    plan.set_defaults(func=cmd_plan)


def _add_model_flags(parser: argparse.ArgumentParser, batch: bool = True) -> None:
    if batch:
        parser.add_argument("--batch", type=int,
                            help="batch size (default: an ONNX graph's static batch, else 32)")
    parser.add_argument("--input", help="input CxHxW, e.g. 3x224x224, or CxDxHxW for a video "
                                        "model (default: what the model says, else 3x224x224; "
                                        "needed for ONNX graphs whose input size is symbolic)")
    parser.add_argument("--name", help="suite name (default: from the source)")


def add_run_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument("--model", dest="source", help="import this model (as `convbench import` "
                                                    "does) and run its layers")
    _add_model_flags(run, batch=False)     # run has --batch already
