#!/usr/bin/env bash
# The GPU check, run on a machine with one NVIDIA GPU from the folder tools/gpu_bundle.sh made
# (it holds this script, the binaries, their libraries, and the Python harness), within 8
# minutes:
#   1. ops:        ops_test, every op on CUDA against the CPU backend;
#   2. local:      dtrain-local 10 steps on cuda against the same run on cpu (losses 1e-4 rel.);
#   3. multi:      pp=2 x tp=2 and dp=2 x pp=2 on 4 dtrain-worker processes sharing GPU 0
#                  against one worker (the integration case multi_worker_staging with
#                  DTRAIN_CASE_WORKER_DEVICE; dp's buckets through the shared buffers);
#   4. throughput: tokens/s and MFU of a GPT-2 124M-shaped model (L=12, C=768, NH=12, V=50257,
#                  T=1024) in fp32, tf32 and bf16, dtrain-local beside PyTorch in the same run;
#   5. profile:    where that step's time goes in tf32 and bf16 (dtrain-local --op_profile:
#                  milliseconds per step by op and shape; the tables are in profile.log).
# Without a GPU it prints one line and exits 0. Each step's outcome is one line "gpu_check: ...";
# the exit code is the number of failed steps.
#
#   ./gpu_check.sh [--skip=ops,local,multi,throughput,profile] [--rehearse]
#
# --rehearse, on a machine without a GPU: the same steps with --device=cpu-staging where they say
# cuda (throughput and profile skipped), so the bundle, its launcher and the harness's flags are checked
# where the project is built (tools/gpu_bundle_test.sh runs it).
#
# Run on an NVIDIA H100 and H200s (2026-11-27, 2026-11-29): every step passed (docs/PERFORMANCE.md "On a GPU").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
skip=""
rehearse=0
for arg in "$@"; do
  case $arg in
    --skip=*) skip=${arg#--skip=} ;;
    --rehearse) rehearse=1 ;;
    *) echo "gpu_check: unknown argument $arg" >&2; exit 2 ;;
  esac
done
device=cuda
worker_device=cuda:0
if ((rehearse)); then
  device=cpu-staging
  worker_device=cpu-staging
  skip="$skip,throughput,profile"
  gpu="none (rehearsal on $device)"
elif ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to check"
  exit 0
else
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
echo "gpu_check: $gpu"
work=$(mktemp -d)
# GPU_CHECK_LOGS=DIR keeps every step's whole log there (the device tool's $OUT, say).
trap 'if [[ -n "${GPU_CHECK_LOGS:-}" ]]; then mkdir -p "$GPU_CHECK_LOGS"; cp "$work"/*.log "$GPU_CHECK_LOGS"/ 2>/dev/null; fi; rm -rf "$work"' EXIT
python=${PYTHON:-python3}
F="$work/corpus.txt" "$python" -c 'import os; open(os.environ["F"], "wb").write(bytes((i * 7919 + i // 13) % 251 for i in range(2_000_000)))'
failed=0
step() {  # step NAME COMMAND...: runs unless skipped, one line of outcome
  local name=$1
  shift
  if [[ ",$skip," == *",$name,"* ]]; then echo "gpu_check: $name skipped"; return; fi
  local start=$SECONDS
  if "$@" > "$work/$name.log" 2>&1; then
    echo "gpu_check: $name ok ($((SECONDS - start)) s) $(grep -h '^RESULT \|^pp2-tp2 on\|^dp2-pp2 on' "$work/$name.log" | sed 's/^RESULT //' | tr '\n' ' ')"
  else
    echo "gpu_check: $name FAILED ($((SECONDS - start)) s); last lines:"
    tail -20 "$work/$name.log" | sed 's/^/  /'
    failed=$((failed + 1))
  fi
}

local_losses() {  # dtrain-local on cuda and on cpu: the same losses
  for d in "$device" cpu; do
    timeout 120 "$here/run" dtrain-local --device=$d --data="$work/corpus.txt" --steps=10 \
      --batch=4 --seq=64 --n_embd=128 --log_json="$work/local-$d.jsonl" || return 1
  done
  "$python" - "$work/local-$device.jsonl" "$work/local-cpu.jsonl" <<'PY'
import json, sys
cuda, cpu = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
worst = max(abs(a - b) / abs(b) for a, b in zip(cuda, cpu))
assert len(cuda) == len(cpu) == 10 and worst <= 1e-4, (cuda, cpu)
print("RESULT worst loss rel diff %.2g over 10 steps" % worst)
PY
}

multi_worker() {  # 4 workers on GPU 0, pp=2 x tp=2 and dp=2 x pp=2, against one worker
  mkdir -p "$work/wrap"
  for b in dtrain-coordinator dtrain-worker dtrain; do
    printf '#!/bin/sh\nexec "%s/run" %s "$@"\n' "$here" "$b" > "$work/wrap/$b"
    chmod 755 "$work/wrap/$b"
  done
  DTRAIN_CASE_WORKER_DEVICE=$worker_device timeout 240 "$python" "$here/tests/integration/integration_test.py" \
    --case=multi_worker_staging --coordinator="$work/wrap/dtrain-coordinator" \
    --worker="$work/wrap/dtrain-worker" --worker_testing="$work/wrap/dtrain-worker" \
    --cli="$work/wrap/dtrain" --examples="$here/examples"
}

throughput() {  # GPT-2 124M shape: dtrain-local and PyTorch, fp32 / tf32 / bf16
  timeout 300 "$python" "$here/gpt2_throughput.py" --run "$here/run" --data "$work/corpus.txt" \
    --gpu "$gpu"
}

profile() {  # the same shape, each op timed (synchronized after each), tf32 and bf16
  for precision in tf32 bf16; do
    echo "== $precision"
    timeout 120 "$here/run" dtrain-local --device=cuda --matmul_precision=$precision \
      --data="$work/corpus.txt" --vocab_size=50257 --context=1024 --n_layer=12 --n_head=12 \
      --n_embd=768 --batch=4 --seq=1024 --steps=4 --op_profile 2>&1 || return 1
  done > "$work/profile_tables.log"
  cat "$work/profile_tables.log"
  awk '/^== / { p = $2 } /\(every op\)/ { printf "RESULT %s profiled %s ms/step\n", p, $1 }' \
    "$work/profile_tables.log"
}

step ops timeout 180 "$here/run" ops_test
step local local_losses
step multi multi_worker
step throughput throughput
step profile profile
exit "$failed"
