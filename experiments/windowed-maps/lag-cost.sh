#!/usr/bin/env bash
# What the lagged maps of lag.sh cost and keep beyond needles, at 4K: the distant-token loss on the frontier's
# 16 documents (paired with its exact, identity and per-row ridge records), and TTFT through llama-bench,
# exact / identity / ridge interleaved (run it on an otherwise idle machine). Resumable.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=experiments/windowed-maps/results/lag-qwen0.5b-s12
F=bench/results/frontier-qwen2.5-coder-0.5b-4k
THREADS=${THREADS:-2}
[ -f $R/fit/s12-lag.gguf ] || experiments/windowed-maps/lag.sh
.venv/bin/ridgefill eval loss --model $R/fit/s12-lag.gguf --split 12 --sinks 4 --tail 1024 --lengths 4096 \
  --modes exact ridge --docs 16 --threads "$THREADS" --no-plots --quiet --out $R/loss-4k
.venv/bin/python experiments/fit-fixes/compare_stores.py --metric loss_distant --split 12 $F/eval $R/loss-4k:ridge
[ -f $R/ttft-4k.json ] || .venv/bin/ridgefill bench ttft --model $R/fit/s12-lag.gguf --lengths 4096 --runs 3 \
  --modes exact identity ridge --paths bench --threads "$THREADS" --sinks 4 --tail 1024 --json-out $R/ttft-4k.json
