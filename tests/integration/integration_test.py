"""dtrain end to end: the real coordinator, workers and CLI on loopback ports.

    python3 integration_test.py --case=happy_path --coordinator=BIN --worker=BIN --cli=BIN \
        --examples=DIR

One case per Bazel test (tests/integration/BUILD); `--case=all` runs every case in turn.
Each case states what it checks in its docstring. The CLI's exit codes are the contract of
client/README.md: 0 ok/SUCCEEDED, 1 FAILED, 2 bad input, 3 unreachable, 4 not found,
5 CANCELLED, 6 other.
"""

import argparse
import glob
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from harness import (Cluster, TestFailure, expect, free_port, hung_listener, latest_step,
                     small_job_spec)

# "job-000003 RUNNING step 40/200 loss 2.9312 4,120 tok/s ETA 0:42"
STEP_LINE = re.compile(r"^(job-\d+) RUNNING step (\d+)/(\d+) loss ([0-9.]+) ")
SUMMARY = re.compile(r"loss ([0-9.]+) -> ([0-9.]+)")
OUTPUT = re.compile(r"output (\S+)")

# A job that trains for a while (minutes) on one CPU thread, so that it is still running when a
# test kills or cancels something: a small model, many steps.
def long_spec(steps=100000, **overrides):
    spec = {
        "name": "long",
        "model": {"vocab_size": 256, "context": 64, "n_layer": 2, "n_head": 4, "n_embd": 128},
        "dataset": "data/demo.txt",
        "steps": steps,
        "batch_size": 8,
        "seq_len": 64,
        "optimizer": {"max_lr": 0.002, "warmup_steps": 5},
    }
    spec.update(overrides)
    return spec


# Today's behaviour before recoveries: the first failure fails the job.
FAIL_FAST = {"fault_tolerance": {"max_restarts": 0}}


def tiny_spec(args):
    with open(os.path.join(args.examples, "tiny.json")) as f:
        return json.load(f)


def step_lines(text):
    """[(step, loss)] from the watch output's progress lines."""
    steps = []
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if m:
            steps.append((int(m.group(2)), float(m.group(4))))
    return steps


def states_of(job):
    return [h.get("state") for h in job.get("history", [])]


# --- cases ---


def case_happy_path(args):
    """submit --watch of deploy/examples/tiny.json: SUCCEEDED, one line per step, the loss falls,
    the output file exists; status/list/workers/watch --json all parse; unknown id -> 4."""
    with Cluster(args.binaries, "happy_path") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})

        spec_path = os.path.join(args.examples, "tiny.json")
        total = tiny_spec(args)["steps"]
        t0 = time.monotonic()
        rc, out, err = c.cli("submit", spec_path, "--watch", timeout=900)
        elapsed = time.monotonic() - t0
        expect(rc == 0, "submit --watch exited %d (want 0)\nstdout:\n%s\nstderr:\n%s" % (rc, out, err))
        first_line = out.splitlines()[0]
        m = re.match(r"submitted (job-\d+)", first_line)
        expect(m, "first line should name the job: %r" % first_line)
        job_id = m.group(1)

        steps = step_lines(out)
        expect([s for s, _ in steps] == list(range(1, total + 1)),
               "want one progress line per step 1..%d, got steps %s" % (total, [s for s, _ in steps]))
        summary = out.splitlines()[-1]
        expect(summary.startswith(job_id + " SUCCEEDED"), "summary line: %r" % summary)
        loss = SUMMARY.search(summary)
        expect(loss, "summary has no 'loss A -> B': %r" % summary)
        first, last = float(loss.group(1)), float(loss.group(2))
        expect(last < first - 1.0, "loss should fall by > 1 nat: %s -> %s" % (first, last))
        output = OUTPUT.search(summary)
        expect(output, "summary names no output: %r" % summary)
        path = output.group(1)
        if not os.path.isabs(path):
            path = os.path.join(c.workdir, path)
        expect(os.path.getsize(path) > 0, "output %s missing or empty" % path)
        print("happy_path: %d steps in %.1fs, loss %.4f -> %.4f, output %s"
              % (total, elapsed, first, last, path))

        job = c.job(job_id)
        expect(job["state"] == "SUCCEEDED", "status: %s" % job["state"])
        expect(latest_step(job) == total, "status latest step %d" % latest_step(job))
        expect(job["output"] == output.group(1), "status output %r" % job["output"])
        hist = states_of(job)
        for s in ("QUEUED", "RUNNING", "SUCCEEDED"):
            expect(s in hist, "history lacks %s: %s" % (s, hist))

        jobs = c.cli_json("list")["jobs"]
        expect(any(j["id"] == job_id and j["state"] == "SUCCEEDED" for j in jobs),
               "list --json lacks %s SUCCEEDED: %s" % (job_id, jobs))
        # IDLE at its next heartbeat after the outcome (every 500 ms here; a loaded machine may
        # delay one).
        c.wait_workers({"w1": "IDLE"}, timeout=10)

        # watch of an ended job replays it: compact JSON lines (no spec), every step, exit 0.
        rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
        expect(rc == 0, "watch --json of a finished job exited %d: %s" % (rc, err))
        updates = [json.loads(l) for l in out.splitlines() if l.strip()]
        replayed = [u["step"] for u in updates if u["type"] == "step"]
        expect(replayed == list(range(1, total + 1)), "watch --json replayed steps %s" % replayed)
        expect(all(u["job"] == job_id and "spec" not in u for u in updates),
               "watch --json lines are not compact: %s" % updates[0])
        last = updates[-1]
        expect(last["type"] == "state" and last["state"] == "SUCCEEDED"
               and last["output"] == output.group(1), "last update %s" % last)

        rc, out, err = c.cli("status", "job-999999")
        expect(rc == 4, "status of an unknown job exited %d (want 4): %s" % (rc, err))
        expect("job-999999" in err, "NOT_FOUND message should name the id: %r" % err)
        rc, out, err = c.cli("watch", "job-999999")
        expect(rc == 4, "watch of an unknown job exited %d (want 4): %s" % (rc, err))
        rc, out, err = c.cli("workers")
        expect(rc == 0 and "w1" in out and "IDLE" in out, "workers table:\n%s" % out)
        expect(c.coordinator.alive(), "the coordinator died")


