"""What is not a failure (README "Maintenance and pauses"): a pause of the coordinator's own
process (SIGSTOP), a job whose last step was sealed before its rank 0 died, a worker stopped on
purpose (SIGTERM), a worker killed and restarted at once, and a job preempted by one of a higher
priority.

Workers run with --test_only_step_delay so that a fault lands at a known point of a run.
"""

import json
import re
import os
import signal
import subprocess
import time
import urllib.request

from harness import Cluster, TestFailure, expect, losses, small_job_spec
from recovery_cases import FINAL, STEP_DELAY, compare, recovery_spec, run_reference, start


def log_time(log, text):
    """Seconds since midnight of the first line of a daemon's log containing `text`."""
    for line in log.splitlines():
        if text in line:
            clock = line.split()[1]  # "2026-11-27 08:01:02.345 dtrain-worker[w2]: ..."
            h, m, sec = clock.split(":")
            return int(h) * 3600 + int(m) * 60 + float(sec)
    raise TestFailure("no line with %r in:\n%s" % (text, log))


def no_lost_worker(c, job_id):
    """The job's events name no lost worker ("worker w2 lost: no heartbeat for 3.1s")."""
    rc, out, err = c.cli("logs", job_id, timeout=30)
    expect("lost: no heartbeat" not in out and "no heartbeat for" not in out,
           "a worker was declared lost:\n%s" % out)


def case_coordinator_pause(args):
    """SIGSTOP of the coordinator for 3 leases, then SIGCONT: a pp=2 job goes on (no worker
    declared lost, no restart, no shrink) and a second pp=2 job whose workers finish it while
    the coordinator is frozen ends SUCCEEDED. Meanwhile `dtrain --timeout=3s workers` says
    "connected ... but no answer within 3s" within the timeout (plus a second), not "does not
    speak TLS"."""
    with Cluster(args.binaries, "coordinator_pause", tls=True) as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        ckpt = os.path.join(c.tmp, "ckpt")
        long_job = c.submit(c.write_spec("long.json", recovery_spec(
            ckpt, steps=80, interval=10, name="long", parallel={"pp": 2},
            fault_tolerance={"max_restarts": 2, "on_worker_loss": "shrink"})))
        short_job = c.submit(c.write_spec("short.json", recovery_spec(
            ckpt, steps=20, interval=10, name="short", parallel={"pp": 2})))
        c.wait_step(long_job, 5, 60)
        c.wait_step(short_job, 5, 60)
        frozen_for = 3 * c.lease_s
        c.coordinator.signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            rc, out, err = c.cli("--timeout=3s", "workers", timeout=30)
            took = time.monotonic() - t0
            expect(rc != 0 and "no answer within 3s" in err and "TLS" not in err,
                   "`dtrain --timeout=3s workers` to a frozen coordinator: exit %d:\n%s"
                   % (rc, err))
            expect(took <= 3.0 + 1.0, "`dtrain --timeout=3s` took %.1fs" % took)
            time.sleep(max(0.0, frozen_for - (time.monotonic() - t0)))
        finally:
            c.coordinator.signal(signal.SIGCONT)
        paused_at = time.monotonic()
        short = c.wait_state(short_job, FINAL, 60)
        expect(short["state"] == "SUCCEEDED", "the job finished during the pause: %s: %s"
               % (short["state"], short.get("reason")))
        done = c.wait_state(long_job, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after the pause: %s: %s"
               % (done["state"], done.get("reason")))
        for job in (short, done):
            expect(not job.get("recoveries"), "%s restarted: %s"
                   % (job["id"], json.dumps(job.get("recoveries"))))
            expect(len(job["placement"]["ranks"]) == 2, "%s shrank: %s"
                   % (job["id"], job["placement"]))
            no_lost_worker(c, job["id"])
        rc, out, err = c.cli("logs", long_job, timeout=30)
        expect("the coordinator's own process did not run for" in out,
               "the long job's events do not say the coordinator paused:\n%s" % out)
        print("coordinator frozen %.1fs (lease %gs): no worker lost, no restart; the job that "
              "finished meanwhile SUCCEEDED %.1fs after SIGCONT; `dtrain --timeout=3s` answered "
              "in %.1fs" % (frozen_for, c.lease_s, time.monotonic() - paused_at, took))


