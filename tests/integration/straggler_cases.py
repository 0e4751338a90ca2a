"""Stragglers on real processes (JobSpec.stragglers, coordinator/policy/stragglers.h): every rank
sends its per-step compute time in its heartbeats, the coordinator scores each rank against the
median of its peers over a window, flags a persistently slower one and applies the spec's
policy.

The slow worker is made slow from here, by a SIGSTOP/SIGCONT duty cycle (DutyCycle: stopped
200 ms of every 250 ms): its lost wall time lands in its own compute, its peer's in waiting for
it. A pp=2 job's stages have different planned costs (the head on the last one): the scores are
per unit of planned cost, so the healthy steps before the duty cycle score ~1.0 and flag nothing.

The threshold is 2.0: the duty cycle makes its rank 5-6x slower, while a healthy rank of a
2-core machine busy with other work scores up to 1.5 over a window of 10 steps (measured beside
3 `yes` hogs: rank 0, which also seals the checkpoints, 0.8-1.5; at 1.5 these cases flagged a
healthy rank in 2 of 6 and 1 of 6 runs).
"""

import os
import re
import signal
import threading
import time
import urllib.request

from harness import Cluster, expect, small_job_spec


class DutyCycle:
    """Stops `process` for `stopped_s` of every `period_s` on a thread, until the with-block
    ends (the process is left running)."""

    def __init__(self, process, stopped_s=0.2, period_s=0.25):
        self.process, self.stopped_s, self.period_s = process, stopped_s, period_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._done.is_set():
            self.process.signal(signal.SIGSTOP)
            time.sleep(self.stopped_s)
            self.process.signal(signal.SIGCONT)
            self._done.wait(self.period_s - self.stopped_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.process.signal(signal.SIGCONT)


def straggler_spec(c, name, steps, policy, interval=0, **overrides):
    """small_job_spec as pp=2 at width 128 and context 64 (tens of ms a step: a window of 10
    steps spans a few duty cycles), scored over windows of 10 steps at threshold 2.0."""
    return small_job_spec(os.path.join(c.tmp, "ckpt"), steps, interval=interval, name=name,
                          model={"vocab_size": 256, "context": 64, "n_layer": 4, "n_head": 4,
                                 "n_embd": 128},
                          seq_len=64, parallel={"pp": 2},
                          stragglers={"threshold": 2.0, "window_steps": 10, "policy": policy},
                          **overrides)


def coordinator_series(c, name):
    """{labels text: value} of one family on the coordinator's /metrics."""
    url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), text, re.M)}


def logs(c, job_id):
    rc, out, err = c.cli("logs", job_id)
    expect(rc == 0, "dtrain logs exited %d: %s" % (rc, err))
    return out


