#!/usr/bin/python3
"""A worker's resident memory across jobs: idle, then after each of a series of real jobs.

    bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain
    /usr/bin/python3 tools/bench_worker_memory.py [--rounds 4] [--worker BIN]

Two workers (w1, w2) and a coordinator on 127.0.0.1 (tests/integration/harness.py). Each round
runs a pp=2 job of 20 steps (4 layers, width 256, context 128, batch 8) on both workers, then a
one-worker job of 100,000 steps on w1 that is cancelled after 5 s. VmRSS of every worker
(/proc/PID/status) is printed idle at the start and once the workers are IDLE after each job
(plus 1 s). Python standard library only.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import Cluster, add_binary_flags, binaries_of, small_job_spec  # noqa: E402

MODEL = {"vocab_size": 256, "context": 128, "n_layer": 4, "n_head": 4, "n_embd": 256}


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_binary_flags(parser)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    binaries = binaries_of(args)
    with Cluster(binaries, "worker-memory") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"])
        time.sleep(1)

        def show(what):
            print("%-34s %s" % (what, "  ".join("%s %6.1f MB" % (w, rss_mb(p.pid))
                                                 for w, p in sorted(c.workers.items()))),
                  flush=True)
        show("idle after start")
        for r in range(1, args.rounds + 1):
            spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 20, name="mem-pp2",
                                  model=MODEL, seq_len=128, parallel={"pp": 2})
            job = c.submit(c.write_spec("pp2-%d.json" % r, spec))
            done = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), 300)
            c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
            time.sleep(1)
            show("round %d: after a pp=2 job (%s)" % (r, done["state"]))
            spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, name="mem-long",
                                  model=MODEL, seq_len=128)
            job = c.submit(c.write_spec("long-%d.json" % r, spec))
            c.wait_state(job, ("RUNNING",), 60)
            time.sleep(5)
            c.cli("cancel", job, check=True)
            c.wait_state(job, ("CANCELLED",), 60)
            c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
            time.sleep(1)
            show("round %d: after a cancelled job" % r)


if __name__ == "__main__":
    main()