def restart_case(args, sig, name):
    """A coordinator stopped with `sig` and started again on the same --db and port keeps every
    job: a queued job stays QUEUED, the running one keeps training on its worker, re-attaches
    and SUCCEEDS, a `watch` across the restart reconnects and misses no step, and the history
    of both survives a second restart. A worker drained before the restart (w2, idle) is
    DRAINED after it, its session registering again, and takes no job."""
    with Cluster(args.binaries, name) as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.start_worker("w2")
        c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
        rc, out, err = c.cli("workers", "drain", "w2")
        expect(rc == 0, "drain of w2 exited %d: %s%s" % (rc, out, err))
        c.wait_workers({"w2": "DRAINED"}, timeout=10)
        steps = 600
        running_id = c.submit(c.write_spec("running.json", long_spec(steps=steps, name="running")))
        # dp=2 needs two workers; there is one: it queues.
        queued_id = c.submit(c.write_spec("queued.json", long_spec(
            steps=10, name="queued", parallel={"dp": 2},
            checkpoint={"dir": os.path.join(c.tmp, "ckpt-queued")})))
        c.wait_step(running_id, 5, 120)
        queued = c.wait_state(queued_id, "QUEUED", 10)

        watch_out = open(os.path.join(c.logs, "watch.out"), "w+")
        watch_err = open(os.path.join(c.logs, "watch.err"), "w+")
        watcher = subprocess.Popen(
            [c.bin["cli"], "--coordinator=" + c.address, "watch", running_id,
             "--reconnect_for=90s"], stdout=watch_out, stderr=watch_err)
        try:
            time.sleep(1)
            before = c.job(running_id)
            step_before = latest_step(before)
            c.coordinator.signal(sig)
            status = c.coordinator.wait(15)
            expect(status is not None, "the coordinator did not exit within 15s of %s" % name)
            print("%s: coordinator exited with %s at step %d" % (name, status, step_before))
            if sig == signal.SIGTERM:
                with open(c.coordinator.log_path) as f:
                    log = f.read()
                expect(status == 0 and "dtrain-coordinator: stopped" in log,
                       "SIGTERM should stop the coordinator cleanly (exit 0, \"stopped\"); "
                       "exit %s, log tail:\n%s" % (status, "\n".join(log.splitlines()[-5:])))
            time.sleep(2)  # the worker keeps training meanwhile
            c.start_coordinator()

            c.wait_workers({"w1": "BUSY", "w2": "DRAINED"}, timeout=30)
            after_q = c.job(queued_id)
            expect(after_q["state"] == "QUEUED", "queued job after restart: %s" % after_q["state"])
            expect(after_q["spec"] == queued["spec"], "queued job's spec changed over the restart")
            after = c.job(running_id)
            expect(states_of(after)[:len(states_of(before))] == states_of(before),
                   "history before %s, after %s" % (states_of(before), states_of(after)))
            expect(after["state"] == "RUNNING",
                   "running job after restart: %s: %s" % (after["state"], after.get("reason")))
            expect(latest_step(after) < steps - 50,
                   "the job should still be running when the coordinator is back (step %d/%d)"
                   % (latest_step(after), steps))

            done = c.wait_state(running_id, ("SUCCEEDED", "FAILED", "CANCELLED"), 600)
            expect(done["state"] == "SUCCEEDED",
                   "the running job should survive the restart: %s: %s"
                   % (done["state"], done.get("reason")))
            expect(latest_step(done) == steps, "latest step %d" % latest_step(done))

            try:
                rc = watcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise TestFailure("the watcher did not end within 60s of the job")
            watch_out.seek(0)
            watch_err.seek(0)
            out, err = watch_out.read(), watch_err.read()
            expect(rc == 0, "watch across the restart exited %d\nstdout tail:\n%s\nstderr:\n%s"
                   % (rc, "\n".join(out.splitlines()[-5:]), err))
            live_steps = step_lines(out)
            seen = [s for s, _ in live_steps]
            expect(seen == list(range(1, steps + 1)),
                   "watch across the restart should print every step once; missing %s, repeated %s"
                   % (sorted(set(range(1, steps + 1)) - set(seen)),
                      sorted(s for s in set(seen) if seen.count(s) > 1)))
            expect("reconnect" in err, "the watcher should say it reconnected: %r" % err)
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()

        # Everything committed survives another restart.
        c.coordinator.signal(sig)
        expect(c.coordinator.wait(15) is not None, "the coordinator did not exit")
        c.start_coordinator()
        job = c.job(running_id)
        expect(job["state"] == "SUCCEEDED" and job["output"] == done["output"],
               "finished job after the 2nd restart: %s %r" % (job["state"], job.get("output")))
        expect(c.job(queued_id)["state"] == "QUEUED", "queued job after the 2nd restart")
        # The per-step metrics too: a fresh watch of the finished job replays every step with
        # the loss the live watch saw.
        rc, out, err = c.cli("watch", running_id, timeout=60)
        expect(rc == 0, "watch of the finished job exited %d: %s" % (rc, err))
        expect(step_lines(out) == live_steps,
               "steps replayed after two restarts differ from those watched live: %d vs %d lines"
               % (len(step_lines(out)), len(live_steps)))
        rc, out, err = c.cli("cancel", queued_id)
        expect(rc == 0, "cancel of the queued job exited %d: %s" % (rc, err))
        expect(c.job(queued_id)["state"] == "CANCELLED", "queued job not cancelled")


def case_restart_term(args):
    restart_case(args, signal.SIGTERM, "restart_term")


def case_restart_kill(args):
    restart_case(args, signal.SIGKILL, "restart_kill")


