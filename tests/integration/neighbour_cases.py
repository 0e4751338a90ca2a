"""Integration cases: no job pays for another's leftovers or a worker's words.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks, through the
real coordinator, workers and CLI (harness.Cluster).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import Cluster, TestFailure, expect, small_job_spec

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def garbage_checkpoint(c):
    """A file every rank fails to load as an init_checkpoint (FAILURE_LOCAL, not curable)."""
    path = os.path.join(c.tmp, "garbage.safetensors")
    with open(path, "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 64)
    return path


def case_bad_job_then_good_job(args):
    """Eight times in a row on 3 workers: a pp=2 job that fails at start on both its workers,
    then a pp=2 job queued behind it, placed on the third worker and one of the bad job's. Every
    worker keeps its finished job (and its peer service) 1 s after the outcome is delivered
    (--test_only_linger_after_job: the window held open); the good job must never meet the bad
    job's peer service: every good job SUCCEEDS, and every bad one FAILS naming its own cause."""
    with Cluster(args.binaries, "bad_job_then_good_job") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ["w1", "w2", "w3"]
        c.start_idle_workers(ids, extra=["--test_only_linger_after_job=1s",
                                         "--connect_timeout=20s", "--comm_timeout=20s"])
        garbage = garbage_checkpoint(c)
        t0 = time.monotonic()
        for i in range(8):
            bad = small_job_spec(os.path.join(c.tmp, "ckpt-bad"), 4, name="bad-%d" % i,
                                 parallel={"pp": 2}, init_checkpoint=garbage,
                                 fault_tolerance={"max_restarts": 0})
            good = small_job_spec(os.path.join(c.tmp, "ckpt-good"), 4, name="good-%d" % i,
                                  parallel={"pp": 2}, fault_tolerance={"max_restarts": 0})
            bad_id = c.submit(c.write_spec("bad-%d.json" % i, bad))
            good_id = c.submit(c.write_spec("good-%d.json" % i, good))
            b = c.wait_state(bad_id, FINAL, 60)
            g = c.wait_state(good_id, FINAL, 60)
            expect(b["state"] == "FAILED" and "garbage.safetensors" in b.get("reason", ""),
                   "round %d: the bad job %s ended %s: %s" % (i, bad_id, b["state"],
                                                             b.get("reason")))
            expect(g["state"] == "SUCCEEDED",
                   "round %d: the good job %s ended %s after the bad job %s: %s"
                   % (i, good_id, g["state"], bad_id, g.get("reason")))
            c.wait_workers({w: "IDLE" for w in ids})
        print("8 bad/good rounds in %.1fs" % (time.monotonic() - t0))


def case_paused_worker_back_in_a_new_job(args):
    """A worker paused (SIGSTOP) past its lease in a pp=2 job comes back (SIGCONT) still running
    that job, which went on without it, and is placed at once in a job queued meanwhile: the new
    job's assignment waits until the worker has stopped the old run (kept 1 s longer here,
    --test_only_linger_after_job, to hold the window open), and the new job SUCCEEDS on it.
    Before, the worker was handed the new job while it still ran the old one, refused it
    ("worker w1 is still running job job-000001"), and the new job FAILED."""
    with Cluster(args.binaries, "paused_worker_back_in_a_new_job") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"], extra=["--test_only_linger_after_job=1s"])
        # Long enough to hold w2 through the whole case once it goes on alone.
        old = c.submit(c.write_spec("old.json", small_job_spec(
            os.path.join(c.tmp, "ckpt"), 100000, 10, name="old", parallel={"pp": 2})))
        j = c.wait_step(old, 12, 60)
        paused = j["placement"]["ranks"][0]["worker_id"]
        c.workers[paused].signal(signal.SIGSTOP)
        try:
            c.wait_job(old, lambda j: j.get("state") == "RUNNING" and j.get("recoveries")
                       and paused not in {r["worker_id"] for r in j["placement"]["ranks"]},
                       60, "the old job running again without %s" % paused)
            new = c.submit(c.write_spec("new.json", small_job_spec(
                os.path.join(c.tmp, "ckpt"), 20, name="new")))
            c.wait_job(new, lambda j: j.get("state") == "QUEUED", 10, "the new job queued")
        finally:
            c.workers[paused].signal(signal.SIGCONT)
        t0 = time.monotonic()
        done = c.wait_state(new, FINAL, 60)
        expect(done["state"] == "SUCCEEDED",
               "the new job %s ended %s after %s came back: %s"
               % (new, done["state"], paused, done.get("reason")))
        ran_on = [r["worker_id"] for r in done["placement"]["ranks"]]
        expect(ran_on == [paused], "the new job ran on %s, not on %s" % (ran_on, paused))
        log = c.workers[paused].log_text()
        expect("refusing job" not in log, "%s refused a job:\n%s" % (paused, log[-2000:]))
        c.cli("cancel", old)
        c.wait_state(old, FINAL, 60)
        print("%s paused past its lease, back: the new job waited for the old run to stop, "
              "then SUCCEEDED on it %.1fs after SIGCONT" % (paused, time.monotonic() - t0))


