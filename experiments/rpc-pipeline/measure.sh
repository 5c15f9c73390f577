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
source "$(dirname "$0")/common.sh"
rpc="$repo/.venv/bin/ggml-rpc-server"
ports=(50301 50302)
for p in "${ports[@]}"; do "$rpc" -H 127.0.0.1 -p "$p" -t 1 > /dev/null 2>&1 & done
trap 'kill $(jobs -p) 2>/dev/null' EXIT
sleep 2
endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
"${ttft[@]}" --json-out "$out/local.json"
"${ttft[@]}" --rpc "$endpoints" -ts even --json-out "$out/rpc-even.json"
"${ttft[@]}" --rpc "$endpoints" -ts auto --json-out "$out/rpc-auto.json"
"$py" "$here/summary.py" "$out"