def case_worker_lost(args):
    """kill -9 of the worker running a job with fault_tolerance.max_restarts 0 (fail fast): the
    job FAILS within the lease (+ slack) with the worker named in the reason, the worker is LOST,
    and a new process with the same id can register again. (recovery_cases.py: the recovery.)"""
    with Cluster(args.binaries, "worker_lost") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.start_worker("w2")
        c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
        job_id = c.submit(c.write_spec("long.json", long_spec(**FAIL_FAST)))
        job = c.wait_step(job_id, 2, 120)
        victim = job["placement"]["ranks"][0]["worker_id"]
        other = "w2" if victim == "w1" else "w1"
        t0 = time.monotonic()
        c.workers[victim].signal(signal.SIGKILL)
        slack = 5.0
        failed = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"),
                              c.lease_s + slack + 30)
        elapsed = time.monotonic() - t0
        expect(failed["state"] == "FAILED", "job after kill -9: %s" % failed["state"])
        expect(victim in failed.get("reason", ""),
               "the reason should name %s: %r" % (victim, failed.get("reason")))
        expect(elapsed <= c.lease_s + slack,
               "detected after %.1fs; lease %.1fs + slack %.1fs" % (elapsed, c.lease_s, slack))
        print("worker_lost: FAILED %.1fs after kill -9 (lease %.1fs): %s"
              % (elapsed, c.lease_s, failed["reason"]))
        workers = c.workers_by_id()
        expect(workers[victim]["state"] == "LOST", "%s: %s" % (victim, workers[victim]))
        expect(workers[other]["state"] == "IDLE", "%s: %s" % (other, workers[other]))
        rc, out, err = c.cli("watch", job_id, timeout=30)
        expect(rc == 1, "watch of a FAILED job exited %d (want 1)" % rc)
        expect(victim in out.splitlines()[-1], "watch summary should name %s: %r" % (victim, out))
        c.start_worker(victim)
        c.wait_workers({victim: "IDLE"}, timeout=30)
        expect(c.coordinator.alive(), "the coordinator died")


