#!/usr/bin/env bash
# The main Quick start job: installs what is missing, builds dtrain, and trains the demo model
# (4 layers, width 256, byte-level) on the CPU with dtrain-local, showing the loss fall.
# Outputs go to runs/quickstart/: train.log, steps.jsonl, model.safetensors, checkpoints/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //worker:dtrain-local

out=runs/quickstart
mkdir -p "$out"
data=$(bash tools/make_demo_data.sh)
steps=${STEPS:-60}
echo "quickstart: training on $data for $steps steps (CPU); log in $out/train.log"
bazel-bin/worker/dtrain-local --device=cpu --data="$data" --steps="$steps" --batch=8 --seq=128 \
  --max_lr=2e-3 --warmup_steps=10 --log_json="$out/steps.jsonl" \
  --checkpoint_dir="$out/checkpoints" --save="$out/model.safetensors" 2>&1 | tee "$out/train.log"

first=$(head -n 1 "$out/steps.jsonl" | sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/')
last=$(tail -n 1 "$out/steps.jsonl" | sed -E 's/.*"loss": ([0-9.e+-]+).*/\1/')
echo
echo "quickstart: loss ${first} -> ${last} over ${steps} steps"
awk -v a="$first" -v b="$last" 'BEGIN { if (b < a) { print "quickstart: the loss fell"; exit 0 } else { print "quickstart: the loss did NOT fall"; exit 1 } }'
echo "quickstart: weights in $out/model.safetensors (GPT-2 names, loadable by PyTorch), training state in $out/checkpoints/"
