#!/usr/bin/env bash
# Installs every Debian package dtrain needs to build, test and benchmark. Idempotent: packages
# already present are skipped, so both Quick start commands can call it on every run.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java  # Bazel 4.2.3 and the rules_java it needs, both local
  g++ pkg-config
  libabsl-dev                # Abseil 20220623 (Status, flags, strings, synchronization)
  libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  libopenblas-dev            # CPU GEMM; also makes PyTorch use OpenBLAS instead of reference BLAS
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libcivetweb-dev
  libssl-dev                 # OpenSSL: TLS certificates (common/tls, dtrain certs)
  libxxhash-dev              # XXH3, the checksum of sharded checkpoint files
  prometheus-cpp-dev         # Prometheus client: registry, metrics, the /metrics Exposer
  python3-torch python3-numpy  # numerical oracle and speed peer (run with /usr/bin/python3)
  iperf3                     # loopback TCP baseline for tools/bench_allreduce.py
  prometheus                 # promtool, which checks our /metrics output in tests
  clang libclang-rt-14-dev   # tools/fuzz.sh: libFuzzer targets, -fsanitize=fuzzer,address
  docker.io docker-compose debootstrap python3-yaml  # tests/deploy: the compose stack, for real
  iptables iproute2 util-linux  # partition_not_a_crime: unshare -rn, ip, iptables in its netns
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
