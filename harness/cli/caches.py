"""What a run remembers from earlier runs on the same GPU and libraries, and says so: the engines
that hung (harness/hang_cache.py) and the graph API's plan labels (harness/plan_cache.py).
`--no-cache` turns both off."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.cli.common import say, warn

if TYPE_CHECKING:
    from harness.plan_cache import CacheFile


def plan_cache_for(env: dict[str, Any]) -> CacheFile:
    """The run's plan-label file for its workers, after saying
    what it holds or why an unusable one was set aside."""
    from harness import plan_cache
    remembered, note = plan_cache.check(env)
    if note:
        warn(f"note: plan cache {note}")
    if remembered:
        say(f"{remembered} graph-API plan set(s) labelled in earlier runs on this GPU and these "
            f"libraries ({plan_cache.path(env)}): their plans are still asked of the "
            "heuristics, their notes and ranks are not (--no-cache asks again)")
    return plan_cache.for_run(env)


def remembered_hangs(env: dict[str, Any]) -> set:
    from harness import hang_cache, worker
    remembered, note = hang_cache.load(env)
    if note:
        warn(f"note: hang cache {note}")
    if remembered:
        say(f"{len(remembered)} engine(s) hung in earlier runs on this GPU and these libraries "
            f"({hang_cache.path(env)}): their plans get a {worker.HUNG_ENGINE_TIMEOUT_S:.0f} s "
            "cap from the start (--no-cache forgets them)")
    return remembered


def remember_hangs(env: dict[str, Any], remembered: set, seen: set) -> None:
    from harness import hang_cache
    if seen <= remembered:
        return
    try:
        where = hang_cache.save(env, remembered | seen)
    except OSError as err:
        warn(f"note: could not remember the engines that hung ({err}); the next run waits "
             "out their caps again")
        return
    say(f"remembered {len(seen - remembered)} engine(s) that hung, for the next run on this "
        f"GPU and these libraries: {where}")
