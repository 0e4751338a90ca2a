#!/usr/bin/env bash
# Bazel wrapper: checks the PyTorch oracle itself (gradcheck, init, safetensors io, schedule).
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/reference_selftest.py"
