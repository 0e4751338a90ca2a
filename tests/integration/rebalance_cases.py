"""The straggler policy `rebalance` on real processes (coordinator/policy/rebalance.h): a pp=3 job
whose middle stage's worker is slowed by a SIGSTOP/SIGCONT duty cycle from here is flagged as a
straggler, its pipeline is re-cut from the measured per-stage compute times (layers move off the
slow stage), the job restarts on the new cut from its next sealed checkpoint (a planned restart,
not a failure) and its measured step time drops.

Step times are the reporting rank's own (StepMetrics.tokens_per_s: the step's tokens over its
wall time), as `dtrain --json watch` replays them once the job ended: a step the restart trained
again shows its new run's time.
"""

import json
import os
import statistics

from harness import Cluster, expect, small_job_spec
from straggler_cases import DutyCycle, logs

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
BATCH, SEQ = 8, 32


def step_seconds(c, job_id):
    """{step: wall seconds} of an ended job, from its replayed steps' tokens_per_s."""
    rc, out, err = c.cli("--json", "watch", job_id, timeout=60)
    expect(rc in (0, 4, 5), "dtrain --json watch exited %d: %s" % (rc, err))
    seconds = {}
    for line in out.splitlines():
        update = json.loads(line) if line.strip() else {}
        if update.get("type") == "step" and float(update.get("tokens_per_s", 0)) > 0:
            seconds[int(update["step"])] = BATCH * SEQ / float(update["tokens_per_s"])
    return seconds


def stage_layers(job):
    """Layers per pipeline stage in the job's current placement."""
    layers = {}
    for r in job["placement"]["ranks"]:
        layers[int(r.get("pp_rank", 0))] = int(r.get("num_layers", 0))
    return [layers[s] for s in sorted(layers)]


def pp3_spec(c, steps, policy):
    """pp=3, 9 layers of width 256 (cut 3,3,3), batch 8 in 4 micro-batches, a checkpoint every
    15 steps, max_restarts 0, stragglers scored over windows of 8 steps with `policy`."""
    return small_job_spec(
        os.path.join(c.tmp, "ckpt"), steps, interval=15, name="rebalance",
        model={"vocab_size": 256, "context": SEQ, "n_layer": 9, "n_head": 4, "n_embd": 256},
        batch_size=BATCH, micro_batch_size=2, parallel={"pp": 3},
        stragglers={"threshold": 1.5, "window_steps": 8, "policy": policy},
        fault_tolerance={"max_restarts": 0})


def start_three(c):
    c.write_corpus()
    c.start_coordinator()
    for w in ("w1", "w2", "w3"):
        c.start_worker(w)
    c.wait_workers({w: "IDLE" for w in ("w1", "w2", "w3")})


def case_rebalance_command(args):
    """`dtrain rebalance JOB` (admin): the same pp=3 job with policy report; once the slowed
    stage 1 is flagged, the command re-cuts it from the latest window (its output says the cut
    and that the job restarts), the job restarts on the new cut at its next sealed checkpoint
    (the recovery's cause names the command) and SUCCEEDS; a second command while the cut is
    pending is refused (exit 6, naming the pending cut)."""
    with Cluster(args.binaries, "rebalance_command") as c:
        start_three(c)
        job_id = c.submit(c.write_spec("report.json", pp3_spec(c, 35, "report")))
        job = c.wait_step(job_id, 3, 120)
        slow = job["placement"]["ranks"][1]["worker_id"]
        with DutyCycle(c.workers[slow], stopped_s=0.04, period_s=0.06):
            event = "straggler: rank 1 (%s, dp0 pp1 tp0) is " % slow
            c.wait_until(lambda: event in logs(c, job_id), 60, "the straggler event")
            rc, out, err = c.cli("rebalance", job_id)
            print(out.strip())
            expect(rc == 0 and ("%s: stage 1 (%s) measured " % (job_id, slow)) in out and
                   "cut 3,3,3 -> " in out and "the job restarts on the new cut" in out,
                   "dtrain rebalance exited %d: %s%s" % (rc, out, err))
            rc, again, err = c.cli("rebalance", job_id)
            expect(rc == 6 and "already moves to cut" in err,
                   "a second rebalance while one is pending: exit %d: %s%s" % (rc, again, err))
            job = c.wait_state(job_id, FINAL, 120)
        expect(job["state"] == "SUCCEEDED", "state %s: %s" % (job["state"], job.get("reason")))
        recoveries = job.get("recoveries", [])
        expect(len(recoveries) == 1 and recoveries[0].get("rebalance_to") and
               int(recoveries[0]["rebalance_to"][1]) < 3 and
               "rebalance: stage 1" in recoveries[0].get("cause", ""),
               "one rebalance off stage 1: %s" % json.dumps(recoveries))
        expect("rebalance (dtrain rebalance): stage 1" in logs(c, job_id),
               "the job's events name the command")


