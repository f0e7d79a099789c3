"""The questions asked of a results frame, answered once for the CLI's table, the report and
the exports: settings and verified rows, the best per setting, the per-GPU split
(settings.py), and who picks the fastest algorithm (selection.py). Pure pandas."""
from harness.analysis.settings import (GPU, SETTING, best_per_setting, by_gpu, status_counts,
                                       verified)

__all__ = ["GPU", "SETTING", "best_per_setting", "by_gpu", "status_counts", "verified"]
