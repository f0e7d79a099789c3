"""What enumerating one point's graph-API plans costs (issue 39), piece by piece, on every layer
of the resnet50 suite: the candidate list in modes A+B+FALLBACK (what measuring needs), mode A
alone (the heuristic ranks), one list per numerical note (the notes), the behavior notes.
Enumeration runs before a group's first plan, outside every row's stage times.

    python evidence/studies/plan_set_cost.py [PRECISION LAYOUT] ...   (default fp16 NHWC fp32 NCHW)
"""
import sys
import time

from harness import backends
from harness.backends.cudnn.graph import HEURISTIC_MODES, NOTES
from harness.suite import load_suite
from harness.sweep import DIRECTIONS, Point, TimingOptions

args = sys.argv[1:] or ["fp16", "NHWC", "fp32", "NCHW"]
settings = list(zip(args[::2], args[1::2]))
session = backends.get("cudnn_graph").session()
totals: dict[str, float] = {}


def timed(name, call, *args):
    start = time.perf_counter()
    result = call(*args)
    totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
    return result


sets = 0
for precision, layout in settings:
    for problem in load_suite("resnet50").problems:
        for direction in DIRECTIONS:
            point = Point(problem, direction, precision, layout, "cudnn_graph", "engines", None,
                          TimingOptions())
            graph = timed("candidates A+B+FALLBACK", session._candidates, point,
                          HEURISTIC_MODES)
            count = graph.get_execution_plan_count()
            timed("mode A ranks", session._mode_a_ranks, point)
            for note in NOTES:
                timed(f"note {note}", session._plans_with_note, point, note)
            for index in range(count):
                timed("behavior notes", session._behavior, graph, index)
            timed("whole plan_set (fresh)", session._enumerate, point)
            sets += 1
print(f"{sets} plan sets ({', '.join(' '.join(s) for s in settings)}), seconds in all "
      f"and ms a plan set:")
for name, seconds in totals.items():
    print(f"  {name:28s} {seconds:8.2f} s  {seconds / sets * 1e3:8.1f} ms")
