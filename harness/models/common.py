"""What the importers (torch_models.py, onnx_models.py) and import_model share: a module of its
own, so that the importers, which harness.models loads lazily, never import harness.models back."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.problem import ConvProblem

# The input a model gets when the user gives none and the model does not say (torchvision's
# classification models all take 3x224x224).
DEFAULT_INPUT = (3, 224, 224)
# The batch when --batch is not given and the model fixes none (a torch model; an ONNX graph
# whose batch dimension is symbolic). A graph exported with a static batch keeps it.
DEFAULT_BATCH = 32


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
