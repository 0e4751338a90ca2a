"""Jobs that recover from a lost worker with no user action (fault_tolerance in proto/job.proto):
kill -9, SIGSTOP (and a run frozen mid-checkpoint, woken after its job ended), too many
failures, a coordinator restart in the middle of a recovery, and the time from kill -9 to the
first new step of the Quick start job (docs/PERFORMANCE.md).

Workers run with --test_only_step_delay so that a fault lands at a known point of a run (after a
sealed checkpoint, before the end) whatever the machine's speed.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

from harness import Cluster, TestFailure, expect, losses, small_job_spec

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
LOSS_RTOL = 1e-5
STEP_DELAY = "--test_only_step_delay=150ms"


def recovery_spec(ckpt_dir, steps=30, interval=10, **overrides):
    """harness.small_job_spec checkpointing every `interval` steps."""
    return small_job_spec(ckpt_dir, steps, interval, **{"name": "recovery", **overrides})


def start(c, ids, extra=()):
    c.write_corpus()
    c.start_coordinator()
    for w in ids:
        c.start_worker(w, extra=[STEP_DELAY] + list(extra))
    c.wait_workers({w: "IDLE" for w in ids})


def run_reference(c, spec, name):
    """Runs `spec` uninterrupted to the end; its {step: loss}."""
    job_id = c.submit(c.write_spec(name + ".json", dict(spec, name=name)))
    done = c.wait_state(job_id, FINAL, 180)
    expect(done["state"] == "SUCCEEDED", "%s: %s: %s" % (name, done["state"], done.get("reason")))
    want = losses(c, job_id)
    expect(sorted(want) == list(range(1, spec["steps"] + 1)), "%s recorded steps %s"
           % (name, sorted(want)))
    return want


def wait_sealed(c, job_id, step, timeout=120):
    """Waits until `job_id` has sealed a checkpoint at `step` or later and is still running."""
    job = c.wait_job(job_id, lambda j: int(j.get("checkpoint", {}).get("last_sealed_step", 0))
                     >= step or j.get("state") in FINAL, timeout, "a checkpoint at step %d" % step)
    expect(job["state"] not in FINAL, "%s ended (%s) before the fault; make it longer"
           % (job_id, job["state"]))
    return job


def start_live_watch(c, job_id):
    """`dtrain --json watch JOB` following the job live (through its recoveries)."""
    return subprocess.Popen([c.bin["cli"], "--coordinator=%s" % c.address, "--json", "watch",
                             job_id], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=c.tmp)


def live_steps(watch, recovery, final):
    """Checks what a live watcher got: the redone steps (after the recovery's checkpoint, up to
    where the old run was) twice, and as its last value of every step the job's final one."""
    try:
        out, _ = watch.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        watch.kill()
        raise TestFailure("the live watch did not end with the job")
    seen = {}  # step -> every loss the live watcher got for it, in order
    for line in out.decode().splitlines():
        update = json.loads(line)
        if update["type"] == "step":
            seen.setdefault(update["step"], []).append(float(update["loss"]))
    resumed, last = int(recovery["resumed_from_step"]), int(recovery["last_step"])
    redone = sorted(s for s, l in seen.items() if len(l) > 1)
    expect(redone in (list(range(resumed + 1, last + 1)), list(range(resumed + 1, last))),
           "the live watcher got steps %s twice; the recovery redid %d-%d"
           % (redone, resumed + 1, last))
    expect({s: l[-1] for s, l in seen.items()} == final,
           "the live watcher's last loss of a step is not the job's final one")
    return redone


def coordinator_metric(c, name):
    """The value of an unlabelled series on the coordinator's /metrics (Prometheus text)."""
    url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise TestFailure("%s is not on the coordinator's /metrics" % name)


def compare(got, want, rtol, what):
    expect(sorted(got) == sorted(want), "%s: steps %s, want %s" % (what, sorted(got), sorted(want)))
    worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    expect(worst <= rtol, "%s: losses differ from the uninterrupted run by %.3g (bound %g)"
           % (what, worst, rtol))
    return worst


def phases(r):
    return ", ".join("%s %.2fs" % (k, int(r.get(k + "_ms", 0) or 0) / 1000.0)
                     for k in ("detect", "stop", "place", "load", "first_step"))


