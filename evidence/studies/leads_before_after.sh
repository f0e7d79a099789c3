#!/usr/bin/env bash
# Issue 39, stop 64 (one H200): the two race leads of stop 63 (a first replayed sample far over the
# bar ends the race; a long verified call's probe is one held call) before and after, on the five
# efficientnet_b0 layers whose rows held most of both leads' time in the stop-63 run (depthwise
# features.4.1/6.1 block.1.0; 1x1 features.2.0.block.0.0, features.5.1.block.0.0 and the SE fc1
# features.2.1.block.2.fc1), fp16, cudnn + cudnn_graph + torch_gpu, via before_after.sh (each run
# its own empty cache; the after tree first, so it pays the fresh machine's kernel compiles).
# .before/ holds the earlier tree (git archive BEFORE harness suites pyproject.toml).
#   bash evidence/studies/leads_before_after.sh OUT CAP_S
set -u
out=${1:?usage: leads_before_after.sh OUT CAP_S}; cap=${2:?}
layers=features.4.1.block.1.0,features.6.1.block.1.0,features.2.0.block.0.0
layers=$layers,features.5.1.block.0.0,features.2.1.block.2.fc1
bash evidence/studies/before_after.sh "$out" "$cap" --model torchvision:efficientnet_b0 \
    --layer "$layers" --backend cudnn,cudnn_graph,torch_gpu --precision fp16 --layout NHWC \
    --batch 32
