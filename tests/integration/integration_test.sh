#!/usr/bin/env bash
# Bazel wrapper: runs one case of integration_test.py (Python standard library only; the python3
# on Bazel's strict PATH is Debian's) with the binaries and examples built as data.
set -euo pipefail
exec python3 "$(dirname "$0")/integration_test.py" "$@"
