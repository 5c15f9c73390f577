#!/usr/bin/env bash
# Issue 36's position lever: calibration windows as long as the prompts. Qwen2.5-Coder-0.5B split 12, the lagged
# maps (`fit --lag-keys`: layers 16-23 read the previous row, as lag.sh's `--lag-gain 0`) from 8192-token windows
# (32768 tokens, 4 windows of 8192) instead of 2048-token ones, on the 8K frontier's 24 needle items, paired with the 2048-token lagged
# maps' records (lag.sh) and the frontier's. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/windowed-maps/results/lag-qwen0.5b-s12-w8192
L=experiments/windowed-maps/results/lag-qwen0.5b-s12
F=bench/results/frontier-qwen2.5-coder-0.5b-8k
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
mkdir -p $R/fit $R/needles-8k/items
[ -f $R/fit/s12.gguf ] || .venv/bin/ridgefill fit "$M" --split 12 --tokens 32768 --window 8192 --threads "$THREADS" \
  --lag-keys -o $R/fit/s12.gguf > $R/fit-s12.txt
for f in $F/eval/items/needle-*-N8192.json; do ln -sfn "../../../../../../$f" "$R/needles-8k/items/$(basename "$f")"; done
.venv/bin/ridgefill eval needle --model $R/fit/s12.gguf --split 12 --sinks 4 --tail 1024 --lengths 8192 \
  --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $R/needles-8k \
  --needle-tasks single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number
.venv/bin/python experiments/fit-fixes/compare_stores.py --split 12 --ref $L/needles-8k:ridge $F/eval $R/needles-8k:ridge
