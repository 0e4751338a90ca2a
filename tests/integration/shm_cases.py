"""The same-host data path with real workers (worker/comm/grpc/shm_link.h): ranks of one host
exchange tensors through shared memory, a peer killed with kill -9 fails the ranks linked to it
within a second with an error naming it, the job recovers, and nothing of it stays in /dev/shm.
"""

import datetime
import os
import re
import signal
import time

from harness import Cluster, expect, latest_step, losses, small_job_spec
from recovery_cases import (FINAL, LOSS_RTOL, compare, one_recovery, phases, recovery_spec,
                            run_reference, start, wait_sealed)

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) dtrain-worker\[")


def logged_after(worker, since, pattern):
    """(seconds after `since`, line) of the worker's first log line after `since` (a local
    datetime) matching `pattern`, or None."""
    for line in worker.log_text().splitlines():
        m = LOG_TIME.match(line)
        if not m:
            continue
        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
        if at >= since and re.search(pattern, line):
            return (at - since).total_seconds(), line
    return None


def rings_of(pids):
    """The /dev/shm entries of these processes' rings ("dtrain-<pid>-<hex>")."""
    prefixes = tuple("dtrain-%d-" % p for p in pids)
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefixes)]


def case_shm_peer_killed(args):
    """pp=2 x tp=2 on 4 workers of this host plus a spare: every rank's data to its peers goes
    through shared memory (the workers say so); kill -9 of one worker mid-step fails a surviving
    rank linked to it within 1 s with an error naming the dead worker; the job recovers onto the
    spare and SUCCEEDS; no ring of any worker stays in /dev/shm."""
    peer_killed(args, "shm_peer_killed", {"pp": 2, "tp": 2})


def case_shm_dp_peer_killed(args):
    """The same with dp=4: the four ranks' gradients live in buffers they all map, and the
    gradient buckets are all-reduced in place (collectives/allreduce_shared.h); kill -9 of one
    fails a survivor within 1 s naming it, the job recovers, no segment stays in /dev/shm."""
    peer_killed(args, "shm_dp_peer_killed", {"dp": 4})


def peer_killed(args, name, parallel):
    with Cluster(args.binaries, name) as c:
        ids = ["w1", "w2", "w3", "w4", "w5"]
        start(c, ids)
        pids = [c.workers[w].pid for w in ids]
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), parallel=parallel)
        job_id = c.submit(c.write_spec("shm.json", dict(spec, name="shm")))
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 13, 60)
        placed = [r["worker_id"] for r in job["placement"]["ranks"]]
        for w in placed:
            text = c.workers[w].log_text()
            expect("goes through shared memory" in text,
                   "%s logged no shared-memory data path:\n%s" % (w, text[-2000:]))
            expect("goes through grpc" not in text, "%s fell back to gRPC on one host" % w)
        if parallel.get("dp", 1) > 1:  # rank 0 says how the dp gradients go, in its events
            text = c.workers[placed[0]].log_text()
            expect("gradient buckets are all-reduced in place" in text,
                   "%s did not say the dp buckets use shared buffers:\n%s"
                   % (placed[0], text[-2000:]))
        expect(not rings_of(pids), "rings left in /dev/shm while running: %s" % rings_of(pids))

        victim = placed[3]  # pp1 tp1, or dp3
        killed_at = datetime.datetime.now()
        c.workers[victim].signal(signal.SIGKILL)
        t0 = time.monotonic()
        # A rank linked to the victim fails at once, naming it (its worker and address).
        first = None
        while time.monotonic() - t0 < 10 and first is None:
            for w in placed[:3]:
                hit = logged_after(c.workers[w], killed_at, r"job %s (failed|stopped): .*worker %s"
                                   % (re.escape(job_id), re.escape(victim)))
                if hit and (first is None or hit[0] < first[0]):
                    first = (hit[0], w, hit[1])
            time.sleep(0.1)
        expect(first is not None, "no surviving rank failed naming %s" % victim)
        expect(first[0] <= 1.0, "the first rank failed %.2fs after the kill, not within 1s: %s"
               % (first[0], first[2]))

        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(r.get("failed_worker") == victim, "the recovery names %r, not %s"
               % (r.get("failed_worker"), victim))
        expect(not rings_of(pids), "rings left in /dev/shm after the job: %s" % rings_of(pids))
        print("kill -9 %s: %s failed %.3fs later naming it; recovered from step %s; "
              "nothing left in /dev/shm" % (victim, first[1], first[0],
                                            r.get("resumed_from_step")))


def case_hierarchical_dp_on_two_hosts(args):
    """dp=4 on workers of two host labels, two each: the coordinator places dp0, dp1 on the first
    host and dp2, dp3 on the second and sends every rank its dp group's hosts, so the gradient
    all-reduce is hierarchical (per host, across the two leaders, back): the leaders dp0 and dp2
    connect to 3 peers, the others to 2 (the flat ring: 2 each); the job's losses are those of
    the same job on one worker."""
    with Cluster(args.binaries, "hierarchical_dp") as c:
        c.write_corpus()
        c.start_coordinator()
        for w, host in (("w1", "host-a"), ("w2", "host-a"), ("w3", "host-b"), ("w4", "host-b")):
            c.start_worker(w, extra=["--host_label=" + host])
        c.wait_workers({w: "IDLE" for w in ("w1", "w2", "w3", "w4")})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 6)
        want = run_reference(c, spec, "one-worker")
        job_id = c.submit(c.write_spec("dp4.json", dict(spec, name="dp4",
                                                         parallel={"dp": 4})))
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "dp=4: %s: %s" % (done["state"], done.get("reason")))
        worst = compare(losses(c, job_id), want, LOSS_RTOL, "dp=4 on two hosts")
        rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
        connected = sorted(int(m.group(1)) for m in
                           (re.search(r"connected to (\d+) peers? in ", line) for line in
                            out.splitlines()) if m)
        expect(connected == [2, 2, 3, 3], "dp=4 on two hosts: ranks connected to %s peers, want "
               "[2, 2, 3, 3] (the hierarchy's)" % connected)
        print("dp=4 on 2 hosts: hierarchical (peers %s), losses within %.2g of one worker's"
              % (connected, worst))


