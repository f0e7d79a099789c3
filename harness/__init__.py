"""convbench: which convolution algorithm to use for each layer, how fast and how accurate."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["load", "ConvProblem", "__version__"]

from harness.problem import ConvProblem


def load(path):
    """Results (Parquet, CSV, a folder of them, or a killed run's journal) as a pandas DataFrame."""
    from harness.store import load as _load
    return _load(path)
