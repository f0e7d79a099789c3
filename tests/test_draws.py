"""Test data drawn on several cores (harness/draws.py): the values depend on the seed and the
shape alone, never on the number of threads that drew them."""
from __future__ import annotations

import numpy as np

from harness import draws, reference
from harness.problem import ConvProblem


def _drawn(monkeypatch, cores: int, shape=(3, draws.BLOCK + 17), seed: int = 5):
    monkeypatch.setattr(draws, "available_cores", lambda: cores)
    return draws.normal(np.random.SeedSequence(seed), shape, lambda b: np.round(b * 4) / 4)


def test_the_values_are_the_same_on_one_core_and_on_many(monkeypatch):
    one, many = _drawn(monkeypatch, 1), _drawn(monkeypatch, 8)
    assert one.shape == (3, draws.BLOCK + 17) and np.array_equal(one, many)
    assert np.all(one * 4 == np.round(one * 4))                  # every block transformed
    assert 0.98 < one.std() < 1.02 and abs(one.mean()) < 0.01
    blocks = one.reshape(-1)[: 3 * draws.BLOCK].reshape(3, -1)
    assert not np.array_equal(blocks[0], blocks[1])              # each block its own stream
    assert not np.array_equal(one, _drawn(monkeypatch, 8, seed=6))


def test_a_problems_tensors_differ_and_repeat_for_the_same_seed():
    problem = ConvProblem(2, 4, 6, 6, 4, 3, 3, name="p")
    first, again = reference.make_data(problem, "bf16"), reference.make_data(problem, "bf16")
    assert np.array_equal(first.x, again.x) and np.array_equal(first.dy, again.dy)
    assert not np.array_equal(first.x.reshape(-1)[:16], first.dy.reshape(-1)[:16])
    as_bf16 = first.x.astype(np.float32).view(np.uint32) & 0xFFFF
    assert not as_bf16.any()                                     # rounded to bf16


def test_a_cap_on_threads_leaves_the_values_alone(monkeypatch):
    pools: list[int] = []
    real = draws.ThreadPoolExecutor
    monkeypatch.setattr(draws, "ThreadPoolExecutor", lambda n: pools.append(n) or real(n))
    many = _drawn(monkeypatch, 8, shape=(3 * draws.BLOCK,))
    with draws.at_most(2):
        capped = _drawn(monkeypatch, 8, shape=(3 * draws.BLOCK,))
    assert np.array_equal(many, capped) and pools == [3, 2]
