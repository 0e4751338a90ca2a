"""`dtrain diagnose JOB` on real processes: the coordinator asks every rank's peer service for its
flight recorder (2 s deadline) and names the rank the others wait on.

A pp=2 x tp=2 job on four workers, over mutual TLS (the coordinator calls the workers' peer
services with its certificate; the CLI asks with the viewer's): while it runs healthily the
diagnosis says so; once one worker is frozen with SIGSTOP (its sockets stay open, it answers
nothing), the diagnosis names that worker and rank as the root, as not answering, and every
other rank as waiting on it.
The coordinator's lease is long here so the frozen worker is not declared lost (and the job
recovered) while the case looks.
"""

import json
import os
import re
import signal
import time

from harness import Cluster, expect, small_job_spec


def diagnose(c, job_id, cert="viewer"):
    """(seconds, text output, JSON diagnosis) of `dtrain diagnose` and `dtrain --json diagnose`."""
    t0 = time.monotonic()
    rc, text, err = c.cli("diagnose", job_id, timeout=30, cert=cert)
    elapsed = time.monotonic() - t0
    expect(rc == 0, "dtrain diagnose %s exited %d: %s" % (job_id, rc, err))
    rc, out, err = c.cli("--json", "diagnose", job_id, timeout=30, cert=cert)
    expect(rc == 0, "dtrain --json diagnose %s exited %d: %s" % (job_id, rc, err))
    return elapsed, text, json.loads(out)


def diagnose_until(c, job_id, root, tries, pause):
    """`diagnose` every `pause` s until the summary starts with `root` (at most `tries` looks);
    the last look's (seconds, text, JSON). Fails naming every summary seen when none did."""
    summaries = []
    for _ in range(tries):
        time.sleep(pause)
        elapsed, text, d = diagnose(c, job_id)
        summaries.append(d["summary"])
        if d["summary"].startswith(root):
            break
    print(text)
    expect(d["summary"].startswith(root), "want %r in one of:\n%s" % (root, "\n".join(summaries)))
    return elapsed, text, d


def submit_pp2(c, name, coordinator=(), w1=(), w2=()):
    """Starts a coordinator and workers w1, w2 (with these extra flags), and submits a pp=2 run
    of the small job without restarts; its job id."""
    c.write_corpus()
    c.start_coordinator(extra=list(coordinator))
    c.start_worker("w1", extra=list(w1))
    c.start_worker("w2", extra=list(w2))
    c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
    spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 1000, name=name,
                          parallel={"pp": 2}, fault_tolerance={"max_restarts": 0})
    return c.submit(c.write_spec(name + ".json", spec))


