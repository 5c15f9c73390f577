#!/usr/bin/env bash
# SmolLM2-135M, 4K, splits 15-16: the default fit (lagged maps: the previous row cuts layers 17-18's held-out
# error by 15-26 %), in the fork. Fits with the frontier's capture settings; then the frontier's 24 needle items
# (item files copied, so every record pairs with the frontier's exact and identity records through
# experiments/fit-fixes/compare_stores.py) in ridge mode; then llama-bench TTFT, exact / identity / ridge interleaved.
# Resumable: fits are skipped when present, the eval resumes from its store, and the TTFT runs are skipped
# when their JSON exists.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=bench/results/lag-fork-smollm2
F=bench/results/frontier-smollm2-135m
M=$(.venv/bin/ridgefill model fetch smollm2-135m)
for s in 15 16; do
  [ -f $R/fit/s$s.gguf ] || .venv/bin/ridgefill fit "$M" --split $s --tokens 16384 -o $R/fit/s$s.gguf --maps-out $R/fit/s$s.maps.npz
done
COMMON=(--model $R/fit/s15.gguf --model $R/fit/s16.gguf --split 15 16 --sinks 4 --tail 1024 --lengths 4096
        --modes ridge --threads 2 --no-plots --quiet)
mkdir -p $R/needles
[ -d $R/needles/items ] || cp -r $F/eval/items $R/needles/
.venv/bin/ridgefill eval needle "${COMMON[@]}" --items 6 --out $R/needles \
  --needle-tasks single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number
for s in 15 16; do
  [ -f $R/ttft-s$s.json ] || .venv/bin/ridgefill bench ttft --model $R/fit/s$s.gguf --lengths 4096 --runs 3 \
    --modes exact identity ridge --paths bench --threads 2 --sinks 4 --tail 1024 --json-out $R/ttft-s$s.json
done
for s in 15 16; do
  .venv/bin/python experiments/fit-fixes/compare_stores.py --split $s $F/eval $R/needles:ridge
done
