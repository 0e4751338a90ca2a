#!/usr/bin/env bash
# The compose stack end to end, for real: builds the images (deploy/docker/Dockerfile and
# deploy/prometheus/Dockerfile) from this workspace, brings deploy/docker-compose.yml up
# (certificates, coordinator, four CPU workers, Prometheus; no Grafana; mutual TLS on every gRPC
# channel), waits for every healthcheck, checks that a plaintext call from a container on the
# stack's network is refused (the CLI exits non-zero and says TLS), submits
# deploy/jobs/smoke-pp2-tp2.json (pp=2 x tp=2) with the CLI in a container (admin certificate),
# watches it to SUCCEEDED, checks the exported weights in the shared checkpoint volume, and asks
# Prometheus' HTTP API for the workers' step counters (all four ranks, > 0), every daemon's TLS
# gauge (1), the coordinator's job and worker gauges, the targets' health and the alert rules.
# Tears everything down (docker-compose down -v) on the way out, also on failure; the images
# stay, so the next run's build is cached.
#
# Needs root (or the docker group), docker.io, docker-compose and, where the image
# debian:bookworm-slim is missing and cannot be pulled, debootstrap and a Debian mirror
# (deploy/docker/make-base-image.sh); starts dockerd when none answers (and leaves it running).
# Traffic: loopback and the containers' bridge network, plus apt inside the image builds.
#
# How the dtrain image is made: by default as a user makes it, the binaries compiled by Bazel
# inside docker (deploy/docker/Dockerfile's build stage: 10 to 20 minutes on a fresh 2-core
# machine); with COMPOSE_TEST_BINARIES=DIR from the binaries in DIR (dtrain-coordinator,
# dtrain-worker, dtrain, dtrain-export, built without CUDA: `bazel build --define=cuda=off`),
# the Dockerfile's DTRAIN_BINARIES=prebuilt. tools/test.sh does the latter with the build it
# has just tested; the image's runtime stage (packages, user, volumes, the ldd check) is the same.
#
# Under Bazel (`bazel test //tests/deploy:compose_test`, tagged manual: the build inside docker;
# tags local: it needs the real workspace as the build context, and the docker socket) the
# workspace is the real path of this script. Standalone: tests/deploy/compose_test.sh.
# Environment: COMPOSE_TEST_KEEP=1 leaves the stack up (to look at it; tear it down with the
# printed command); DOCKER, DOCKER_COMPOSE choose the clients.
set -euo pipefail
# Bazel's strict PATH has no sbin: dockerd and debootstrap live there.
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

t0=$SECONDS
say() { echo "compose_test: [$((SECONDS - t0))s] $*"; }
fail() { echo "compose_test: FAIL: $*" >&2; exit 1; }

self=$(readlink -f "${BASH_SOURCE[0]}")
root=$(cd "$(dirname "$self")/../.." && pwd)
[ -f "$root/WORKSPACE" ] && [ -f "$root/deploy/docker-compose.yml" ] ||
  fail "cannot find the workspace from $self"
outputs=${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d /tmp/compose_test.XXXXXX)}
mkdir -p "$outputs"
python=/usr/bin/python3
[ -x "$python" ] || python=python3

# --- docker -----------------------------------------------------------------------------------
# Debian's client first: another docker CLI on the PATH may need buildx for BuildKit.
if [ -z "${DOCKER:-}" ]; then
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker) || fail "no docker client (apt-get install docker.io)"; fi
fi
docker() { "$DOCKER" "$@"; }
if [ -z "${DOCKER_COMPOSE:-}" ]; then
  if command -v docker-compose >/dev/null; then DOCKER_COMPOSE=docker-compose
  elif docker compose version >/dev/null 2>&1; then DOCKER_COMPOSE="$DOCKER compose"
  else fail "no docker-compose (apt-get install docker-compose)"; fi
fi

if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || fail "no docker daemon answers and there is no dockerd to start"
  say "starting dockerd (log: /var/log/dtrain-dockerd.log); it keeps running afterwards"
  setsid nohup dockerd >>/var/log/dtrain-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || fail "dockerd did not come up; see /var/log/dtrain-dockerd.log"
fi
export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1