def case_diagnose(args):
    """pp=2 x tp=2 over TLS, asked with the viewer's certificate: healthy -> 'healthy: no rank waiting longer than 1.0 s', every rank answering
    with what it does; one worker frozen by SIGSTOP -> within 5 s, the root is that rank and
    worker, which 'did not answer in 2s', and the three others wait on it."""
    with Cluster(args.binaries, "diagnose", tls=True) as c:
        c.lease_s = 60.0  # the frozen worker stays BUSY: its job stays RUNNING meanwhile
        ids = ["w1", "w2", "w3", "w4"]
        c.write_corpus()
        c.start_coordinator()
        for w in ids:
            c.start_worker(w)
        c.wait_workers({w: "IDLE" for w in ids})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, name="diagnose",
                              parallel={"pp": 2, "tp": 2},
                              fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("diagnose.json", spec))
        job = c.wait_step(job_id, 5, 120)

        elapsed, text, d = diagnose(c, job_id)
        expect(d["summary"].startswith("healthy: no rank waiting longer than 1.0 s"),
               "a running job diagnosed as:\n%s" % text)
        expect(len(d["ranks"]) == 4 and all(r.get("answered") for r in d["ranks"]),
               "every rank should answer:\n%s" % text)
        expect(all(r.get("recorder", {}).get("entries") for r in d["ranks"]),
               "every rank should show its last operations: %s" % d["ranks"])
        print("healthy: %.2fs\n%s" % (elapsed, text))

        frozen_rank = 3  # dp0 pp1 tp1: stage 0 waits on its gradients, its tp partner in all-reduces
        frozen = job["placement"]["ranks"][frozen_rank]["worker_id"]
        c.workers[frozen].signal(signal.SIGSTOP)
        try:
            time.sleep(1.5)  # every wait on it is now longer than the 1 s threshold
            elapsed, text, d = diagnose(c, job_id)
        finally:
            c.workers[frozen].signal(signal.SIGKILL)
        print("frozen %s: %.2fs\n%s" % (frozen, elapsed, text))
        expect(elapsed < 5, "diagnose took %.1fs (want < 5s)" % elapsed)
        root = "root: rank %d (%s, dp0 pp1 tp1) did not answer in 2s" % (frozen_rank, frozen)
        expect(d["summary"].startswith(root), "want %r, got:\n%s" % (root, text))
        expect(d.get("root_ranks") == [frozen_rank], "root ranks %s" % d.get("root_ranks"))
        expect(any(f.startswith("rank %d on %s (dp0 pp1 tp1) did not answer in 2s: process alive?"
                                " last heartbeat" % (frozen_rank, frozen)) for f in d["findings"]),
               "no 'did not answer' finding:\n%s" % text)
        for r in d["ranks"]:
            if r["rank"] == frozen_rank:
                expect(not r.get("answered"), "the frozen rank answered: %s" % r)
            else:
                expect(r.get("answered") and r.get("waits_on"),
                       "rank %d should answer and wait: %s" % (r["rank"], r.get("doing")))
        waiters = re.findall(r"ranks? ([0-9, -]+) waits?", d["summary"])
        named = set()
        for group in waiters:
            for part in group.split(","):
                part = part.strip()
                if "-" in part:
                    lo, hi = part.split("-")
                    named.update(range(int(lo), int(hi) + 1))
                elif part:
                    named.add(int(part))
        expect(named == {0, 1, 2}, "the summary should name ranks 0, 1, 2 as waiting: %s"
               % d["summary"])


def case_diagnose_busy_rank(args):
    """A rank that answers but is busy outside the schedule (its worker sleeps 3 s after every
    step: --test_only_step_delay) is told apart from a frozen one: the root is that rank, which
    answered and 'is between operations', and the other rank waits on it."""
    with Cluster(args.binaries, "diagnose_busy_rank") as c:
        job_id = submit_pp2(c, "busy", w2=["--test_only_step_delay=3s"])
        job = c.wait_step(job_id, 1, 120)
        busy_rank = [r["worker_id"] for r in job["placement"]["ranks"]].index("w2")
        root = "root: rank %d (w2, dp0 pp%d tp0) is between operations" % (busy_rank, busy_rank)
        # A look lands in the 3 s sleep (after its first second) most times.
        elapsed, text, d = diagnose_until(c, job_id, root, tries=8, pause=0.7)
        expect(all(r.get("answered") for r in d["ranks"]), "every rank answers:\n%s" % text)
        other = 1 - busy_rank
        expect(d["ranks"][other].get("waits_on") == [busy_rank],
               "rank %d should wait on rank %d: %s" % (other, busy_rank, d["ranks"][other]))
        expect(not any("did not answer" in f for f in d["findings"]), "findings:\n%s" % text)


def case_diagnose_stall_reason(args):
    """The diagnosis runs by itself: with --diagnose_stall_after=1.5s, a pp=2 run whose rank on
    w2 sleeps 5 s after a step (--test_only_step_delay) is diagnosed while it stalls (the job's
    events: 'no step for 1.5s: root: rank 1 (w2, dp0 pp1 tp0) is between operations'), and when
    the other rank's 4 s communication timeout then fails the job, its FAILED reason says the
    same root."""
    with Cluster(args.binaries, "diagnose_stall_reason") as c:
        job_id = submit_pp2(c, "stall", coordinator=["--diagnose_stall_after=1.5s"],
                            w1=["--comm_timeout=4s"],
                            w2=["--test_only_step_delay=5s", "--comm_timeout=4s"])
        job = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), 120)
        busy_rank = [r["worker_id"] for r in job["placement"]["ranks"]].index("w2")
        root = "root: rank %d (w2, dp0 pp%d tp0) is between operations" % (busy_rank, busy_rank)
        rc, logs, err = c.cli("logs", job_id)
        expect(rc == 0, "dtrain logs exited %d: %s" % (rc, err))
        print(logs)
        print("reason: %s" % job.get("reason"))
        expect(("no step for 1.5s: " + root) in logs, "no stall diagnosis in the events:\n%s" % logs)
        expect(job["state"] == "FAILED", "state %s: %s" % (job["state"], job.get("reason")))
        expect("(diagnosed when it stalled: %s" % root in job.get("reason", ""),
               "the reason lacks the diagnosis: %s" % job.get("reason"))


