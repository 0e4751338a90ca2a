#!/usr/bin/env bash
# CI's run of the coordinator load benchmark in a short mode: heartbeat_load against a
# dtrain-coordinator it starts, with 64 workers and a 16-rank job. It checks that the tool works
# and what is not a timing: every heartbeat answered, the coordinator's pace (64 workers at
# --max_heartbeat_rate=100: every 640 ms instead of 200 ms, which the workers follow), the job
# placed and RUNNING, and no rank sent more than 2 KiB for its assignment. The figures of
# docs/PERFORMANCE.md "Coordinator" come from full runs (tools/bench_coordinator.sh).
set -euo pipefail
tool=tools/load/heartbeat_load
coordinator=coordinator/dtrain-coordinator
out=$("$tool" --coordinator_binary="$coordinator" --workers=64 --workers_per_host=4 \
  --interval=200ms --max_heartbeat_rate=100 --warmup=1s --duration=2s --layouts=4x2x2 \
  --connections=4)
echo "$out"
result=$(grep '^RESULT' <<<"$out")
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$result"; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(field placed)" = 1 ] || fail "the 16-rank job was not placed"
[ "$(field hb_errors)" = 0 ] || fail "heartbeats failed: $(field hb_errors)"
[ "$(field interval_ms)" = 640 ] || fail "interval $(field interval_ms) ms, want 640 (the pace)"
[ "$(field running_ms)" != - ] || fail "the job never reached RUNNING"
bytes=$(field assignment_bytes)
[ "$bytes" -gt 0 ] && [ "$bytes" -le 2048 ] || fail "a rank was sent $bytes bytes"
echo "PASS"
