"""The questions asked of a results frame, answered once for the CLI's table, the report and
the exports: the point key, verified rows, the best per point and the per-GPU split
(points.py); the policies and the oracle (policies.py); who picks the fastest algorithm
(selection.py); what deterministic mode costs (determinism.py); how likely a rerun picks another
algorithm, and near-ties (stability.py); the network table (networks.py); what fusing an
epilogue saves (fusion.py); 3-D layers per backend (depth.py); what fp8 and int8 buy over fp16
(quantized.py). Pure pandas (and NumPy for the bootstrap)."""
from harness.analysis.points import (ASKED_KEYS, GPU, LAYER_KEYS, NETWORK_KEYS, POINT_KEYS,
                                     best_per_point, by_gpu, layer_labels, ranked, status_counts,
                                     verified, with_candidate)

__all__ = ["ASKED_KEYS", "GPU", "LAYER_KEYS", "NETWORK_KEYS", "POINT_KEYS", "best_per_point",
           "by_gpu", "layer_labels", "ranked", "status_counts", "verified", "with_candidate"]
