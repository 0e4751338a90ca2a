#!/usr/bin/python3
"""Mutated job specs through `dtrain submit` against a real coordinator with real workers.

    bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain
    /usr/bin/python3 tools/fuzz_submit.py --minutes 10 --workers 3 --report /tmp/fuzz.json

A plaintext (--insecure) coordinator and `--workers` workers on 127.0.0.1 (random ports, one
temporary folder, tests/integration/harness.py), each worker one CPU thread. Each spec is the
integration tests' small job (4 layers, width 32, a few steps) with 1-3 mutations: a field set
to a boundary value (0, -1, 2^31, 2^63, 9.2e18, "Infinity", "NaN", a long string, a deep array),
a field deleted, or a parallel layout drawn at random. Every accepted job is watched until it
ends (cancelled after --job_seconds). At the end, and in --report as JSON:

  crashes   a daemon that exited (a crash signal or any exit) while the run went on;
  hangs     a `dtrain workers` that did not answer within 10 s, or a job that made no progress
            (state or step) for 60 s while its workers were idle or busy with it;
  accepted_then_failed   every job submit accepted that then FAILED on a worker, grouped by its
            reason with ids, paths and numbers blanked ("rule the plan should have checked").

Exit status 0 when there were no crashes and no hangs (failed jobs are findings, not errors).
Python standard library only.
"""

import argparse
import collections
import copy
import json
import os
import random
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import (Cluster, TestFailure, add_binary_flags, binaries_of,  # noqa: E402
                     small_job_spec)

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")

# field path -> values worth trying (besides the generic ones below)
FIELDS = {
    "steps": [1, 2, 3],
    "batch_size": [1, 2, 3, 4, 6, 8, 16, 12],
    "micro_batch_size": [0, 1, 2, 3, 4, 8],
    "seq_len": [0, 1, 2, 16, 31, 32, 33],
    "seed": [0, 1, 2 ** 32 - 1],
    "device": ["", "auto", "cpu", "cuda", "cuda:0"],
    "model.vocab_size": [1, 2, 255, 256, 257, 50257],
    "model.context": [1, 2, 16, 32],
    "model.n_layer": [1, 2, 3, 4, 8],
    "model.n_head": [1, 2, 3, 4, 8],
    "model.n_embd": [1, 2, 4, 8, 16, 32, 33],
    "optimizer.lr": [0, 1e-3, 1.0, 10.0, 1e6],
    "optimizer.max_lr": [0, 1e-3, 1.0, 10.0, 1e6],
    "optimizer.min_lr_ratio": [0, 0.5, 1],
    "optimizer.warmup_steps": [0, 1, 100],
    "optimizer.weight_decay": [0, 0.1, 1, 100, 1e6],
    "optimizer.beta1": [0, 0.5, 0.999999],
    "optimizer.beta2": [0, 0.5, 0.999999],
    "optimizer.eps": [1e-30, 1e-8, 1, 1e6],
    "optimizer.grad_clip": [0, 1e-30, 1, 1e6],
    "checkpoint.interval_steps": [0, 1, 2],
    "parallel.dp": [0, 1, 2, 3],
    "parallel.pp": [0, 1, 2, 3, 4],
    "parallel.tp": [0, 1, 2, 4],
    "parallel.schedule": ["1f1b", "gpipe", "interleaved", "zb-h1", "x"],
    "parallel.virtual_stages": [0, 1, 2, 4],
    "parallel.zero1": [True, False],
    "parallel.stage_layers": [[1, 3], [2, 2], [4], [0, 4], [1, 1, 2]],
    "fault_tolerance.max_restarts": [0, 1],
}
GENERIC = [0, -1, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 63 - 1, 9.2e18, -9.2e18, 1e-45, 3.4e38,
           "Infinity", "-Infinity", "NaN", "", "x" * 300, [], {}, [[[1]]], None, True]


def set_path(spec, path, value):
    parts = path.split(".")
    node = spec
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def mutate(rng, base):
    spec = copy.deepcopy(base)
    done = []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(sorted(FIELDS))
        value = rng.choice(FIELDS[path]) if rng.random() < 0.7 else rng.choice(GENERIC)
        set_path(spec, path, value)
        done.append("%s=%s" % (path, json.dumps(value)[:40]))
    return spec, done


