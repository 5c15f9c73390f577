#!/usr/bin/env bash
# SmolLM2-135M, split 16, 4K: does any λ lift the filled-region needles off 0?
# One capture (the frontier's settings: 16384 tokens, 2048-token windows, seed 0), then maps with
# λ/scale fixed for every layer near both ends of the fit's grid (1e-6..10) (plain ridge, α = 1), each on the frontier's 24 needle items.
# Usage: experiments/fit-levers/run.sh [OUT]   (default experiments/fit-levers/results/lever-smollm2-s16-lambda; resumable)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-experiments/fit-levers/results/lever-smollm2-s16-lambda}
RF=.venv/bin/ridgefill
M=$($RF model fetch smollm2-135m)
W=$OUT/fit  # gitignored: statistics and maps are rebuilt from the commands below
mkdir -p "$W"
[ -f "$W/s16.stats.npz" ] || $RF fit "$M" --split 16 --tokens 16384 --threads 2 --stats-out "$W/s16.stats.npz"
for lam in ${LAMBDAS:-1e-5 1}; do
  [ -f "$W/s16-l$lam.gguf" ] || $RF fit "$M" --stats "$W/s16.stats.npz" --lambda "$lam" --no-identity-blend \
    -o "$W/s16-l$lam.gguf" > "$W/s16-l$lam.fit.txt"
  $RF eval needle --model "$W/s16-l$lam.gguf" --split 16 --sinks 4 --tail 1024 --lengths 4096 \
    --needle-tasks single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number \
    --items 6 --modes ridge --threads 2 --out "$OUT/l$lam"
done
