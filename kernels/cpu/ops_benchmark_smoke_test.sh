#!/usr/bin/env bash
# CI check that the kernel benchmarks run (docs/PERFORMANCE.md): every benchmark of
# ops_benchmark once, at the shortest time; it must exit 0 and report each one it lists. No
# timing is asserted. Usage (from Bazel): ops_benchmark_smoke_test.sh <ops_benchmark binary>.
set -euo pipefail
bin="${1:?ops_benchmark path}"
listed="$("$bin" --benchmark_list_tests | wc -l)"
out="$("$bin" --benchmark_min_time=0.001 2>&1)"
echo "$out"
ran="$(grep -c '^BM_' <<<"$out" || true)"
if [[ "$listed" -eq 0 || "$ran" -ne "$listed" ]]; then
  echo "ops_benchmark_smoke_test: FAILED: ${ran} results for ${listed} listed benchmarks" >&2
  exit 1
fi
