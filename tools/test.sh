#!/usr/bin/env bash
# Runs every test of dtrain: installs what is missing (tools/setup.sh), then `bazel test //...`
# (unit tests, finite-difference kernel checks, the PyTorch oracle, the CUDA backend compiled and
# linked when /usr/local/cuda exists), then the sanitizer builds and the fuzz targets
# (docs/TESTING.md says what each covers, what it costs and why these subsets):
#   --config=asan  AddressSanitizer + UndefinedBehaviorSanitizer over ASAN_TESTS
#   --config=tsan  ThreadSanitizer over TSAN_TESTS (communication and coordinator)
#   tools/gpu_bundle_test.sh  the GPU check's bundle and its rehearsal on cpu-staging
#   tests/deploy/compose_test.sh  the compose stack in real docker, its image made from this
#                  build's binaries
#   tools/fuzz.sh  every libFuzzer target for FUZZ_SECONDS (20) each, after replaying its corpus
#                  (a smoke run inside CI's budget; longer runs by hand: docs/TESTING.md)
# Each phase prints how long it took ("test.sh: PHASE took N s", the figures docs/TESTING.md
# keeps). DTRAIN_SANITIZERS=0 skips the sanitizer builds, FUZZ_SECONDS=0 the fuzzing. Arguments
# go to the first `bazel test`. Ends with one line "N passed, M failed", counting every Bazel test of
# every build and every fuzz target.
#
#   tools/test.sh --quick   everyday work: every unit and oracle test, and a handful of
#                           end-to-end cases (QUICK_CASES), no docker, no sanitizers, no fuzzing
#                           (docs/TESTING.md: its cost on a warm build)
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

