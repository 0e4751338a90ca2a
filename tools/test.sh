#!/usr/bin/env bash
# Runs every test of dtrain: installs what is missing (tools/setup.sh), then `bazel test //...`
# (unit tests, finite-difference kernel checks, the PyTorch oracle, the CUDA backend compiled and
# linked when /usr/local/cuda exists). Ends with one line "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

log=$(mktemp)
bazel test //... --test_summary=short "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
rm -f "$log"
echo
echo "${passed} passed, ${failed} failed"
exit "$status"
