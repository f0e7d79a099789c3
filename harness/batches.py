"""How the runner (harness/runner.py) cuts a sweep's groups into batches, each measured in one go,
and what it tells a timing process of the batches to come (WorkerPool.prefetch)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import groupby, islice

from harness import backends
from harness.sweep import Point


def batches(all_groups: Iterable[list[Point]]) -> Iterator[list[list[Point]]]:
    """Consecutive CPU groups of one backend sharing test data (one problem at one precision:
    the executor's caches hold its data and references across the rounds) as one batch; on a
    GPU, consecutive groups of one point's candidates (one backend's algorithms of a problem,
    precision, layout and direction: they share test data and race each other) as one batch,
    sent to a worker process in one message."""
    def key(group: list[Point]) -> tuple:
        p = group[0]
        if is_on_gpu(p):
            return ("cuda", replace(p, algorithm="*", workspace_limit=None).point_id)
        return (p.backend, p.problem, p.precision, p.op)
    for _, batch in groupby(all_groups, key=key):
        yield list(batch)


def is_on_gpu(point: Point) -> bool:
    return backends.get(point.backend).device == "cuda"


# The batches after a point's whose setup a timing process starts ahead (Algorithm.ahead). At
# two (cudnn_rnn's batch is followed by torch_gpu's of the same layer) the LSTMs of hidden 2048
# still waited 2.5-5.0 s of their 6.3-9.5 s PERSIST_DYNAMIC builds on an H200 (stop 61's
# before/after); at four the build after next starts while the next one's layer is timed.
AHEAD_BATCHES = 4


def with_next(batches: Iterable[list[list[Point]]], count: int = AHEAD_BATCHES
               ) -> Iterator[tuple[list[list[Point]], list[list[list[Point]]]]]:
    """Each batch with the (up to `count`) batches after it."""
    batches = iter(batches)
    window = list(islice(batches, count + 1))
    while window:
        yield window[0], window[1:]
        window = window[1:] + list(islice(batches, 1))


def ahead_of(following: list[list[list[Point]]]) -> tuple[list[Point], list[Point]] | None:
    """What a timing process prefetches for the batches to come (WorkerPool.prefetch): the
    next one's first group, and the points of those on the GPU."""
    if not following or not is_on_gpu(following[0][0][0]):
        return None
    return following[0][0], [point for batch in following if is_on_gpu(batch[0][0])
                             for group in batch for point in group]
