"""Profiles every Python process of a run, worker processes included (issue 39: where the
legacy sweep's time goes outside the rows' own stages). Put this folder first on PYTHONPATH and
set CONVBENCH_PROFILE_DIR; each process writes DIR/<pid>.prof when it ends (a spawned worker
through multiprocessing's finalizers, which run before its os._exit; the main process at exit).
Read them with evidence/studies/profile_summary.py."""
import os

_where = os.environ.get("CONVBENCH_PROFILE_DIR")
if _where:
    import atexit
    import cProfile
    import multiprocessing.util

    _profile = cProfile.Profile()
    _done = []

    def _dump() -> None:
        if _done:
            return
        _done.append(True)
        _profile.disable()
        os.makedirs(_where, exist_ok=True)
        _profile.dump_stats(os.path.join(_where, f"{os.getpid()}.prof"))

    atexit.register(_dump)
    multiprocessing.util.Finalize(None, _dump, exitpriority=100)
    _profile.enable()