def case_stragglers_flagged(args):
    """pp=2 on two workers, policy replace with no spare: healthy for 3 windows (every rank
    scored ~1.0, none flagged, no 'straggler:' event); then the worker of rank 1 is slowed by
    the duty cycle and within 3 windows it is flagged: the event names its rank and worker,
    `dtrain status` shows it FLAGGED, `dtrain watch` the event, the coordinator's /metrics its
    score over 2.0 and one straggler for the job; with no idle spare the job says so and goes
    on (no recovery)."""
    with Cluster(args.binaries, "stragglers_flagged") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(("w1", "w2"))
        job_id = c.submit(c.write_spec("s.json", straggler_spec(c, "flagged", 100000, "replace")))
        job = c.wait_step(job_id, 35, 120)
        job = c.wait_job(job_id, lambda j: j.get("stragglers"), 30, "straggler scores")
        healthy = {s["rank"]: s["score"] for s in job["stragglers"]}
        print("healthy scores (steps to %s): %s" % (job["stragglers"][0]["window_end_step"],
                                                   healthy))
        expect(len(healthy) == 2 and all(0.5 < v < 2.0 for v in healthy.values()),
               "a healthy pp=2 job should score ~1.0 on both ranks: %s" % job["stragglers"])
        expect(not any(s.get("flagged") for s in job["stragglers"]), "flagged while healthy")
        expect("straggler:" not in logs(c, job_id), "a straggler event while healthy")

        slow_rank = 1
        slow = job["placement"]["ranks"][slow_rank]["worker_id"]
        start_step = int(job["latest"]["step"])
        event = "straggler: rank 1 (%s, dp0 pp1 tp0) is " % slow
        with DutyCycle(c.workers[slow]):
            text = c.wait_until(lambda: (lambda t: t if event in t else None)(logs(c, job_id)),
                                60, "the straggler event naming rank 1 on %s" % slow)
            job = c.job(job_id)
            flagged_step = int(job["latest"]["step"])
            rc, status, err = c.cli("status", job_id)
            scores = coordinator_series(c, "dtrain_coordinator_job_straggler_score")
            count = coordinator_series(c, "dtrain_coordinator_job_stragglers")
        line = next(l for l in text.splitlines() if event in l)
        print(line)
        print("slowed from step %d, flagged by step %d" % (start_step, flagged_step))
        print("\n".join(l for l in status.splitlines() if l.startswith("stragglers:")))
        print(scores, count)
        m = re.search(r"is ([0-9.]+)x the median of its peers over the last 10 steps \(compute "
                      r"[0-9.e-]+ s/step vs [0-9.e-]+ s\)", line)
        expect(m is not None and float(m.group(1)) >= 2.0, "event: %s" % line)
        expect(flagged_step - start_step <= 30, "flagged %d steps after the slowdown began"
               % (flagged_step - start_step))
        expect(rc == 0 and re.search(r"^stragglers: 1 flagged over steps \d+-\d+ \(threshold "
                                     r"2x, policy replace\): rank 1 \(%s, dp0 pp1 tp0\) "
                                     r"[0-9.]+x FLAGGED" % slow, status, re.M),
               "dtrain status lacks the flagged line:\n%s" % status)
        key = 'job_id="%s",rank="1",worker="%s"' % (job_id, slow)
        expect(scores.get(key, 0) >= 2.0, "metric %s: %s" % (key, scores))
        expect(count.get('job_id="%s"' % job_id) == 1, "flagged count: %s" % count)
        no_spare = ("straggler policy replace: no idle spare to replace %s with; reporting only"
                    % slow)
        expect(no_spare in text, "no %r in the events:\n%s" % (no_spare, text))
        job = c.job(job_id)
        expect(job["state"] == "RUNNING" and not job.get("recoveries"),
               "without a spare the job goes on: %s %s" % (job["state"], job.get("recoveries")))
        c.cli("cancel", job_id, check=True)
        c.wait_state(job_id, ("CANCELLED",), 30)
        rc, watched, err = c.cli("watch", job_id, "--every=1000")  # the ended job, replayed
        expect(rc == 5 and event in watched, "dtrain watch (exit %d) lacks %r:\n%s%s"
               % (rc, event, watched, err))
        expect(not coordinator_series(c, "dtrain_coordinator_job_straggler_score"),
               "the ended job's scores are still exported")


def case_stragglers_replace(args):
    """pp=2, policy replace, max_restarts 0, one idle spare: the duty-cycled worker is flagged,
    swapped for the spare (a recovery with replaced_worker, resumed from the latest sealed
    checkpoint, not counted as a failure: max_restarts 0 would otherwise fail the job), the job
    goes on without it and SUCCEEDS; the events say so."""
    with Cluster(args.binaries, "stragglers_replace") as c:
        c.write_corpus()
        c.start_coordinator()
        ids = ("w1", "w2", "w3")
        c.start_idle_workers(ids)
        spec = straggler_spec(c, "replace", 150, "replace", interval=10,
                              fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("s.json", spec))
        job = c.wait_step(job_id, 12, 120)
        placed = [r["worker_id"] for r in job["placement"]["ranks"]]
        spare = next(w for w in ids if w not in placed)
        slow = placed[1]
        with DutyCycle(c.workers[slow]):
            job = c.wait_state(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"), 90)
        text = logs(c, job_id)
        print(text)
        expect(job["state"] == "SUCCEEDED", "state %s: %s" % (job["state"], job.get("reason")))
        expect(("straggler: rank 1 (%s, dp0 pp1 tp0) is " % slow) in text,
               "no straggler event for %s" % slow)
        expect(("straggler policy replace: swapping %s (rank 1, dp0 pp1 tp0) for the idle spare "
                "%s" % (slow, spare)) in text, "no replacement event for %s" % slow)
        expect(any(("replacing straggler %s" % slow) in h.get("reason", "")
                   and h.get("state") == "RECOVERING" for h in job.get("history", [])),
               "no RECOVERING state naming the straggler: %s" % job.get("history"))
        recoveries = job.get("recoveries", [])
        expect(len(recoveries) == 1 and recoveries[0].get("replaced_worker") == slow,
               "one recovery replacing %s: %s" % (slow, recoveries))
        r = recoveries[0]
        expect(slow not in r.get("workers", []) and spare in r.get("workers", []),
               "the new placement %s should use the spare %s, not %s"
               % (r.get("workers"), spare, slow))
        expect(int(r.get("resumed_from_step", 0)) >= 10 and r.get("done"),
               "resumed from a sealed checkpoint: %s" % r)
        print("replaced %s by %s at step %s, resumed from step %s"
              % (slow, spare, r.get("last_step"), r.get("resumed_from_step")))