# --- images -----------------------------------------------------------------------------------
t=$SECONDS
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  docker pull -q debian:bookworm-slim >/dev/null 2>&1 ||
    DOCKER=$DOCKER "$root/deploy/docker/make-base-image.sh"
fi
base_s=$((SECONDS - t))

tag=compose-test
t=$SECONDS
if [ -n "${COMPOSE_TEST_BINARIES:-}" ]; then
  # The image of binaries built already (tools/test.sh: this build's, without CUDA): a context
  # of just them and the healthcheck script, DTRAIN_BINARIES=prebuilt.
  context=$(mktemp -d /tmp/compose_test_context.XXXXXX)
  mkdir -p "$context/prebuilt" "$context/deploy/docker"
  for b in dtrain-coordinator dtrain-worker dtrain dtrain-export; do
    [ -x "$COMPOSE_TEST_BINARIES/$b" ] || fail "COMPOSE_TEST_BINARIES=$COMPOSE_TEST_BINARIES has no $b"
    cp "$COMPOSE_TEST_BINARIES/$b" "$context/prebuilt/$b"
  done
  cp "$root/deploy/docker/dtrain-healthcheck" "$context/deploy/docker/"
  build_from=(--build-arg DTRAIN_BINARIES=prebuilt "$context")
  say "building dtrain:$tag from the binaries in $COMPOSE_TEST_BINARIES (DTRAIN_BINARIES=prebuilt)"
else
  context=""
  build_from=("$root")
  say "building dtrain:$tag (Bazel inside docker; cached layers and Bazel cache make reruns fast)"
fi
docker build --progress=plain -f "$root/deploy/docker/Dockerfile" -t "dtrain:$tag" "${build_from[@]}" \
  >"$outputs/build-dtrain.log" 2>&1 || { tail -n 60 "$outputs/build-dtrain.log" >&2; fail "image build"; }
[ -z "$context" ] || rm -rf "$context"
dtrain_s=$((SECONDS - t))
t=$SECONDS
docker build --progress=plain -f "$root/deploy/prometheus/Dockerfile" -t "dtrain-prometheus:$tag" \
  "$root/deploy" >"$outputs/build-prometheus.log" 2>&1 ||
  { tail -n 40 "$outputs/build-prometheus.log" >&2; fail "prometheus image build"; }
prometheus_s=$((SECONDS - t))
say "images built: dtrain ${dtrain_s}s, prometheus ${prometheus_s}s (base image ${base_s}s)"

# --- the stack --------------------------------------------------------------------------------
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
data=$(mktemp -d /tmp/dtrain-compose-data.XXXXXX)
cp "$root/$(cd "$root" && bash tools/make_demo_data.sh)" "$data/demo.txt"
chmod 0755 "$data" && chmod 0644 "$data/demo.txt"

project=dtrain-test-$$
export DTRAIN_IMAGE=dtrain:$tag DTRAIN_PROMETHEUS_IMAGE=dtrain-prometheus:$tag
export DTRAIN_DATA_DIR=$data DTRAIN_WORKER_THREADS=1
export DTRAIN_COORDINATOR_PORT=$(free_port) DTRAIN_METRICS_PORT=$(free_port) PROMETHEUS_PORT=$(free_port)
compose() { $DOCKER_COMPOSE --ansi never -p "$project" -f "$root/deploy/docker-compose.yml" "$@"; }
services=(coordinator worker1 worker2 worker3 worker4 prometheus)

