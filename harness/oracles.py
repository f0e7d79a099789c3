"""Which oracle checks a problem's outputs: harness/reference.py for a convolution,
harness/rnn/oracle.py for a recurrent layer (harness/families.py). Both offer make_data,
reference and term_scales with the same signatures."""
from __future__ import annotations

from types import ModuleType
from typing import Any

from harness import families, reference
from harness.rnn import oracle as rnn_oracle


def of(problem: Any) -> ModuleType:
    """The module that makes the test data of `problem` and computes its exact results."""
    return rnn_oracle if problem.kind == families.RNN else reference
