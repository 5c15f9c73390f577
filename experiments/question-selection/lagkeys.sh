#!/usr/bin/env bash
# The lagged maps every selection run here reads: calib-size's capture of Qwen2.5-Coder-0.5B at split 12
# (65,536 calibration tokens) fitted with `fit --lag-keys` (experiments/calib-size/run.sh's first steps, without its
# needle runs). Made when missing; prints the GGUF's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
C=experiments/calib-size/results/qwen0.5b-s12-t65536
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
mkdir -p $C/fit
[ -f $C/fit/stats.npz ] || .venv/bin/ridgefill calibrate "$M" --split 12 --tokens 65536 --threads "${THREADS:-2}" \
  -o $C/fit/stats.npz >&2
[ -f $C/fit/lagkeys.gguf ] || .venv/bin/ridgefill fit "$M" --stats $C/fit/stats.npz --lag-keys -o $C/fit/lagkeys.gguf \
  > $C/fit-lagkeys.txt
echo $C/fit/lagkeys.gguf
