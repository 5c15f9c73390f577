#!/usr/bin/env bash
# Issue 55 item 4 at longer prompts: does split 12 with selection keep its 4K trade? Qwen2.5-Coder-0.5B, lagged maps
# (lagkeys.sh), sinks 4, RULER-11 at LEN (8192; no frontier has RULER beyond 4K, so the items are made here): exact
# and the plain fill at tail 1024 in one store, `ridge^Q` at tail TAIL (Q 10, TAIL 512: the 4K run's fastest
# selecting point) in a second whose item files are the first's, so every record pairs; with PLAIN set to another
# split (16: the seed's depth), that split's plain fill too, in a third. TASKS narrows RULER's tasks (16K: the niah
# tasks and vt). Items run one round at a time (the first item of every task in every store, then the second, ...),
# so a run stopped part-way is balanced; ITEMS (6) rounds in all. Then TTFT at LEN (llama-bench, each fill
# interleaved with exact, RUNS 3). Resumable.
#   experiments/question-selection/long.sh                                    # 8K, all 11 tasks
#   LEN=16384 PLAIN=16 ITEMS=4 TASKS="niah_single_1 niah_single_2 niah_single_3 niah_multikey_1 niah_multikey_2 \
#     niah_multikey_3 niah_multivalue niah_multiquery vt" experiments/question-selection/long.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/question-selection/results
THREADS=${THREADS:-2}
LEN=${LEN:-8192} TAIL=${TAIL:-512} Q=${Q:-10} ITEMS=${ITEMS:-6} PLAIN=${PLAIN:-12}
K=$((LEN / 1024))k
G=$(experiments/question-selection/lagkeys.sh)
S=$R/ruler-$K-lagkeys
S2=$R/ruler-$K-lagkeys-fork-t$TAIL-q$Q
S3=$R/ruler-$K-s$PLAIN-lagkeys
ruler() {  # gguf, split, store, tail, items, modes...
  local g=$1 split=$2 out=$3 tail=$4 n=$5; shift 5
  .venv/bin/ridgefill eval ruler --model $g --split $split --sinks 4 --tail $tail --lengths $LEN --modes "$@" \
    ${TASKS:+--ruler-tasks $TASKS} --threads "$THREADS" --no-plots --quiet --items $n --out $out
}
for i in $(seq 1 "$ITEMS"); do
  ruler $G 12 $S 1024 $i exact ridge
  experiments/question-selection/link-items.sh $S $S2 "ruler-*N$LEN.json"
  ruler $G 12 $S2 $TAIL $i "ridge^$Q"
  if [ "$PLAIN" != 12 ]; then
    experiments/question-selection/link-items.sh $S $S3 "ruler-*N$LEN.json"
    ruler "$(SPLIT=$PLAIN experiments/question-selection/lagkeys.sh)" $PLAIN $S3 1024 $i ridge
  fi
done
extra=()
[ "$PLAIN" = 12 ] || extra=("$S3:$PLAIN=split $PLAIN")
.venv/bin/python experiments/question-selection/table.py --split 12 --exact $S $S "${extra[@]}" "$S2=tail $TAIL" \
  --variants ridge "ridge^$Q" | tee $R/ruler-$K-lagkeys.md
[ "${TTFT:-1}" = 1 ] || exit 0
for point in "1024 ridge" "$TAIL ridge^$Q"; do
  set -- $point
  T=$R/fork-ttft-$K-t$1-${2//^/q}
  [ -f $T.json ] || .venv/bin/ridgefill bench ttft --model $G --lengths $LEN --runs "${RUNS:-3}" --modes exact "$2" \
    --paths bench --threads "$THREADS" --sinks 4 --tail $1 --json-out $T.json | tee $T.md
done
