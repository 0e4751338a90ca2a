#!/usr/bin/env bash
# Collects what tools/gpu_check.sh needs on a GPU machine that is not Debian: the dtrain binaries
# (-c opt, stripped) and every shared library they load except CUDA's and the driver's (gRPC,
# protobuf, Abseil, OpenBLAS, OpenSSL, ..., and glibc with its loader, so the machine's own
# glibc version does not matter), into one folder (gpu-bundle/, ignored by git) with a launcher:
#
#   tools/gpu_bundle.sh [DIR]          # default gpu-bundle; refuses a result over 60 MiB
#   GPU_BUNDLE_MODE=fastbuild tools/gpu_bundle.sh DIR   # the test suite's own build (its rehearsal)
#   DIR/run dtrain-local --version     # on the GPU machine: the bundled loader and libraries
#                                      # (the first run unpacks the gzipped large ones),
#                                      # then CUDA from $CUDA_LIB_DIR (/usr/local/cuda/lib64)
#   DIR/gpu_check.sh                   # the check itself (tools/gpu_check.sh, copied here)
#
# CUDA (libcudart, libcublas, libcublasLt) and the driver (libcuda) come from the GPU machine:
# the launcher puts $CUDA_LIB_DIR after the bundle on the library path and the loader's cache
# (/etc/ld.so.cache) finds the driver. tools/gpu_bundle_test.sh runs the binaries with the
# system's library directories hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
limit_mib=60

targets=(//worker:dtrain-local //worker:dtrain-worker //coordinator:dtrain-coordinator
         //client:dtrain //kernels/tests:ops_test)
mode=${GPU_BUNDLE_MODE:-opt}
bazel build -c "$mode" "${targets[@]}" >&2
bin_dir=$(bazel info -c "$mode" bazel-bin 2>/dev/null)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
built=()
for t in "${targets[@]}"; do
  path="$bin_dir/$(echo "${t#//}" | tr ':' '/')"
  built+=("$path")
  install -m 755 "$path" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$path")"
done

# Every library the binaries load, transitively (ldd resolves the whole tree, on the built
# files: their RUNPATH finds the test libraries Bazel links dynamically), minus CUDA's and the
# driver's; the loader itself under its own name.
is_cuda() { case "$(basename "$1")" in libcuda.*|libcudart*|libcublas*|libnvidia*|libnvrtc*) return 0;; esac; return 1; }
for b in "${built[@]}"; do
  ldd "$b" | awk '/=> \// { print $3 } /ld-linux/ && !/=>/ { print $1 }'
done | sort -u | while read -r lib; do
  if is_cuda "$lib"; then continue; fi
  cp -L "$lib" "$out/lib/$(basename "$lib")"
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
# OpenBLAS alone is 36 MB (kernels for every x86 generation): libraries over 2 MiB travel
# gzipped (the bundle then leaves room for the repository within the device tool's 64 MiB), and
# the launcher unpacks them on its first run.
for lib in "$out"/lib/*; do
  if (($(stat -c %s "$lib") > 2 * 1024 * 1024)); then gzip -9 "$lib"; fi
done
loader=$(basename "$(ls "$out"/lib/ld-linux-*.so.* | head -1)")

cat > "$out/run" <<LAUNCHER
#!/bin/sh
# $out/run BINARY ARGS...: BINARY from bin/, with this folder's loader and libraries first, then
# CUDA from \$CUDA_LIB_DIR (default /usr/local/cuda/lib64); the driver from the loader's cache.
here=\$(cd "\$(dirname "\$0")" && pwd)
for gz in "\$here"/lib/*.gz; do
  [ -e "\$gz" ] || break
  gzip -dc "\$gz" > "\${gz%.gz}.part" && mv "\${gz%.gz}.part" "\${gz%.gz}" && rm -f "\$gz"
done
name=\$1
shift
exec "\$here/lib/$loader" --argv0 "\$name" \\
  --library-path "\$here/lib:\${CUDA_LIB_DIR:-/usr/local/cuda/lib64}" "\$here/bin/\$name" "\$@"
LAUNCHER
chmod 755 "$out/run"
install -m 755 tools/gpu_check.sh tools/gpt2_throughput.py "$out/"
# The multi-worker step's harness and specs, laid out as in the repository (the harness runs
# ../../tools/demo_corpus.py from its own folder).
mkdir -p "$out/tests/integration" "$out/tools" "$out/examples"
cp tests/integration/*.py "$out/tests/integration/"
cp tools/demo_corpus.py "$out/tools/"
cp deploy/examples/*.json "$out/examples/"

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu_bundle: $out: $(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries, $((size_kib / 1024)) MiB"
if ((size_kib > limit_mib * 1024)); then
  echo "gpu_bundle: $out is over $limit_mib MiB" >&2
  exit 1
fi
