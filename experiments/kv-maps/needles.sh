#!/usr/bin/env bash
# The frontier's 24 needle items at 4K (sinks 4, tail 1024) through both of ttft.sh's fits of MODEL at SPLIT (run
# ttft.sh first: it makes the GGUFs), the item files linked so every record pairs with the frontier's exact and the
# two fits with each other; then the paired table. Resumable.
#   experiments/kv-maps/needles.sh qwen2.5-coder-0.5b 16 bench/results/frontier-qwen2.5-coder-0.5b-4k
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?registry model name} SPLIT=${2:?split} F=${3:?the frontier folder whose eval/ holds the items}
R=experiments/kv-maps/results/ttft-$NAME-s$SPLIT
FIT=$HOME/.cache/ridgefill/experiments/kv-maps/fit-$NAME-s$SPLIT
for kind in kv input-lagkeys; do
  [ -f $FIT/$kind.gguf ] || { echo "no $FIT/$kind.gguf: run experiments/kv-maps/ttft.sh $NAME $SPLIT first" >&2; exit 1; }
  experiments/question-selection/link-items.sh $F/eval $R/needles-4k-$kind 'needle-*N4096.json'
  .venv/bin/ridgefill eval needle --model $FIT/$kind.gguf --split "$SPLIT" --sinks 4 --tail 1024 --lengths 4096 \
    --modes ridge --items 6 --threads "${THREADS:-2}" --no-plots --quiet --out $R/needles-4k-$kind
done
.venv/bin/python experiments/fit-fixes/compare_stores.py --split "$SPLIT" --ref $R/needles-4k-input-lagkeys:ridge \
  $F/eval $R/needles-4k-kv:ridge | tee $R/needles-4k.md