# Every unit test but ops_test: under -fsanitize=address,undefined g++ rounds one LayerNorm
# output differently and it misses its tolerance by 1e-6 (docs/TESTING.md).
# Nor the parallel layout matrices (parallel_trainer, sharded_checkpoint_reshard and their
# cpu-staging twins): minutes of instrumented arithmetic over the same trainer code that
# worker/daemon's tests run under ASan in every layout (parallel_job_test); the normal build
# runs them all.
# Nor the CUDA backend's test: --config=asan builds without CUDA (.bazelrc).
# Of the coordinator only its store (SQLite's C API, the state a restart reads), and nothing of
# the client: the rest of both handles memory through protobuf, Abseil and the standard library,
# their hostile input (specs, manifests, frames) is fuzzed under ASan by tools/fuzz.sh, and they
# were a third of this build's objects (docs/TESTING.md); the normal build runs their tests.
ASAN_TESTS=(-- //plan/... //common/... //worker/... //kernels/... //coordinator:job_store_test
            -//kernels/tests:ops_test -//kernels/cuda/... -//worker/parallel:parallel_trainer_staging_test
            -//worker/parallel:sharded_checkpoint_reshard_staging_test
            -//worker/parallel:parallel_trainer_test
            -//worker/parallel:sharded_checkpoint_reshard_test)
# Not the gRPC transport's cases (TSAN_FILTER) nor the coordinator tests that parse a job spec
# (job_manager, recovery, coordinator_service, coordinator_metrics): with Debian's uninstrumented
# gRPC and protobuf, TSan cannot see gRPC's callback ordering and crashes iterating a protobuf
# map (docs/TESTING.md).
TSAN_TESTS=(//worker/comm:all //plan:placement_test //coordinator/policy:failure_report_test
            //coordinator:job_store_test //coordinator:job_notifier_test
            //coordinator:worker_registry_test)
TSAN_FILTER='-*Grpc*:*/Shm:*/Shm_*:*/TlsSockets:*/TlsSockets_*:TlsLink.*:ShmTransport.*:PeerDeath.*:*KilledProcess*:JobSecret.*:RankDiagnosis.*'

# The binaries of the dtrain image (deploy/docker/Dockerfile) for the compose phase.
IMAGE_BINARIES=(//coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain
                //worker/parallel:dtrain-export)

image_binaries() {  # Builds IMAGE_BINARIES without CUDA and copies them into the folder $1.
  bazel build --define=cuda=off "${IMAGE_BINARIES[@]}" || return 1
  local t p
  for t in "${IMAGE_BINARIES[@]}"; do
    p=${t#//}
    cp "bazel-bin/${p%%:*}/${p#*:}" "$1/" || return 1
  done
}

# --quick: the end-to-end cases that cover the most of the service in the least time.
QUICK_CASES=(happy_path multi_worker recovery_spare tls cli_offline)
QUICK_TESTS=()
for c in "${QUICK_CASES[@]}"; do QUICK_TESTS+=("//tests/integration:${c}_test"); done

passed=0
failed=0
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
FAIL_RE='^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)'
count() {  # Adds the Bazel summary lines of $log to the totals.
  passed=$((passed + $(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")))
  failed=$((failed + $(grep -cE "$FAIL_RE" "$log")))
}
phase_start=0  # setup.sh ran from the script's start
phase_done() {  # Prints how long the phase named $1 took, then starts the next one's clock.
  echo "test.sh: $1 took $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}
run_bazel() {  # bazel test ARGS..., counted; a build that fails without a test summary counts 1
  bazel test --test_summary=short "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  count
  if ((rc != 0)); then
    status=1
    grep -qE "$FAIL_RE" "$log" || failed=$((failed + 1))
  fi
}

if [[ ${1:-} == --quick ]]; then
  shift
  run_bazel "$@" -- //... -//tests/integration/... "${QUICK_TESTS[@]}"
  echo
  echo "${passed} passed, ${failed} failed"
  exit "$status"
fi

phase_done setup
# With the sanitizers on, the unit tests of ASAN_TESTS run in the ASan build only: each is
# compiled, linked and run once, not once more at -O2 (docs/TESTING.md: what that saved a cold
# run). The normal build still builds every target (binaries, benchmarks, the CUDA backend) and
# runs every other test.
main_tests=(-- //...)
if [[ ${DTRAIN_SANITIZERS:-1} != 0 ]]; then
  asan_expr=""
  for p in "${ASAN_TESTS[@]:1}"; do
    if [[ $p == -* ]]; then asan_expr+=" - ${p#-}"; else asan_expr+="${asan_expr:+ + }$p"; fi
  done
  mapfile -t asan_only < <(bazel query "tests($asan_expr)" 2>/dev/null)
  if ((${#asan_only[@]} == 0)); then
    echo "test.sh: bazel query of ASAN_TESTS found no tests; running every test in both builds"
  else
    main_tests=(-- //... "${asan_only[@]/#/-}")
  fi
fi
run_bazel "$@" "${main_tests[@]}"
phase_done "bazel test //..."
# The GPU check's rehearsal (tools/gpu_bundle_test.sh) from a bundle of the build just tested:
# the check that runs when a GPU is lent must keep working where there is none.
bundle_dir=$(mktemp -d)
if GPU_BUNDLE_MODE=fastbuild tools/gpu_bundle_test.sh "$bundle_dir/gpu-bundle"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
fi
rm -rf "$bundle_dir"
phase_done "gpu bundle rehearsal"
# The compose stack in real docker (tests/deploy/compose_test.sh), its image made from this
# build's binaries without CUDA (`--define=cuda=off` relinks the worker; every other object is
# the one just tested) rather than by a second Bazel build inside docker, which cost a fresh
# machine 10 to 20 minutes (`bazel test //tests/deploy:compose_test` still runs that one).
image_dir=$(mktemp -d)
if image_binaries "$image_dir" && COMPOSE_TEST_BINARIES=$image_dir tests/deploy/compose_test.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
fi
rm -rf "$image_dir"
phase_done compose
if [[ ${DTRAIN_SANITIZERS:-1} != 0 ]]; then
  # --build_tests_only: the tests and what they need, not every binary and benchmark the
  # patterns name (those are built, and their smoke tests run, in the normal build).
  run_bazel --config=asan --keep_going --build_tests_only "${ASAN_TESTS[@]}"
  phase_done asan
  run_bazel --config=tsan --keep_going --build_tests_only --test_filter="$TSAN_FILTER" \
    "${TSAN_TESTS[@]}"
  phase_done tsan
fi
if [[ ${FUZZ_SECONDS:-20} != 0 ]]; then
  tools/fuzz.sh --seconds "${FUZZ_SECONDS:-20}" 2>&1 | tee "$log"
  fuzz_rc=${PIPESTATUS[0]}
  passed=$((passed + $(grep -cE '^fuzz.sh: [a-z]+ PASSED' "$log")))
  fuzz_failed=$(grep -cE '^fuzz.sh: [a-z]+ FAILED' "$log")
  if ((fuzz_rc != 0)); then
    status=1
    ((fuzz_failed > 0)) || fuzz_failed=1  # it did not build
  fi
  failed=$((failed + fuzz_failed))
  phase_done fuzz
fi
echo
echo "${passed} passed, ${failed} failed"
exit "$status"
