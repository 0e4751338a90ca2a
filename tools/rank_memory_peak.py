"""Peak resident memory (VmHWM) of real dtrain-worker processes against `dtrain plan`'s estimate
(plan/memory.h), for pp=1, pp=2 and tp=2 layouts of one model: docs/PERFORMANCE.md "Rank memory".

    bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain
    python3 tools/rank_memory_peak.py bazel-bin

Each layout runs on a fresh loopback cluster (tests/integration/harness.py); "idle" is the
worker's peak before the job (the process baseline), "peak" its peak after the job.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from harness import Cluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "bazel-bin")
B = {"coordinator": os.path.join(BIN, "coordinator/dtrain-coordinator"),
     "worker": os.path.join(BIN, "worker/dtrain-worker"), "cli": os.path.join(BIN, "client/dtrain")}
BASE = {"model": {"vocab_size": 256, "context": 128, "n_layer": 4, "n_head": 4, "n_embd": 512},
        "dataset": "data/demo.txt", "steps": 6, "batch_size": 8, "seq_len": 128}
LAYOUTS = [("pp1", {"parallel": {"pp": 1}}, 1),
           ("pp2", {"parallel": {"pp": 2}, "micro_batch_size": 2}, 2),
           ("tp2", {"parallel": {"tp": 2}}, 2)]

def hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

for name, change, n in LAYOUTS:
    with Cluster(B, "measure-" + name) as c:
        c.write_corpus()
        spec = dict(BASE, name=name, **change)
        if n > 1:
            spec["checkpoint"] = {"dir": os.path.join(c.tmp, "ckpt")}
        path = c.write_spec(name + ".json", spec)
        rc, out, err = c.cli("--json", "plan", path)
        report = json.loads(out)
        est = {int(r["pp"]): int(r["memory_bytes"]) for r in report["ranks"]}
        c.start_coordinator()
        ids = ["w%d" % i for i in range(n)]
        c.start_idle_workers(ids)
        base = {w: hwm(c.workers[w].pid) for w in ids}
        job = c.submit(path)
        j = c.wait_state(job, {"SUCCEEDED", "FAILED"}, 300)
        placement = {r["worker_id"]: int(r.get("pp_rank", 0)) for r in j["placement"]["ranks"]}
        for w in ids:
            peak = hwm(c.workers[w].pid)
            e = est[placement[w]]
            print("%s %s pp%d: estimate %.1f MiB, idle %.1f MiB, peak %.1f MiB, "
                  "peak-idle %.1f MiB, ratio peak/(est+idle) %.2f, (peak-idle)/est %.2f, state %s"
                  % (name, w, placement[w], e / 2**20, base[w] / 2**20, peak / 2**20,
                     (peak - base[w]) / 2**20, peak / (e + base[w]), (peak - base[w]) / e,
                     j["state"]), flush=True)
