#!/usr/bin/env bash
# Coordinator load benchmark (docs/PERFORMANCE.md, "Coordinator"): for N = 100 and 1,000
# simulated workers heartbeating once a second over real gRPC (one connection each), the
# heartbeat latency p50/p99 over DURATION (default 20s) and the time to place a 512-rank job
# (dp=32 pp=4 tp=4; with 100 workers it cannot be placed, so a 96-rank 6x4x4 job is placed
# instead). Each run starts its own coordinator on a free loopback port with a fresh database.
#
#   tools/bench_coordinator.sh                 # N = 100 and 1000
#   WORKERS="1000 2000" SHARED=1 tools/bench_coordinator.sh
#   TLS=1 WORKERS=1000 tools/bench_coordinator.sh   # plaintext, then mutual TLS, per N
#
# SHARED=1 adds runs with every simulated worker on one shared connection (less client-side
# work: separates the simulator's cost from the coordinator's on a small machine).
# TLS=1 follows every run with the same run over mutual TLS (certificates from `dtrain certs
# init` in a temporary folder: the coordinator's, the shared worker one, the admin one).
# Extra arguments go to every heartbeat_load run. Prints the raw output, then a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //coordinator:dtrain-coordinator //tools/load:heartbeat_load //client:dtrain
bin=$(bazel info bazel-bin 2>/dev/null)  # this output base's, whatever the bazel-bin link says
duration=${DURATION:-20s}
results=$(mktemp)
run_log=$(mktemp)
certs=$(mktemp -d)
trap 'rm -rf "$results" "$run_log" "$certs"' EXIT
if [ "${TLS:-0}" = 1 ]; then "$bin/client/dtrain" certs init "$certs/ca" >/dev/null; fi

run() {  # workers, shared(0/1), tls(0/1), layouts
  local extra=()
  [ "$2" = 1 ] && extra+=(--shared_channel)
  [ "$3" = 1 ] && extra+=(--tls_dir="$certs/ca")
  echo "== $1 workers$([ "$2" = 1 ] && echo ", one shared connection")$([ "$3" = 1 ] &&
    echo ", mutual TLS"), $(uptime | sed 's/.*load/load/')"
  "$bin/tools/load/heartbeat_load" --coordinator_binary="$bin/coordinator/dtrain-coordinator" \
    --workers="$1" --duration="$duration" --layouts="$4" "${extra[@]}" "${@:5}" | tee "$run_log"
  grep '^RESULT' "$run_log" | sed "s/^RESULT/RESULT shared=$2/" >>"$results"
}

for n in ${WORKERS:-100 1000}; do
  layouts=32x4x4
  [ "$n" -lt 512 ] && layouts=32x4x4,6x4x4
  for shared in 0 $([ "${SHARED:-0}" = 1 ] && echo 1); do
    run "$n" "$shared" 0 "$layouts" "$@"
    if [ "${TLS:-0}" = 1 ]; then run "$n" "$shared" 1 "$layouts" "$@"; fi
  done
done

echo
echo "| workers | TLS | connections | heartbeats | hb p50 ms | hb p90 ms | hb p99 ms | hb max ms | errors | job (ranks) | submit -> PLACING ms | coordinator clock ms | -> RUNNING ms | hb p99 while placing ms (with assignment) | CPU % coordinator / load tool |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
awk '{
  for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  placing = v["placed"] == 1 ? v["placing_ms"] : "not placed (too few workers)"
  placing_hb = v["placed"] == 1 ? v["place_hb_p99_ms"] " (" v["place_assign_p99_ms"] ")" : "-"
  printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s / %s |\n",
    v["workers"], v["tls"] == 1 ? "mutual TLS" : "off", v["shared"] == 1 ? "1 shared" : "1 per worker",
    v["hb_count"], v["hb_p50_ms"], v["hb_p90_ms"], v["hb_p99_ms"], v["hb_max_ms"], v["hb_errors"], v["layout"], v["ranks"],
    placing, v["placing_coord_ms"], v["running_ms"], placing_hb, v["coordinator_cpu_pct"],
    v["tool_cpu_pct"]
}' "$results"
