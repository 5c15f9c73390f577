#!/usr/bin/env bash
# Issue 36 item 1 in the fork: window maps (rows t-1..t-8 through a projection every late layer reads) at
# Qwen2.5-Coder-0.5B split 12 from fit's default 65,536 calibration tokens. The window statistics come from the
# same windows as experiments/calib-size's capture and take its statistics' principal directions as their basis
# (--basis-from), so the row and lagged maps underneath are calib-size's `--lag-keys` maps and the needles pair
# with its records: the difference is the window alone. Fitted twice from one capture: the default rule
# (--window-gain 0.05) and --window-gain 0 (the window wherever it helps held-out), then the frontier's 24
# needle items at 4K for a fit that keeps a window. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/windowed-maps/results/fork-window-qwen0.5b-s12
C=experiments/calib-size/results/qwen0.5b-s12-t65536
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
STATS=${STATS:-$HOME/.cache/ridgefill/experiments/windowed-maps/window-stats-s12-w8-q128.npz}
TASKS=(single/noise/number single/prose/number multivalue/noise/number multiquery/prose/number)
mkdir -p $R/fit "$(dirname "$STATS")"
[ -f $C/fit/stats.npz ] || experiments/calib-size/run.sh
[ -f "$STATS" ] || .venv/bin/ridgefill calibrate "$M" --split 12 --tokens 65536 --threads "$THREADS" \
  --window-rows 8 --window-basis 128 --basis-from $C/fit/stats.npz -o "$STATS"
for gain in 0.05 0; do
  [ -f $R/fit/gain$gain.gguf ] || .venv/bin/ridgefill fit "$M" --stats "$STATS" --lag-keys --window-gain $gain \
    -o $R/fit/gain$gain.gguf > $R/fit-gain$gain.txt
done
for gain in 0.05 0; do
  grep -q "kept: none" $R/fit-gain$gain.txt && continue
  S=$R/needles-4k-gain$gain
  mkdir -p $S/items
  for f in $F/eval/items/needle-*N4096.json; do ln -sfn "../../../../../../$f" "$S/items/$(basename "$f")"; done
  .venv/bin/ridgefill eval needle --model $R/fit/gain$gain.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
    --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $S --needle-tasks "${TASKS[@]}"
  .venv/bin/python experiments/fit-fixes/compare_stores.py --split 12 --ref $C/needles-4k-lagkeys:ridge $F/eval $S:ridge \
    | tee $R/needles-4k-gain$gain.md
done
# TTFT at 4K (llama-bench, exact / identity / ridge interleaved; an otherwise idle machine): the window maps and,
# for what the window adds, the same lagged maps without it
[ -f $R/ttft-4k-gain0.json ] || .venv/bin/ridgefill bench ttft --model $R/fit/gain0.gguf --lengths 4096 --runs 3 \
  --modes exact identity ridge --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $R/ttft-4k-gain0.json
[ -f $R/ttft-4k-lagkeys.json ] || .venv/bin/ridgefill bench ttft --model $C/fit/lagkeys.gguf --lengths 4096 --runs 3 \
  --modes exact identity ridge --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $R/ttft-4k-lagkeys.json
