"""Where FFT convolution starts to beat im2col (and oneDNN), from a results file of
suites/large_kernel.toml (5x5 to 11x11 kernels, stride 1):

    .venv/bin/python evidence/studies/fft_crossover.py evidence/runs/large_kernel-cpu-DATE.parquet

Prints, per layer and direction, the verified medians of cpu:im2col, cpu:fft, cpu:direct and
torch_cpu and fft's ratio to im2col, then for each shape family and direction the smallest kernel
size from which FFT is faster than im2col at every larger size measured ("none": never).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from harness import store  # noqa: E402
from harness.analysis import verified  # noqa: E402

ALGORITHMS = ["cpu:im2col", "cpu:fft", "cpu:direct", "torch_cpu"]


def medians(df: pd.DataFrame) -> pd.DataFrame:
    ok = verified(df).assign(name=lambda d: d.backend.where(d.backend == "torch_cpu",
                                                            d.backend + ":" + d.algorithm))
    ok = ok[ok.name.isin(ALGORITHMS)]
    table = ok.pivot_table(index=["in_channels", "in_h", "kernel_h", "direction"],
                           columns="name", values="median_ms", aggfunc="min")
    return table.assign(fft_vs_im2col=table["cpu:fft"] / table["cpu:im2col"])


def crossover(ratio: pd.Series) -> str:
    """The smallest kernel from which every larger one has fft faster than im2col."""
    kernels = sorted(ratio.index)
    from_k = None
    for k in reversed(kernels):
        if ratio[k] < 1:
            from_k = k
        else:
            break
    return "none" if from_k is None else f"{from_k}x{from_k}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    args = parser.parse_args()
    table = medians(store.load(args.results))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(3).to_string())
    for (channels, size, direction), part in table.groupby(
            level=["in_channels", "in_h", "direction"]):
        ratio = part["fft_vs_im2col"].droplevel(["in_channels", "in_h", "direction"])
        print(f"{channels} channels {size}x{size} {direction}: FFT faster than im2col from "
              f"{crossover(ratio.dropna())}")


if __name__ == "__main__":
    main()
