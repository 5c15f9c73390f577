#!/usr/bin/env bash
# Issue 55 item 4's second bar: does selection beat moving the split at equal TTFT? The fork's `ridge^10` at split
# 12 runs 1.33x at 4K (fork.sh); the cost model puts the plain split-15 fill nearest (split 14 1.39x, split 15
# 1.34x, split 16 1.29x: costmodel.bound with every layer lagged). So: split 15's lagged maps from the same kind of
# capture as split 12's (65,536 calibration tokens, `fit --lag-keys`, experiments/calib-size), TTFT through
# llama-bench interleaved with exact, and RULER-11 on the frontier's 66 items (item files linked, so every record
# pairs with the frontier's exact and with fork.sh's `ridge^10`). Resumable: every step skips what it has written.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
THREADS=${THREADS:-2}
SPLIT=${SPLIT:-15}
G=$(SPLIT=$SPLIT experiments/question-selection/lagkeys.sh)
T=$R/ttft-4k-s$SPLIT
[ -f $T.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths 4096 --runs "${RUNS:-5}" --modes exact ridge \
  --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $T.json | tee $T.md
S=$R/ruler-4k-s$SPLIT-lagkeys
experiments/question-selection/link-items.sh $F/eval $S
.venv/bin/ridgefill eval ruler --model $G --split $SPLIT --sinks 4 --tail 1024 --lengths 4096 --modes ridge \
  --threads "$THREADS" --no-plots --quiet --items 6 --out $S
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval $R/ruler-4k-lagkeys-fork \
  "$R/ruler-4k-lagkeys-fork-t512=tail 512" "$R/ruler-4k-lagkeys-fork-t256-q20=tail 256" $S:$SPLIT \
  --variants "ridge^10" "ridge^20" ridge --ref "ridge (split $SPLIT)" | tee $R/ruler-4k-s12-select-vs-s$SPLIT.md
