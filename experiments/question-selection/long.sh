#!/usr/bin/env bash
# Issue 55 item 4 at 8K: does split 12 with selection keep its 4K trade at twice the length? Qwen2.5-Coder-0.5B, the
# lagged maps every run here reads (lagkeys.sh), sinks 4. RULER-11 at LEN (8192) made here (no frontier has RULER at
# 8K): exact and the plain fill at tail 1024 in one store, `ridge^Q` at tail TAIL (Q 10, TAIL 512: the 4K run's
# fastest selecting point) in a second whose item files are the first's, so every record pairs. Items run one round
# at a time (the first item of every task, then the second, ...), so a run stopped part-way is balanced over tasks;
# ITEMS (6) rounds in all. Then TTFT at LEN (llama-bench, each fill interleaved with exact, RUNS 3). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
THREADS=${THREADS:-2}
LEN=${LEN:-8192} TAIL=${TAIL:-512} Q=${Q:-10} ITEMS=${ITEMS:-6}
K=$((LEN / 1024))k
G=$(experiments/question-selection/lagkeys.sh)
S=$R/ruler-$K-lagkeys
S2=$R/ruler-$K-lagkeys-fork-t$TAIL-q$Q
ruler() {  # store, tail, items, modes...
  local out=$1 tail=$2 n=$3; shift 3
  .venv/bin/ridgefill eval ruler --model $G --split 12 --sinks 4 --tail $tail --lengths $LEN --modes "$@" \
    --threads "$THREADS" --no-plots --quiet --items $n --out $out
}
for i in $(seq 1 "$ITEMS"); do
  ruler $S 1024 $i exact ridge
  experiments/question-selection/link-items.sh $S $S2 "ruler-*N$LEN.json"
  ruler $S2 $TAIL $i "ridge^$Q"
done
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $S $S "$S2=tail $TAIL" \
  --variants ridge "ridge^$Q" | tee $R/ruler-$K-lagkeys.md
[ "${TTFT:-1}" = 1 ] || exit 0
for point in "1024 ridge" "$TAIL ridge^$Q"; do
  set -- $point
  T=$R/fork-ttft-$K-t$1-${2//^/q}
  [ -f $T.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths $LEN --runs "${RUNS:-3}" --modes exact "$2" \
    --paths bench --threads "$THREADS" --sinks 4 --tail $1 --json-out $T.json | tee $T.md
done
