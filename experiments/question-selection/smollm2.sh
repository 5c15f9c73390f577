#!/usr/bin/env bash
# Issue 55 item 4 on a second model: SmolLM2-135M (llama, 30 layers) at 4K, where the frontier stops at split 18
# (RULER tied with exact there, 1.29x) and splits 15-16 lose needles even with lagged maps. The cost model puts split
# 15 with `ridge^10` at tail 512 at the plain split 15's bound at tail 1024 (1.40x each, the fit lagging 13 layers):
# selection against the plain fill at the same split and bound. Maps: the default fit (16,384 calibration tokens) with `--lag-keys`. RULER-11 on
# the frontier's items (4 a task, linked, so every record pairs with its exact), then TTFT (llama-bench, interleaved;
# TTFT=0 skips it, for a run that shares the machine). SPLIT (15) chooses the split. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
F=bench/results/frontier-smollm2-135m
W=${WORK:-$HOME/.cache/ridgefill/experiments/question-selection}
THREADS=${THREADS:-2}
SPLIT=${SPLIT:-15}
M=$(.venv/bin/ridgefill model fetch smollm2-135m)
G=$W/smollm2-s$SPLIT-lagkeys.gguf
mkdir -p $W
[ -f $G ] || .venv/bin/ridgefill fit "$M" --split $SPLIT --lag-keys -o $G > $R/fit-smollm2-s$SPLIT-lagkeys.txt
S=$R/ruler-smollm2-4k-s$SPLIT
for tail in 1024 512; do experiments/question-selection/link-items.sh $F/eval $S-t$tail; done
run() {  # tail, mode
  .venv/bin/ridgefill eval ruler --model $G --split $SPLIT --sinks 4 --tail $1 --lengths 4096 --modes "$2" \
    --threads "$THREADS" --no-plots --quiet --items 4 --out $S-t$1
}
run 1024 ridge
run 512 "ridge^10"
.venv/bin/python experiments/question-selection/table.py --split $SPLIT --exact $F/eval "$S-t1024=tail 1024" \
  "$S-t512=tail 512" "$F/eval:18=split 18, tail 1024" --variants ridge "ridge^10" --ref "ridge (tail 1024)" | tee $S.md
[ "${TTFT:-1}" = 1 ] || exit 0
T=$R/ttft-smollm2-4k-s$SPLIT
[ -f $T-t1024.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths 4096 --runs "${RUNS:-5}" --modes exact ridge \
  --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $T-t1024.json | tee $T-t1024.md
[ -f $T-t512.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths 4096 --runs "${RUNS:-5}" \
  --modes exact "ridge^10" --paths bench --threads "$THREADS" --sinks 4 --tail 512 --json-out $T-t512.json | tee $T-t512.md
