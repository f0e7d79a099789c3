"""The flags that several `convbench` commands share: what to sweep and how (run, check, ab)
and how to judge a comparison (compare, check, ab)."""
from __future__ import annotations

import argparse

from harness.setup_budget import RNN_BUILD_BUDGET_S


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threshold", help="practical slowdown threshold, e.g. 5%% or 0.05 "
                                       "(default: the suite's, else 5%%)")
    p.add_argument("--layer-threshold", action="append", metavar="LAYER=PCT",
                   help="a threshold for one layer (repeatable)")
    p.add_argument("--suite-threshold",
                   help="threshold of the suite verdict on the geometric-mean ratio (default 3%%)")
    p.add_argument("--fail-on", default="slower", choices=["slower", "ambiguous", "never"],
                   help="exit 1 for: slower = a SLOWER row or suite, a BROKEN row or a MISSING "
                        "row (default); ambiguous = also an AMBIGUOUS row or suite; never = only "
                        "report")
    p.add_argument("--allow-missing", action="store_true",
                   help="do not exit 1 for MISSING rows (points verified in the baseline that "
                        "the candidate lacks or did not run: unsupported, over the workspace "
                        "limit, not tried), for a candidate meant to measure fewer points; "
                        "BROKEN rows still fail")
    p.add_argument("--alpha", type=float, default=0.002, help="significance level (0.002)")
    p.add_argument("--correction", default="bh", choices=["bh", "holm", "none"],
                   help="multiple-comparison control across rows (default bh)")
    p.add_argument("--allow-env-mismatch", action="store_true",
                   help="compare runs from different GPUs/drivers/libraries; marked in the report")
    p.add_argument("--report", help="also write the Markdown summary here")
    p.add_argument("--verdicts", help="write every row's verdict as CSV here")


def add_sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", help="comma list of backends (default: the suite's; with a GPU, "
                                     "cudnn,cudnn_graph,torch_gpu at fp32/tf32 NCHW and "
                                     "fp16/bf16 NHWC; naming backends, cpu included, runs the "
                                     "suite's precisions and layouts)")
    p.add_argument("--algorithm", help="comma list of algorithms (default: all of each backend)")
    p.add_argument("--direction", help="comma list of fwd, bwd_data, bwd_filter")
    p.add_argument("--precision",
                   help="comma list of fp32, tf32, fp16, bf16, fp64, fp8_e4m3, fp8_e5m2, int8")
    p.add_argument("--layout", help="comma list of NCHW, NHWC")
    p.add_argument("--batch", type=int, help="override every layer's batch size")
    p.add_argument("--layer", action="append",
                   help="comma list of layer names to run (default: all); may be repeated")
    p.add_argument("--workspace-limit", help="comma list of limits, e.g. 0,64MiB,unlimited")
    p.add_argument("--budget-ms", type=float, help="time budget per point in milliseconds")
    p.add_argument("--threads", help="comma list of thread counts for CPU points, e.g. 1,2,all "
                                     "(default: all cores; recorded in the `threads` column)")
    p.add_argument("--op", help="comma list of conv (default), conv_bias, conv_bias_relu, "
                                "conv_bias_add_relu: what follows the convolution in the timed "
                                "call; epilogues are forward-only (other directions run conv)")
    p.add_argument("--output-type", help="comma list of auto (default: each precision's own result "
                                    "type) and result precisions for fp8 (fwd: bf16, fp32, "
                                    "fp8_e4m3 / fp8_e5m2) and int8 (fwd: int8); 8-bit results "
                                    "are written scaled by a power of two")
    p.add_argument("--timing-mode", help="warm (default) or cold (caches flushed per sample)")
    p.add_argument("--gpu-timer", help="graph (default: replay a CUDA graph of the calls, kernel "
                                       "time) or stream (stream order, as eager frameworks run)")
    p.add_argument("--gpu-processes", type=int,
                   help="worker processes that share each GPU point's samples (default 2; 1 "
                        "in the GPU default, which answers 'which algorithm'): a "
                        "point's time can depend on the process it runs in, and a row that "
                        "shows that spread is not mistaken for a regression by compare")
    p.add_argument("--no-race", action="store_true",
                   help="time every candidate to the full sample floor; by default a graph-API "
                        "plan or a GPU backend's algorithm whose first four samples are all over "
                        "1.2x the fastest of its point so far stops there (stop_reason "
                        "raced_out): it cannot be the best")
    p.add_argument("--no-runoff", action="store_true",
                   help="decide each GPU point on its first measurement; by default the "
                        "candidates within 8%% of a point's fastest (each backend's two "
                        "fastest) are prepared afresh once more in each timing process and "
                        "timed again, since where their buffers land moves a ~10 us kernel "
                        "by up to 8%% (runoff_preparations); with --gpu-processes 2 or more "
                        "it does not run: each process gives every finalist a placement")
    p.add_argument("--plan-limit", type=int,
                   help="measure only each point's first N graph-API plans in the heuristics' "
                        "order (mode A's ranking first), as torch.backends.cudnn."
                        "benchmark_limit caps PyTorch's search (default: every plan; a "
                        "runtime-compiled fp8/int8 plan takes 0.4 s to build, up to 3 s); the run "
                        "says how many plans it left out")
    p.add_argument("--build-budget-s", type=float,
                   help="wait up to this many seconds for a run-time kernel build (cuDNN's "
                        "PERSIST_DYNAMIC RNN algorithm: 1-11 s a DeepBench layer, 52-115 s for "
                        "its LSTM of hidden 4096 on an H200) before its row is not_tried, naming "
                        f"it (default {RNN_BUILD_BUDGET_S:g})")
    p.add_argument("--cpu-rounds", type=int,
                   help="rounds that share each CPU point's samples (default 2), each with "
                        "fresh buffers and apart by the points that share its test data: the "
                        "run's own replicates, from which compare takes a noise floor that a "
                        "regression cannot raise")
