#!/usr/bin/env bash
# SmolLM2-135M, 4K, splits 17-19: the fit whose lag rule also reads the keys' held-out error (`--lag-keys`;
# gains.py: the previous row cuts layer 18's or 20's key error by 27-43 % there, no layer input's by 10 %), against
# the frontier's per-row maps on its 24 needle items (item files linked, so every record pairs with the
# frontier's exact, identity and ridge records through experiments/fit-fixes/compare_stores.py); then
# llama-bench TTFT, exact / identity / ridge interleaved. Resumable: fits are skipped when present, the eval
# resumes from its store, the TTFT runs are skipped when their JSON exists.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/key-lag/results/smollm2-lag
F=bench/results/frontier-smollm2-135m
M=$(.venv/bin/ridgefill model fetch smollm2-135m)
SPLITS=(${SPLITS:-17 18 19})
THREADS=${THREADS:-2}
mkdir -p $R/fit $R/needles/items
for s in "${SPLITS[@]}"; do
  [ -f $R/fit/s$s.gguf ] || .venv/bin/ridgefill fit "$M" --split $s --tokens 16384 --threads "$THREADS" \
    --lag-keys -o $R/fit/s$s.gguf --maps-out $R/fit/s$s.maps.npz > $R/fit-s$s.txt
done
for f in $F/eval/items/needle-*-N4096.json; do ln -sfn "../../../../../../$f" "$R/needles/items/$(basename "$f")"; done
MODELS=(); for s in "${SPLITS[@]}"; do MODELS+=(--model $R/fit/s$s.gguf); done
.venv/bin/ridgefill eval needle "${MODELS[@]}" --split "${SPLITS[@]}" --sinks 4 --tail 1024 --lengths 4096 \
  --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $R/needles \
  --needle-tasks single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number
for s in "${SPLITS[@]}"; do
  .venv/bin/python experiments/fit-fixes/compare_stores.py --split $s $F/eval $R/needles:ridge
done
[ "${TTFT:-1}" = 1 ] || exit 0
for s in "${SPLITS[@]}"; do
  [ -f $R/ttft-s$s.json ] || .venv/bin/ridgefill bench ttft --model $R/fit/s$s.gguf --lengths 4096 --runs 3 \
    --modes exact identity ridge --paths bench --threads 2 --sinks 4 --tail 1024 --json-out $R/ttft-s$s.json
done
