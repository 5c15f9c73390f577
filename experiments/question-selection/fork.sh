#!/usr/bin/env bash
# Selection built into the fork (issue 55 items 2 and 4): the same setting as run.sh (Qwen2.5-Coder-0.5B, split 12,
# 4K, sinks 4, tail 1024, the lagged maps of calib-size's 65,536-token capture), with the fork selecting 10 % of the
# filled rows by a 64-row probe (`ridge^10`: llama_rf_set_select; the splice it builds is run.sh's
# ridge-select10-Lall-max63-after). Step 1: TTFT at 4K through llama-bench, exact, ridge and ridge^10 interleaved,
# the cost-model bound beside each (probe scores, selected rows' late layers and the probe's second pass paid).
# Step 2: RULER-11 on the frontier's 66 items (item files linked, so every record pairs with the frontier's exact
# and with run.sh's store). Resumable: every step skips what it has written.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
THREADS=${THREADS:-2}
G=$(experiments/question-selection/lagkeys.sh)
T=$R/fork-ttft-4k
[ -f $T.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths 4096 --runs "${RUNS:-5}" \
  --modes exact ridge "ridge^10" --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $T.json | tee $T.md
S=$R/ruler-4k-lagkeys-fork
if [ ! -f $R/ruler-4k-lagkeys-fork.md ]; then  # done on 2026-12-06: a refit elsewhere digests differently
  experiments/question-selection/link-items.sh $F/eval $S
  .venv/bin/ridgefill eval ruler --model $G --split 12 --sinks 4 --tail 1024 --lengths 4096 \
    --modes "ridge^10" --threads "$THREADS" --no-plots --quiet --items 6 --out $S
  .venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval $R/ruler-4k-lagkeys $S \
    --variants ridge ridge-evidence ridge-select10-Lall-max63 "ridge^10" | tee $R/ruler-4k-lagkeys-fork.md
fi
# Step 3: a shorter tail. The selected rows give the question's evidence exact K/V wherever it lies, so the exact tail
# need not hold it: tail 512 (cost model: ridge^10 1.51x where tail 1024 gives 1.36x), TTFT and RULER as above.
TAIL2=${TAIL2:-512}
T=$R/fork-ttft-4k-t$TAIL2
[ -f $T.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths 4096 --runs "${RUNS:-5}" \
  --modes exact ridge "ridge^10" --paths bench --threads "$THREADS" --sinks 4 --tail $TAIL2 --json-out $T.json | tee $T.md
S2=$R/ruler-4k-lagkeys-fork-t$TAIL2
experiments/question-selection/link-items.sh $F/eval $S2
.venv/bin/ridgefill eval ruler --model $G --split 12 --sinks 4 --tail $TAIL2 --lengths 4096 --modes "ridge^10" \
  --threads "$THREADS" --no-plots --quiet --items 6 --out $S2
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $F/eval $R/ruler-4k-lagkeys $S \
  "$S2=tail $TAIL2" --variants ridge "ridge^10" | tee $R/ruler-4k-lagkeys-fork-t$TAIL2.md
