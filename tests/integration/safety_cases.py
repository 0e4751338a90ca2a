"""Integration cases: no job ever loses or mixes another's files, and failures are told truly.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks. Every case
runs real daemons and the real CLI (harness.Cluster); file checks hash every byte of a job's
directory before and after the operation that must not touch it.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import time

from harness import Cluster, TestFailure, expect, free_port, losses, small_job_spec

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def spec_for(ckpt_dir, steps=6, **overrides):
    """harness.small_job_spec as a pp=2 job checkpointing every 2 steps."""
    return small_job_spec(ckpt_dir, steps, 2,
                          **{"name": "safety", "parallel": {"pp": 2}, **overrides})


def tree_digest(path):
    """{relative path: sha256} of every file under `path` (the job.json claim included)."""
    digest = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                digest[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return digest


def expect_unchanged(before, path, what):
    after = tree_digest(path)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    expect(not changed, "%s: files of %s changed: %s" % (what, path, changed[:10]))


def start(c, n, extra=()):
    c.write_corpus()
    c.start_coordinator()
    ids = ["w%d" % i for i in range(1, n + 1)]
    for w in ids:
        c.start_worker(w, extra=list(extra))
    c.wait_workers({w: "IDLE" for w in ids})
    return ids


def run(c, name, spec, timeout=180):
    job_id = c.submit(c.write_spec(name, spec))
    return job_id, c.wait_state(job_id, FINAL, timeout)


def case_shared_checkpoint_dir(args):
    """Two pp=2 jobs with different seeds running at the same time with one checkpoint.dir, then
    a resubmit of the first spec: each job writes only its own <dir>/<job id>/ (claimed by its
    job.json), each `output` is its own file and the two models differ, and the resubmitted job
    changes no byte of the first job's directory."""
    with Cluster(args.binaries, "shared_checkpoint_dir") as c:
        start(c, 4)
        shared = os.path.join(c.tmp, "shared-ckpt")
        a = c.submit(c.write_spec("a.json", spec_for(shared, seed=1)))
        b = c.submit(c.write_spec("b.json", spec_for(shared, seed=2)))
        jobs = {j: c.wait_state(j, FINAL, 180) for j in (a, b)}
        for j, job in jobs.items():
            expect(job["state"] == "SUCCEEDED", "%s: %s: %s" % (j, job["state"], job.get("reason")))
            own = os.path.join(shared, j)
            expect(job.get("output") == os.path.join(own, "model.safetensors"),
                   "%s's output should be in its own directory %s: %r" % (j, own, job.get("output")))
            expect(os.path.isfile(job["output"]), "%s's output is missing" % j)
            with open(os.path.join(own, "job.json")) as f:
                expect(json.load(f)["job_id"] == j, "%s/job.json does not name %s" % (own, j))
            expect(job.get("checkpoint", {}).get("dir") == own,
                   "%s: status should show its checkpoint dir %s: %r" % (j, own, job.get("checkpoint")))
        expect(sorted(os.listdir(shared)) == sorted([a, b]),
               "the shared dir should hold only the two job directories: %s" % os.listdir(shared))
        with open(jobs[a]["output"], "rb") as fa, open(jobs[b]["output"], "rb") as fb:
            expect(fa.read() != fb.read(), "two seeds gave byte-identical models: mixed?")

        before = tree_digest(os.path.join(shared, a))
        again, done = run(c, "a-again.json", spec_for(shared, seed=1))
        expect(done["state"] == "SUCCEEDED", "resubmitted: %s: %s" % (done["state"], done.get("reason")))
        expect(done["output"].startswith(os.path.join(shared, again) + "/"),
               "the resubmitted job's output is not its own: %r" % done["output"])
        expect_unchanged(before, os.path.join(shared, a), "after resubmitting %s's spec" % a)
        print("jobs %s, %s and %s each in their own directory under %s" % (a, b, again, shared))


