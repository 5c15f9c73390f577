#!/usr/bin/env bash
# TTFT exact vs split prefill on one GPU: the fork built with CUDA, synthetic shapes of the seed's
# Qwen3.8-27B (qwen35 hybrid) and of llama-3.1-8b (random Q8_0 weights, identity maps at split L/2),
# 16K-120K prompts, tail 2048; the 27B shape first, so a call that runs out of time has measured it.
# Beside each shape: random lagged K/V maps in a maps file (on the hybrid, for its attention layers, its linear
# layers on input maps; routed and selected modes run on the dense shape only: the hybrid refuses them), bench
# overhead (nothing filled; dense shape) and bench batches (every ubatch timed alone, exact against each fill at
# the same positions, with the cost model's ratio) at the second length.
# Device runs are timed warm (bench ttft --warmup auto: each prompt once untimed first), so a length takes
# about twice its TTFTs; RF_DEADLINE_S cuts the lengths that would not fit.
#
#   bench/gpu.sh pack        here: write build/gpu-carry (trimmed patched tree, tokenizer, gguf wheel)
#   bench/gpu.sh run         on the GPU machine, with build/gpu-carry carried: build + generate + measure
#   bench/gpu.sh --dry-run   here: the same pipeline on CPU (tiny shapes, short prompts, CMake configure only)
#
# Env: RF_CUDA_ARCH (90 = H100/H200, the default; 80 = A100), RF_WEIGHT_TYPE (q8_0, the default: the 27B
# shape in F16 is 54 GB, near the lent machine's 64 GiB disk; f16), RF_OUT (results folder; default $OUT or
# bench/out), RF_LENGTHS, RF_SHAPES, RF_RUNS, RF_MODES (default exact identity ridge ridge@10), RF_DEADLINE_S (start no new length after it; default 420),
# RF_CARRY (the carry folder; default build/gpu-carry), RF_CMAKE_ARGS (extra CMake flags of the CUDA build, e.g.
# -DGGML_CUDA_FA=OFF to build in less time when flash attention is not measured).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
carry="${RF_CARRY:-$repo/build/gpu-carry}"
arch="${RF_CUDA_ARCH:-90}"
out="${RF_OUT:-${OUT:-$repo/bench/out}}"
work="${RF_WORK:-/tmp/rf-gpu}"
mode="${1:-run}"
t0=$(date +%s)
say() { echo "[gpu.sh +$(( $(date +%s) - t0 ))s] $*"; }

pack() {
    PYTHONPATH="$repo/python" "$repo/.venv/bin/python" -m ridgefill.cli.gpu pack --src "$repo/build/llama.cpp" --dest "$carry"
}

configure() {  # $1 = build dir, then extra CMake flags
    local dir="$1"; shift
    cmake -S "$work/llama.cpp" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF "$@" > "$out/gpu-configure.log" 2>&1
}

unpack() {
    rm -rf "$work" && mkdir -p "$work" "$out"
    tar xzf "$carry/llama-src.tar.gz" -C "$work"
}

case "$mode" in
pack)
    pack ;;
--dry-run)
    [ -d "$carry" ] || pack
    unpack
    say "CMake configure of the carried tree (CPU; the GPU run adds -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch)"
    configure "$work/build-cpu" -DGGML_NATIVE=OFF
    say "generate + measure through the CPU llama-bench (tiny shapes, short prompts)"
    PYTHONPATH="$repo/python" "$repo/.venv/bin/python" -m ridgefill.cli.gpu run --llama-bench "$repo/.venv/bin/llama-bench" \
        --tokenizer "$carry/tokenizer.gguf" --shapes ${RF_SHAPES:-tiny-llama tiny-qwen3} --lengths ${RF_LENGTHS:-1024 2048} \
        --runs "${RF_RUNS:-1}" --modes ${RF_MODES:-exact identity ridge ridge@10} --tail 256 --ngl 0 --threads 2 --ubatch 512 --weight-type f16 \
        --workdir "$work/models" --out "$out/gpu-ttft-dryrun.json" --overhead-rounds 2 --batch-rounds 1
    say "dry run done: $out/gpu-ttft-dryrun.json" ;;
run)
    [ -f "$carry/llama-src.tar.gz" ] || { echo "no $carry: run 'bench/gpu.sh pack' first and carry build/gpu-carry" >&2; exit 1; }
    command -v nvcc > /dev/null || export PATH="/usr/local/cuda/bin:$PATH"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/rf-site "$carry"/wheels/*.whl
    export PYTHONPATH="/tmp/rf-site:$repo/python"
    unpack
    say "CUDA build of llama-bench for sm_$arch (log: $out/gpu-build.log)"
    configure "$work/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_NATIVE=ON ${RF_CMAKE_ARGS:-}
    cmake --build "$work/build" --target llama-bench -j"$(nproc)" > "$out/gpu-build.log" 2>&1 &
    build=$!
    say "writing the synthetic models while it builds"
    python3 -m ridgefill.cli.gpu gen --tokenizer "$carry/tokenizer.gguf" --shapes ${RF_SHAPES:-qwen3.8-27b llama-3.1-8b} \
        --lengths ${RF_LENGTHS:-16384 32768 65536 122880} --weight-type "${RF_WEIGHT_TYPE:-q8_0}" --workdir "$work/models"
    wait "$build" || { tail -30 "$out/gpu-build.log"; exit 1; }
    say "built; measuring"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu-info.csv" || true
    python3 -m ridgefill.cli.gpu run --llama-bench "$work/build/bin/llama-bench" --tokenizer "$carry/tokenizer.gguf" \
        --shapes ${RF_SHAPES:-qwen3.8-27b llama-3.1-8b} --lengths ${RF_LENGTHS:-16384 32768 65536 122880} \
        --runs "${RF_RUNS:-2}" --modes ${RF_MODES:-exact identity ridge ridge@10} --tail 2048 --threads 8 --ubatch 2048 \
        --weight-type "${RF_WEIGHT_TYPE:-q8_0}" --workdir "$work/models" \
        --out "$out/gpu-ttft.json" --deadline-s "${RF_DEADLINE_S:-420}"
    say "done: $out/gpu-ttft.json" ;;
*)
    echo "usage: bench/gpu.sh [pack|run|--dry-run]" >&2; exit 2 ;;
esac