def one_recovery(job):
    recoveries = job.get("recoveries", [])
    expect(len(recoveries) == 1, "want one recovery, got %s" % json.dumps(recoveries))
    r = recoveries[0]
    expect(r.get("done"), "the recovery is not done: %s" % r)
    return r


def case_recovery_spare(args):
    """pp=2 x tp=2 on 4 workers plus an idle spare, a checkpoint every 10 steps; kill -9 of one
    worker after step 13: the job goes RECOVERING, continues on the spare from step 10 and
    SUCCEEDS with one recovery; every per-step loss equals the uninterrupted run's
    (bit-identical: the same layout), and `status`/`watch` show the recovery."""
    with Cluster(args.binaries, "recovery_spare") as c:
        ids = ["w1", "w2", "w3", "w4", "w5"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), parallel={"pp": 2, "tp": 2})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("recovered.json", dict(spec, name="recovered")))
        live = start_live_watch(c, job_id)
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 13, 60)
        victim = job["placement"]["ranks"][3]["worker_id"]  # pp1 tp1
        t0 = time.monotonic()
        c.workers[victim].signal(signal.SIGKILL)
        c.wait_job(job_id, lambda j: j.get("recoveries"), 30, "a recovery")
        done = c.wait_state(job_id, FINAL, 120)
        elapsed = time.monotonic() - t0
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(r.get("failed_worker") == victim, "the recovery names %r, not %s"
               % (r.get("failed_worker"), victim))
        expect(int(r.get("resumed_from_step", 0)) >= 10, "resumed from %s" % r)
        expect(victim not in r.get("workers", []), "placed on the dead %s: %s" % (victim, r))
        states = [h["state"] for h in done["history"]]
        expect("RECOVERING" in states, "history: %s" % states)
        got = losses(c, job_id)
        worst = compare(got, want, 0.0, "recovered on a spare")
        live_steps(live, r, got)

        rc, out, err = c.cli("status", job_id)
        expect(rc == 0 and "recoveries" in out and "resumed from step" in out,
               "status shows no recovery:\n%s" % out)
        expect(coordinator_metric(c, 'dtrain_coordinator_job_recoveries_total{kind="failure"}') == 1 and
               coordinator_metric(c, "dtrain_coordinator_job_recovery_seconds_count") == 1,
               "the coordinator's metrics should count one recovery")
        rc, out, err = c.cli("watch", job_id, timeout=60)
        expect("RECOVERING" in out and "recovery 1 done" in out, "watch shows no recovery:\n%s"
               % out)
        print("kill -9 %s at step %d: SUCCEEDED %.1fs later, resumed from step %s, %s steps "
              "redone; %s; losses equal (worst %.2g)"
              % (victim, int(r["last_step"]), elapsed, r.get("resumed_from_step"),
                 r.get("steps_redone", 0), phases(r), worst))


def case_recovery_shrink(args):
    """dp=2 x pp=2 on 4 workers, no spare, on_worker_loss shrink (the default), a checkpoint every
    10 steps: kill -9 of one worker after step 13; the job continues at once as dp=1 on two
    survivors with the same global batch (twice the micro-batches per replica), loading the
    dp=2 step 10 on dp=1 (the layout-free checkpoint), and SUCCEEDS; every per-step loss is
    within 1e-5 of the uninterrupted dp=2 run."""
    with Cluster(args.binaries, "recovery_shrink") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), parallel={"dp": 2, "pp": 2})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("shrunk.json", dict(spec, name="shrunk")))
        live = start_live_watch(c, job_id)
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 13, 60)
        victim = job["placement"]["ranks"][3]["worker_id"]  # dp1 pp1
        c.workers[victim].signal(signal.SIGKILL)
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        layout = r.get("layout", {})
        expect(int(layout.get("dp", 1)) == 1 and int(layout.get("pp", 1)) == 2,
               "want dp=1 pp=2 after the shrink: %s" % layout)
        expect(len(r.get("workers", [])) == 2, "placed on %s" % r.get("workers"))
        expect(int(r.get("resumed_from_step", 0)) >= 10, "resumed from %s" % r)
        _, status, _ = c.cli("status", job_id, check=True)
        expect("layout:    dp=1 pp=2 tp=1 (2 workers; shrunk from dp=2 pp=2 tp=1 by recovery 1)"
               in status, "`dtrain status` does not show the shrunk layout:\n%s" % status)
        _, listed, _ = c.cli("list", check=True)
        expect("dp=1 pp=2 tp=1 (shrunk)" in listed, "`dtrain list` shows:\n%s" % listed)
        got = losses(c, job_id)
        worst = compare(got, want, LOSS_RTOL, "shrunk to dp=1")
        # dp=1's losses differ from dp=2's in the last bits: the watcher's last value of each
        # redone step is the new run's, not the old run's.
        live_steps(live, r, got)
        print("kill -9 %s at step %s: continued as dp=1 on %s from step %s; %s; losses within "
              "%.2g" % (victim, r["last_step"], r["workers"], r["resumed_from_step"], phases(r),
                        worst))