def case_coordinator_outage_keeps_the_curve(args):
    """kill -9 of the coordinator for 6 s while a fast job trains (about 100 steps/s) on a worker
    that buffers at most 64 reports, then a restart on the same database: the job SUCCEEDS with
    its whole loss curve (the outage's steps thinned evenly: no gap wider than 32 steps, the
    steps before and after it whole), every checkpoint sealed during the outage recorded, each
    at the time the worker sealed it (not when it arrived), and the job's log says the buffer
    was full."""
    with Cluster(args.binaries, "coordinator_outage_keeps_the_curve") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1", extra=["--test_only_step_delay=10ms", "--max_buffered_reports=64"])
        c.wait_workers({"w1": "IDLE"})
        steps = 1500
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), steps, 100, name="outage",
                              model={"vocab_size": 256, "context": 16, "n_layer": 1,
                                     "n_head": 1, "n_embd": 8},
                              batch_size=1, seq_len=16)
        job_id = c.submit(c.write_spec("outage.json", spec))
        c.wait_step(job_id, 50, 60)
        c.coordinator.signal(signal.SIGKILL)
        c.coordinator.wait(10)
        down_ms = int(time.time() * 1000)
        time.sleep(6)
        up_ms = int(time.time() * 1000)
        c.start_coordinator()
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after the outage: %s: %s"
               % (done["state"], done.get("reason")))
        recorded = sorted(losses(c, job_id))
        gaps = [b - a for a, b in zip(recorded, recorded[1:])]
        expect(recorded[0] == 1 and recorded[-1] == steps and max(gaps) <= 32,
               "the curve: steps %d..%d, %d recorded, widest gap %d"
               % (recorded[0], recorded[-1], len(recorded), max(gaps)))
        expect(max(gaps) >= 2, "no step was thinned: the outage did not fill the buffer "
               "(%d steps recorded)" % len(recorded))
        rc, out, err = c.cli("--json", "logs", job_id, timeout=30)
        sealed = {}
        for line in out.splitlines():
            e = json.loads(line)
            m = re.search(r"checkpoint sealed at step (\d+):", e["text"])
            if m:
                sealed[int(m.group(1))] = int(e["time_unix_ms"])
        expect(sorted(sealed) == list(range(100, steps + 1, 100)),
               "seals recorded: %s" % sorted(sealed))
        during = [s for s, t in sealed.items() if down_ms <= t <= up_ms]
        expect(during, "no seal is recorded at a time inside the outage (%d..%d): %s"
               % (down_ms, up_ms, sealed))
        expect("report buffer full (64)" in out, "the log does not say the buffer was full")
        print("coordinator down 6 s: %d of %d steps recorded, widest gap %d; %d seals, %d of "
              "them at their time inside the outage" % (len(recorded), steps, max(gaps),
                                                        len(sealed), len(during)))


def case_finished_at_last_seal(args):
    """kill -9 of rank 0 of a pp=2 job as its last step's manifest appears (before it reports
    the outcome): the recovery's run trains nothing, exports the weights from the sealed last
    step and the job ends SUCCEEDED with model.safetensors, not counted as a failure.
    (max_restarts 1: rank 0 may die before reporting the seal, and then the coordinator learns
    that the step was the last only from the new run.)"""
    with Cluster(args.binaries, "finished_at_last_seal") as c:
        ids = ["w1", "w2", "w3"]
        start(c, ids)
        ckpt = os.path.join(c.tmp, "ckpt")
        steps = 20
        job_id = c.submit(c.write_spec("last.json", recovery_spec(
            ckpt, steps=steps, interval=10, name="last", parallel={"pp": 2},
            fault_tolerance={"max_restarts": 1})))
        job = c.wait_step(job_id, 1, 60)
        rank0 = job["placement"]["ranks"][0]["worker_id"]
        manifest = os.path.join(ckpt, job_id, "step_%08d" % steps, "manifest.json")
        deadline = time.monotonic() + 120
        while not os.path.exists(manifest):
            expect(time.monotonic() < deadline, "no %s within 120s" % manifest)
            time.sleep(0.005)
        c.workers[rank0].signal(signal.SIGKILL)
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "killed after the last seal: %s: %s"
               % (done["state"], done.get("reason")))
        weights = os.path.join(ckpt, job_id, "model.safetensors")
        expect(os.path.exists(weights), "no %s" % weights)
        recoveries = done.get("recoveries", [])
        # (Rank 0 may have reported its outcome just before the kill: no recovery then.)
        if recoveries:
            expect(len(recoveries) == 1 and recoveries[0].get("finishing"),
                   "want one finishing recovery: %s" % json.dumps(recoveries))
        print("kill -9 of rank 0 (%s) at the last manifest: SUCCEEDED (%s), %s"
              % (rank0, done.get("reason"), "finished by recovery 1" if recoveries
                 else "its outcome had already arrived"))


