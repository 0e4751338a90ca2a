#!/usr/bin/env bash
# The Quick start job's speed: the services and spec of tools/quickstart.sh (a coordinator and
# four CPU workers of one thread on this host, mutual TLS, deploy/examples/quickstart-pp2-tp2.json)
# run with the binaries of BIN (a bazel-bin with client/dtrain, coordinator/dtrain-coordinator and
# worker/dtrain-worker built), so two builds (before and after a change) can be run alternately:
#
#   tools/bench_quickstart.sh BIN [PORT]
#
# Prints one JSON line: the median of the steps' tokens_per_s (what `dtrain watch` shows), the
# tokens/s of steps 2-200 by their wall clock, and the seconds from submit to the end. PORT
# (default 7170) and the 14 ports after it must be free. No setup, no build; data/demo.txt is made
# if missing. Everything else goes in a temporary directory, removed at exit.
set -euo pipefail
bin=$1
port=${2:-7170}
cd "$(dirname "$0")/.."
root=$PWD
bash tools/make_demo_data.sh >/dev/null
out=$(mktemp -d /tmp/bench_quickstart.XXXXXX)
pids=()
stop() {
  ((${#pids[@]})) && { kill -TERM "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; }
  rm -rf "$out"
}
trap stop EXIT
mkdir -p "$out/logs" "$out/checkpoints"
spec=$out/spec.json
sed "s|runs/quickstart/checkpoints|$out/checkpoints|" deploy/examples/quickstart-pp2-tp2.json >"$spec"
tls=$out/tls
"$bin/client/dtrain" certs init "$tls" >/dev/null
export DTRAIN_TLS_CA=$tls/ca.pem DTRAIN_TLS_CERT=$tls/admin.pem DTRAIN_TLS_KEY=$tls/admin.key
address=127.0.0.1:$port
dtrain() { "$bin/client/dtrain" --coordinator="$address" "$@"; }
"$bin/coordinator/dtrain-coordinator" --listen="$address" --db="$out/coordinator.db" \
  --metrics_listen="127.0.0.1:$((port + 10))" --tls_ca="$tls/ca.pem" \
  --tls_cert="$tls/coordinator.pem" --tls_key="$tls/coordinator.key" >"$out/logs/coordinator.log" 2>&1 &
pids+=($!)
for i in 0 1 2 3; do
  w=w$((i + 1))
  "$bin/worker/dtrain-worker" --coordinator="$address" --worker_id="$w" --device=cpu \
    --threads=1 --host_label=local --advertise_address=127.0.0.1:$((port + 1 + i)) \
    --metrics_listen="127.0.0.1:$((port + 11 + i))" --data_root="$out/data-$w" \
    --allowed_paths="$root/data,$out/checkpoints" --tls_ca="$tls/ca.pem" \
    --tls_cert="$tls/worker.pem" --tls_key="$tls/worker.key" >"$out/logs/worker-$w.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 1 120); do
  idle=$(dtrain --json workers 2>/dev/null | grep -o '"state":"IDLE"' | wc -l || true)
  [ "$idle" -ge 4 ] && break
  sleep 0.5
done
job=$(dtrain --json submit "$spec" | sed -E 's/^\{"id":"([^"]+)".*/\1/')
start=$(date +%s.%N)
dtrain watch "$job" >/dev/null
end=$(date +%s.%N)
dtrain --json watch "$job" | grep '^{"type":"step"' >"$out/steps.jsonl"
python3 - "$out/steps.jsonl" "$start" "$end" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
t = [s["time_unix_ms"] for s in steps]
tokens_per_step = 12 * 128  # the spec's batch_size * seq_len
print(json.dumps({
    "steps": len(steps),
    "median_tokens_per_s": round(statistics.median(s["tokens_per_s"] for s in steps)),
    "wall_tokens_per_s": round(tokens_per_step * (len(t) - 1) / ((t[-1] - t[0]) / 1000)),
    "submit_to_end_s": round(float(sys.argv[3]) - float(sys.argv[2]), 1)}))
PY
