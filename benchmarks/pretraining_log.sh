#!/usr/bin/env bash
# Build the source log of the learning benchmarks: seven matmul and convolution shapes, 128 trials
# each, none of them the shapes `autosched bench search` then searches (matmul 512^3 and
# conv2d_nhwc 56x56x64->64 by default).
#   benchmarks/pretraining_log.sh [DB_URL]     (default: sqlite:///pretrain.db)
set -euo pipefail
db="${1:-sqlite:///pretrain.db}"
shapes=(
  "matmul -p M=256 -p N=256 -p K=256"
  "matmul -p M=128 -p N=768 -p K=256"
  "matmul -p M=384 -p N=256 -p K=640"
  "batch_matmul"
  "conv2d_nhwc -p H=28 -p W=28 -p CI=128 -p CO=128"
  "conv2d_nhwc -p H=14 -p W=14 -p CI=256 -p CO=256"
  "conv2d_nhwc -p H=56 -p W=56 -p CI=32 -p CO=32"
)
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086  # each shape is a workload and its -p options
  autosched tune $shape --trials 128 --batch 32 --seed 7 --cold --db "$db" --json
done