def blank(reason):
    """The reason's rule: the first line with job ids, paths and numbers blanked."""
    first = reason.splitlines()[0] if reason else ""
    first = re.sub(r"job-\d+", "job-N", first)
    first = re.sub(r"/[^\s,:()]+", "PATH", first)
    first = re.sub(r"\bw\d+\b", "wN", first)
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", first)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_binary_flags(parser)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--in_flight", type=int, default=4, help="jobs watched at once")
    parser.add_argument("--job_seconds", type=float, default=30, help="cancel a job after this")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", help="write the findings here as JSON")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    binaries = binaries_of(args)
    stats = collections.Counter()
    failed = collections.defaultdict(list)  # blanked reason -> [(job id, mutations, reason)]
    hangs, crashes = [], []
    with Cluster(binaries, "fuzz-submit") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ["w%d" % i for i in range(1, args.workers + 1)]
        c.start_idle_workers(ids, extra=["--connect_timeout=10s", "--comm_timeout=10s"])
        base = small_job_spec(os.path.join(c.tmp, "ckpt"), 3, name="fuzz")
        jobs = {}  # id -> {"mutations", "since", "seen"}
        end = time.monotonic() + args.minutes * 60
        n = 0
        while time.monotonic() < end:
            for p in c.processes:
                if not p.alive() and p.name not in [x["process"] for x in crashes]:
                    crashes.append({"process": p.name, "status": p.popen.returncode,
                                    "signal": p.crash(), "log": p.log_path})
            if crashes:
                break
            # Submit until --in_flight jobs are open.
            while len(jobs) < args.in_flight and time.monotonic() < end:
                spec, mutations = mutate(rng, base)
                n += 1
                path = c.write_spec("spec-%d.json" % n, spec)
                t0 = time.monotonic()
                rc, out, err = c.cli("--json", "submit", path, timeout=30)
                took = time.monotonic() - t0
                if took > 10:
                    hangs.append({"what": "submit took %.1fs" % took, "mutations": mutations})
                stats["submitted"] += 1
                if rc == 0:
                    job_id = json.loads(out)["id"]
                    jobs[job_id] = {"mutations": mutations, "since": time.monotonic(),
                                    "start": time.monotonic(), "seen": None}
                    stats["accepted"] += 1
                elif rc == 2:
                    stats["refused"] += 1
                else:
                    stats["submit exit %d" % rc] += 1
            # Look at every open job once.
            t0 = time.monotonic()
            rc, out, err = c.cli("--json", "workers", timeout=30)
            if time.monotonic() - t0 > 10 or rc != 0:
                hangs.append({"what": "dtrain workers: exit %d after %.1fs: %s"
                              % (rc, time.monotonic() - t0, err.strip()[:200])})
            for job_id in list(jobs):
                j = jobs[job_id]
                rc, out, err = c.cli("--json", "status", job_id, timeout=30)
                if rc != 0:
                    continue
                job = json.loads(out)
                state = job.get("state")
                now = time.monotonic()
                seen = (state, int(job.get("latest", {}).get("step", 0) or 0))
                if seen != j["seen"]:
                    j["seen"], j["since"] = seen, now
                if state in FINAL:
                    stats[state] += 1
                    if state == "FAILED":
                        reason = job.get("reason", "")
                        failed[blank(reason)].append({"job": job_id, "mutations": j["mutations"],
                                                      "reason": reason[:400]})
                    del jobs[job_id]
                elif now - j["start"] > args.job_seconds:
                    c.cli("cancel", job_id, timeout=30)
                    stats["cancelled by the fuzzer (ran past --job_seconds)"] += 1
                    del jobs[job_id]
                elif state in ("PLACING", "RUNNING", "RECOVERING") and now - j["since"] > 60:
                    hangs.append({"what": "%s %s: no change for 60s" % (job_id, state),
                                  "mutations": j["mutations"]})
                    c.cli("cancel", job_id, timeout=30)
                    del jobs[job_id]
            time.sleep(0.2)
        report = {"stats": dict(stats), "crashes": crashes, "hangs": hangs,
                  "accepted_then_failed": {k: v for k, v in sorted(
                      failed.items(), key=lambda kv: -len(kv[1]))}}
    print(json.dumps(report["stats"], indent=1))
    print("crashes: %d, hangs: %d" % (len(crashes), len(hangs)))
    for h in hangs:
        print("  hang: %s" % h)
    print("accepted, then FAILED on a worker (%d jobs, %d reasons):"
          % (sum(len(v) for v in failed.values()), len(failed)))
    for rule, cases in report["accepted_then_failed"].items():
        print("  %4d x %s\n         e.g. %s: %s" % (len(cases), rule, cases[0]["job"],
                                                  ", ".join(cases[0]["mutations"])))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TestFailure as e:
        print("fuzz_submit: %s" % e, file=sys.stderr)
        sys.exit(2)
