"""Summarise the per-process profiles that profile_workers/sitecustomize.py wrote: for each
process its total time and the functions with the most own time and the most cumulative time.
    python evidence/studies/profile_summary.py DIR [TOP]"""
import glob
import io
import os
import pstats
import sys


def main(folder: str, top: int = 35) -> None:
    for path in sorted(glob.glob(os.path.join(folder, "*.prof"))):
        stats = pstats.Stats(path)
        print(f"==== {os.path.basename(path)}: {stats.total_tt:.1f} s profiled")
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(path, stream=text).sort_stats(key).print_stats(top)
            body = text.getvalue()
            print(f"-- by {key}")
            print(body[body.find("ncalls"):])


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