def case_diagnose_mismatched_collective(args):
    """A mismatched collective (--test_only_skip_collective=20 on w2: its tensor-parallel group
    skips sequence number 20, so from its 21st all-reduce on it is one op ahead of its partner)
    on a tp=2 job: no rank waits for its communication timeout (30 s here); the first op past the
    skip fails at once on the in-order streams, and the job is FAILED (a restart cannot cure it)
    with a reason naming the sequence mismatch, both ops and the other rank."""
    with Cluster(args.binaries, "diagnose_mismatched_collective") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1", extra=["--comm_timeout=30s"])
        c.start_worker("w2", extra=["--comm_timeout=30s", "--test_only_skip_collective=20"])
        c.wait_workers({"w1": "IDLE", "w2": "IDLE"})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 1000, name="mismatch",
                              parallel={"tp": 2}, fault_tolerance={"max_restarts": 2})
        t0 = time.monotonic()
        job_id = c.submit(c.write_spec("mismatch.json", spec))
        job = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), 60)
        elapsed = time.monotonic() - t0
        reason = job.get("reason", "")
        print("%s after %.1fs: %s" % (job["state"], elapsed, reason))
        expect(job["state"] == "FAILED", "state %s: %s" % (job["state"], reason))
        expect(elapsed < 25, "the mismatch took %.1fs to fail the job (want no timeout)" % elapsed)
        expect(not job.get("recoveries"), "a mismatch is not retried: %s" % job.get("recoveries"))
        ranks = [r["worker_id"] for r in job["placement"]["ranks"]]
        # Whichever rank saw it first: "... op 21 of group G, the peer at op 20" or the reverse,
        # from the other rank.
        m = re.search(r"sequence mismatch: the peer sent collective group=(\d+) seq=(\d+) part=\d+ "
                      r"first \(this rank is at op (\d+) of group \d+, the peer at op \d+: the "
                      r"ranks called different collectives\)", reason)
        expect(m is not None, "the reason should name the sequence mismatch: %s" % reason)
        ops = {int(m.group(2)), int(m.group(3))}
        expect(ops == {20, 21}, "the mismatched ops should be 20 and 21: %s" % reason)
        expect(re.search(r"from rank \d \(worker w\d at ", reason) is not None,
               "the reason should name the other rank and its worker: %s" % reason)
        expect(set(ranks) == {"w1", "w2"}, "placement %s" % ranks)