def case_report_not_utf8(args):
    """A pp=2 job whose dataset is a symlink (inside the roots) to a file outside them whose
    directory is named in Latin-1 (b"caf\\xe9"): both workers fail it quoting that path, whose
    bytes are not UTF-8. The reports are delivered (the bytes escaped as \\xe9), so the job FAILS
    at once with the true reason, not "stopped answering"; no worker registers again."""
    outside = tempfile.mkdtemp(prefix="dtrain-outside-")
    latin1 = os.path.join(outside.encode(), b"caf\xe9")
    os.mkdir(latin1)
    with open(os.path.join(latin1, b"data.txt"), "wb") as f:
        f.write(b"some text " * 100)
    try:
        with Cluster(args.binaries, "report_not_utf8") as c:
            c.write_corpus()
            c.start_coordinator()
            c.start_idle_workers(["w1", "w2"])
            link = os.path.join(c.workdir, "data", "latin1.txt")
            os.symlink(os.path.join(latin1, b"data.txt"), link.encode())
            spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 4, name="latin1",
                                  parallel={"pp": 2}, dataset="data/latin1.txt",
                                  fault_tolerance={"max_restarts": 0})
            t0 = time.monotonic()
            job_id = c.submit(c.write_spec("latin1.json", spec))
            job = c.wait_state(job_id, FINAL, 30)
            reason = job.get("reason", "")
            expect(job["state"] == "FAILED", "%s ended %s: %s" % (job_id, job["state"], reason))
            expect("caf\\xe9/data.txt" in reason and "outside" in reason
                   and "stopped answering" not in reason,
                   "%s: the reason does not name the path outside the roots: %s"
                   % (job_id, reason))
            print("FAILED in %.1fs: %s" % (time.monotonic() - t0, reason.splitlines()[0]))
            for w in ("w1", "w2"):
                log = c.workers[w].log_text()
                expect("registered again" not in log,
                       "worker %s registered again (a report taken for a refusal)" % w)
    finally:
        shutil.rmtree(outside.encode(), ignore_errors=True)


