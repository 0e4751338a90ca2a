#!/usr/bin/env bash
# Bazel wrapper: runs the PyTorch oracle test against the dtrain-local built as a data dep.
# Usage (from Bazel): oracle_test.sh <path of dtrain-local>. PyTorch lives in Debian's python
# (/usr/bin/python3, python3-torch), not in whatever python3 is first on PATH.
set -euo pipefail
dir="$(dirname "$0")"
if [[ ! -x /usr/bin/python3 ]] || ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
  echo "oracle_test: FAILED: /usr/bin/python3 lacks torch/numpy (tools/setup.sh installs" \
       "python3-torch python3-numpy)" >&2
  exit 1
fi
exec /usr/bin/python3 "$dir/${ORACLE_SCRIPT:-oracle_test.py}" --dtrain_local "${1:?dtrain-local path}" "${@:2}"
