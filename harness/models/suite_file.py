"""An imported model as suite text (TOML) that `convbench run` takes, and back again."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from harness.models import ImportedModel, skipped_text
from harness.problem import ConvProblem
from harness.problem_text import parse_benchdnn, to_benchdnn

# A training step runs every direction; the user narrows with --direction.
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")


def suite_text(model: ImportedModel, command: str = "") -> str:
    """The suite file for `model`; its comments say where it came from and what was left out."""
    total = sum(p.multiplicity for p in model.layers)
    description = (f"{model.name} from {model.source}: {len(model.layers)} unique conv shapes "
                   f"({total} layers), batch {model.batch}")
    header = [
        f"# Imported from {model.source} ({model.method}) on "
        f"{datetime.now(UTC):%Y-%m-%d}" + (f" by `{command}`" if command else ""),
        f"# {total} convolutions ({_ranks(model)}), {len(model.layers)} unique shapes; `*K` in "
        f"a name counts how often the shape occurs (named by its first module).",
        f"# Batch {model.batch}: {model.batch_from}.",
        f"# Not imported (convbench runs no 1-D, transposed or quantized convolution): "
        f"{skipped_text(model.skipped)}",
        "",
        f"name = {_string(model.name)}",
        f"description = {_string(description)}",
        "",
        "layers = [",
        *[f"  {_layer(p)}," for p in model.layers],
        "]",
        "",
        "[sweep]",
        f"batch = {model.batch}",
        f"directions = {json.dumps(list(DIRECTIONS))}",
    ]
    return "\n".join(header) + "\n"


def _ranks(model: ImportedModel) -> str:
    """"2-D", "3-D" or "2-D and 3-D": which kinds of convolution the layers are."""
    ranks = sorted({"3-D" if p.is_3d else "2-D" for p in model.layers})
    return " and ".join(ranks)


def _layer(problem: ConvProblem) -> str:
    """A benchdnn string when it says the whole shape, else an inline table of ConvProblem's
    fields (benchdnn implies the end padding from the output size, which can lose it)."""
    text = to_benchdnn(problem)
    if _round_trips(text, problem):
        return _string(text)
    fields = {name: getattr(problem, name) for name in problem.__dataclass_fields__}
    return "{ " + ", ".join(f"{k} = {_string(v) if isinstance(v, str) else v}"
                            for k, v in fields.items()) + " }"


def _round_trips(text: str, problem: ConvProblem) -> bool:
    try:
        return replace(parse_benchdnn(text), name=problem.name,
                       multiplicity=problem.multiplicity) == problem
    except ValueError:
        return False


def _string(value: str) -> str:
    """A TOML basic string (JSON's escaping is valid TOML for these)."""
    return json.dumps(value, ensure_ascii=False)