teardown() {
  local status=$?
  trap - EXIT INT TERM
  set +e
  compose ps >"$outputs/compose-ps.txt" 2>&1
  compose logs --no-color --timestamps >"$outputs/compose-logs.txt" 2>&1
  if [ "$status" -ne 0 ]; then
    echo "compose_test: the services' last log lines (all of them in the test outputs):" >&2
    cat "$outputs/compose-ps.txt" >&2
    compose logs --no-color --tail=25 >&2 2>&1
  fi
  if [ "${COMPOSE_TEST_KEEP:-0}" = 1 ]; then
    say "COMPOSE_TEST_KEEP=1: the stack stays up; tear it down with:"
    echo "  DTRAIN_DATA_DIR=$data $DOCKER_COMPOSE -p $project -f $root/deploy/docker-compose.yml down -v"
  else
    compose down -v --remove-orphans >/dev/null 2>&1
    rm -rf "$data"
  fi
  say "exit $status"
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM

t=$SECONDS
compose config -q || fail "docker-compose config"
say "bringing up ${services[*]} (project $project; coordinator on 127.0.0.1:$DTRAIN_COORDINATOR_PORT, Prometheus on 127.0.0.1:$PROMETHEUS_PORT)"
compose up -d --no-build "${services[@]}" >"$outputs/compose-up.log" 2>&1 ||
  { cat "$outputs/compose-up.log" >&2; fail "docker-compose up"; }

healthy=0
for _ in $(seq 1 90); do
  healthy=0
  states=()
  for s in "${services[@]}"; do
    id=$(compose ps -q "$s")
    h=$( [ -n "$id" ] && docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id" 2>/dev/null || echo missing)
    states+=("$s=$h")
    [ "$h" = healthy ] && healthy=$((healthy + 1))
  done
  [ "$healthy" = "${#services[@]}" ] && break
  sleep 2
done
[ "$healthy" = "${#services[@]}" ] || fail "not every service became healthy within 180s: ${states[*]}"
up_s=$((SECONDS - t))
say "all ${#services[@]} services healthy after ${up_s}s"

# Every long-running service's log is bounded (x-logging: a month left alone must not fill the
# host's disk with Docker's unbounded default).
for s in "${services[@]}"; do
  logs=$(docker inspect -f '{{.HostConfig.LogConfig.Type}} {{index .HostConfig.LogConfig.Config "max-size"}} {{index .HostConfig.LogConfig.Config "max-file"}}' "$(compose ps -q "$s")")
  [ "$logs" = "json-file 20m 5" ] || fail "$s's log is not rotated (20m x 5): $logs"
done

cli() { compose run --rm -T cli "$@"; }
idle=0
for _ in $(seq 1 30); do
  idle=$(cli --json workers 2>/dev/null | grep -o '"state":"IDLE"' | wc -l || true)
  [ "$idle" -ge 4 ] && break
  sleep 1
done
cli workers
[ "$idle" -ge 4 ] || fail "expected 4 IDLE workers, saw $idle"

# --- TLS --------------------------------------------------------------------------------------
# The CLI above got in with the admin certificate. Without TLS, from a container on the stack's
# network (no certificate at all, as anyone on that network could), the coordinator answers
# nothing: the CLI must fail and say why.
network=$(docker inspect -f '{{range $name, $v := .NetworkSettings.Networks}}{{$name}}{{end}}' \
  "$(compose ps -q coordinator)")
status=0
plain=$(docker run --rm --network "$network" "dtrain:$tag" \
  dtrain --coordinator=coordinator:7070 --insecure workers 2>&1) || status=$?
[ "$status" -ne 0 ] || fail "a plaintext 'dtrain workers' from network $network was answered: $plain"
[[ "$plain" == *TLS* ]] || fail "the refused plaintext CLI does not say why (TLS): $plain"
say "plaintext 'dtrain --insecure workers' from network $network refused (exit $status): $plain"

# --- the job ----------------------------------------------------------------------------------
t=$SECONDS
spec=/var/lib/dtrain/jobs/smoke-pp2-tp2.json
submitted=$(cli --json submit "$spec") || fail "dtrain submit $spec: $submitted"
job=$(echo "$submitted" | sed -nE 's/^\{"id":"([^"]+)".*/\1/p')
[ -n "$job" ] || fail "no job id in: $submitted"
say "submitted $spec as $job; watching it"
status=0
timeout 900 $DOCKER_COMPOSE --ansi never -p "$project" -f "$root/deploy/docker-compose.yml" \
  run --rm -T cli watch "$job" >"$outputs/watch.log" 2>&1 || status=$?
tail -n 8 "$outputs/watch.log"
cli status "$job" || true
[ "$status" = 0 ] || fail "dtrain watch $job exited $status (0 = SUCCEEDED)"
job_s=$((SECONDS - t))
say "$job SUCCEEDED in ${job_s}s"
output=$(cli --json status "$job" | sed -nE 's/.*"output":"([^"]*)".*/\1/p')
[ -n "$output" ] || fail "no output path in dtrain status $job"
compose exec -T worker1 test -s "$output" || fail "$output is not in the shared checkpoint volume"
say "weights at $output (checkpoints volume, seen from worker1)"
# Text from the job's model, asked from the cli container: a worker with the checkpoints volume
# draws it (SampleJob); the image has no dtrain-sample.
sample=$(cli --json sample "$job" --prompt="The " --tokens=16 --temperature=0) ||
  fail "dtrain sample $job: $sample"
echo "$sample" | grep -q '"text":"The ' && echo "$sample" | grep -q '"worker_id":"[^"]' ||
  fail "dtrain sample $job printed $sample"
say "dtrain sample $job: ${sample:0:160}"

# --- Prometheus -------------------------------------------------------------------------------
# Series of the job stay on the workers after it ends (until their next job); last_over_time
# also covers a worker that drops them. Scrapes are 5s apart: retry for a while.
promql() {
  "$python" - "$PROMETHEUS_PORT" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
port, query = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
with urllib.request.urlopen(url, timeout=10) as r:
    body = json.load(r)
assert body["status"] == "success", body
for s in body["data"]["result"]:
    labels = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()))
    print(f"{labels} {s['value'][1]}")
EOF
}
check() {  # check DESCRIPTION PYTHON_CONDITION_ON_rows QUERY: retries for 60s
  local what=$1 cond=$2 query=$3 rows=""
  for _ in $(seq 1 30); do
    rows=$(promql "$query" 2>&1) || rows="query failed: $rows"
    if "$python" -c "import sys; rows = [l.rsplit(' ', 1) for l in sys.stdin.read().splitlines() if l]; sys.exit(0 if ($cond) else 1)" <<<"$rows"; then
      say "Prometheus: $what"
      echo "$rows" | sed 's/^/    /'
      return 0
    fi
    sleep 2
  done
  echo "$rows" >&2
  fail "Prometheus: $what: not seen; query: $query"
}
check "dtrain_worker_steps_total of all four ranks of $job, each > 0" \
  "len(rows) == 4 and sorted(dict(kv.split('=', 1) for kv in l.split(','))['rank'] for l, v in rows) == ['0', '1', '2', '3'] and all(float(v) > 0 for l, v in rows)" \
  "last_over_time(dtrain_worker_steps_total{job_id=\"$job\"}[30m])"
