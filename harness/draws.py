"""Standard-normal test data drawn on every core the process may use.

One generator stream per fixed-size block, each seeded from the tensor's own SeedSequence, so
the values depend on the seed and the shape alone, never on how many threads drew them. NumPy's
generator and ufuncs release the GIL while they fill a block. Drawn on one thread, ResNet-50's
tensors cost ~54 ms per 6.4 M values on an H100 host (a profile of the legacy sweep), paid for
every problem and precision by each of a point's two timing processes: about 15% of the sweep
(issue 39).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from harness.threads import available_cores

BLOCK = 1 << 20    # values a stream draws: large enough that threads pay off, fixed for repeats
_cap: list[int] = []    # at_most's limits, innermost last


@contextmanager
def at_most(threads: int) -> Iterator[None]:
    """Draw on at most `threads` threads inside the block (a worker drawing ahead while its
    sibling times the GPU leaves it cores). The values do not depend on it."""
    _cap.append(threads)
    try:
        yield
    finally:
        _cap.pop()


def normal(seed: np.random.SeedSequence, shape: tuple[int, ...],
           transform: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """float64 standard-normal values of `shape`, each block passed through `transform` (an
    elementwise function: scaling, rounding to a precision) as it is drawn."""
    out = np.empty(math.prod(shape), dtype=np.float64)
    blocks = max(1, math.ceil(out.size / BLOCK))
    streams = seed.spawn(blocks)

    def fill(i: int) -> None:
        block = out[i * BLOCK:(i + 1) * BLOCK]
        np.random.Generator(np.random.PCG64(streams[i])).standard_normal(out=block)
        if transform is not None:
            block[...] = transform(block)

    workers = min(blocks, available_cores(), *_cap[-1:])
    if workers == 1:
        for i in range(blocks):
            fill(i)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fill, range(blocks)))
    return out.reshape(shape)
