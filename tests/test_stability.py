"""Pick stability (harness/analysis/stability.py) and the tie-aware regret it gives the selection
analysis, on hand-made frames whose answers are known without the code."""
from __future__ import annotations

import numpy as np
import pytest

from harness import stats
from harness.analysis import selection, stability

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import frame, row
except ImportError:
    from tests.report_fixtures import frame, row

# 16 samples spread +-2% around 1: a typical H100 row at the sample floor
SPREAD = [1.0 + 0.02 * x for x in np.linspace(-1, 1, 16)]


def _timed(algorithm: str, scale: float, layer: str = "L1", noise=None, **extras) -> dict:
    samples = [scale * s for s in SPREAD]
    return row(layer=layer, algorithm=algorithm, ms=float(np.median(samples)),
               samples_ms=samples, noise=noise, **extras)


def test_identical_sample_distributions_are_a_near_tie():
    # no noise column: the bootstrap alone must find the coin toss
    points = stability.point_stability(frame(_timed("a", 1.0), _timed("b", 1.0)))
    point = points.iloc[0]
    assert 0.3 < point["p_change"] < 0.7, point["p_change"]
    assert bool(point["near_tie"]) and point["tied"] == 2
    assert point["tie_candidates"] == "cudnn:a, cudnn:b"


def test_a_twice_as_fast_candidate_is_no_tie():
    points = stability.point_stability(frame(_timed("slow", 2.0), _timed("fast", 1.0)))
    point = points.iloc[0]
    assert point["best_candidate"] == "cudnn:fast" and point["runner_candidate"] == "cudnn:slow"
    assert point["p_change"] == 0.0 and point["tied"] == 1 and not bool(point["near_tie"])


def test_medians_within_their_noise_tie_and_outside_do_not():
    # constant samples: the bootstrap can never reorder them, so only the noise rule speaks;
    # 1% apart with 1% standard error each: within 2 x sqrt(2) x 1%; with 0.1% each: not
    def pair(noise: float):
        return frame(row(algorithm="a", ms=1.0, samples_ms=[1.0] * 8, noise=noise),
                     row(algorithm="b", ms=1.01, samples_ms=[1.01] * 8, noise=noise))
    assert bool(stability.point_stability(pair(0.01)).iloc[0]["near_tie"])
    assert not bool(stability.point_stability(pair(0.001)).iloc[0]["near_tie"])


def test_summary_gives_the_share_of_near_tie_layer_directions():
    df = frame(_timed("a", 1.0), _timed("b", 1.0),                      # L1: a coin toss
               _timed("a", 1.0, layer="L2"), _timed("b", 2.0, layer="L2"),
               _timed("a", 1.0, precision="fp16"), _timed("b", 2.0, precision="fp16"))
    summary = stability.stability_summary(stability.point_stability(df))
    fp32, fp16 = (summary.set_index("effective_precision").loc[p] for p in ("fp32", "fp16"))
    assert fp32["points"] == 2 and fp32["near_ties"] == 1
    assert fp32["near_tie_pct"] == pytest.approx(50.0)
    assert fp16["points"] == 1 and fp16["near_ties"] == 0 and fp16["near_tie_pct"] == 0.0


def test_tie_aware_regret_forgives_a_coin_toss_but_not_a_slower_pick():
    # L1: the heuristic's pick is 3% slower than the oracle in this sample, beyond the 1%
    # slack, but the two sample sets overlap: a coin toss. L2: its pick is twice as slow.
    wide = [1.0 + 0.2 * x for x in np.linspace(-1, 1, 16)]
    df = frame(row(algorithm="a", ms=float(np.median(wide)), samples_ms=wide,
                   heuristic_pick=False),
               row(algorithm="b", ms=1.03 * float(np.median(wide)),
                   samples_ms=[1.03 * s for s in wide], heuristic_pick=True),
               _timed("a", 1.0, layer="L2", heuristic_pick=False),
               _timed("b", 2.0, layer="L2", heuristic_pick=True))
    sel = selection.selection(df).set_index("layer")
    assert sel.loc["L1", "regret"] == pytest.approx(1.03)
    assert not bool(sel.loc["L1", "picks_oracle"])
    assert bool(sel.loc["L1", "ties_oracle"]) and sel.loc["L1", "tie_regret"] == 1.0
    assert not bool(sel.loc["L2", "ties_oracle"])
    assert sel.loc["L2", "tie_regret"] == pytest.approx(2.0)
    summary = selection.policy_summary(selection.selection(df)).iloc[0]
    assert summary["picks_oracle_pct"] == 0.0 and summary["picks_tie_pct"] == 50.0
    assert summary["geomean_tie_regret"] == pytest.approx(2.0 ** 0.5)


def test_bootstrap_medians_are_seeded_and_stay_inside_the_samples():
    samples = [[1.0, 2.0, 3.0], [5.0] * 4, [], [0.5, 0.7, 0.9]]
    first = stats.bootstrap_medians(samples, 200, seed=3)
    assert first.shape == (4, 200)
    np.testing.assert_array_equal(first, stats.bootstrap_medians(samples, 200, seed=3))
    assert np.isnan(first[2]).all() and (first[1] == 5.0).all()
    assert first[0].min() >= 1.0 and first[0].max() <= 3.0 and len(set(first[0])) > 1
