"""Where a `convbench run` process first imports torch (issue 38: the planning process should
not; a worker does, for torch_gpu). Prints the import's stack in each process that imports it,
spawned workers included (they import this file as __mp_main__ and so install the hook too).
    python3 evidence/studies/first_torch_import.py RUN-ARGS..."""
import builtins
import os
import sys
import traceback

_original = builtins.__import__


def _hooked(name, *args, **kwargs):
    if name == "torch" and "torch" not in sys.modules:
        builtins.__import__ = _original
        print(f"== pid {os.getpid()} ({__name__}) imports torch first here:", file=sys.stderr)
        traceback.print_stack(limit=16)
    return _original(name, *args, **kwargs)


builtins.__import__ = _hooked

if __name__ == "__main__":
    from harness.cli import main
    sys.argv = ["convbench", "run", *sys.argv[1:]]
    main()