def case_cancel(args):
    """cancel of a running job: exit 0, the job CANCELLED, its watcher exits 5, training stops
    and the worker is IDLE again; cancelling again exits 0 with a note that it already ended."""
    with Cluster(args.binaries, "cancel") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        job_id = c.submit(c.write_spec("long.json", long_spec()))
        watcher = subprocess.Popen([c.bin["cli"], "--coordinator=" + c.address, "watch", job_id],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            c.wait_step(job_id, 3, 120)
            c.wait_workers({"w1": "BUSY"}, timeout=10)
            rc, out, err = c.cli("cancel", job_id, "--reason=not needed any more")
            expect(rc == 0, "cancel exited %d: %s" % (rc, err))
            expect("CANCELLED" in out, "cancel output: %r" % out)
            try:
                out, err = watcher.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise TestFailure("the watcher did not end within 30s of the cancel")
            expect(watcher.returncode == 5, "watch of a cancelled job exited %d (want 5)"
                   % watcher.returncode)
            expect(b"CANCELLED" in out.splitlines()[-1], "watch summary: %r" % out[-300:])
        finally:
            if watcher.poll() is None:
                watcher.kill()
                watcher.wait()
        job = c.job(job_id)
        expect(job["state"] == "CANCELLED", "state %s" % job["state"])
        expect("not needed any more" in json.dumps(job), "the reason is not recorded: %s"
               % job.get("reason"))
        c.wait_workers({"w1": "IDLE"}, timeout=15)
        step = latest_step(c.job(job_id))
        time.sleep(2)
        expect(latest_step(c.job(job_id)) == step, "the job kept reporting steps after the cancel")
        rc, out, err = c.cli("cancel", job_id)
        expect(rc == 0 and "already ended" in err,
               "cancel of an ended job: exit %d (want 0 with a note): %s" % (rc, err))
        # The worker takes the next job.
        next_id = c.submit(c.write_spec("short.json", long_spec(steps=3, name="after-cancel")))
        rc, out, err = c.cli("watch", next_id, timeout=300)
        expect(rc == 0, "the next job on the same worker: exit %d\n%s" % (rc, out[-500:]))


def case_bad_input(args):
    """Each bad input gets a clear error naming its cause and no daemon crashes: malformed JSON,
    unknown fields, an impossible layout, several problems at once, an unreadable file (exit 2);
    a missing dataset (job FAILED naming the path, exit 1); a duplicate worker id (the second
    worker exits 1 saying the id is held by another live session, the first keeps working)."""
    with Cluster(args.binaries, "bad_input") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        tiny = tiny_spec(args)

        def rejected(name, text, must_name):
            rc, out, err = c.cli("submit", c.write_spec(name, text))
            expect(rc == 2, "%s: exit %d (want 2)\nstdout:%s\nstderr:%s" % (name, rc, out, err))
            for word in must_name:
                expect(word in err, "%s: the error should name %r:\n%s" % (name, word, err))
            print("%s -> exit 2:\n%s" % (name, err.rstrip()))
            return err

        rejected("malformed.json", '{"name": "x", "steps": 10,', ["malformed.json", "JSON"])
        rejected("unknown_field.json", dict(tiny, colour="blue"), ["colour"])
        nested = dict(tiny, parallel={"dp": 1, "tpp": 2})
        rejected("unknown_nested.json", nested, ["tpp"])
        rejected("tp3.json", dict(tiny, parallel={"tp": 3}), ["parallel.tp"])
        err = rejected("several.json", dict(tiny, steps=0, parallel={"tp": 3}),
                       ["parallel.tp", "steps"])
        problem_lines = [l for l in err.splitlines() if l.startswith("  ")]
        expect(len(problem_lines) >= 2, "one problem per line, got:\n%s" % err)
        # An unknown field does not hide the spec's other problems.
        rejected("typo_and_layout.json", dict(tiny, colour="blue", parallel={"tp": 3}),
                 ["colour", "parallel.tp"])
        rejected("no_checkpoint_dir.json", dict(tiny, parallel={"pp": 2}), ["checkpoint.dir"])
        rc, out, err = c.cli("submit", os.path.join(c.tmp, "no-such-spec.json"))
        expect(rc == 2 and "no-such-spec.json" in err, "unreadable file: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("submit", c.tmp)  # a directory
        expect(rc == 2, "a directory as the spec: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("list", "--frobnicate")
        expect(rc == 2 and "--frobnicate" in err, "unknown flag: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("sumbit", "x.json")
        expect(rc == 2 and "sumbit" in err, "unknown command: exit %d: %s" % (rc, err))

        # Inside the workers' allowed roots (paths_cases.py has the paths outside them).
        missing = os.path.join(c.tmp, "nonexistent", "corpus.txt")
        spec = c.write_spec("missing_dataset.json", dict(tiny, dataset=missing, steps=5))
        rc, out, err = c.cli("submit", spec, "--watch", timeout=120)
        expect(rc == 1, "missing dataset: exit %d (want 1)\n%s\n%s" % (rc, out, err))
        summary = out.splitlines()[-1]
        expect("FAILED" in summary and missing in summary, "summary: %r" % summary)
        job_id = re.match(r"(job-\d+)", summary).group(1)
        expect(missing in c.job(job_id)["reason"], "reason: %r" % c.job(job_id)["reason"])
        c.wait_workers({"w1": "IDLE"}, timeout=15)

        first = c.workers["w1"]
        dup = c.start_worker("w1", extra=["--data_root=%s" % os.path.join(c.tmp, "dup"),
                                          "--id_conflict_wait=1s"])
        c.workers["w1"] = first
        # The coordinator answers ALREADY_EXISTS; the worker retries for --id_conflict_wait (a
        # previous process of its own that died would let go within the lease), then exits 1.
        status = dup.wait(30)
        log = dup.log_text()
        print("duplicate worker: exit status %s; log:\n%s"
              % (status, "\n".join(log.splitlines()[-2:])))
        expect(status == 1, "the duplicate w1 should exit 1, got %s:\n%s" % (status, log))
        for words in ("dtrain-worker: error:", "held by another live session",
                      "every worker process needs its own --worker_id"):
            expect(words in log, "the duplicate's log should say %r:\n%s" % (words, log))
        time.sleep(c.lease_s)
        expect(c.workers_by_id()["w1"]["state"] == "IDLE", "the first w1 should stay IDLE")
        # The first w1 still runs jobs.
        rc, out, err = c.cli("submit", c.write_spec("ok.json", long_spec(steps=3)), "--watch",
                             timeout=300)
        expect(rc == 0, "a job after the duplicate: exit %d\n%s\n%s" % (rc, out[-500:], err))
        expect(c.coordinator.alive(), "the coordinator died")
        for wid, p in c.workers.items():
            expect(p.alive(), "worker %s died" % wid)


# --- multi-worker jobs ---


def tiny_parallel_spec(ckpt_dir, steps=10, **overrides):
    """harness.small_job_spec checkpointing to `ckpt_dir` (multi-worker jobs need one)."""
    return small_job_spec(ckpt_dir, steps, **{"name": "tiny-parallel", **overrides})


def watched_steps(c, job_id):
    """{step: (loss, grad_norm)} of an ended job, from `dtrain --json watch` (which replays
    every step the coordinator recorded)."""
    rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
    updates = [json.loads(l) for l in out.splitlines() if l.strip()]
    steps = {}
    for u in updates:
        if u["type"] == "step":
            step = u["step"]
            expect(step not in steps, "%s: step %d reported twice" % (job_id, step))
            steps[step] = (float(u["loss"]), float(u["grad_norm"]))
    return rc, updates, steps


def expect_one_workers_losses(name, ref_steps, steps, grad_norms=False):
    """Steps 1-10 of `steps` ({step: (loss, grad_norm)}) against one worker's: each loss within
    LOSS_RTOL (and grad norm within 1e-4, relative, if `grad_norms`). The worst loss difference."""
    worst = 0.0
    for s in range(1, 11):
        want, got = ref_steps[s][0], steps[s][0]
        rel = abs(got - want) / abs(want)
        expect(rel <= LOSS_RTOL, "%s step %d: loss %.9f, one worker %.9f (rel %.2g)"
               % (name, s, got, want, rel))
        if grad_norms:
            gw, gg = ref_steps[s][1], steps[s][1]
            expect(abs(gg - gw) <= 1e-4 * abs(gw), "%s step %d: grad norm %.9f, one worker %.9f"
                   % (name, s, gg, gw))
        worst = max(worst, rel)
    return worst


def read_safetensors(path):
    """{name: (shape, array of floats)} of an F32 safetensors file (standard library only)."""
    import array
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        expect(t["dtype"] == "F32", "%s: %s is %s, not F32" % (path, name, t["dtype"]))
        begin, end = t["data_offsets"]
        values = array.array("f")
        values.frombytes(data[base + begin:base + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (t["shape"], values)
    return tensors


# Final weights of a multi-worker job against one worker's, per tensor:
#   max |parallel - single| <= WEIGHT_RTOL * max |single| + WEIGHT_ATOL.
# The sums run in another order (tensor-parallel shards, micro-batches, all-reduce), and AdamW
# divides each update by the gradient's own magnitude, so a rounding difference in a tiny
# gradient moves a weight by up to lr per step; worker/parallel's in-process tests use 5e-4.
WEIGHT_RTOL = 5e-4
WEIGHT_ATOL = 1e-6
LOSS_RTOL = 1e-5


def compare_weights(reference, candidate, what):
    ref, got = read_safetensors(reference), read_safetensors(candidate)
    expect(sorted(ref) == sorted(got), "%s: tensor names differ: %s vs %s"
           % (what, sorted(set(ref) ^ set(got)), ""))
    worst = (0.0, None)
    for name, (shape, a) in ref.items():
        shape_b, b = got[name]
        expect(shape == shape_b, "%s: %s has shape %s, want %s" % (what, name, shape_b, shape))
        scale = max(abs(x) for x in a) if len(a) else 0.0
        diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
        bound = WEIGHT_RTOL * scale + WEIGHT_ATOL
        expect(diff <= bound, "%s: %s differs from one worker's by %.3g (max |w| %.3g, bound "
               "%.3g)" % (what, name, diff, scale, bound))
        if scale > 0 and diff / scale > worst[0]:
            worst = (diff / scale, name)
    return worst


def run_to_end(c, spec_path, timeout=300):
    job_id = c.submit(spec_path)
    done = c.wait_state(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout)
    expect(done["state"] == "SUCCEEDED", "%s ended %s: %s" % (job_id, done["state"],
                                                             done.get("reason")))
    return job_id, done


def peer_ranks(dp, pp, tp, rank):
    """The ranks `rank` talks to (plan/ranks.h PeerRanks, written again as the test's oracle):
    pipeline -+1 stage (wrapping), tp -+1 and dp -+1 (rings), and the job's ring -+1."""
    n = dp * pp * tp
    d, p, t = rank // (pp * tp), rank // tp % pp, rank % tp

    def at(dd, pq, tt):
        return ((dd % dp) * pp + pq % pp) * tp + tt % tp

    peers = {at(d, p - 1, t), at(d, p + 1, t), at(d, p, t - 1), at(d, p, t + 1),
             at(d - 1, p, t), at(d + 1, p, t), (rank - 1) % n, (rank + 1) % n}
    peers.discard(rank)
    return sorted(peers)


def case_multi_worker(args):
    """(dp, pp, tp) = (1,2,2) interleaved, (2,2,1) 1f1b with ZeRO-1 and (2,2,2) zb-h1, each on
    real worker processes (4, 4, 8) through the CLI: every job SUCCEEDS, the coordinator records
    each step once, the per-step losses match a one-worker job of the same spec within 1e-5
    relative, the output is rank 0's <checkpoint.dir>/model.safetensors and its weights match
    the one worker's (WEIGHT_RTOL); the workers are IDLE after each job."""
    with Cluster(args.binaries, "multi_worker") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ["w%d" % i for i in range(1, 9)]
        for w in ids:
            c.start_worker(w, extra=["--comm_timeout=20s", "--connect_timeout=20s"])
        c.wait_workers({w: "IDLE" for w in ids})

        t0 = time.monotonic()
        ref_ckpt = os.path.join(c.tmp, "ckpt-single")
        ref_id, ref = run_to_end(c, c.write_spec("single.json", tiny_parallel_spec(ref_ckpt)))
        rc, _, ref_steps = watched_steps(c, ref_id)
        expect(rc == 0 and sorted(ref_steps) == list(range(1, 11)),
               "reference steps %s (watch exit %d)" % (sorted(ref_steps), rc))
        expect(ref["output"] == os.path.join(ref_ckpt, ref_id, "model.safetensors"),
               "reference output %r" % ref["output"])
        print("one worker: %.1fs, loss %.6f -> %.6f"
              % (time.monotonic() - t0, ref_steps[1][0], ref_steps[10][0]))

        layouts = [
            ((1, 2, 2), {"schedule": "interleaved", "virtual_stages": 2}, 2),
            ((2, 2, 1), {"schedule": "1f1b", "zero1": True}, 2),
            ((2, 2, 2), {"schedule": "zb-h1"}, 1),
        ]
        for (dp, pp, tp), extra, micro in layouts:
            name = "dp%d-pp%d-tp%d" % (dp, pp, tp)
            ckpt = os.path.join(c.tmp, "ckpt-" + name)
            parallel = dict({"dp": dp, "pp": pp, "tp": tp}, **extra)
            spec = tiny_parallel_spec(ckpt, name=name, parallel=parallel, micro_batch_size=micro)
            t0 = time.monotonic()
            job_id, done = run_to_end(c, c.write_spec(name + ".json", spec))
            elapsed = time.monotonic() - t0
            ranks = done["placement"]["ranks"]
            expect(len(ranks) == dp * pp * tp, "%s: %d ranks placed" % (name, len(ranks)))
            rc, updates, steps = watched_steps(c, job_id)
            expect(rc == 0, "%s: watch exited %d" % (name, rc))
            expect(sorted(steps) == list(range(1, 11)), "%s: steps %s" % (name, sorted(steps)))
            worst_loss = expect_one_workers_losses(name, ref_steps, steps, grad_norms=True)
            expect(done["output"] == os.path.join(ckpt, job_id, "model.safetensors"),
                   "%s: output %r" % (name, done["output"]))
            worst = compare_weights(ref["output"], done["output"], name)
            events = [u["text"] for u in updates if u["type"] == "event"]
            # Each rank connects to its peers only (plan/ranks.h PeerRanks), not to every rank.
            want = sorted(len(peer_ranks(dp, pp, tp, r)) for r in range(dp * pp * tp))
            connected = sorted(int(m.group(1)) for m in
                               (re.search(r"connected to (\d+) peers? in ", e) for e in events)
                               if m)
            expect(connected == want, "%s: connected to %s peers, want %s" % (name, connected, want))
            print("%s: %.1fs on %d workers, worst loss rel diff %.2g, worst weight diff %.2g of "
                  "max |w| (%s)" % (name, elapsed, len(ranks), worst_loss, worst[0], worst[1]))
            c.wait_workers({w["worker_id"]: "IDLE" for w in ranks}, timeout=15)
        expect(c.coordinator.alive(), "the coordinator died")
        for wid, p in c.workers.items():
            expect(p.alive(), "worker %s died" % wid)


def case_multi_worker_staging(args):
    """pp=2 x tp=2, then dp=2 x pp=2, on four worker processes started with
    --device=cpu-staging (device memory only the backend may touch, copies on a thread:
    kernels/cpu/staging_backend.h), so every activation, gradient, all-reduce chunk and checkpoint
    goes through the staging a GPU worker uses, and the dp gradient buckets through the buffers
    the dp group shares (copied there, all-reduced in place, copied back): each job SUCCEEDS with
    one worker's losses (1e-5 relative) and weights, and no worker crashed (a dereference of device
    memory outside the backend is a SIGSEGV). Then `dtrain sample` of the last job, drawn by one
    of its workers, and a bf16 job (expect_bf16_job).
    DTRAIN_CASE_WORKER_DEVICE=cuda:0 runs it on one GPU shared by the workers (tools/gpu_check.sh)."""
    device = os.environ.get("DTRAIN_CASE_WORKER_DEVICE", "cpu-staging")
    with Cluster(args.binaries, "multi_worker_staging") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ["w%d" % i for i in range(1, 5)]
        for w in ids:
            c.start_worker(w, extra=["--device=" + device, "--comm_timeout=20s",
                                     "--connect_timeout=20s"])
        c.wait_workers({w: "IDLE" for w in ids})
        ref_ckpt = os.path.join(c.tmp, "ckpt-single")
        ref_id, ref = run_to_end(c, c.write_spec("single.json", tiny_parallel_spec(ref_ckpt)))
        _, _, ref_steps = watched_steps(c, ref_id)
        for name, parallel in (("pp2-tp2", {"pp": 2, "tp": 2}), ("dp2-pp2", {"dp": 2, "pp": 2})):
            ckpt = os.path.join(c.tmp, "ckpt-" + name)
            spec = tiny_parallel_spec(ckpt, name=name, parallel=parallel, micro_batch_size=2)
            t0 = time.monotonic()
            job_id, done = run_to_end(c, c.write_spec(name + ".json", spec))
            elapsed = time.monotonic() - t0
            expect(len(done["placement"]["ranks"]) == 4, "4 ranks placed: %s" % done["placement"])
            rc, _, steps = watched_steps(c, job_id)
            expect(rc == 0 and sorted(steps) == list(range(1, 11)), "steps %s" % sorted(steps))
            worst_loss = expect_one_workers_losses(name, ref_steps, steps)
            worst = compare_weights(ref["output"], done["output"], "%s on %s" % (name, device))
            if "dp" in parallel:  # rank 0 says how the dp gradients went, in its log
                rank0 = c.workers[done["placement"]["ranks"][0]["worker_id"]].log_text()
                expect("copied to buffers the dp group shares" in rank0,
                       "rank 0 did not say the dp buckets use the shared buffers:\n%s"
                       % rank0[-2000:])
            print("%s on %s: %.1fs, worst loss rel diff %.2g, worst weight diff %.2g (%s)"
                  % (name, device, elapsed, worst_loss, worst[0], worst[1]))
        # `dtrain sample` of the last job: one of its workers draws it (on its CPU, whatever
        # its device) from the job's final weights.
        rc, out, err = c.cli("sample", job_id, "--prompt=The ", "--tokens=8", "--temperature=0",
                             "--json")
        expect(rc == 0, "sample exited %d: %s" % (rc, err))
        drawn = json.loads(out) if rc == 0 else {}
        workers = [r["worker_id"] for r in done["placement"]["ranks"]]
        expect(len(drawn.get("tokens", [])) == 8 and drawn.get("worker_id") in workers,
               "sample of %s: %r" % (job_id, drawn))
        print("sample of the %s job: drawn by %s" % (name, drawn.get("worker_id")))
        expect_bf16_job(c, device, ref_steps)
        for wid, p in c.workers.items():
            expect(p.alive(), "worker %s died" % wid)


def expect_bf16_job(c, device, ref_steps):
    """A job's "matmul_precision": "bf16". On CUDA workers, dp=2 x pp=2 trains with it on every
    rank (the job's event says so) to about the fp32 losses (2e-2 relative) but not to the same
    bits; on CPU workers the job is planned for CUDA workers and waits for them."""
    spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt-bf16"), name="bf16",
                              parallel={"dp": 2, "pp": 2}, micro_batch_size=2,
                              matmul_precision="bf16")
    if not device.startswith("cuda"):
        job_id = c.submit(c.write_spec("bf16.json", spec))
        time.sleep(2)
        job = c.job(job_id)
        expect(job["state"] == "QUEUED" and job["spec"]["device"] == "cuda",
               "bf16 job on cpu workers: %s, device %s: %s"
               % (job["state"], job["spec"]["device"], job.get("reason")))
        rc, _, err = c.cli("cancel", job_id)
        expect(rc == 0, "cancel of the bf16 job exited %d: %s" % (rc, err))
        print("bf16 on %s: planned for cuda, QUEUED (%s)" % (device, job.get("reason")))
        return
    job_id, done = run_to_end(c, c.write_spec("bf16.json", spec))
    rc, updates, steps = watched_steps(c, job_id)
    expect(rc == 0 and sorted(steps) == list(range(1, 11)), "bf16 steps %s" % sorted(steps))
    rels = [abs(steps[s][0] - ref_steps[s][0]) / abs(ref_steps[s][0]) for s in range(1, 11)]
    expect(max(rels) <= 2e-2, "bf16 losses %s vs fp32 %s" % (steps, ref_steps))
    expect(max(rels) > 1e-7, "bf16 losses equal the fp32 ones: was bf16 used?")
    events = [u["text"] for u in updates if u["type"] == "event"]
    expect(any(", matmul bf16" in e for e in events),
           "no event says the job trains with bf16: %s" % events)
    print("bf16 dp2-pp2 on %s: losses within %.2g of fp32 (relative)" % (device, max(rels)))


def case_multi_worker_faults(args):
    """Running (2,2,1) jobs with fault_tolerance.max_restarts 0 (fail fast; recovery_cases.py
    has the recoveries): cancel -> CANCELLED (not FAILED) and every worker IDLE within
    seconds; kill -9 of one worker -> FAILED at once (its peers' streams break) with a reason
    naming it; SIGSTOP of one worker -> FAILED at the comm deadline (--comm_timeout=5s; the
    coordinator's lease is 30s, so the workers' reports decide) naming it; the survivors are
    IDLE again and, with fresh workers, train a job to the end."""
    with Cluster(args.binaries, "multi_worker_faults") as c:
        c.lease_s = 30.0
        c.write_corpus()
        c.start_coordinator()
        comm_timeout = 5.0
        extra = ["--comm_timeout=%gs" % comm_timeout, "--connect_timeout=20s"]
        ids = ["w1", "w2", "w3", "w4"]
        for w in ids:
            c.start_worker(w, extra=extra)
        c.wait_workers({w: "IDLE" for w in ids})
        layout = {"dp": 2, "pp": 2, "tp": 1}

        # Cancel.
        spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt-cancel"), steps=100000,
                                  name="cancel", parallel=layout)
        job_id = c.submit(c.write_spec("cancel.json", spec))
        c.wait_step(job_id, 3, 120)
        t0 = time.monotonic()
        rc, out, err = c.cli("cancel", job_id, "--reason=enough")
        expect(rc == 0, "cancel exited %d: %s" % (rc, err))
        # Each rank hears of the cancel at its own heartbeat and aborts its streams; its peer
        # service then closes within a grace of 5 s. 30 s: CI runs this beside other tests.
        c.wait_workers({w: "IDLE" for w in ids}, timeout=30)
        elapsed = time.monotonic() - t0
        job = c.job(job_id)
        expect(job["state"] == "CANCELLED", "cancelled job: %s: %s" % (job["state"], job["reason"]))
        time.sleep(1)
        expect(c.job(job_id)["state"] == "CANCELLED", "the job changed state after the cancel")
        print("cancel: every worker IDLE %.1fs after the cancel; %s" % (elapsed, job["reason"]))

        # kill -9 of one worker.
        spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt-kill"), steps=100000, name="kill",
                                  parallel=layout, **FAIL_FAST)
        job_id = c.submit(c.write_spec("kill.json", spec))
        job = c.wait_step(job_id, 3, 120)
        victim = job["placement"]["ranks"][3]["worker_id"]  # dp1 pp1
        t0 = time.monotonic()
        c.workers[victim].signal(signal.SIGKILL)
        failed = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), comm_timeout + 30)
        elapsed = time.monotonic() - t0
        reason = failed.get("reason", "")
        expect(failed["state"] == "FAILED", "job after kill -9: %s: %s" % (failed["state"], reason))
        expect("worker %s " % victim in reason, "the reason should name %s: %r" % (victim, reason))
        expect("lost: no heartbeat" not in reason,
               "the workers' reports should decide, not the lease: %r" % reason)
        expect(elapsed <= comm_timeout + 3, "FAILED %.1fs after kill -9; comm deadline %gs"
               % (elapsed, comm_timeout))
        print("kill -9 %s: FAILED %.1fs later: %s" % (victim, elapsed, reason))
        survivors = [w for w in ids if w != victim]
        c.wait_workers({w: "IDLE" for w in survivors}, timeout=15)

        # A worker that hangs (SIGSTOP: its connections stay open, it answers nothing).
        c.start_worker("w5", extra=extra)
        c.wait_workers({"w5": "IDLE"})
        spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt-hang"), steps=100000, name="hang",
                                  parallel=layout, **FAIL_FAST)
        job_id = c.submit(c.write_spec("hang.json", spec))
        job = c.wait_step(job_id, 3, 120)
        hung = job["placement"]["ranks"][3]["worker_id"]
        t0 = time.monotonic()
        c.workers[hung].signal(signal.SIGSTOP)
        try:
            failed = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), comm_timeout + 30)
            elapsed = time.monotonic() - t0
            reason = failed.get("reason", "")
            expect(failed["state"] == "FAILED", "job after SIGSTOP: %s: %s"
                   % (failed["state"], reason))
            expect("worker %s " % hung in reason, "the reason should name %s: %r" % (hung, reason))
            expect(comm_timeout - 1 <= elapsed <= comm_timeout + 5,
                   "FAILED %.1fs after SIGSTOP; comm deadline %gs" % (elapsed, comm_timeout))
            print("SIGSTOP %s: FAILED %.1fs later: %s" % (hung, elapsed, reason))
            c.wait_workers({w: "IDLE" for w in survivors + ["w5"] if w != hung}, timeout=15)
        finally:
            c.workers[hung].signal(signal.SIGKILL)

        for w in ("w6", "w7"):
            c.start_worker(w, extra=extra)
        c.wait_workers({"w6": "IDLE", "w7": "IDLE"})
        spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt-after"), steps=3, name="after",
                                  parallel=layout)
        job_id, done = run_to_end(c, c.write_spec("after.json", spec))
        expect(victim not in json.dumps(done["placement"]), "placed on the dead %s" % victim)
        expect(c.coordinator.alive(), "the coordinator died")


