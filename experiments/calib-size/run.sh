#!/usr/bin/env bash
# Issue 36's held-out-set lever, at the default fit's calibration size: Qwen2.5-Coder-0.5B split 12 from 65,536
# calibration tokens (`ridgefill fit`'s default: 57,344 training and 8,192 held-out tokens, 4 windows held out
# where the frontier's and the lagged maps' 16,384 tokens held out 1), one capture, fitted twice: the default lag
# rule and `--lag-keys`. Each on the frontier's 24 needle items at 4K and 8K (item files linked, so every record
# pairs with the frontier's exact, identity and per-row ridge and with the 16K-token lagged maps' records
# through experiments/fit-fixes/compare_stores.py), then the distant-token loss at 4K (the frontier's 16
# documents). Resumable: the capture and fits are skipped when present, the evals resume from their stores.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/calib-size/results/qwen0.5b-s12-t65536
L=experiments/windowed-maps/results/lag-qwen0.5b-s12
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
FITS=(${FITS:-default lagkeys})
LENGTHS=(${LENGTHS:-4096 8192})
TASKS=(single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number)
mkdir -p $R/fit
[ -f $R/fit/stats.npz ] || .venv/bin/ridgefill calibrate "$M" --split 12 --tokens 65536 --threads "$THREADS" \
  -o $R/fit/stats.npz
[ -f $R/fit/default.gguf ] || .venv/bin/ridgefill fit "$M" --stats $R/fit/stats.npz -o $R/fit/default.gguf > $R/fit-default.txt
[ -f $R/fit/lagkeys.gguf ] || .venv/bin/ridgefill fit "$M" --stats $R/fit/stats.npz --lag-keys -o $R/fit/lagkeys.gguf \
  > $R/fit-lagkeys.txt
link_items() {  # the frontier's item files for length $1 into store $2
  mkdir -p $2/items
  for f in $F/eval/items/$3-*N$1.json; do ln -sfn "../../../../../../$f" "$2/items/$(basename "$f")"; done
}
for N in "${LENGTHS[@]}"; do
  F=bench/results/frontier-qwen2.5-coder-0.5b-$((N / 1024))k
  for fit in "${FITS[@]}"; do
    S=$R/needles-$((N / 1024))k-$fit
    link_items $N $S needle
    .venv/bin/ridgefill eval needle --model $R/fit/$fit.gguf --split 12 --sinks 4 --tail 1024 --lengths $N \
      --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $S --needle-tasks "${TASKS[@]}"
    .venv/bin/python experiments/fit-fixes/compare_stores.py --split 12 --ref $L/needles-$((N / 1024))k:ridge \
      $F/eval $S:ridge
  done
done
[ "${LOSS:-1}" = 1 ] || exit 0
F=bench/results/frontier-qwen2.5-coder-0.5b-4k  # exact runs again: records are per GGUF, maps included
for fit in "${FITS[@]}"; do
  S=$R/loss-4k-$fit
  link_items 4096 $S loss
  .venv/bin/ridgefill eval loss --model $R/fit/$fit.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
    --modes exact ridge --docs 16 --threads "$THREADS" --no-plots --quiet --out $S
  .venv/bin/python experiments/fit-fixes/compare_stores.py --metric loss_distant --split 12 --ref $L/loss-4k:ridge \
    $F/eval $S:ridge
done