# Kills of the same-host stop case (case_shm_peer_killed_stops_fast); DTRAIN_STOP_KILLS more to
# hunt a slow path by hand.
STOP_KILLS = int(os.environ.get("DTRAIN_STOP_KILLS", "3"))
# The survivor's stop, bounded: a killed peer fails its receives at once (a broken stream, or
# the coordinator's cancel), far below the comm timeout (60 s); room for a loaded 2-core machine.
STOP_BOUND_S = 5.0


def await_unpublished_rank1(job_dir, timeout=10):
    """Returns once the newest step in `job_dir` has rank 0's entries and not yet rank 1's
    (rank 0 waits for them to seal it; 2 of 3 such kills of rank 1 left rank 0 waiting its comm
    timeout before the seal watched its peers), or after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            steps = sorted(d for d in os.listdir(job_dir) if d.startswith("step_"))
        except OSError:
            steps = []
        if steps:
            have = lambda r: os.path.exists(os.path.join(job_dir, steps[-1],
                                                         "rank-%05d.entries.json" % r))
            if have(0) and not have(1):
                return
        time.sleep(0.001)


def case_shm_peer_killed_stops_fast(args):
    """pp=2 on 2 workers of this host (shared memory) plus a spare, full-speed steps, a
    checkpoint every step: kill -9 of rank 1 while rank 0 waits for its part of a checkpoint
    (await_unpublished_rank1), of rank 0 mid-step, alternately, STOP_KILLS times, a fresh
    worker joining as the next spare after each: every time the
    recovery's stop and place phases (which wait for the surviving rank to stop its run) take
    under STOP_BOUND_S together, and that rank's worker logs the run's end within a lease plus
    STOP_BOUND_S of the kill: nothing waits for the comm timeout (60 s)."""
    with Cluster(args.binaries, "shm_peer_killed_stops_fast") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2", "w3"])
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), steps=100000, interval=1,
                             name="stopfast", parallel={"pp": 2},
                             fault_tolerance={"max_restarts": STOP_KILLS + 1,
                                              "on_worker_loss": "wait", "wait_for": "90s"})
        job_id = c.submit(c.write_spec("stopfast.json", spec))
        stops = []
        for i in range(STOP_KILLS):
            job = c.wait_job(job_id, lambda j: j.get("state") == "RUNNING" and
                             len(j.get("recoveries", [])) == i, 60, "running after %d kills" % i)
            job = c.wait_step(job_id, latest_step(job) + 3, 60)
            ranks = [r["worker_id"] for r in job["placement"]["ranks"]]
            victim, survivor = ranks[(i + 1) % 2], ranks[i % 2]
            if victim == ranks[1]:
                await_unpublished_rank1(os.path.join(c.tmp, "ckpt", job_id))
            else:
                time.sleep(0.011 * (i % 7))  # somewhere else in a step
            killed_at = datetime.datetime.now()
            c.workers[victim].signal(signal.SIGKILL)
            done = c.wait_job(job_id, lambda j: len(j.get("recoveries", [])) > i and
                              j["recoveries"][i].get("done") or j.get("state") in FINAL, 90,
                              "recovery %d done" % (i + 1))
            expect(done["state"] not in FINAL, "after kill %d: %s: %s"
                   % (i + 1, done["state"], done.get("reason")))
            r = done["recoveries"][i]
            hit = logged_after(c.workers[survivor], killed_at,
                               r"job %s (failed|stopped):" % re.escape(job_id))
            expect(hit is not None, "%s logged no end of its run after the kill" % survivor)
            # The stop phase ends after at most a lease even if the survivor still runs; the
            # placement then waits for it ("wait": the layout needs it and the spare).
            waited = sum(int(r.get(k, 0) or 0) for k in ("stop_ms", "place_ms")) / 1000.0
            stops.append(hit[0])
            print("kill %d of %s (rank %d) after step %s: %s stopped %.2fs later; %s"
                  % (i + 1, victim, (i + 1) % 2, r.get("last_step"), survivor, hit[0], phases(r)))
            # (A survivor that did not see the death itself is stopped once the lease expires.)
            expect(hit[0] < c.lease_s + STOP_BOUND_S and waited < STOP_BOUND_S,
                   "kill %d of %s: %s stopped %.2fs later, stop + place %.2fs (bounds %gs, %gs): "
                   "%s" % (i + 1, victim, survivor, hit[0], waited, c.lease_s + STOP_BOUND_S,
                           STOP_BOUND_S, hit[1]))
            c.start_idle_workers(["s%d" % (i + 1)])  # a fresh spare: the victim failed once
        rc, _, err = c.cli("cancel", job_id)
        expect(rc == 0, "cancel: %s" % err)
        print("%d kills: the survivor stopped after %s s"
              % (len(stops), ", ".join("%.2f" % s for s in stops)))