def case_worker_kill_restart(args):
    """A worker of a running pp=2 job killed with kill -9 and started again at once (systemd's
    Restart=on-failure) is accepted within a second (not refused for the lease: "held by
    another live session"); the job recovers and SUCCEEDS."""
    with Cluster(args.binaries, "worker_kill_restart") as c:
        c.lease_s = 10.0  # the default: the restart must not wait for it
        ids = ["w1", "w2"]
        start(c, ids)
        job_id = c.submit(c.write_spec("job.json", recovery_spec(
            os.path.join(c.tmp, "ckpt"), steps=40, interval=10, name="job",
            parallel={"pp": 2}, fault_tolerance={"max_restarts": 1})))
        c.wait_step(job_id, 12, 60)
        victim = "w2"
        c.workers[victim].signal(signal.SIGKILL)
        c.workers[victim].wait(10)
        c.start_worker(victim, extra=[STEP_DELAY])
        c.wait_until(
            lambda: "registered with coordinator" in c.workers[victim].log_text(), 10,
            "the restarted %s registering" % victim)
        log = c.workers[victim].log_text()
        expect("held by another live session" not in log, "refused:\n%s" % log)
        # From the daemon's start (its first registration attempt) to its acceptance, by its
        # own log's clock: the process's start-up (OpenBLAS threads) is not the coordinator's.
        took = log_time(log, "starting: coordinator") and (
            log_time(log, "registered with coordinator") - log_time(log, "starting: coordinator"))
        expect(took <= 1.0, "the restarted worker was accepted %.2fs after it started trying "
               "(bound 1s):\n%s" % (took, log))
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9 and restart: %s: %s"
               % (done["state"], done.get("reason")))
        print("kill -9 %s, started again at once: registered %.2fs after its start (lease %gs); "
              "the job SUCCEEDED after %d recovery" % (victim, took, c.lease_s,
                                                       len(done.get("recoveries", []))))


def case_rolling_restart(args):
    """A rolling restart of every worker of a running pp=2 x tp=2 job, one after the other:
    `dtrain workers drain W` (the job moves off W at its next sealed checkpoint, which its
    workers are asked for at once: its interval, 100 steps, is never reached in its 60; it waits
    for a fourth worker), W shows DRAINED, SIGTERM, start W again (its new session is undrained and
    the job is placed on it). Each move is maintenance, not a failure (max_restarts 0), and the
    job SUCCEEDS with losses equal to an undisturbed run's."""
    with Cluster(args.binaries, "rolling_restart") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), steps=60, interval=100,
                             parallel={"pp": 2, "tp": 2},
                             fault_tolerance={"max_restarts": 0, "on_worker_loss": "wait",
                                              "wait_for": "120s"})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})
        job_id = c.submit(c.write_spec("rolling.json", dict(spec, name="rolling")))
        step = 3
        for w in ids:
            c.wait_step(job_id, step, 120)
            rc, out, err = c.cli("workers", "drain", w, timeout=30)
            expect(rc == 0 and "moves off it at its next sealed checkpoint" in out,
                   "dtrain workers drain %s: exit %d\n%s%s" % (w, rc, out, err))
            c.wait_workers({w: "DRAINED"}, timeout=60)
            c.workers[w].signal(signal.SIGTERM)
            c.workers[w].wait(30)
            c.start_worker(w, extra=[STEP_DELAY])
            # Running again and its recovery done (the new run's first step arrived): until then
            # the stopped run's steps count, and a drain moves the job at once instead of at its
            # next sealed checkpoint (JobManager::PlanMoveOffDrained).
            c.wait_job(job_id, lambda j: j.get("state") in FINAL or (
                j.get("state") == "RUNNING"
                and all(r.get("done") for r in j.get("recoveries", []))),
                120, "the job running again, its recovery done, after %s restarted" % w)
            step += 6
        done = c.wait_state(job_id, FINAL, 240)
        expect(done["state"] == "SUCCEEDED", "rolling restart: %s: %s"
               % (done["state"], done.get("reason")))
        recoveries = done.get("recoveries", [])
        expect(len(recoveries) == len(ids) and all(r.get("maintenance") for r in recoveries),
               "want %d maintenance restarts: %s" % (len(ids), json.dumps(recoveries)))
        worst = compare(losses(c, job_id), want, 0.0, "after a rolling restart")
        # An idle worker drained at once, then returned by `undrain`. The job's end reaches the
        # coordinator before each worker reports itself idle: wait for that first, or the drain
        # answers for a worker that still runs the finished job.
        c.wait_workers({"w1": "IDLE"}, timeout=30)
        rc, out, err = c.cli("workers", "drain", "w1", timeout=30)
        expect(rc == 0 and "it is idle and can be stopped" in out, "drain idle w1: %s%s"
               % (out, err))
        c.wait_workers({"w1": "DRAINED"}, timeout=10)
        rc, out, err = c.cli("workers", "undrain", "w1", timeout=30)
        expect(rc == 0 and "undrained" in out, "undrain w1: %s%s" % (out, err))
        c.wait_workers({"w1": "IDLE"}, timeout=10)
        print("rolling restart (drain, SIGTERM, start) of %d workers: SUCCEEDED with %d "
              "maintenance restarts, none counted; losses equal (worst %.2g)"
              % (len(ids), len(recoveries), worst))