def case_resume_low_steps(args):
    """A finished pp=2 job's checkpoint resumed with `steps` not beyond it: by path the job FAILS
    before anything is read or written, naming both steps; by job id `submit` refuses it (exit 2).
    The checkpoint stays byte-identical and its `latest` still names the last step, so resuming
    it properly and exporting it still work."""
    with Cluster(args.binaries, "resume_low_steps") as c:
        start(c, 2)
        ckpt = os.path.join(c.tmp, "ckpt")
        first, done = run(c, "first.json", spec_for(ckpt, steps=6))
        expect(done["state"] == "SUCCEEDED", "first: %s: %s" % (done["state"], done.get("reason")))
        own = os.path.join(ckpt, first)
        with open(os.path.join(own, "latest")) as f:
            expect(f.read().strip() == "step_00000006", "latest should name step 6")
        before = tree_digest(own)

        low, failed = run(c, "low.json", spec_for(ckpt, steps=4, resume_from=own))
        reason = failed.get("reason", "")
        expect(failed["state"] == "FAILED", "resume with steps=4: %s: %s" % (failed["state"], reason))
        expect("steps=4" in reason and "6" in reason,
               "the reason should name steps=4 and the checkpoint's step 6: %r" % reason)
        expect_unchanged(before, own, "after a resume with low steps by path")

        rc, out, err = c.cli("submit", c.write_spec("low-id.json",
                                                    spec_for(ckpt, steps=6, resume_from=first)))
        expect(rc == 2, "submit of a resume from %s with steps=6 exited %d (want 2): %s"
               % (first, rc, err))
        expect("not beyond step 6" in err, "the refusal should say why: %r" % err)
        expect_unchanged(before, own, "after a refused resume by job id")

        resumed, done = run(c, "resumed.json", spec_for(ckpt, steps=8, resume_from=first))
        expect(done["state"] == "SUCCEEDED", "resume to 8: %s: %s" % (done["state"], done.get("reason")))
        expect(done.get("resumed_from_step") in (6, "6"),
               "status should say it resumed from step 6: %r" % done.get("resumed_from_step"))
        expect_unchanged(before, own, "after a proper resume")
        out_path = os.path.join(c.tmp, "exported.safetensors")
        rc, out, err = c.cli("export", own, out_path)
        expect(rc == 0 and os.path.getsize(out_path) > 0, "export of %s: %d %s" % (own, rc, err))
        print("low steps refused (%s); checkpoint of %s untouched" % (reason.splitlines()[0], first))


def case_second_coordinator(args):
    """A second coordinator on the same --db refuses to start (exit 1) naming the holder's pid,
    host and listen address; the first keeps serving, and after it stops the file opens again."""
    with Cluster(args.binaries, "second_coordinator") as c:
        c.start_coordinator()
        other = "127.0.0.1:%d" % free_port()
        argv = [c.bin["coordinator"], "--listen=%s" % other, "--db=%s" % c.db, "--metrics_listen="]
        argv += c.tls_flags("coordinator")
        r = subprocess.run(argv, capture_output=True, timeout=30)
        err = r.stderr.decode(errors="replace")
        expect(r.returncode == 1, "the second coordinator exited %d: %s" % (r.returncode, err))
        expect("in use by another coordinator" in err and "pid %d" % c.coordinator.pid in err
               and c.address in err, "the refusal should name the holder: %r" % err)
        rc, _, _ = c.cli("workers")
        expect(rc == 0, "the first coordinator stopped answering")
        c.coordinator.signal(signal.SIGTERM)
        c.coordinator.wait(30)
        c.start_coordinator()
        print("second coordinator refused: %s" % err.strip().splitlines()[-1])


def case_sigterm_cause(args):
    """SIGTERM to one worker of a running pp=2 x tp=2 job (max_restarts 0): maintenance, not a
    failure: the job goes RECOVERING (not FAILED) with that worker named first as stopped by
    SIGTERM (its peers' transport errors only in the recovery's cause, on a later line), a
    maintenance restart; `dtrain logs` shows the worker's error line, and the worker has
    deregistered (not listed IDLE, no LOST)."""
    with Cluster(args.binaries, "sigterm_cause") as c:
        ids = start(c, 4)
        spec = spec_for(os.path.join(c.tmp, "ckpt"), steps=100000,
                        parallel={"pp": 2, "tp": 2}, fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("long.json", spec))
        job = c.wait_step(job_id, 3, 120)
        victim = job["placement"]["ranks"][3]["worker_id"]  # pp1 tp1
        c.workers[victim].signal(signal.SIGTERM)
        moved = c.wait_job(job_id, lambda j: j.get("recoveries") or j["state"] in FINAL, 60,
                           "a recovery")
        expect(moved["state"] not in FINAL, "after SIGTERM: %s: %s"
               % (moved["state"], moved.get("reason")))
        recovery = moved["recoveries"][0]
        expect(recovery.get("maintenance"), "not a maintenance restart: %s" % recovery)
        first = recovery.get("cause", "").splitlines()[0]
        expect(first.startswith("worker %s (" % victim) and "SIGTERM" in first,
               "the cause's first line should name %s stopped by SIGTERM: %r"
               % (victim, recovery.get("cause")))
        expect(c.workers[victim].wait(30) == 0, "the worker should exit 0 after SIGTERM")

        rc, out, err = c.cli("logs", job_id, timeout=30)
        expect(rc == 0, "dtrain logs exited %d: %s" % (rc, err))
        lines = [l for l in out.splitlines() if victim in l and "SIGTERM" in l]
        expect(lines and any("ERROR" in l for l in lines),
               "dtrain logs should show %s's error line:\n%s" % (victim, out))
        workers = c.workers_by_id()
        expect(victim not in workers or workers[victim]["state"] != "IDLE",
               "%s deregistered but is listed %s" % (victim, workers.get(victim)))
        time.sleep(c.lease_s + 1)
        workers = c.workers_by_id()
        expect(victim not in workers, "%s should not reappear (as LOST): %s" % (victim, workers.get(victim)))
        c.cli("cancel", job_id, check=True)
        c.wait_workers({w: "IDLE" for w in ids if w != victim}, timeout=15)
        print("SIGTERM %s: maintenance restart: %s" % (victim, first))