check "TLS on in the coordinator and the four workers (dtrain_*_tls_enabled)" \
  "len(rows) == 5 and all(float(v) == 1 for l, v in rows)" \
  'dtrain_coordinator_tls_enabled or dtrain_worker_tls_enabled'
check "every target up" \
  "len(rows) == 6 and all(float(v) == 1 for l, v in rows)" 'up'
check "the coordinator counts the job SUCCEEDED and 4 workers idle" \
  "len(rows) == 2 and all(float(v) >= 1 for l, v in rows) and [float(v) for l, v in rows if 'idle' in l] == [4.0]" \
  'dtrain_coordinator_jobs{state="succeeded"} or dtrain_coordinator_workers{state="idle"}'
check "the job's bytes between ranks (activation, gradient, collective)" \
  "{l.split('kind=')[1].split(',')[0] for l, v in rows if float(v) > 0} >= {'activation', 'gradient', 'collective'}" \
  "sum by (kind) (last_over_time(dtrain_worker_sent_bytes_total{job_id=\"$job\"}[30m]))"
rules=$("$python" - "$PROMETHEUS_PORT" <<'EOF'
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v1/rules", timeout=10) as r:
    body = json.load(r)
print(" ".join(sorted(r["name"] for g in body["data"]["groups"] for r in g["rules"])))
EOF
)
say "Prometheus alert rules loaded: $rules"
for a in WorkerLost JobFailed NoStepProgress JobStraggler; do
  [[ " $rules " == *" $a "* ]] || fail "alert rule $a is not loaded"
done

say "PASS: images ${dtrain_s}s + ${prometheus_s}s (base ${base_s}s), stack healthy in ${up_s}s, job ${job_s}s, total $((SECONDS - t0))s"
