#!/usr/bin/env bash
# TTFT exact vs ridge over two loopback ggml-rpc-servers, with llama.cpp's layer placement and with each mode's
# planned one, beside the local run at the same threads per process (1), interleaved within each run.
#
#   experiments/rpc-pipeline/measure.sh [MODEL [LENGTHS [RUNS]]]
#
# MODEL: an augmented GGUF (default: the demo's fit of SmolLM2-135M, split 18 of 30). Sinks 4, tail 512, ubatch 512
# (the issue's try). Every process times its prompt after one untimed run of it (RF_WARMUP=off: cold, as a fresh
# process meets it). Writes results/{local,rpc-even,rpc-auto}.json; summary.py tabulates them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="$repo/.venv/bin/python"
model="${1:-$("$py" -c 'from ridgefill import demo; from ridgefill.sources import models
print(demo.demo_fit(models.fetch_model(models.DEFAULT_MODEL), None)[0])')}"
lengths="${2:-2048 4096}"
runs="${3:-5}"
out="${RF_OUT:-$here/results}"
mkdir -p "$out"
rpc="$repo/.venv/bin/ggml-rpc-server"
ports=(50301 50302)
for p in "${ports[@]}"; do "$rpc" -H 127.0.0.1 -p "$p" -t 1 > /dev/null 2>&1 & done
trap 'kill $(jobs -p) 2>/dev/null' EXIT
sleep 2
common=(--model "$model" --lengths $lengths --runs "$runs" --modes exact ridge --threads 1 --sinks 4 --tail 512
        --ubatch 512 --paths bench --warmup "${RF_WARMUP:-on}")
endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
"$repo/.venv/bin/ridgefill" bench ttft "${common[@]}" --json-out "$out/local.json"
"$repo/.venv/bin/ridgefill" bench ttft "${common[@]}" --rpc "$endpoints" -ts even --json-out "$out/rpc-even.json"
"$repo/.venv/bin/ridgefill" bench ttft "${common[@]}" --rpc "$endpoints" -ts auto --json-out "$out/rpc-auto.json"
"$py" "$here/summary.py" "$out"