def case_recovery_grow_back(args):
    """dp=2 x pp=2 on 4 workers, no spare: kill -9 of one worker shrinks the job to dp=1; a new
    worker then registers, and at the next sealed checkpoint the job grows back to dp=2 on four
    workers (a planned restart, not counted as a failure) and SUCCEEDS with every per-step loss
    within 1e-5 of the uninterrupted run."""
    with Cluster(args.binaries, "recovery_grow_back") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), steps=40,
                             parallel={"dp": 2, "pp": 2}, fault_tolerance={"max_restarts": 1})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("grow.json", dict(spec, name="grow")))
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 13, 60)
        victim = job["placement"]["ranks"][3]["worker_id"]
        c.workers[victim].signal(signal.SIGKILL)
        job = c.wait_job(job_id, lambda j: j.get("recoveries") and j["recoveries"][0].get("done")
                         or j.get("state") in FINAL, 60, "the shrink done")
        expect(int(job["recoveries"][0]["layout"].get("dp", 1)) == 1, "not shrunk: %s"
               % job["recoveries"][0])
        c.start_worker("w5", extra=[STEP_DELAY])
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "%s: %s" % (done["state"], done.get("reason")))
        recoveries = done.get("recoveries", [])
        expect(len(recoveries) == 2 and recoveries[1].get("grow") and
               int(recoveries[1]["layout"].get("dp", 1)) == 2,
               "want a shrink then a grow back to dp=2: %s" % json.dumps(recoveries))
        worst = compare(losses(c, job_id), want, LOSS_RTOL, "dp=2 -> dp=1 -> dp=2")
        print("kill -9 %s at step %s: dp=1 from step %s; %s; losses within %.2g"
              % (victim, recoveries[0]["last_step"], recoveries[0]["resumed_from_step"],
                 recoveries[1]["cause"], worst))


def case_recovery_relayout(args):
    """pp=2 x tp=2 (dp=1) on 4 workers, no spare, shrink: kill -9 of one worker after the
    checkpoint of step 10; no smaller dp exists, so the job continues on the three survivors as
    pp=3 x tp=1 (plan::ShrinkPlan), loading the pp=2 x tp=2 step on the new layout, and
    SUCCEEDS with every per-step loss within 1e-5 of the uninterrupted run."""
    with Cluster(args.binaries, "recovery_relayout") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), parallel={"pp": 2, "tp": 2})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("relayout.json", dict(spec, name="relayout")))
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 13, 60)
        victim = job["placement"]["ranks"][0]["worker_id"]  # pp0 tp0: rank 0 itself
        c.workers[victim].signal(signal.SIGKILL)
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        layout = r.get("layout", {})
        expect((int(layout.get("pp", 1)), int(layout.get("tp", 1))) == (3, 1),
               "want pp=3 tp=1 on the three survivors: %s" % layout)
        expect(int(r.get("resumed_from_step", 0)) >= 10, "resumed from %s" % r)
        worst = compare(losses(c, job_id), want, LOSS_RTOL, "pp=2 x tp=2 -> pp=3 x tp=1")
        print("kill -9 %s at step %s: continued as pp=3 tp=1 on %s from step %s; %s; losses "
              "within %.2g" % (victim, r["last_step"], r["workers"], r["resumed_from_step"],
                               phases(r), worst))


