#!/usr/bin/env bash
# Bazel wrapper: runs a Python test (first argument) with Debian's python3, the one on Bazel's
# strict PATH (it has PyYAML from python3-yaml).
set -euo pipefail
exec python3 "$@"