def case_unreachable(args):
    """A CLI pointed at nothing exits 3 at once with a clear message; a coordinator that accepts
    connections but never answers: exit 3 after --timeout; $DTRAIN_COORDINATOR is honoured."""
    cli = args.binaries["cli"]
    port = free_port()
    nothing = "127.0.0.1:%d" % port
    spec = os.path.join(args.examples, "tiny.json")
    for argv in (["list"], ["workers"], ["status", "job-000001"], ["watch", "job-000001"],
                 ["cancel", "job-000001"], ["submit", spec], ["submit", spec, "--watch"]):
        t0 = time.monotonic()
        r = subprocess.run([cli, "--coordinator=" + nothing, "--insecure"] + argv,
                           capture_output=True, timeout=30)
        elapsed = time.monotonic() - t0
        err = r.stderr.decode()
        expect(r.returncode == 3, "%s against nothing: exit %d (want 3): %s"
               % (argv, r.returncode, err))
        expect(elapsed < 3, "%s against nothing took %.1fs" % (argv, elapsed))
        expect("cannot reach the coordinator at " + nothing in err, "message: %r" % err)
    print("against nothing: %s" % err.strip())

    env = dict(os.environ, DTRAIN_COORDINATOR=nothing, DTRAIN_INSECURE="1")
    r = subprocess.run([cli, "list"], capture_output=True, timeout=30, env=env)
    expect(r.returncode == 3 and nothing in r.stderr.decode(),
           "$DTRAIN_COORDINATOR not used: %d %r" % (r.returncode, r.stderr))

    with hung_listener() as address:
        for argv in (["list"], ["watch", "job-000001"]):
            t0 = time.monotonic()
            r = subprocess.run([cli, "--coordinator=" + address, "--timeout=1s", "--insecure"]
                               + argv, capture_output=True, timeout=30)
            elapsed = time.monotonic() - t0
            expect(r.returncode == 3, "%s against a hung listener: exit %d: %r"
                   % (argv, r.returncode, r.stderr))
            expect(elapsed < 5, "%s against a hung listener took %.1fs (--timeout=1s)"
                   % (argv, elapsed))
            expect(b"but no answer within 1s (--timeout): is it hung or overloaded?" in r.stderr,
                   "%s against a hung listener says: %r" % (argv, r.stderr))
        print("against a hung listener: %s" % r.stderr.decode().strip())

    r = subprocess.run([cli, "help"], capture_output=True, timeout=30)
    expect(r.returncode == 0 and b"exit status" in r.stdout, "help: %d" % r.returncode)