def case_diagnose_stuck_in_compute(args):
    """A rank stuck in compute (--test_only_forward_delay=3:10s on w2: F of micro-batch 0 of
    step 3 sleeps 10 s) is told apart from a frozen one: it answers, and the root is it, 'in F
    of micro-batch 0, step 3, for N s (compute, not communication)', the other rank waiting on
    it; no 'did not answer' (the SIGSTOP case, `diagnose`, asserts that one). Then the other
    rank's 4 s communication timeout fails it, and the coordinator diagnoses the job before
    tearing it down (no --diagnose_stall_after): the FAILED reason and the events name that
    root."""
    with Cluster(args.binaries, "diagnose_stuck_in_compute") as c:
        job_id = submit_pp2(c, "compute", coordinator=["--diagnose_stall_after=0"],
                            w1=["--comm_timeout=4s"], w2=["--test_only_forward_delay=3:10s"])
        job = c.wait_step(job_id, 2, 120)
        slow = [r["worker_id"] for r in job["placement"]["ranks"]].index("w2")
        other = 1 - slow
        root = ("root: rank %d (w2, dp0 pp%d tp0) is in F of micro-batch 0, step 3, for "
                % (slow, slow))
        elapsed, text, d = diagnose_until(c, job_id, root, tries=10, pause=0.5)
        expect("(compute, not communication)" in d["summary"], "summary: %s" % d["summary"])
        expect(d["ranks"][slow].get("answered") and d["ranks"][slow].get("compute"),
               "the slow rank answers, in compute: %s" % d["ranks"][slow])
        expect(d["ranks"][other].get("waits_on") == [slow],
               "rank %d should wait on rank %d: %s" % (other, slow, d["ranks"][other]))
        expect(not any("did not answer" in f for f in d["findings"]), "findings:\n%s" % text)
        expect(elapsed < 5, "diagnose took %.1fs" % elapsed)

        job = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), 60)
        reason = job.get("reason", "")
        rc, logs, err = c.cli("logs", job_id)
        expect(rc == 0, "dtrain logs exited %d: %s" % (rc, err))
        print(logs)
        print("reason: %s" % reason)
        expect(job["state"] == "FAILED", "state %s: %s" % (job["state"], reason))
        when = "(diagnosed when rank %d (w1) timed out: %s" % (other, root)
        expect(when in reason, "the reason lacks the diagnosis %r: %s" % (when, reason))
        expect(("rank %d timed out waiting on it" % other) in reason, "reason: %s" % reason)
        expect(("timed out: " + root) in logs, "no timeout diagnosis in the events:\n%s" % logs)


def case_diagnose_timeout_reason(args):
    """The automatic analysis when ranks hit their communication timeout (4 s), without
    --diagnose_stall_after: a pp=2 x tp=2 job whose rank 3 (dp0 pp1 tp1) is frozen by SIGSTOP
    FAILS naming, in its reason, that rank and worker as the root that did not answer and the
    others as waiting on it; the lease (60 s) is long so the worker is not lost first."""
    with Cluster(args.binaries, "diagnose_timeout_reason") as c:
        c.lease_s = 60.0
        ids = ["w1", "w2", "w3", "w4"]
        c.write_corpus()
        c.start_coordinator(extra=["--diagnose_stall_after=0"])
        for w in ids:
            c.start_worker(w, extra=["--comm_timeout=4s"])
        c.wait_workers({w: "IDLE" for w in ids})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, name="timeout",
                              parallel={"pp": 2, "tp": 2}, fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("timeout.json", spec))
        job = c.wait_step(job_id, 3, 120)
        frozen = job["placement"]["ranks"][3]["worker_id"]
        c.workers[frozen].signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            job = c.wait_state(job_id, ("FAILED", "SUCCEEDED", "CANCELLED"), 30)
        finally:
            c.workers[frozen].signal(signal.SIGKILL)
        elapsed = time.monotonic() - t0
        reason = job.get("reason", "")
        rc, logs, err = c.cli("logs", job_id)
        expect(rc == 0, "dtrain logs exited %d: %s" % (rc, err))
        print(logs)
        print("%s %.1fs after the SIGSTOP: %s" % (job["state"], elapsed, reason))
        expect(job["state"] == "FAILED", "state %s: %s" % (job["state"], reason))
        m = re.search(r"\(diagnosed when rank (\d) \((w\d)\) timed out: root: rank 3 \(%s, dp0 pp1 "
                      r"tp1\) did not answer in 2s \(process stopped or hung\?[^)]*\); ([^\n]*)\)"
                      % frozen, reason)
        expect(m is not None, "the reason should name rank 3 on %s as the root: %s"
               % (frozen, reason))
        expect(re.search(r"ranks? [0-9, -]+ (timed out waiting|waits?) ", m.group(3)) is not None,
               "the others should wait on it: %s" % m.group(3))
        expect(elapsed < 15, "the job failed %.1fs after the SIGSTOP (4 s comm timeout)" % elapsed)
