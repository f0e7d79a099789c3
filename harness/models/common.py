"""What the importers (torch_models.py, onnx_models.py) and import_model share: a module of its
own, so that the importers, which harness.models loads lazily, never import harness.models back."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.problem import ConvProblem

# The input a model gets when the user gives none and the model does not say (torchvision's
# classification models all take 3x224x224).
DEFAULT_INPUT = (3, 224, 224)
# The batch when --batch is not given and the model fixes none (a torch model; an ONNX graph
# whose batch dimension is symbolic). A graph exported with a static batch keeps it.
DEFAULT_BATCH = 32


def conv_problem(batch: int, in_channels: int, spatial: Sequence[int], out_channels: int,
                 kernel: Sequence[int], strides: Sequence[int], begins: Sequence[int],
                 ends: Sequence[int], dilations: Sequence[int], groups: int,
                 name: str) -> ConvProblem:
    """A 2-D or 3-D convolution from per-axis values (depth first where there is one): the one
    place the importers map axes onto ConvProblem's fields. A 2-D problem keeps the flat depth
    defaults. ProblemError propagates for the caller to name its source."""
    depth = {} if len(spatial) == 2 else dict(
        in_d=spatial[0], kernel_d=kernel[0], stride_d=strides[0], pad_front=begins[0],
        pad_back=ends[0], dilation_d=dilations[0])
    return ConvProblem(batch, in_channels, spatial[-2], spatial[-1], out_channels, kernel[-2],
                       kernel[-1], strides[-2], strides[-1], begins[-2], begins[-1], ends[-2],
                       ends[-1], dilations[-2], dilations[-1], int(groups), name=name, **depth)


class ModelError(ValueError):
    """A model that cannot be imported; the one-line message names the value and why."""


@dataclass(frozen=True)
class Capture:
    """What one capture of a model found, before merging.

    convs: each 2-D or 3-D convolution in network order as a ConvProblem whose `name` is its
      module path (e.g. "layer1.0.conv2"; ONNX: the node name, else "conv<index>") and
      multiplicity 1; the batch is whatever the capture used (import_model sets the real one).
    skipped: convolutions convbench cannot run, by kind ("Conv1d", "ConvTranspose2d", ...) -> count.
    method: how the shapes were found ("torch.export", "forward hooks", "onnx shape inference").
    batch: the batch the model itself fixes (an ONNX input's static batch dimension), else None.
    """
    convs: tuple[ConvProblem, ...]
    skipped: dict[str, int] = field(default_factory=dict)
    method: str = ""
    batch: int | None = None
