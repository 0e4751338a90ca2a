#!/usr/bin/env bash
# Checks tools/gpu_bundle.sh's folder on this (Debian) machine as a non-Debian GPU machine would
# see it: in a private mount namespace (unshare -m; as root, or -r where user namespaces are
# allowed) the system's library folder /usr/lib/x86_64-linux-gnu (where Debian's gRPC,
# protobuf, Abseil, OpenBLAS, OpenSSL and glibc live) is hidden under an empty tmpfs, and every
# bundled binary must still start (--version; ops_test lists its tests) with the bundle's loader
# and libraries, plus CUDA's from /usr/local/cuda/lib64. Then gpu_check.sh, run from the bundle
# on this GPU-less machine, must print exactly one line and exit 0, and its rehearsal
# (--rehearse: every step but throughput on cpu-staging, from a copy of the bundle elsewhere)
# must pass.
#
#   tools/gpu_bundle_test.sh [DIR]     # builds DIR (default gpu-bundle) first
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
tools/gpu_bundle.sh "$out"
out=$(cd "$out" && pwd)
"$out/run" dtrain --version > /dev/null  # unpacks the gzipped libraries (and starts one binary)
loader=$(ls "$out"/lib/ld-linux-*.so.* | head -1)
cuda=${CUDA_LIB_DIR:-/usr/local/cuda/lib64}

# Inside the namespace no program of the system can start once the folder is hidden: only the
# shell that is already running, which execs the bundle's loader directly.
unshare_flags=-m
[[ $(id -u) == 0 ]] || unshare_flags=-rm
unshare $unshare_flags sh -c '
  set -e
  mount -t tmpfs none /usr/lib/x86_64-linux-gnu
  # The control: without the bundle on the library path the same binary cannot start.
  if "$1" --library-path "$3" "$2/bin/dtrain" --version > /dev/null 2>&1; then
    echo "gpu_bundle_test: dtrain started without the bundle: the system libraries are not hidden" >&2
    exit 1
  fi
  for b in dtrain-local dtrain-worker dtrain-coordinator dtrain; do
    "$1" --library-path "$2/lib:$3" "$2/bin/$b" --version > /dev/null
    echo "gpu_bundle_test: $b starts with the system libraries hidden"
  done
  "$1" --library-path "$2/lib:$3" "$2/bin/ops_test" --gtest_list_tests > /dev/null
  echo "gpu_bundle_test: ops_test starts with the system libraries hidden"
' hidden "$loader" "$out" "$cuda"

lines=$("$out/gpu_check.sh")
rc=$?
if [[ $rc != 0 || $(printf '%s\n' "$lines" | wc -l) != 1 ]]; then
  echo "gpu_bundle_test: gpu_check.sh without a GPU: exit $rc, output:" >&2
  printf '%s\n' "$lines" >&2
  exit 1
fi
echo "gpu_bundle_test: gpu_check.sh without a GPU: \"$lines\", exit 0"
# The rehearsal: every step but throughput on cpu-staging, from a copy of the bundle outside the
# repository, so the launcher, the harness's flags and the bundle's layout are what a GPU run uses.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -a "$out/." "$copy/"
if ! "$copy/gpu_check.sh" --rehearse; then
  echo "gpu_bundle_test: gpu_check.sh --rehearse failed" >&2
  exit 1
fi
echo "gpu_bundle_test: ok"
