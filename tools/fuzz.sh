#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs
# each one for a bounded time over its seed corpus (fuzz/corpus/<target>/). Exits non-zero when a
# target does not build or finds a crash, a leak, undefined behaviour or a slow input; the input
# that did it is left in fuzz/out/artifacts/ (docs/TESTING.md says how to keep it as a
# regression input).
#
#   tools/fuzz.sh                       # every target, FUZZ_SECONDS (60) each
#   tools/fuzz.sh --seconds 10 spec     # one target, 10 s
#   tools/fuzz.sh --build-only          # only compile (fuzz/out/bin/<target>_fuzzer)
#   tools/fuzz.sh --replay              # run each target once over its corpus, no fuzzing
#
# Why not Bazel: the rest of the build uses g++, and pointing Bazel's autoconfigured toolchain
# at clang would reconfigure it for every build sharing the output base. The targets need few
# sources, so this compiles them (and the protos they read) with clang++ directly against the
# system libraries, a few objects at a time.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
mode=fuzz
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build-only) mode=build; shift ;;
    --replay) mode=replay; shift ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

# The sources each target links, besides fuzz/<target>_fuzzer.cc (gen/ = generated protos).
declare -A SOURCES=(
  [spec]="plan/spec_json.cc plan/spec_bounds.cc plan/job_plan.cc plan/checkpoint_plan.cc plan/memory.cc
          plan/ranks.cc common/rank_numbering.cc plan/stage_cuts.cc
          plan/schedule.cc plan/simulate.cc plan/ready_work.cc plan/spec_enums.cc
          plan/format_bytes.cc
          gen/proto/job.pb.cc gen/proto/plan.pb.cc gen/proto/model.pb.cc"
  [submit]="coordinator/submit_spec.cc plan/spec_json.cc plan/spec_bounds.cc plan/job_plan.cc
            plan/checkpoint_plan.cc
            plan/memory.cc plan/ranks.cc common/rank_numbering.cc plan/stage_cuts.cc
            plan/schedule.cc plan/simulate.cc plan/ready_work.cc plan/spec_enums.cc
            plan/format_bytes.cc
            gen/proto/coordinator.pb.cc gen/proto/peer.pb.cc gen/proto/job.pb.cc
            gen/proto/plan.pb.cc gen/proto/model.pb.cc"
  [safetensors]="worker/model/safetensors.cc worker/model/header_json.cc common/files.cc"
  [manifest]="worker/parallel/manifest.cc worker/model/checkpoint_dir.cc worker/model/held_directory.cc
              worker/model/config.cc worker/model/config_proto.cc
              worker/model/parameter_layout.cc worker/model/safetensors.cc
              worker/model/header_json.cc common/files.cc common/job_paths.cc
              gen/proto/checkpoint.pb.cc gen/proto/model.pb.cc"
  [token]="worker/model/token_dataset.cc common/files.cc"
  [frame]="worker/comm/grpc/frame_codec.cc worker/comm/inbox.cc worker/comm/transport.cc
           gen/proto/peer.pb.cc"
)
ALL_TARGETS=(spec submit safetensors manifest token frame)
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [[ -n "${SOURCES[$t]:-}" ]] || { echo "fuzz.sh: no target '$t' (${ALL_TARGETS[*]})" >&2; exit 2; }
done

OUT=fuzz/out
mkdir -p "$OUT/gen" "$OUT/obj" "$OUT/bin" "$OUT/artifacts"
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
# Every object is instrumented for coverage (fuzzer-no-link), so the fuzzer sees the parsers'
# branches; the system libraries (protobuf's JSON reader, Abseil) are not.
CXXFLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -I. -I"$OUT/gen" "${SAN[@]}"
          -fsanitize=fuzzer-no-link)
