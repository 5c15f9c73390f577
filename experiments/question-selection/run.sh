#!/usr/bin/env bash
# Selection measured as a splice before it is built (issue 55, item 1): at half depth (Qwen2.5-Coder-0.5B,
# split 12 of 24, 4K, sinks 4, tail 1024) the filled rows that the prompt's last 64 rows attend to at the exact
# layers get exact K and V in every late layer, then the tail runs. Beside it: the plain fill, the ceiling (the
# items' evidence rows, widened by 4) and random rows of the same count. RULER-11 on the frontier's 66 items (item
# files linked, so every record pairs with the frontier's exact), on the lagged maps (`fit --lag-keys`) and the
# default fit of calib-size's one 65,536-token capture (the same GGUFs experiments/ruler-half-depth measured).
# Step 1, recall.py: which probe layer and pooling cover the evidence (no generation, one exact pass an item).
# Resumable: every step skips what its store holds.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
C=experiments/calib-size/results/qwen0.5b-s12-t65536
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
[ -f $C/fit/lagkeys.gguf ] && [ -f $C/fit/default.gguf ] || LOSS=0 LENGTHS=4096 experiments/calib-size/run.sh
.venv/bin/python experiments/question-selection/recall.py --model "$M" --items $F/eval/items --split 12 \
  --threads "$THREADS" --out $R/recall-qwen0.5b-s12
link_items() { experiments/question-selection/link-items.sh $F/eval "$1"; }
# the grid on the lagged maps: q = 2, 5, 10 % at the best probe of recall.md (every exact layer, max over 15 rows),
# random rows of the same count at q = 5 and 10 %, at q = 5 % the split layer alone with 7-row pooling (the
# selector's defaults), and at q = 5 and 10 % 63-row windows (whole needles rather than the rows around the attended ones)
# and, in the fork's order (`-after`: the tail before the last 64 rows first, then the splice), the ceiling and the
# 10 % 63-row windows
LAG_MODES=(ridge ridge-evidence ridge-select2-Lall-max15 ridge-select5-Lall-max15 ridge-select10-Lall-max15
           ridge-random5 ridge-random10 ridge-select5 ridge-select10-Lall-max63 ridge-select5-Lall-max63
           ridge-evidence-after ridge-select10-Lall-max63-after)
[ -z "${MODES:-}" ] || read -ra LAG_MODES <<< "$MODES"  # a subset first, e.g. MODES="ridge ridge-evidence ..."
S=$R/ruler-4k-lagkeys
link_items $S
.venv/bin/ridgefill eval ruler --model $C/fit/lagkeys.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
  --modes "${LAG_MODES[@]}" --threads "$THREADS" --no-plots --quiet --items 6 --out $S
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval $S --variants "${LAG_MODES[@]}" \
  | tee $R/ruler-4k-lagkeys.md
