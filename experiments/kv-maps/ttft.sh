#!/usr/bin/env bash
# K/V maps beside input maps in TTFT (issue 54 item 3) at another model or split than fork.sh's: MODEL (a registry
# name) at SPLIT, the fit's default calibration captured once with K/V targets (`calibrate --kv`) and fitted twice
# (`--maps kv`; `--maps input --lag-keys`), then each GGUF through llama-bench at LENGTH tokens, exact and ridge
# interleaved in one run, the bound printed beside. Resumable: every step skips what it has written.
#   experiments/kv-maps/ttft.sh qwen2.5-coder-0.5b 16 4096
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${1:?registry model name} SPLIT=${2:?split} LENGTH=${3:-4096}
M=$(.venv/bin/ridgefill model fetch "$NAME")
R=experiments/kv-maps/results/ttft-$NAME-s$SPLIT
THREADS=${THREADS:-2}
STATS=$HOME/.cache/ridgefill/experiments/kv-maps/stats-$NAME-s$SPLIT-kv.npz
mkdir -p $R "$(dirname "$STATS")" "$HOME/.cache/ridgefill/experiments/kv-maps/fit-$NAME-s$SPLIT"
FIT=$HOME/.cache/ridgefill/experiments/kv-maps/fit-$NAME-s$SPLIT
[ -f "$STATS" ] || .venv/bin/ridgefill calibrate "$M" --split "$SPLIT" --kv --threads "$THREADS" -o "$STATS"
[ -f $FIT/kv.gguf ] || .venv/bin/ridgefill fit "$M" --stats "$STATS" --maps kv -o $FIT/kv.gguf > $R/fit-kv.txt
[ -f $FIT/input-lagkeys.gguf ] || .venv/bin/ridgefill fit "$M" --stats "$STATS" --maps input --lag-keys \
  -o $FIT/input-lagkeys.gguf > $R/fit-input-lagkeys.txt
for kind in kv input-lagkeys; do
  [ -f $R/ttft-$LENGTH-$kind.json ] || .venv/bin/ridgefill bench ttft --model $FIT/$kind.gguf --lengths "$LENGTH" \
    --runs 5 --modes exact ridge --paths bench --threads "$THREADS" --sinks 4 --tail 1024 \
    --json-out $R/ttft-$LENGTH-$kind.json | tee $R/ttft-$LENGTH-$kind.md
done