def prometheus_config(path, targets, interval="1s"):
    """A scrape config for Debian's Prometheus: every target under job "dtrain"."""
    with open(path, "w") as f:
        f.write("global:\n  scrape_interval: %s\n  evaluation_interval: %s\n"
                "scrape_configs:\n  - job_name: dtrain\n    static_configs:\n"
                "      - targets: [%s]\n"
                % (interval, interval, ", ".join('"%s"' % t for t in targets)))
    return path


def prometheus_query(port, query):
    """The result vector of an instant query against Prometheus' HTTP API."""
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": query}))
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read().decode())
    if body.get("status") != "success":
        raise TestFailure("Prometheus query %r failed: %r" % (query, body))
    return body["data"]["result"]


def case_prometheus(args):
    """A real Prometheus server (Debian's) scrapes the coordinator and four workers running a
    pp=2 x tp=2 job on loopback. Its HTTP API shows, for every rank of the job, the step
    counter and the bytes counters growing between two queries, the coordinator's workers by
    state, and every target up."""
    if shutil.which("prometheus") is None:
        raise TestFailure("prometheus is not installed (tools/setup.sh installs Debian's)")
    with Cluster(args.binaries, "prometheus") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ["w1", "w2", "w3", "w4"]
        for w in ids:
            c.start_worker(w, extra=["--comm_timeout=30s"])
        c.wait_workers({w: "IDLE" for w in ids})
        targets = ["127.0.0.1:%d" % p for p in c.metrics_ports.values()]
        prom_port = free_port()
        config = prometheus_config(os.path.join(c.tmp, "prometheus.yml"), targets)
        c._spawn("prometheus", ["prometheus", "--config.file=%s" % config,
                                "--storage.tsdb.path=%s" % os.path.join(c.tmp, "tsdb"),
                                "--web.listen-address=127.0.0.1:%d" % prom_port])

        def all_up():
            try:
                up = prometheus_query(prom_port, "up")
            except (OSError, ValueError):
                return False
            return len(up) == len(targets) and all(r["value"][1] == "1" for r in up)
        c.wait_until(all_up, 60, "Prometheus scraping all %d targets" % len(targets))

        spec = tiny_parallel_spec(os.path.join(c.tmp, "ckpt"), steps=5000, name="prometheus",
                                  parallel={"dp": 1, "pp": 2, "tp": 2}, micro_batch_size=2)
        job_id = c.submit(c.write_spec("prom.json", spec))
        c.wait_step(job_id, 5, 120)

        def per_rank(query):
            try:
                return {r["metric"].get("rank"): float(r["value"][1])
                        for r in prometheus_query(prom_port, query)}
            except (OSError, ValueError):
                return {}
        steps_q = 'dtrain_worker_steps_total{job_id="%s"}' % job_id
        bytes_q = 'sum by (rank) (dtrain_worker_sent_bytes_total{job_id="%s"})' % job_id
        c.wait_until(lambda: len(per_rank(steps_q)) == 4 and len(per_rank(bytes_q)) == 4, 60,
                     "step and bytes series of all four ranks in Prometheus")
        steps1, bytes1 = per_rank(steps_q), per_rank(bytes_q)
        c.wait_until(lambda: all(per_rank(steps_q).get(r, 0) > steps1[r] for r in steps1) and
                     all(per_rank(bytes_q).get(r, 0) > bytes1[r] for r in bytes1), 60,
                     "every rank's steps and bytes counters growing")
        steps2, bytes2 = per_rank(steps_q), per_rank(bytes_q)
        expect(sorted(steps2) == ["0", "1", "2", "3"], "ranks in Prometheus: %s" % sorted(steps2))
        busy = prometheus_query(prom_port, 'dtrain_coordinator_workers{state="busy"}')
        expect(busy and float(busy[0]["value"][1]) == 4, "coordinator busy workers: %r" % busy)
        kinds = {r["metric"]["kind"] for r in
                 prometheus_query(prom_port, 'dtrain_worker_sent_bytes_total{job_id="%s"}' % job_id)}
        expect({"activation", "gradient", "collective"} <= kinds, "bytes kinds %s" % kinds)
        print("steps per rank %s -> %s; bytes sent per rank %s -> %s"
              % (steps1, steps2, bytes1, bytes2))
        c.cli("cancel", job_id, check=True)
        c.wait_state(job_id, ("CANCELLED",), 60)


