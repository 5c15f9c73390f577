#!/usr/bin/env bash
# K/V maps in the fork (issue 54 items 2-3): Qwen2.5-Coder-0.5B split 12, fit's default 16,384 calibration tokens
# captured once with K/V targets (`calibrate --kv`), fitted twice from those statistics: `--maps kv` (the fit's
# rule lags them: the previous row cuts layer 16's key error by 26 %) and `--maps input --lag-keys` (the lagged
# input maps kv.py's needles compared them with). Then, for each GGUF, TTFT at 4K through llama-bench (exact and
# ridge interleaved, the bound printed beside), and the frontier's 24 needle items at 4K for the K/V maps, paired
# with the frontier (per-row input maps, exact) and the lagged input maps' store. Resumable: every step skips what
# it has written.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/kv-maps/results/fork-qwen0.5b-s12
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
L=experiments/windowed-maps/results/lag-qwen0.5b-s12/needles-4k
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
THREADS=${THREADS:-2}
STATS=${STATS:-$HOME/.cache/ridgefill/experiments/kv-maps/stats-s12-kv.npz}
mkdir -p $R/fit "$(dirname "$STATS")"
[ -f "$STATS" ] || .venv/bin/ridgefill calibrate "$M" --split 12 --kv --threads "$THREADS" -o "$STATS"
[ -f $R/fit/kv.gguf ] || .venv/bin/ridgefill fit "$M" --stats "$STATS" --maps kv -o $R/fit/kv.gguf > $R/fit-kv.txt
[ -f $R/fit/input-lagkeys.gguf ] || .venv/bin/ridgefill fit "$M" --stats "$STATS" --maps input --lag-keys \
  -o $R/fit/input-lagkeys.gguf > $R/fit-input-lagkeys.txt
for kind in kv input-lagkeys; do
  [ -f $R/ttft-4k-$kind.json ] || .venv/bin/ridgefill bench ttft --model $R/fit/$kind.gguf --lengths 4096 --runs 5 \
    --modes exact ridge --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $R/ttft-4k-$kind.json \
    | tee $R/ttft-4k-$kind.md
done
S=$R/needles-4k-kv
mkdir -p $S/items
for f in $F/eval/items/needle-*N4096.json; do ln -sfn "../../../../../../$f" "$S/items/$(basename "$f")"; done
.venv/bin/ridgefill eval needle --model $R/fit/kv.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
  --modes ridge --items 6 --threads "$THREADS" --no-plots --quiet --out $S
.venv/bin/python experiments/fit-fixes/compare_stores.py --split 12 --ref $L:ridge $F/eval $S:ridge \
  experiments/kv-maps/results/qwen0.5b-s12-needles/needles:pykv-lag1kv | tee $R/needles-4k.md