def case_rebalance_slow_stage(args):
    """pp=3, 9 layers of width 256 cut 3,3,3, policy rebalance over windows of 8 steps, a
    checkpoint every 15 steps, max_restarts 0: the worker of stage 1 is slowed by a duty cycle
    (stopped 40 ms of every 60) from step 3 on; it is flagged, the re-cut moves layers off it
    (fewer than 3 left on stage 1) at a sealed checkpoint (Recovery.rebalance_to, not a failure:
    max_restarts 0 would fail the job otherwise), `dtrain status` shows the new cut, the job
    SUCCEEDS, and the median step time after the re-cut is below the median while slowed on the
    old cut (both printed: the figure of docs/PERFORMANCE.md)."""
    with Cluster(args.binaries, "rebalance_slow_stage") as c:
        start_three(c)
        spec = pp3_spec(c, 50, "rebalance")
        job_id = c.submit(c.write_spec("rebalance.json", spec))
        job = c.wait_step(job_id, 3, 120)
        before_cut = stage_layers(job)
        expect(before_cut == [3, 3, 3], "the plan's cut of 9 layers on 3 stages: %s" % before_cut)
        slow = job["placement"]["ranks"][1]["worker_id"]
        slowed_from = int(job["latest"]["step"])
        # Stopped 40 ms of every 60 (~3x slower): a step (~0.15 s) spans a few periods, so each
        # is slowed alike.
        with DutyCycle(c.workers[slow], stopped_s=0.04, period_s=0.06):
            job = c.wait_state(job_id, FINAL, 150)
        text = logs(c, job_id)
        print("\n".join(l for l in text.splitlines() if "straggler" in l or "rebalance" in l))
        expect(job["state"] == "SUCCEEDED", "state %s: %s" % (job["state"], job.get("reason")))
        recoveries = job.get("recoveries", [])
        expect(recoveries and recoveries[0].get("rebalance_to"),
               "no rebalance recovery: %s" % json.dumps(recoveries))
        # A second re-cut may follow once the first one's run is measured: the last is the cut.
        expect(all(x.get("rebalance_to") for x in recoveries),
               "only rebalances expected: %s" % json.dumps(recoveries))
        first, r = recoveries[0], recoveries[-1]
        after_cut = [int(n) for n in r["rebalance_to"]]
        expect(after_cut[1] < 3, "layers should move off stage 1 (%s): cut %s" % (slow, after_cut))
        expect(stage_layers(job) == after_cut or len(recoveries) > 1,
               "placed on %s, rebalanced to %s" % (stage_layers(job), after_cut))
        expect(("rebalance: stage 1 (%s) measured " % slow) in first.get("cause", ""),
               "the recovery's cause names stage 1 and %s: %s" % (slow, first.get("cause")))
        rc, status, err = c.cli("status", job_id)
        want = "cut:       %s (rebalanced by recovery %d)" % (
            ",".join(map(str, after_cut)), int(r["number"]))
        expect(rc == 0 and want in status, "dtrain status lacks %r:\n%s" % (want, status))
        print(status)
        resumed = int(first.get("resumed_from_step", 0))
        expect(resumed >= 15 and r.get("done"), "resumed from a sealed checkpoint: %s" % r)
        restarted = int(r.get("resumed_from_step", 0))

        seconds = step_seconds(c, job_id)
        # Slowed on the old cut: from 2 steps into the duty cycle to the checkpoint resumed from
        # (later steps were trained again on the new cut). On the new cuts (a second re-cut late
        # in the job is a new cut too, off stage 1 as the first): from the first restart to the
        # end, but the 3 steps after each restart (its run loads and warms up).
        restarts = [int(x.get("resumed_from_step", 0)) for x in recoveries]
        before = [seconds[s] for s in seconds if slowed_from + 2 < s <= resumed]
        after = [seconds[s] for s in seconds
                 if s > resumed and not any(r0 < s <= r0 + 3 for r0 in restarts)]
        expect(len(before) >= 3 and len(after) >= 10,
               "too few steps to compare: %d slowed before, %d after" % (len(before), len(after)))
        t_before, t_after = statistics.median(before), statistics.median(after)
        print("cut %s -> %s at step %s (%d re-cuts; resumed from %s); %s slowed by a 40/60 ms "
              "SIGSTOP duty cycle from step %d"
              % (",".join(map(str, before_cut)), ",".join(map(str, after_cut)), r.get("last_step"),
                 len(recoveries), restarted, slow, slowed_from))
        print("median step time slowed on the old cut: %.3f s over %d steps; on the new cut: "
              "%.3f s over %d steps (%.0f%% less)"
              % (t_before, len(before), t_after, len(after), 100 * (1 - t_after / t_before)))
        expect(t_after < t_before, "the step time did not drop: %.3f s -> %.3f s"
               % (t_before, t_after))