# Cases live here and in the modules beside this file, one module per theme (*_cases.py: each
# module's docstring says what it covers); every function named case_NAME is the case NAME, which
# tests/integration/BUILD registers as NAME_test with its size.
CASES = {}
for _module in [sys.modules[__name__]] + [
        importlib.import_module(os.path.basename(path)[:-len(".py")])
        for path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "*_cases.py")))]:
    for _name, _fn in list(vars(_module).items()):
        if _name.startswith("case_") and callable(_fn):
            CASES[_name[len("case_"):]] = _fn


def _on_sigterm(signum, frame):
    raise TestFailure("terminated by SIGTERM (Bazel's test timeout?)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", required=True, choices=sorted(CASES) + ["all"])
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--worker_testing", required=True,
                        help="dtrain-worker-testing: the worker with --test_only_* fault flags")
    parser.add_argument("--cli", required=True)
    parser.add_argument("--examples", required=True, help="folder of tiny.json")
    parser.add_argument("--peer_dial", help="worker/comm's peer_dial_for_testing (roles_cases)")
    parser.add_argument("--sample", help="worker's dtrain-sample (metrics_cases: dtrain sample)")
    parser.add_argument("--fill_store", help="coordinator's fill_store_for_testing (bounds_cases)")
    parser.add_argument("--local", help="worker's dtrain-local (eval_cases: the one-process oracle)")
    args = parser.parse_args()
    args.binaries = {"coordinator": os.path.abspath(args.coordinator),
                     "worker": os.path.abspath(args.worker),
                     "worker_testing": os.path.abspath(args.worker_testing),
                     "cli": os.path.abspath(args.cli)}
    args.examples = os.path.abspath(args.examples)
    if args.peer_dial:
        args.peer_dial = os.path.abspath(args.peer_dial)
    if args.sample:
        args.sample = os.path.abspath(args.sample)
    if args.fill_store:
        args.fill_store = os.path.abspath(args.fill_store)
    if args.local:
        args.local = os.path.abspath(args.local)
    # Bazel ends a test that runs too long with SIGTERM: turn it into an exception so every
    # Cluster's cleanup runs (children also die with us through PR_SET_PDEATHSIG).
    signal.signal(signal.SIGTERM, _on_sigterm)
    names = sorted(CASES) if args.case == "all" else [args.case]
    failed = []
    for name in names:
        t0 = time.monotonic()
        print("=== %s" % name, flush=True)
        try:
            CASES[name](args)
            print("--- PASS %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
        except TestFailure as e:
            print("--- FAIL %s (%.1fs): %s" % (name, time.monotonic() - t0, e), flush=True)
            failed.append(name)
    if failed:
        print("FAILED: %s" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
