#!/usr/bin/env bash
# Builds sched_recreate.cpp against the Vulkan build (make setup-vulkan) and runs it 3 times per condition:
# Vulkan with a reserve between decodes, Vulkan without, CPU with. Prints the rounds each run completed.
# Usage: experiments/vulkan-lavapipe/sched_recreate.sh MODEL.gguf   (e.g. the tests' tiny-llama.gguf)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$here/../.."; b="$root/build/vulkan"
out="${TMPDIR:-/tmp}/sched_recreate"
g++ -O1 -g -std=c++17 -I"$root/build/llama.cpp/include" -I"$root/build/llama.cpp/src" -I"$root/build/llama.cpp/ggml/include" \
  "$here/sched_recreate.cpp" -o "$out" "$b/llama.cpp/src/libllama.a" "$b/llama.cpp/ggml/src/libggml.a" \
  "$b/llama.cpp/ggml/src/libggml-cpu.a" "$b/llama.cpp/ggml/src/ggml-rpc/libggml-rpc.a" \
  "$b/llama.cpp/ggml/src/ggml-vulkan/libggml-vulkan.a" "$b/llama.cpp/ggml/src/libggml-base.a" \
  -ldl -fopenmp -lpthread -lm -lvulkan
for cond in "GGML_VK_VISIBLE_DEVICES=0" "GGML_VK_VISIBLE_DEVICES=0 NO_RESERVE=1" "GGML_VK_VISIBLE_DEVICES="; do
  printf '%-40s' "$cond:"
  for _ in 1 2 3; do
    n=$(env $cond XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" "$out" "$1" 4 2>/dev/null | grep -c '^round' || true)
    printf ' %s/4' "$n"
  done
  echo
done