LIBS=(-lgrpc++ -lgrpc -lgpr -lprotobuf -lxxhash
      -labsl_statusor -labsl_status -labsl_cord -labsl_cordz_info -labsl_cord_internal
      -labsl_cordz_functions -labsl_cordz_handle -labsl_exponential_biased -labsl_hash
      -labsl_city -labsl_low_level_hash -labsl_raw_hash_set -labsl_hashtablez_sampler
      -labsl_synchronization -labsl_graphcycles_internal -labsl_stacktrace -labsl_symbolize
      -labsl_debugging_internal -labsl_demangle_internal -labsl_malloc_internal -labsl_time
      -labsl_civil_time -labsl_time_zone -labsl_str_format_internal -labsl_strings
      -labsl_strings_internal -labsl_int128 -labsl_strerror -labsl_bad_optional_access
      -labsl_bad_variant_access -labsl_throw_delegate -labsl_base -labsl_spinlock_wait
      -labsl_raw_logging_internal -labsl_log_severity -lpthread)

# Protos: regenerated when a .proto is newer than its output.
for p in proto/*.proto; do
  out="$OUT/gen/${p%.proto}.pb.cc"
  if [[ ! "$out" -nt "$p" ]]; then
    protoc -I. --cpp_out="$OUT/gen" "$p" || { echo "fuzz.sh: protoc $p failed" >&2; exit 1; }
  fi
done

# Objects: every source of the chosen targets, compiled on each run (headers change too often
# to trust timestamps), one per core at a time.
compile() {  # SOURCE -> fuzz/out/obj/<source with / as _>.o
  local src=$1 path=$1
  [[ $src == gen/* ]] && path="$OUT/$src"
  clang++ "${CXXFLAGS[@]}" -c "$path" -o "$OUT/obj/${src//\//_}.o" ||
    { echo "fuzz.sh: compiling $src failed" >&2; return 1; }
}
all_sources=()
for t in "${targets[@]}"; do all_sources+=("fuzz/${t}_fuzzer.cc" ${SOURCES[$t]}); done
mapfile -t unique < <(printf '%s\n' "${all_sources[@]}" | sort -u)
start=$SECONDS
pids=()
build_ok=1
for src in "${unique[@]}"; do
  compile "$src" &
  pids+=($!)
  if ((${#pids[@]} >= $(nproc))); then
    wait "${pids[0]}" || build_ok=0
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || build_ok=0; done
((build_ok)) || exit 1
for t in "${targets[@]}"; do
  objs=()
  for s in fuzz/${t}_fuzzer.cc ${SOURCES[$t]}; do objs+=("$OUT/obj/${s//\//_}.o"); done
  clang++ -fsanitize=fuzzer "${SAN[@]}" "${objs[@]}" "${LIBS[@]}" -o "$OUT/bin/${t}_fuzzer" ||
    { echo "fuzz.sh: linking ${t}_fuzzer failed" >&2; exit 1; }
done
echo "fuzz.sh: built ${targets[*]} in $((SECONDS - start)) s"
[[ $mode == build ]] && exit 0

failed=()
for t in "${targets[@]}"; do
  seeds=fuzz/corpus/$t
  work="$OUT/corpus/$t"  # new inputs found go here, never into the committed corpus
  mkdir -p "$work"
  args=(-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
        -artifact_prefix="$OUT/artifacts/${t}-")
  if [[ $mode == replay ]]; then
    args+=(-runs=0 "$seeds")
  else
    args+=(-max_total_time="$seconds" "$work" "$seeds")
  fi
  if ! "$OUT/bin/${t}_fuzzer" "${args[@]}" >"$OUT/${t}.log" 2>&1; then
    failed+=("$t")
    tail -n 60 "$OUT/${t}.log"
    echo "fuzz.sh: $t FAILED"
  else
    echo "fuzz.sh: $t PASSED ($(grep -oE 'number_of_executed_units: [0-9]+' "$OUT/${t}.log" |
      grep -oE '[0-9]+') inputs, $(grep -oE 'cov: [0-9]+' "$OUT/${t}.log" | tail -n 1))"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED ${failed[*]} (inputs in $OUT/artifacts/, logs in $OUT/<target>.log)"
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets ran clean"
