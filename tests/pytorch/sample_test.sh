#!/usr/bin/env bash
# Bazel wrapper: sample_test.py under Debian's /usr/bin/python3 (torch, numpy).
# Usage (from Bazel): sample_test.sh DTRAIN_SAMPLE ENCODER_JSON DTRAIN (the tokenizer is
# ENCODER_JSON's directory).
set -euo pipefail
if ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
  echo "sample_test: FAILED: /usr/bin/python3 lacks torch/numpy (tools/setup.sh)" >&2
  exit 1
fi
exec /usr/bin/python3 "$(dirname "$0")/sample_test.py" "${1:?dtrain-sample}" "$(dirname "${2:?encoder.json}")" "${3:?dtrain}"
