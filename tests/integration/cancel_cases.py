"""A cancel stops a step in progress (worker/model/gpt_stage.h set_stop_flag): a one-worker job
whose steps take seconds is stopped between two transformer blocks, not at the step's end."""

import time

from harness import Cluster, expect, latest_step
from maintenance_cases import log_time


def slow_step_spec():
    """One step of 16 x 256 tokens through 8 blocks of width 256 on one CPU thread: seconds on
    an idle 2-core machine (17 s under a load of 13), in 24 block passes (forward, backward,
    weights), each a stopping point."""
    return {
        "name": "slow-steps",
        "model": {"vocab_size": 256, "context": 256, "n_layer": 8, "n_head": 4, "n_embd": 256},
        "dataset": "data/demo.txt",
        "steps": 1000,
        "batch_size": 16,
        "seq_len": 256,
        "optimizer": {"max_lr": 0.001, "warmup_steps": 5},
    }


def case_cancel_slow_step(args):
    """A one-worker job whose steps take seconds is cancelled just after its step 2 was
    reported (so in the middle of step 3): the worker is IDLE again within half a step's time
    and a second (the step stops at the next transformer block; before, the cancel waited for
    the end of the step), the job ends CANCELLED after step 2 and reports no further step; by the
    worker's own log the step stopped within a quarter of a step of the cancel's arrival, and
    the log says where ("step 3 stopped in the forward pass before layer 5 of 8"). `dtrain logs`
    shows the job's state changes (QUEUED ... RUNNING ... CANCELLED) among its other lines, in
    time order, each naming who said it."""
    with Cluster(args.binaries, "cancel_slow_step") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        spec = slow_step_spec()
        job_id = c.submit(c.write_spec("slow.json", spec))
        c.wait_step(job_id, 1, 180)
        t1 = time.monotonic()
        job = c.wait_step(job_id, 2, 180)
        step_s = time.monotonic() - t1  # step 2's time, as the CLI saw it (poll: 0.2s)
        expect(latest_step(job) == 2, "step 3 ended before the cancel: %s" % latest_step(job))
        t0 = time.monotonic()
        rc, out, err = c.cli("cancel", job_id, timeout=30)
        expect(rc == 0, "cancel exited %d: %s" % (rc, err))
        c.wait_until(lambda: c.workers_by_id()["w1"]["state"] == "IDLE", 60,
                     "w1 IDLE after the cancel", interval=0.05)
        took = time.monotonic() - t0
        job = c.job(job_id)
        expect(job["state"] == "CANCELLED", "state %s" % job["state"])
        # The heartbeat that carries the cancel (every 0.5 s) and the CLI's own start are in
        # `took`; the step's stop alone is checked below by the worker's clock.
        expect(took < step_s / 2 + 1.0, "the cancel took %.2fs with steps of %.2fs: it should "
               "stop the step in progress" % (took, step_s))
        expect(latest_step(job) == 2, "steps after the cancel: %s" % latest_step(job))
        log = c.workers["w1"].log_text()
        expect("step 3 stopped in the" in log,
               "the worker's log does not say where the step stopped:\n%s" % log[-2000:])
        # From the cancel's arrival to the step's stop, by the worker's clock (no heartbeat
        # or CLI in it).
        stopped_s = log_time(log, " stopped: cancelled") - log_time(log, "cancelled by the "
                                                                         "coordinator; stopping")
        expect(stopped_s < step_s / 4, "the step stopped %.2fs after the cancel arrived, with "
               "steps of %.2fs" % (stopped_s, step_s))
        # `dtrain logs`: the state changes among the other lines, in time order, each line
        # saying who said it.
        rc, out, err = c.cli("logs", job_id, timeout=30)
        lines = out.splitlines()
        states = [l.split(" coordinator INFO state ", 1)[1].split(":")[0] for l in lines
                  if " coordinator INFO state " in l]
        expect(states[0] == "QUEUED" and "RUNNING" in states and states[-1] == "CANCELLED",
               "`dtrain logs` should show the state changes:\n%s" % out)
        expect([l[:23] for l in lines] == sorted(l[:23] for l in lines),
               "`dtrain logs` is not in time order:\n%s" % out)
        expect(any(" rank 0 (w1) " in l for l in lines), "no line of rank 0 (w1):\n%s" % out)
        where = [l for l in log.splitlines() if "step 3 stopped in the" in l][0]
        print("steps of %.2fs; cancel in the middle of step 3: stopped %.2fs after it arrived, "
              "w1 IDLE %.2fs after `dtrain cancel` began; job %s after step %d; %s"
              % (step_s, stopped_s, took, job["state"], latest_step(job),
                 where.split("]: ", 1)[-1]))
