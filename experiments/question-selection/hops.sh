#!/usr/bin/env bash
# Hops (vt's later links): the selection finds a variable chain's first link, the one that names the value the
# question asks for; does a hop (the rows that pay the chosen ones the most attention at the exact layers, 63 rows
# a hop) find the later links, and does RULER's vt follow? Qwen2.5-Coder-0.5B split 12, lagged maps, sinks 4,
# tail 256 (the budget point, where the fork's `ridge^20` runs 1.41x and vt scores 36.7 of exact's 53.3).
# Step 1 (hops.py): the evidence rows covered, hops forward and backward against the first pick widened to the
# same count, no generation. Step 2: RULER (TASKS, default vt) as a splice, the plain fill beside, 10 % + 3 hops against 15 % (the same
# rows: 379 + 3 x 63 = 568 of 3,789 filled) and the evidence ceiling, on the frontier's items (linked, so every
# record pairs with the frontier's exact). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
C=experiments/calib-size/results/qwen0.5b-s12-t65536
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
TASKS=${TASKS:-vt}
[ -f $R/hops-vt-t256/hops.md ] || .venv/bin/python experiments/question-selection/hops.py --model "$M" \
  --items $F/eval/items --split 12 --tasks vt --tail 256 --hops 3 --threads "$THREADS" --out $R/hops-vt-t256
S=$R/ruler-4k-lagkeys-t256-hops
experiments/question-selection/link-items.sh $F/eval $S
MODES=(ridge ridge-evidence ridge-select15-Lall-max63 ridge-select10-Lall-max63-hop3)
.venv/bin/ridgefill eval ruler --model $C/fit/lagkeys.gguf --split 12 --sinks 4 --tail 256 --lengths 4096 \
  --modes "${MODES[@]}" --ruler-tasks $TASKS --threads "$THREADS" --no-plots --quiet --items 6 --out $S
# beside them the fork's `ridge^20` at the same tail (budget.sh's store)
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval $S $R/ruler-4k-lagkeys-fork-t256-q20 \
  --variants "${MODES[@]}" "ridge^20" --same-items $S --closer ridge-select10-Lall-max63-hop3 ridge-select15-Lall-max63 \
  | tee $S.md
