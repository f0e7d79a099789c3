"""Layer shapes read from a real model, written as a suite file `convbench run` takes.

A SOURCE names a model: `torchvision:NAME`, `timm:NAME`, `module.path:callable` (a user's own
`nn.Module`) or a path to an `.onnx` file. Capturing it (torch_models.py, onnx_models.py) gives
every 2-D and 3-D convolution in network order, at the input size it really sees there, plus a
count of the convolutions convbench cannot run (1-D, transposed, quantized), which are listed,
never dropped silently. Identical shapes are then merged into one layer with a multiplicity,
named by the module path of the first (`layer1.0.conv2*3`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from harness.models.common import DEFAULT_BATCH, DEFAULT_INPUT, Capture, ModelError
from harness.problem import ConvProblem

__all__ = ["DEFAULT_BATCH", "DEFAULT_INPUT", "Capture", "ImportedModel", "ModelError",
           "default_name", "import_model", "merge", "parse_input", "skipped_text"]


@dataclass(frozen=True)
class ImportedModel:
    name: str                     # suite name: letters, digits, _ - .
    source: str                   # what the user typed
    batch: int
    layers: tuple[ConvProblem, ...]   # merged: unique shapes with multiplicity, network order
    convs: int                    # 2-D and 3-D convolutions found, before merging
    skipped: dict[str, int]
    method: str
    batch_from: str = "--batch"   # where `batch` came from, said in the suite file


def import_model(source: str, batch: int | None = None,
                 input_chw: tuple[int, ...] | None = None,
                 name: str | None = None) -> ImportedModel:
    """Capture `source` and merge its convolutions; ModelError on bad input. `batch` None: the
    model's own static batch if it has one, else DEFAULT_BATCH."""
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ModelError(f"--batch {batch!r}: expected a positive integer")
    capture = _capture(source, input_chw)
    if not capture.convs:
        skipped = f" (only {skipped_text(capture.skipped)})" if capture.skipped else ""
        raise ModelError(f"{source}: the model has no 2-D or 3-D convolution{skipped}")
    if batch is not None:
        batch_from = "--batch"
    elif capture.batch is not None:
        batch, batch_from = capture.batch, "the model's static input batch"
    else:
        batch, batch_from = DEFAULT_BATCH, "the default"
    layers = merge(tuple(p.with_batch(batch) for p in capture.convs))
    return ImportedModel(name or default_name(source), source, batch, layers,
                         len(capture.convs), dict(capture.skipped), capture.method, batch_from)


def _capture(source: str, input_chw: tuple[int, ...] | None) -> Capture:
    if source.lower().endswith(".onnx") or Path(source).is_file():
        from harness.models import onnx_models
        return onnx_models.capture(Path(source), input_chw)
    if ":" not in source:
        raise ModelError(f"model {source!r}: expected torchvision:NAME, timm:NAME, "
                         f"module.path:callable or a path to an .onnx file")
    from harness.models import torch_models
    return torch_models.capture(source, input_chw)


def merge(convs: tuple[ConvProblem, ...]) -> tuple[ConvProblem, ...]:
    """Identical shapes as one layer, in order of first appearance, counted by multiplicity and
    named by the first one's path."""
    firsts: dict[ConvProblem, ConvProblem] = {}
    counts: dict[ConvProblem, int] = {}
    for conv in convs:
        shape = replace(conv, name="", multiplicity=1)
        firsts.setdefault(shape, conv)
        counts[shape] = counts.get(shape, 0) + conv.multiplicity
    return tuple(replace(first, multiplicity=counts[shape]) for shape, first in firsts.items())


def default_name(source: str) -> str:
    """A suite name from a source: `torchvision:resnet50` -> resnet50, `my.pkg:build` -> build,
    `models/net.onnx` -> net."""
    stem = Path(source).stem if source.lower().endswith(".onnx") else source.rsplit(":", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("_.-") or "model"


def skipped_text(skipped: dict[str, int]) -> str:
    """"2 Conv3d, 1 ConvTranspose2d", or "none": what an import left out, said the same way in
    the suite file and the command's output."""
    return ", ".join(f"{count} {kind}" for kind, count in sorted(skipped.items())) or "none"


def parse_input(text: str) -> tuple[int, ...]:
    """`--input CxHxW` (e.g. 3x224x224) or, for a model of 3-D convolutions, CxDxHxW (a video
    clip: 3x16x112x112) as positive integers; ModelError otherwise."""
    parts = text.lower().replace("*", "x").split("x")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ModelError(f"--input {text!r}: expected CxHxW such as 3x224x224, or CxDxHxW such "
                         f"as 3x16x112x112, positive integers")
    return tuple(int(p) for p in parts)