def case_resubmit_resume(args):
    """A pp=2 job cancelled after a sealed checkpoint continues with `dtrain resubmit JOB
    --resume` from its last sealed step, and every step after it has the loss of an
    uninterrupted run of the same spec (bit-identical resume: within 1e-6 relative). While it
    ran, the same resubmit was refused naming its state."""
    with Cluster(args.binaries, "resubmit_resume") as c:
        start(c, 2)
        steps = 40
        model = {"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4, "n_embd": 128}

        def spec(name):
            return spec_for(os.path.join(c.tmp, "ckpt"), steps=steps, seq_len=64, model=model,
                            checkpoint={"dir": os.path.join(c.tmp, "ckpt"), "interval_steps": 5},
                            name=name)

        reference, done = run(c, "reference.json", spec("reference"), timeout=300)
        expect(done["state"] == "SUCCEEDED", "reference: %s: %s" % (done["state"], done.get("reason")))
        want = losses(c, reference)
        expect(len(want) == steps, "the reference recorded %d of %d steps" % (len(want), steps))

        interrupted = c.submit(c.write_spec("interrupted.json", spec("interrupted")))
        job = c.wait_job(interrupted,
                         lambda j: int(j.get("checkpoint", {}).get("last_sealed_step", 0)) >= 5
                         or j.get("state") in FINAL, 240, "a sealed checkpoint")
        expect(job.get("state") not in FINAL,
               "the job ended (%s) before it could be cancelled; make it longer" % job.get("state"))
        # Not while it runs: its retention would remove the step a queued copy waits to load.
        rc, out, err = c.cli("resubmit", interrupted, "--resume", timeout=60)
        expect(rc == 2 and re.search(r"is (RUNNING|RECOVERING): resume it once it has ended", err),
               "resubmit --resume of a running job: exit %d\n%s%s" % (rc, out, err))
        c.cli("cancel", interrupted, check=True)
        cancelled = c.wait_state(interrupted, FINAL, 60)
        expect(cancelled["state"] == "CANCELLED", "cancel: %s" % cancelled["state"])
        sealed = int(cancelled["checkpoint"]["last_sealed_step"])
        expect(5 <= sealed < steps, "sealed step %d" % sealed)

        rc, out, err = c.cli("resubmit", interrupted, "--resume", timeout=60)
        expect(rc == 0, "resubmit --resume exited %d: %s%s" % (rc, out, err))
        ids = re.findall(r"job-\d+", out)
        resumed = [i for i in ids if i != interrupted]
        expect(resumed, "resubmit printed no new job id: %r" % out)
        done = c.wait_state(resumed[0], FINAL, 300)
        expect(done["state"] == "SUCCEEDED", "resumed: %s: %s" % (done["state"], done.get("reason")))
        expect(int(done.get("resumed_from_step", 0)) == sealed,
               "resumed from %r, want %d" % (done.get("resumed_from_step"), sealed))
        got = losses(c, resumed[0])
        expect(sorted(got) == list(range(sealed + 1, steps + 1)),
               "the resumed job recorded steps %s, want %d..%d" % (sorted(got)[:3], sealed + 1, steps))
        worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in got)
        expect(worst <= 1e-6, "resumed losses differ from the uninterrupted run: worst %.3g" % worst)
        print("resumed %s from step %d as %s: %d steps equal to the uninterrupted run (worst %.2g)"
              % (interrupted, sealed, resumed[0], len(got), worst))
