#!/usr/bin/env bash
# K/V maps on RULER (issue 54 item 3): fork.sh's two fits of one 16,384-token capture at Qwen2.5-Coder-0.5B split 12
# (lagged K/V maps, `--maps kv`; lagged input maps, `--maps input --lag-keys`), RULER-11 on the frontier's 66 items at
# 4K (sinks 4, tail 1024), the item files linked so every record pairs with the frontier's exact and with each other.
# Items run one round at a time (the first item of every task for both fits, then the second, ...), so a run stopped
# part-way is balanced over tasks and fits. Resumable: run fork.sh first (it makes the GGUFs).
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/kv-maps/results/fork-qwen0.5b-s12
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
THREADS=${THREADS:-2}
ITEMS=${ITEMS:-6}
for kind in kv input-lagkeys; do
  [ -f $R/fit/$kind.gguf ] || { echo "no $R/fit/$kind.gguf: run experiments/kv-maps/fork.sh first" >&2; exit 1; }
  experiments/question-selection/link-items.sh $F/eval $R/ruler-4k-$kind
done
for i in $(seq 1 "$ITEMS"); do
  for kind in kv input-lagkeys; do
    .venv/bin/ridgefill eval ruler --model $R/fit/$kind.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
      --modes ridge --threads "$THREADS" --no-plots --quiet --items $i --out $R/ruler-4k-$kind
  done
done
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval \
  "$R/ruler-4k-input-lagkeys=lagged input maps" "$R/ruler-4k-kv=lagged K/V maps" --variants ridge \
  --ref "ridge (lagged input maps)" | tee $R/ruler-4k.md