def case_recovery_damaged_checkpoint(args):
    """pp=2 with a spare, checkpoints at steps 10 and 20; kill -9 of a worker after step 23 and
    one byte of a step-20 shard flipped at once: the recovery resumes from step 10 instead, says
    so in the job's log (step 20 damaged), and the job SUCCEEDS with every per-step loss equal
    to the uninterrupted run's."""
    with Cluster(args.binaries, "recovery_damaged_checkpoint") as c:
        ids = ["w1", "w2", "w3"]
        start(c, ids)
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = recovery_spec(ckpt, parallel={"pp": 2})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("damaged.json", dict(spec, name="damaged")))
        wait_sealed(c, job_id, 20)
        job = c.wait_step(job_id, 23, 60)
        victim = job["placement"]["ranks"][1]["worker_id"]
        c.workers[victim].signal(signal.SIGKILL)
        step_dir = os.path.join(ckpt, job_id, "step_00000020")
        shards = sorted(f for f in os.listdir(step_dir) if f.endswith(".safetensors"))
        expect(shards, "no shard files in %s" % step_dir)
        path = os.path.join(step_dir, shards[0])
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 16)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after kill -9: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(int(r.get("resumed_from_step", 0)) == 10,
               "want the recovery to fall back to step 10: %s" % r)
        rc, out, err = c.cli("logs", job_id, timeout=30)
        said = [l for l in out.splitlines() if "step_00000020 is damaged" in l]
        expect(said, "the job's log should say step 20 is damaged:\n%s" % out)
        worst = compare(losses(c, job_id), want, 0.0, "recovered past a damaged step")
        expect(os.path.isdir(os.path.join(ckpt, job_id, "damaged-step_00000020")) and
               os.path.isfile(os.path.join(step_dir, "manifest.json")),
               "the damaged step should be set aside and step 20 sealed again")
        print("kill -9 %s at step %s with %s damaged: resumed from step 10 (%s); losses equal"
              % (victim, r["last_step"], shards[0], said[0].strip()))


