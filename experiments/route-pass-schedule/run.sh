#!/usr/bin/env bash
# The routed-pass schedule, A/B in one sitting: llama-bench with one routed pass after every fill ubatch
# ("per-ubatch") against one pass per llama_decode call ("per-call"), same flags, interleaved rounds,
# paired same-round ratios. Both builds come from the series as it stood before it was re-cut by concern
# (RidgeFill commit 85fd45c), applied up to the patch named by its subject:
#   per-ubatch: "context : routed rows are picked into a pending list, then run"
#   per-call:   "context : one routed pass per decode call, not one per fill ubatch"
# Needs `make setup` (the venv, the pinned sdist). Work folder: build/route-ab/.
# Usage: experiments/route-pass-schedule/run.sh MODEL.gguf SPLIT [N_TOKENS=8192] [ROUNDS=3] [OUT.json]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="$1" split="$2" n="${3:-8192}" rounds="${4:-3}" out="${5:-$here/build/route-ab/ab.json}"
old=85fd45c ab="$here/build/route-ab"
mkdir -p "$ab/patches"
git -C "$here" archive "$old" ggml-patches | tar -x -C "$ab/patches" --strip-components=1
[ -d "$ab/src/.git" ] || PYTHONPATH="$here/python" "$here/.venv/bin/python" -c \
    "import sys; from pathlib import Path; from ridgefill import upstream; upstream._unpack_base(Path(sys.argv[1]))" "$ab/src"
# CPU flags of CMakeLists.txt's static build (keep them in step); only llama-context differs between the two
[ -f "$ab/bld/CMakeCache.txt" ] || cmake -S "$ab/src" -B "$ab/bld" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
build_upto() {  # $1 = name of the binary, $2 = subject of the last patch to apply
    git -C "$ab/src" am --abort 2>/dev/null || true
    git -C "$ab/src" reset -q --hard upstream
    for p in "$ab"/patches/*.patch; do
        git -C "$ab/src" -c user.name=rf -c user.email=rf@localhost am -q "$p"
        grep -q "^Subject: \[PATCH\] $2\$" "$p" && break
    done
    grep -lq "^Subject: \[PATCH\] $2\$" "$ab"/patches/*.patch || { echo "no patch named '$2' at $old" >&2; exit 1; }
    cmake --build "$ab/bld" -j2 --target llama-bench >/dev/null
    cp "$ab/bld/bin/llama-bench" "$ab/llama-bench-$1"
}
build_upto per-ubatch "context : routed rows are picked into a pending list, then run"
build_upto per-call "context : one routed pass per decode call, not one per fill ubatch"
PYTHONPATH="$here/python" "$here/.venv/bin/python" - "$model" "$split" "$n" "$rounds" "$out" "$ab" <<'PY'
import json, statistics, sys, time
from ridgefill.bench.ttft import run_llama_bench
model, split, n, rounds, out, ab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:]
cells = [(k, m) for m in ("ridge@2", "ridge@5") for k in ("per-call", "per-ubatch")]
ms = {f"{k}:{m}": [] for k, m in cells}
for i in range(rounds):
    for k, m in cells:
        t, _, rep = run_llama_bench(model, n, m, 2, 2048, 512, split, 4, 1024, tool=f"{ab}/llama-bench-{k}")
        ms[f"{k}:{m}"].append(t)
        print(f"{time.strftime('%H:%M:%S')} round {i + 1}/{rounds} {k} {m}: {t:.0f} ms ({rep})", flush=True)
for m in ("ridge@2", "ridge@5"):
    r = [a / b for a, b in zip(ms[f"per-call:{m}"], ms[f"per-ubatch:{m}"])]
    print(f"{m}: per-call / per-ubatch time, paired median {statistics.median(r):.3f} (range {min(r):.3f}-{max(r):.3f})")
json.dump({"model": model, "split": split, "n_tokens": n, "sinks": 4, "tail": 1024, "threads": 2,
           "ms": ms}, open(out, "w"), indent=1)
PY
