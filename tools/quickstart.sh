#!/usr/bin/env bash
# The main Quick start job: installs what is missing, builds dtrain, starts a coordinator and two
# CPU workers on this machine (loopback only), submits deploy/examples/tiny.json with the dtrain
# CLI, watches it to the end, shows that the loss fell and where the weights are, and stops the
# services again (also on Ctrl-C or an error).
#
# Everything goes to runs/quickstart/ (emptied first): coordinator.db, logs/ (one file per
# service), data-w1/ and data-w2/ (the workers' --data_root: jobs/<job id>/model.safetensors).
# The coordinator listens on 127.0.0.1:${DTRAIN_PORT:-7070}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain

root=$PWD
out=$root/runs/quickstart
port=${DTRAIN_PORT:-7070}
address=127.0.0.1:$port
bin=$(bazel info bazel-bin 2>/dev/null)  # this output base's, whatever the bazel-bin link says
dtrain() { "$bin/client/dtrain" --coordinator="$address" "$@"; }
say() { echo "quickstart: $*"; }

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  say "port $port is in use (a coordinator already running?); stop it or set DTRAIN_PORT" >&2
  exit 1
fi
data=$(bash tools/make_demo_data.sh)  # data/demo.txt, where tiny.json's "dataset" points
rm -rf "$out"
mkdir -p "$out/logs"

pids=()
stop_services() {
  ((${#pids[@]})) || return 0
  say "stopping the coordinator and the workers"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
trap stop_services EXIT
trap 'exit 130' INT TERM

"$bin/coordinator/dtrain-coordinator" --listen="$address" --db="$out/coordinator.db" \
  >"$out/logs/coordinator.log" 2>&1 &
pids+=($!)
# Workers run from the repository root: relative dataset paths in job specs resolve from here.
for i in 1 2; do
  w=w$i
  "$bin/worker/dtrain-worker" --coordinator="$address" --worker_id="$w" --device=cpu \
    --threads=1 --host_label=local --advertise_address=127.0.0.1:$((port + i)) \
    --data_root="$out/data-$w" >"$out/logs/worker-$w.log" 2>&1 &
  pids+=($!)
done
say "coordinator on $address and workers w1, w2 (CPU, 1 thread each); logs in runs/quickstart/logs/"

for _ in $(seq 1 60); do
  idle=$(dtrain --json workers 2>/dev/null | grep -o '"state":"IDLE"' | wc -l || true)
  [ "$idle" -ge 2 ] && break
  sleep 0.5
done
if [ "${idle:-0}" -lt 2 ]; then
  say "the workers did not register within 30 s; see runs/quickstart/logs/" >&2
  exit 1
fi
dtrain workers
echo

job=$(dtrain --json submit deploy/examples/tiny.json | sed -E 's/^\{"id":"([^"]+)".*/\1/')
say "submitted deploy/examples/tiny.json as $job (training on $data); watching it"
status=0
dtrain watch "$job" || status=$?
echo
if [ "$status" -ne 0 ]; then
  say "$job did not succeed (dtrain watch exited $status); see runs/quickstart/logs/" >&2
  exit "$status"
fi

# The first and the last loss, from the job's replayed metrics.
losses=$(dtrain --json watch "$job" | grep '"step":{"step"' |
  sed -E 's/.*"step":\{"step":"[0-9]+","loss":([0-9.eE+-]+).*/\1/')
first=$(echo "$losses" | head -n 1)
last=$(echo "$losses" | tail -n 1)
output=$(dtrain --json status "$job" | sed -E 's/.*"output":"([^"]*)".*/\1/')
say "$(awk -v a="$first" -v b="$last" -v n="$(echo "$losses" | wc -l)" \
  'BEGIN { printf "loss %.4f -> %.4f over %d steps", a, b, n }')"
awk -v a="$first" -v b="$last" 'BEGIN { if (b < a) { print "quickstart: the loss fell"; exit 0 } else { print "quickstart: the loss did NOT fall"; exit 1 } }'
say "weights (GPT-2 safetensors, loadable by PyTorch): ${output#"$root/"}"
say "service logs in runs/quickstart/logs/; to keep the services running and submit jobs" \
  "yourself, see \"Running the services yourself\" in README.md"
