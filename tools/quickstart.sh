#!/usr/bin/env bash
# The main Quick start job: installs what is missing, builds dtrain, makes a cluster CA and
# certificates (once), starts a coordinator and four CPU workers on this machine (loopback only;
# mutual TLS on every gRPC channel), submits deploy/examples/quickstart-pp2-tp2.json (two
# pipeline stages of two tensor-parallel ranks: activations, gradients and all-reduces flow
# between the four worker processes over gRPC) with the dtrain CLI and the admin certificate,
# watches it to the end, shows that the loss fell, a worker's Prometheus metrics, where the
# weights are and text sampled from them (`dtrain sample JOB`), and stops the services again (also on Ctrl-C or an error). QUICKSTART_SPEC=FILE
# runs another spec.
#
# Everything goes to runs/quickstart/ (emptied first, but for tls/): tls/ (`dtrain certs init`:
# ca.pem, and NAME.pem + NAME.key for coordinator, worker, admin, viewer; made on the first run
# and kept), coordinator.db, logs/ (one file per service), checkpoints/ (the job's sharded
# checkpoints and the exported model.safetensors), data-w*/ (the workers' --data_root). The
# coordinator listens on 127.0.0.1:${DTRAIN_PORT:-7070}, worker i's peer service on port+i and
# its metrics on port+10+i.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain

root=$PWD
out=$root/runs/quickstart
port=${DTRAIN_PORT:-7070}
spec=${QUICKSTART_SPEC:-deploy/examples/quickstart-pp2-tp2.json}
workers=(w1 w2 w3 w4)
address=127.0.0.1:$port
bin=$(bazel info bazel-bin 2>/dev/null)  # this output base's, whatever the bazel-bin link says
tls=$out/tls
# The CLI as the admin (submit, cancel, and everything a viewer may do).
export DTRAIN_TLS_CA=$tls/ca.pem DTRAIN_TLS_CERT=$tls/admin.pem DTRAIN_TLS_KEY=$tls/admin.key
dtrain() { "$bin/client/dtrain" --coordinator="$address" "$@"; }
say() { echo "quickstart: $*"; }

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  say "port $port is in use (a coordinator already running?); stop it or set DTRAIN_PORT" >&2
  exit 1
fi
data=$(bash tools/make_demo_data.sh)  # data/demo.txt, where the examples' "dataset" points
mkdir -p "$out"
find "$out" -mindepth 1 -maxdepth 1 ! -name tls -exec rm -rf {} +
# Jobs may use data/ and checkpoints/ (--allowed_paths), not tls/: no spec can read a key.
mkdir -p "$out/logs" "$out/checkpoints"
if [ ! -e "$tls/ca.pem" ]; then
  "$bin/client/dtrain" certs init "$tls" >"$out/logs/certs.log" 2>&1 ||
    { cat "$out/logs/certs.log" >&2; exit 1; }
  say "made a cluster CA and certificates in runs/quickstart/tls/ (dtrain certs init)"
fi

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
  --metrics_listen="127.0.0.1:$((port + 10))" --tls_ca="$tls/ca.pem" \
  --tls_cert="$tls/coordinator.pem" --tls_key="$tls/coordinator.key" \
  >"$out/logs/coordinator.log" 2>&1 &
pids+=($!)
# Workers run from the repository root: relative dataset paths in job specs resolve from here.
for i in "${!workers[@]}"; do
  w=${workers[$i]}
  "$bin/worker/dtrain-worker" --coordinator="$address" --worker_id="$w" --device=cpu \
    --threads=1 --host_label=local --advertise_address=127.0.0.1:$((port + 1 + i)) \
    --metrics_listen="127.0.0.1:$((port + 11 + i))" --data_root="$out/data-$w" \
    --allowed_paths="$root/data,$out/checkpoints" --tls_ca="$tls/ca.pem" \
    --tls_cert="$tls/worker.pem" --tls_key="$tls/worker.key" >"$out/logs/worker-$w.log" 2>&1 &
  pids+=($!)
done
say "coordinator on $address and workers ${workers[*]} (CPU, 1 thread each), mutual TLS" \
  "with runs/quickstart/tls/; logs in runs/quickstart/logs/"

for _ in $(seq 1 60); do
  idle=$(dtrain --json workers 2>/dev/null | grep -o '"state":"IDLE"' | wc -l || true)
  [ "$idle" -ge "${#workers[@]}" ] && break
  sleep 0.5
done
if [ "${idle:-0}" -lt "${#workers[@]}" ]; then
  say "the workers did not register within 30 s; see runs/quickstart/logs/" >&2
  exit 1
fi
dtrain workers
echo

dtrain plan "$spec"
echo
job=$(dtrain --json submit "$spec" | sed -E 's/^\{"id":"([^"]+)".*/\1/')
# The spec's own dataset (QUICKSTART_SPEC may name another than the demo corpus).
dataset=$(sed -nE 's/.*"dataset": *"([^"]+)".*/\1/p' "$spec" | head -1)
say "submitted $spec as $job (training on ${dataset:-$data}); watching it"
status=0
dtrain watch "$job" || status=$?
echo
if [ "$status" -ne 0 ]; then
  say "$job did not succeed (dtrain watch exited $status); see runs/quickstart/logs/" >&2
  exit "$status"
fi

# The first and the last loss, from the job's replayed metrics.
losses=$(dtrain --json watch "$job" | grep '^{"type":"step"' |
  sed -E 's/.*"loss":([0-9.eE+-]+).*/\1/')
first=$(echo "$losses" | head -n 1)
last=$(echo "$losses" | tail -n 1)
output=$(dtrain --json status "$job" | sed -E 's/.*"output":"([^"]*)".*/\1/')
say "$(awk -v a="$first" -v b="$last" -v n="$(echo "$losses" | wc -l)" \
  'BEGIN { printf "loss %.4f -> %.4f over %d steps", a, b, n }')"
awk -v a="$first" -v b="$last" 'BEGIN { if (b < a) { print "quickstart: the loss fell"; exit 0 } else { print "quickstart: the loss did NOT fall"; exit 1 } }'
say "a worker's Prometheus metrics (http://127.0.0.1:$((port + 11))/metrics), a few lines:"
(exec 3<>"/dev/tcp/127.0.0.1/$((port + 11))" &&
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null |
  grep -E '^dtrain_worker_(steps_total|loss|sent_bytes_total)' | head -n 6 || true
say "weights (GPT-2 safetensors, loadable by PyTorch): ${output#"$root/"}"
say "text from the trained model (dtrain sample $job: drawn by a worker from its newest checkpoint):"
dtrain sample "$job" --prompt="The " --tokens=80 --temperature=0.8 --top_k=20 || true
say "service logs in runs/quickstart/logs/; to keep the services running and submit jobs" \
  "yourself, see \"Running the services yourself\" in README.md"
