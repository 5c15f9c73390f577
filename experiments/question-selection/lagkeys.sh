#!/usr/bin/env bash
# The lagged maps every selection run here reads: Qwen2.5-Coder-0.5B's activations at SPLIT (default 12) over 65,536
# calibration tokens, fitted with `fit --lag-keys`. Split 12's are calib-size's capture (experiments/calib-size/run.sh's
# first steps, without its needle runs); another split's go to WORK (the cache: 300-800 MB each). Made when missing
# (about 12 minutes on 2 cores); prints the GGUF's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
SPLIT=${SPLIT:-12}
M=$(.venv/bin/ridgefill model fetch qwen2.5-coder-0.5b)
if [ "$SPLIT" = 12 ]; then
  C=experiments/calib-size/results/qwen0.5b-s12-t65536
  STATS=$C/fit/stats.npz G=$C/fit/lagkeys.gguf LOG=$C/fit-lagkeys.txt
else
  W=${WORK:-$HOME/.cache/ridgefill/experiments/question-selection}
  STATS=$W/stats-s$SPLIT.npz G=$W/s$SPLIT-lagkeys.gguf LOG=experiments/question-selection/results/fit-s$SPLIT-lagkeys.txt
fi
mkdir -p "$(dirname $STATS)"
[ -f $STATS ] || .venv/bin/ridgefill calibrate "$M" --split $SPLIT --tokens 65536 --threads "${THREADS:-2}" \
  -o $STATS >&2
[ -f $G ] || .venv/bin/ridgefill fit "$M" --stats $STATS --lag-keys -o $G > $LOG
echo $G