def _tool(name):
    """`name` on PATH or in the sbin folders (Bazel's strict PATH has none of them)."""
    found = shutil.which(name, path=os.pathsep.join(
        [os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"]))
    if found is None:
        raise TestFailure("%s not found (tools/setup.sh installs it)" % name)
    return found


def _in_own_network_namespace(case):
    """Runs `case` again inside a new user + network namespace (unshare -rn) with its loopback
    up, so that its iptables rules touch nothing outside; True when this process is that run."""
    if os.environ.get("DTRAIN_NETNS_CASE") == case:
        subprocess.run([_tool("ip"), "link", "set", "lo", "up"], check=True)
        return True
    env = dict(os.environ, DTRAIN_NETNS_CASE=case)
    r = subprocess.run([_tool("unshare"), "-rn", sys.executable] + sys.argv, env=env)
    if r.returncode != 0:
        raise TestFailure("%s inside `unshare -rn` exited %d (its output is above; user and "
                          "network namespaces must be allowed)" % (case, r.returncode))
    return False


def _partition(ports, on):
    """Drops (on) or lets through (off) every TCP packet to or from `ports` in this namespace."""
    for port in ports:
        for direction in ("--dport", "--sport"):
            subprocess.run([_tool("iptables"), "-A" if on else "-D", "INPUT", "-p", "tcp",
                            direction, str(port), "-j", "DROP"], check=True)


def case_partition_not_a_crime(args):
    """A pp=2 job on w1 and w2, in a network namespace of its own: iptables drops every packet of
    both workers' peer services for 8 s (the link between them; both keep heartbeating to the
    coordinator). Within 2.5 s `dtrain status` says the run stalled (not "all 2 workers
    running"); each failure it causes names the link, never a worker (Recovery.failed_worker
    empty: neither is excluded); once the link is back the job runs on both workers again and
    steps on."""
    if not _in_own_network_namespace("partition_not_a_crime"):
        return
    with Cluster(args.binaries, "partition_not_a_crime") as c:
        c.write_corpus()
        c.start_coordinator()
        # Every byte over TCP: on one host the data would otherwise go through shared memory,
        # which no iptables rule cuts.
        c.start_idle_workers(["w1", "w2"], extra=["--comm_timeout=3s", "--connect_timeout=3s",
                                                   "--shared_memory=false"])
        ports = [int(c.workers_by_id()[w]["address"].rsplit(":", 1)[1]) for w in ("w1", "w2")]
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, 5, name="partitioned",
                              parallel={"pp": 2}, fault_tolerance={"max_restarts": 20})
        job_id = c.submit(c.write_spec("partitioned.json", spec))
        before = c.wait_step(job_id, 5, 60)
        print("before the cut: %s, %s" % (before.get("reason"), [
            r["worker_id"] for r in before.get("placement", {}).get("ranks", [])]), flush=True)
        _partition(ports, True)
        cut = time.monotonic()
        seen = []

        def shows_stall(j):
            seen[:] = ["%s step %d: %s" % (j.get("state"), int(j.get("latest", {}).get("step", 0)
                                                                 or 0), j.get("reason"))]
            return "stalled?" in j.get("reason", "")
        try:
            stalled = c.wait_job(job_id, shows_stall, 10, "a status that shows the stall")
        except TestFailure as e:
            raise TestFailure("%s; last seen: %s" % (e, seen)) from None
        shown_after = time.monotonic() - cut
        expect(stalled["state"] == "RUNNING" and shown_after < 2.5,
               "the stall showed after %.1fs as %s: %s"
               % (shown_after, stalled["state"], stalled.get("reason")))
        time.sleep(max(0.0, 8 - (time.monotonic() - cut)))
        _partition(ports, False)
        healed = c.job(job_id)
        step_healed = int(healed.get("latest", {}).get("step", 0) or 0)
        job = c.wait_job(job_id, lambda j: j.get("state") == "RUNNING"
                         and int(j.get("latest", {}).get("step", 0) or 0) >= step_healed + 5
                         and len(j.get("placement", {}).get("ranks", [])) == 2, 90,
                         "running on 2 workers again, 5 steps past the healed link")
        recoveries = job.get("recoveries", [])
        expect(recoveries, "the partition caused no recovery: %s" % job.get("reason"))
        for r in recoveries:
            expect(not r.get("failed_worker") and "the link between" in r.get("cause", ""),
                   "a recovery blamed a worker for the partition: %s" % r)
        workers = sorted(r["worker_id"] for r in job["placement"]["ranks"])
        expect(workers == ["w1", "w2"], "placed on %s after the partition" % workers)
        print("stall shown after %.1fs; %d recoveries, each naming the link; back on w1, w2"
              % (shown_after, len(recoveries)))
        c.cli("cancel", job_id, check=True)
