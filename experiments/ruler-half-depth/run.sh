#!/usr/bin/env bash
# Do the lagged maps that won +13.5 needle points at half depth (Qwen2.5-Coder-0.5B split 12, experiments/key-lag,
# experiments/calib-size) win RULER points too? RULER's 11 offline tasks at 4K, 6 items a task: the frontier's
# items (linked, so every record pairs with its exact, identity and per-row ridge), the same tail and sinks, ridge
# from calib-size's two fits of one 65,536-token capture: `--lag-keys` (lagged maps at layers 13-23) and the
# default rule (no layer lagged at this split), so their difference is the previous row alone. Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/ruler-half-depth/results
C=experiments/calib-size/results/qwen0.5b-s12-t65536
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
THREADS=${THREADS:-2}
FITS=(${FITS:-lagkeys default})
[ -f $C/fit/lagkeys.gguf ] && [ -f $C/fit/default.gguf ] || LOSS=0 experiments/calib-size/run.sh
for fit in "${FITS[@]}"; do
  S=$R/ruler-4k-$fit
  mkdir -p $S/items
  for f in $F/eval/items/ruler-*N4096.json; do ln -sfn "../../../../../$f" "$S/items/$(basename "$f")"; done
  .venv/bin/ridgefill eval ruler --model $C/fit/$fit.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
    --modes ridge --threads "$THREADS" --no-plots --quiet --items 6 --out $S
done
args=()
for fit in "${FITS[@]}"; do args+=("$R/ruler-4k-$fit:ridge"); done
.venv/bin/python experiments/fit-fixes/compare_stores.py --metric ruler --split 12 $F/eval "${args[@]}" \
  | tee $R/ruler-4k.md
# the previous row alone: the lagged maps against the per-row maps of the same capture
[ -d $R/ruler-4k-lagkeys ] && [ -d $R/ruler-4k-default ] && .venv/bin/python experiments/fit-fixes/compare_stores.py \
  --metric ruler --split 12 --ref $R/ruler-4k-default:ridge $F/eval $R/ruler-4k-lagkeys:ridge | tee $R/ruler-4k-lag-vs-row.md
# Beside: SmolLM2-135M at split 18 (tune's pick), where per-row maps lose 8.1 RULER points in niah_single_3's keys
# and `--lag-keys` tied them on needles: key-lag's lagged fit (16,384 tokens, as the frontier's) on the SmolLM2
# frontier's first 5 items a task (its exact and identity records stop at 4-5)
[ "${SMOLLM2:-1}" = 1 ] || exit 0
K=experiments/key-lag/results/smollm2-lag
FS=bench/results/frontier-smollm2-135m
[ -f $K/fit/s18.gguf ] || SPLITS=18 TTFT=0 experiments/key-lag/run.sh
S=$R/ruler-4k-smollm2-s18-lagkeys
mkdir -p $S/items
for f in $FS/eval/items/ruler-*N4096.json; do ln -sfn "../../../../../$f" "$S/items/$(basename "$f")"; done
.venv/bin/ridgefill eval ruler --model $K/fit/s18.gguf --split 18 --sinks 4 --tail 1024 --lengths 4096 \
  --modes ridge --threads "$THREADS" --no-plots --quiet --items 5 --out $S
.venv/bin/python experiments/fit-fixes/compare_stores.py --metric ruler --split 18 $FS/eval $S:ridge \
  | tee $R/ruler-4k-smollm2-s18.md
