"""The float64 recurrent oracle (harness/rnn/reference.py) before and after a change, forward and
backward on a few recurrent layers, in interleaved rounds, with the two results compared.

Not a test: a script whose printed table goes into the diary with the machine it ran on.

    .venv/bin/python evidence/studies/rnn_oracle_speed.py [--before COMMIT] [--rounds 5]
        [--gpu]

"after" is the working tree's reference.py, "before" the file at --before (default HEAD) loaded
from git under another name (evidence/studies/_before.py). Each round times one forward and
backward pass of each, alternating which goes first. --gpu runs both on CuPy (the way the oracle
checks GPU rows) and synchronizes before reading the clock.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

from _before import module_at
from harness.rnn import oracle
from harness.rnn import reference as after
from harness.rnn.problem import RnnProblem

# (cell, hidden, batch, steps): a DeepBench-like spread, small enough for a 2-core VM
LAYERS = [("gru", 512, 32, 375), ("lstm", 512, 64, 25), ("lstm", 256, 16, 150),
          ("rnn_relu", 1024, 32, 50)]


def _on_device(data, xp):
    """The test data's arrays as CuPy's (None stays None)."""
    def on(a):
        return None if a is None else xp.asarray(a)
    weights = [[{k: on(v) for k, v in w.items()} for w in layer] for layer in data.weights]
    return replace(data, x=on(data.x), h0=on(data.h0), c0=on(data.c0), dy=on(data.dy),
                   dh_n=on(data.dh_n), dc_n=on(data.dc_n), weights=weights)


def _pass(module, problem, data, xp) -> tuple:
    fwd = module.forward(problem, data.x, data.h0, data.c0, data.weights, xp)
    return fwd.y, *module.backward(problem, fwd, data.weights, data.dy, data.dh_n, data.dc_n, xp)


def _flat(result, xp) -> list:
    out = []
    for part in result:
        if isinstance(part, list):
            out += [a for layer in part for w in layer for a in w.values()]
        elif part is not None:
            out.append(part)
    return [xp.asarray(a) for a in out]


def _relative(a: list, b: list, xp) -> float:
    return max(float(xp.linalg.norm(x - y) / max(float(xp.linalg.norm(y)), 1e-300))
               for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="HEAD")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gpu", action="store_true")
    args = ap.parse_args()
    before = module_at("harness/rnn/reference.py", "reference_before", args.before)
    if args.gpu:
        import cupy as xp
        sync = xp.cuda.Stream.null.synchronize
    else:
        xp, sync = np, (lambda: None)
    print(f"before = {args.before}, after = the working tree; {args.rounds} rounds; "
          f"{'cupy' if args.gpu else 'numpy'}; median seconds of one forward + backward")
    print(f"{'layer':28} {'before':>8} {'after':>8} {'after/before':>22} {'max rel diff':>13}")
    for cell, hidden, batch, steps in LAYERS:
        problem = RnnProblem(cell=cell, input_size=hidden, hidden_size=hidden, seq_len=steps,
                             batch=batch)
        data = oracle.make_data(problem, "fp32")
        if args.gpu:
            data = _on_device(data, xp)
        times = {"before": [], "after": []}
        results = {}
        for r in range(args.rounds):
            order = (("before", before), ("after", after))[::1 if r % 2 == 0 else -1]
            for name, module in order:
                sync()
                start = time.perf_counter()
                results[name] = _pass(module, problem, data, xp)
                sync()
                times[name].append(time.perf_counter() - start)
        ratios = sorted(a / b for a, b in zip(times["after"], times["before"]))
        diff = _relative(_flat(results["after"], xp), _flat(results["before"], xp), xp)
        label = f"{cell} h{hidden} n{batch} t{steps}"
        print(f"{label:28} {statistics.median(times['before']):8.3f} "
              f"{statistics.median(times['after']):8.3f} "
              f"{statistics.median(ratios):6.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]"
              f"{diff:13.1e}")


if __name__ == "__main__":
    main()