def case_recovery_sigstop(args):
    """A worker frozen with SIGSTOP (its connections stay open, it answers nothing) in a pp=2 job
    with a spare: detected within the lease or the communication timeout (here a 3s lease,
    --comm_timeout=5s), recovered on the spare, SUCCEEDED with losses equal to the
    uninterrupted run's."""
    with Cluster(args.binaries, "recovery_sigstop") as c:
        ids = ["w1", "w2", "w3"]
        comm_timeout = 5.0
        start(c, ids, extra=["--comm_timeout=%gs" % comm_timeout])
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), parallel={"pp": 2})
        want = run_reference(c, spec, "reference")
        c.wait_workers({w: "IDLE" for w in ids})

        job_id = c.submit(c.write_spec("frozen.json", dict(spec, name="frozen")))
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 12, 60)
        hung = job["placement"]["ranks"][1]["worker_id"]
        t0 = time.monotonic()
        c.workers[hung].signal(signal.SIGSTOP)
        try:
            c.wait_job(job_id, lambda j: j.get("recoveries"), max(c.lease_s, comm_timeout) + 10,
                       "a recovery")
            detected = time.monotonic() - t0
            expect(detected <= max(c.lease_s, comm_timeout) + 3,
                   "detected %.1fs after SIGSTOP; lease %gs, comm timeout %gs"
                   % (detected, c.lease_s, comm_timeout))
            done = c.wait_state(job_id, FINAL, 120)
        finally:
            c.workers[hung].signal(signal.SIGKILL)
        expect(done["state"] == "SUCCEEDED", "after SIGSTOP: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(hung not in r.get("workers", []), "placed on the frozen %s: %s" % (hung, r))
        worst = compare(losses(c, job_id), want, 0.0, "recovered from SIGSTOP")
        print("SIGSTOP %s: recovery began %.1fs later (%s); %s; losses equal (worst %.2g)"
              % (hung, detected, r["cause"].splitlines()[0], phases(r), worst))


def case_recovery_frozen_seal(args):
    """A worker frozen in the middle of a checkpoint and woken after its job was recovered and
    finished elsewhere writes nothing: pp=2 with a spare, rank 0 of the first run stops itself
    (SIGSTOP, --test_only_stop_before_seal=20) just before sealing step 20; the job recovers on
    the spare from step 10 and SUCCEEDS; then SIGCONT: the old run's seal is refused (the new
    run claimed the directory, DIR/run), so `latest` still names the last step and no manifest
    changes."""
    with Cluster(args.binaries, "recovery_frozen_seal") as c:
        ids = ["w1", "w2", "w3"]
        start(c, ids, extra=["--comm_timeout=5s", "--test_only_stop_before_seal=20"])
        ckpt = os.path.join(c.tmp, "ckpt")
        job_id = c.submit(c.write_spec("frozen.json", recovery_spec(ckpt, parallel={"pp": 2})))
        job = wait_sealed(c, job_id, 10)
        frozen = job["placement"]["ranks"][0]["worker_id"]
        done = c.wait_state(job_id, FINAL, 150)
        expect(done["state"] == "SUCCEEDED", "after the freeze: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect(frozen not in r.get("workers", []), "placed on the frozen %s: %s" % (frozen, r))
        expect(sorted(losses(c, job_id)) == list(range(1, 31)), "steps %s"
               % sorted(losses(c, job_id)))
        job_dir = os.path.join(ckpt, job_id)

        def snapshot():
            files = {}
            for root, _, names in os.walk(job_dir):
                for n in names:
                    if n in ("latest", "run", "manifest.json"):
                        path = os.path.join(root, n)
                        with open(path, "rb") as f:
                            files[os.path.relpath(path, job_dir)] = f.read()
            return files

        before = snapshot()
        expect(before.get("latest") == b"step_00000030\n", "latest: %r" % before.get("latest"))
        expect(before.get("run", b"").startswith(b"attempt 1 run "), "run: %r" % before.get("run"))
        t0 = time.monotonic()
        c.workers[frozen].signal(signal.SIGCONT)
        # Woken, it finds its seal refused, its session gone, and registers again: IDLE once its
        # old run (and the writer's thread) ended.
        c.wait_workers({frozen: "IDLE"}, 60)
        after = snapshot()
        expect(after == before, "the woken run changed the job directory: %s" % sorted(
            k for k in set(before) | set(after) if before.get(k) != after.get(k)))
        print("%s frozen before sealing step 20, recovered (%s), SIGCONT after the end: IDLE "
              "in %.1fs, latest still step_00000030, no manifest changed"
              % (frozen, phases(r), time.monotonic() - t0))


def case_recovery_limit(args):
    """max_restarts 1: a pp=2 job with two spares recovers from one kill -9, then a second
    kill -9 FAILS it, the reason naming both failed workers."""
    with Cluster(args.binaries, "recovery_limit") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), steps=200,
                             parallel={"pp": 2}, fault_tolerance={"max_restarts": 1})
        job_id = c.submit(c.write_spec("limit.json", spec))
        job = c.wait_step(job_id, 3, 60)
        first = job["placement"]["ranks"][1]["worker_id"]
        c.workers[first].signal(signal.SIGKILL)
        job = c.wait_job(job_id, lambda j: j.get("recoveries") and j["recoveries"][0].get("done")
                         or j.get("state") in FINAL, 60, "the first recovery done")
        expect(job["state"] == "RUNNING", "after the first kill: %s: %s"
               % (job["state"], job.get("reason")))
        second = [r["worker_id"] for r in job["placement"]["ranks"]][0]
        expect(second != first, "placed on the dead %s" % first)
        c.workers[second].signal(signal.SIGKILL)
        done = c.wait_state(job_id, FINAL, 60)
        reason = done.get("reason", "")
        expect(done["state"] == "FAILED", "after the second kill: %s: %s" % (done["state"], reason))
        expect("worker %s " % first in reason and "worker %s " % second in reason,
               "the reason should name %s and %s: %r" % (first, second, reason))
        expect("max_restarts=1" in reason, "the reason should say why it stopped: %r" % reason)
        print("kill -9 %s, then %s: FAILED: %s" % (first, second, reason.replace("\n", " | ")))


