# Sourced by measure.sh and shaped.sh: paths, their first three arguments (MODEL LENGTHS RUNS) and the
# `bench ttft` command both time with (llama-bench path, exact and ridge interleaved, 1 thread per process).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="$repo/.venv/bin/python"
model="${1:-$("$py" -c 'from ridgefill import demo; from ridgefill.sources import models
print(demo.demo_fit(models.fetch_model(models.DEFAULT_MODEL), None)[0])')}"
lengths="${2:-2048 4096}"
runs="${3:-5}"
out="${RF_OUT:-$here/results}"
mkdir -p "$out"
ttft=("$repo/.venv/bin/ridgefill" bench ttft --model "$model" --lengths $lengths --runs "$runs" --modes exact ridge
      --threads 1 --sinks 4 --tail 512 --ubatch 512 --paths bench --warmup "${RF_WARMUP:-on}")
