#!/usr/bin/env bash
# Issue 55 item 5: selection's limits. (1) A question that is not at the end: RULER-11 with the question moved
# before the context (`eval ruler --ruler-question start`: the prompt ends in an answer prefix that names nothing;
# the item's draws are the RULER item's), exact, the plain fill and the fork's `ridge^10` at split 12 (fork.sh's
# GGUF and setting), two items a task; the same two items with the question at the end come from fork.sh's and
# run.sh's stores. (2) The distant-token loss beside: `ridge^10` on calib-size's 16 documents at 4K (the probe is
# the tail's last 64 rows: the rows before them read the plain fill). Resumable: every step skips what it has.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
C=experiments/calib-size/results/qwen0.5b-s12-t65536
G=$(experiments/question-selection/lagkeys.sh)
THREADS=${THREADS:-2}
ITEMS=${ITEMS:-2}
S=$R/ruler-4k-lagkeys-qstart
.venv/bin/ridgefill eval ruler --model $G --split 12 --sinks 4 --tail 1024 --lengths 4096 \
  --ruler-question start --modes exact ridge "ridge^10" --threads "$THREADS" --no-plots --quiet --items "$ITEMS" \
  --out $S
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $S $S --variants ridge "ridge^10" \
  | tee $R/ruler-4k-lagkeys-qstart.md
# the same draws with the question at the end: the frontier's exact, run.sh's plain fill, fork.sh's ridge^10
.venv/bin/python experiments/question-selection/table.py --split 12 --exact bench/results/frontier-qwen2.5-coder-0.5b-4k/eval \
  --same-items $S $R/ruler-4k-lagkeys $R/ruler-4k-lagkeys-fork --variants ridge "ridge^10" | tee $R/ruler-4k-lagkeys-qend.md
[ "${LOSS:-1}" = 1 ] || exit 0
L=$R/loss-4k-lagkeys-select
experiments/question-selection/link-items.sh bench/results/frontier-qwen2.5-coder-0.5b-4k/eval $L loss-N4096.json
# exact defines the distant-dependent tokens (its records are per GGUF, and calib-size's predate the refit)
.venv/bin/ridgefill eval loss --model $G --split 12 --sinks 4 --tail 1024 --lengths 4096 \
  --modes exact "ridge^10" --docs 16 --threads "$THREADS" --no-plots --quiet --out $L
.venv/bin/python experiments/fit-fixes/compare_stores.py --metric loss_distant --split 12 \
  --ref $C/loss-4k-lagkeys:ridge bench/results/frontier-qwen2.5-coder-0.5b-4k/eval $C/loss-4k-lagkeys:ridge \
  "$L:ridge^10" | tee $R/loss-4k-lagkeys-select.md