def case_preemption(args):
    """A coordinator with --preempt_after=1s and two workers, both running a 30-step pp=2 job
    of priority 0 whose checkpoint interval (100 steps) it never reaches: a pp=2 job submitted
    then and raised to priority 5 by `dtrain priority` (500 refused naming the range) takes
    them at the running job's next sealed checkpoint, which the coordinator asks its workers
    for at once (HeartbeatResponse.checkpoint_requests), and SUCCEEDS (`dtrain checkpoint`
    before that seals a step within a few); the preempted job waits
    (RECOVERING, "preempted by ..."), resumes from that checkpoint once the workers are free,
    and SUCCEEDS with losses equal to an undisturbed run's, its restart not counted
    (max_restarts 0) and counted by dtrain_coordinator_job_recoveries_total{kind="preempted"}."""
    with Cluster(args.binaries, "preemption") as c:
        ids = ["w1", "w2"]
        c.write_corpus()
        c.start_coordinator(extra=["--preempt_after=1s"])
        for w in ids:
            c.start_worker(w, extra=[STEP_DELAY])
        c.wait_workers({w: "IDLE" for w in ids})
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = recovery_spec(ckpt, steps=30, interval=100, parallel={"pp": 2},
                             fault_tolerance={"max_restarts": 0})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})
        long_job = c.submit(c.write_spec("long.json", dict(spec, name="long")))
        c.wait_step(long_job, 2, 60)
        # A checkpoint asked for by hand (`dtrain checkpoint`): sealed within a step or two.
        rc, out, err = c.cli("checkpoint", "long", timeout=60)
        m = re.search(r"step (\d+) sealed in ", out)
        expect(rc == 0 and m and 2 <= int(m.group(1)) < 30,
               "dtrain checkpoint long: exit %d: %s%s" % (rc, out, err))
        asked = int(m.group(1))
        # Submitted at priority 0, raised to 5 by `dtrain priority` while it waits.
        urgent_job = c.submit(c.write_spec("urgent.json", recovery_spec(
            ckpt, steps=10, interval=5, name="urgent", parallel={"pp": 2})))
        rc, out, err = c.cli("priority", "urgent", "5", timeout=30)
        expect(rc == 0 and out.startswith("%s: priority 5; QUEUED" % urgent_job),
               "dtrain priority urgent 5: exit %d: %s%s" % (rc, out, err))
        rc, out, err = c.cli("priority", "urgent", "500", timeout=30)
        expect(rc == 2 and "priority=500 must be in [-100, 100]" in err,
               "dtrain priority urgent 500: exit %d: %s%s" % (rc, out, err))
        c.wait_job(long_job, lambda j: j.get("state") == "RECOVERING" or j.get("state") in FINAL,
                   60, "the long job preempted")
        urgent = c.wait_state(urgent_job, FINAL, 120)
        expect(urgent["state"] == "SUCCEEDED", "the urgent job: %s: %s"
               % (urgent["state"], urgent.get("reason")))
        done = c.wait_state(long_job, FINAL, 180)
        expect(done["state"] == "SUCCEEDED", "the preempted job: %s: %s"
               % (done["state"], done.get("reason")))
        recoveries = done.get("recoveries", [])
        expect(len(recoveries) == 1 and recoveries[0].get("preempted_by") == urgent_job,
               "want one preemption by %s: %s" % (urgent_job, json.dumps(recoveries)))
        expect(int(done["ended_unix_ms"]) > int(urgent["ended_unix_ms"]),
               "the preempted job ended before the urgent one")
        sealed = int(recoveries[0].get("resumed_from_step", 0))
        # Not a multiple of the interval: the checkpoint asked for, within a few steps.
        expect(asked < sealed < 30, "resumed from step %d, not the checkpoint asked for after "
               "step %d" % (sealed, asked))
        worst = compare(losses(c, long_job), want, 0.0, "after a preemption")
        rc, out, err = c.cli("status", long_job, timeout=30)
        expect(rc == 0 and "preempted by %s (priority 5): yielding its workers at the checkpoint "
               "of step %d" % (urgent_job, sealed) in out, "dtrain status:\n%s%s" % (out, err))
        rc, out, err = c.cli("logs", urgent_job, timeout=30)
        expect("preempting %s (priority 0, 2 workers)" % long_job in out,
               "the urgent job's log does not name its preemption:\n%s" % out)
        url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        expect('dtrain_coordinator_job_recoveries_total{kind="preempted"} 1' in text,
               "no preemption counted:\n%s" % "\n".join(
                   l for l in text.splitlines() if "recoveries_total" in l))
        print("preempted at step %d by a job of priority 5, resumed after it: SUCCEEDED, losses "
              "equal to an undisturbed run's (worst %.2g)" % (sealed, worst))