def case_recovery_coordinator_restart(args):
    """on_worker_loss wait, no spare: kill -9 of a worker leaves the pp=2 job RECOVERING
    (waiting for a worker); the coordinator is killed (-9) and started again on the same
    database; then a new worker registers and the job recovers on it and SUCCEEDS."""
    with Cluster(args.binaries, "recovery_coordinator_restart") as c:
        start(c, ["w1", "w2"])
        spec = recovery_spec(os.path.join(c.tmp, "ckpt"), steps=30, parallel={"pp": 2},
                             fault_tolerance={"on_worker_loss": "wait", "wait_for": "120s"})
        job_id = c.submit(c.write_spec("restart.json", spec))
        wait_sealed(c, job_id, 10)
        job = c.wait_step(job_id, 12, 60)
        victim = job["placement"]["ranks"][1]["worker_id"]
        c.workers[victim].signal(signal.SIGKILL)
        job = c.wait_state(job_id, "RECOVERING", 30)
        c.wait_job(job_id, lambda j: "waiting up to" in j.get("reason", ""), 30,
                   "the recovery waiting for a worker")
        c.coordinator.signal(signal.SIGKILL)
        c.coordinator.wait(10)
        c.start_coordinator()
        job = c.job(job_id)
        expect(job["state"] == "RECOVERING", "after the restart: %s: %s"
               % (job["state"], job.get("reason")))
        c.start_worker("w3", extra=[STEP_DELAY])
        done = c.wait_state(job_id, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "after the restart: %s: %s"
               % (done["state"], done.get("reason")))
        r = one_recovery(done)
        expect("w3" in r.get("workers", []), "not placed on the new w3: %s" % r)
        expect(int(r.get("resumed_from_step", 0)) >= 10, "resumed from %s" % r)
        print("coordinator restarted while RECOVERING; recovered on %s from step %s"
              % (r["workers"], r.get("resumed_from_step")))


def case_recovery_time_quickstart(args):
    """The figure of docs/PERFORMANCE.md "Recovery": the Quick start job
    (deploy/examples/quickstart-pp2-tp2.json, checkpoints every 10 steps here) on 4 workers plus
    a spare, no step delay, the coordinator's default lease and heartbeat (10s, 1s: as
    tools/quickstart.sh runs it); kill -9 of a worker after step 25: the time from the kill to
    the first new step, split by phase."""
    with Cluster(args.binaries, "recovery_time_quickstart") as c:
        c.lease_s, c.heartbeat_s = 10.0, 1.0
        c.write_corpus()
        c.start_coordinator()
        ids = ["w1", "w2", "w3", "w4", "w5"]
        for w in ids:
            c.start_worker(w)
        c.wait_workers({w: "IDLE" for w in ids})
        with open(os.path.join(args.examples, "quickstart-pp2-tp2.json")) as f:
            spec = json.load(f)
        spec["checkpoint"] = {"dir": os.path.join(c.tmp, "ckpt"), "interval_steps": 10}
        job_id = c.submit(c.write_spec("quickstart.json", spec))
        wait_sealed(c, job_id, 20, timeout=300)
        job = c.wait_step(job_id, 25, 120)
        victim = job["placement"]["ranks"][3]["worker_id"]
        killed_at_step = int(job["latest"]["step"])
        t0 = time.time()
        c.workers[victim].signal(signal.SIGKILL)
        job = c.wait_job(job_id, lambda j: j.get("recoveries") and j["recoveries"][0].get("done")
                         or j.get("state") in FINAL, 120, "the recovery done")
        expect(job["state"] == "RUNNING", "%s: %s" % (job["state"], job.get("reason")))
        r = job["recoveries"][0]
        c.cli("cancel", job_id)
        ms = {k: int(r.get(k + "_ms", 0) or 0) / 1000.0
              for k in ("detect", "stop", "place", "load", "first_step")}
        # The coordinator's clock is this machine's: RECOVERING began at started_unix_ms, and
        # the later phases follow it.
        started = int(r["started_unix_ms"]) / 1000.0
        kill_to_recovering = started - t0
        kill_to_first_step = kill_to_recovering + ms["stop"] + ms["place"] + ms["load"] + \
            ms["first_step"]
        print("RECOVERY quickstart: kill -9 %s at step %d; resumed from step %s (%s steps "
              "redone); kill -> RECOVERING %.2fs (detect, from its last heartbeat: %.2fs), stop "
              "%.2fs, place %.2fs, load %.2fs, first step %.2fs; kill -> first new step %.2fs"
              % (victim, killed_at_step, r.get("resumed_from_step"), r.get("steps_redone", 0),
                 kill_to_recovering, ms["detect"], ms["stop"], ms["place"], ms["load"],
                 ms["first_step"], kill_to_first_step))
        expect(kill_to_first_step < 30, "recovery took %.1fs (goal: under 30s)"
               % kill_to_first_step)
