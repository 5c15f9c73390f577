#!/usr/bin/env bash
# Qwen2.5-Coder-0.5B, 4K and 8K, split 12: the fork's lagged maps (fit --lag-gain 0: every layer the previous row
# helps at all reads it; the default 10 % gain picks none here) on the frontier's 24 needle items (item files
# linked, so the records pair with the frontier's exact, identity and per-row ridge through
# experiments/fit-fixes/compare_stores.py). Resumable: the fit is skipped when present, the eval resumes.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/windowed-maps/results/lag-qwen0.5b-s12
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
mkdir -p $R/fit
[ -f $R/fit/s12-lag.gguf ] || .venv/bin/ridgefill fit "$M" --split 12 --tokens 16384 --threads "$THREADS" --lag-gain 0 \
  --stats-out $R/fit/s12-t16384.stats.npz -o $R/fit/s12-lag.gguf
for N in 4096 8192; do
  F=bench/results/frontier-qwen2.5-coder-0.5b-$((N / 1024))k
  S=$R/needles-$((N / 1024))k
  mkdir -p $S/items
  for f in $F/eval/items/needle-*-N$N.json; do ln -sfn "../../../../../../$f" "$S/items/$(basename "$f")"; done
  .venv/bin/ridgefill eval needle --model $R/fit/s12-lag.gguf --split 12 --sinks 4 --tail 1024 --lengths $N \
    --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $S \
    --needle-tasks single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number
  .venv/bin/python experiments/fit-fixes/compare_stores.py --split 12 $F/eval $S:ridge
done
