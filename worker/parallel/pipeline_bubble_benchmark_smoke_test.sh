#!/usr/bin/env bash
# CI check that the pipeline bubble benchmark runs (docs/PERFORMANCE.md, "Pipeline bubble"): a
# tiny model on 2 stages, 2 steps; it must exit 0 and print a row per schedule. No timing is
# asserted. Usage (from Bazel): pipeline_bubble_benchmark_smoke_test.sh <benchmark binary>.
set -euo pipefail
out="$("${1:?benchmark path}" --stages=2 --micro_batches=4 --steps=2 --n_embd=32 --seq=16 \
  --layers_per_stage=2 2>&1)"
echo "$out"
for schedule in gpipe 1f1b 1f1b/textbook interleaved zb-h1 zb-h1/ready; do
  if ! grep -q "^${schedule} " <<<"$out"; then
    echo "pipeline_bubble_benchmark_smoke_test: FAILED: no row for ${schedule}" >&2
    exit 1
  fi
done
if ! grep -q "zb-h1/ready idle / 1f1b/textbook idle = " <<<"$out"; then
  echo "pipeline_bubble_benchmark_smoke_test: FAILED: no ratio of ZB-H1 to the textbook 1F1B" >&2
  exit 1
fi
