"""Validation in the loop (JobSpec.eval): a pp=2 x tp=2 job evaluates every 10 steps by a
forward-only pass through its own layout; val_loss reaches watch, status, the job's history
(export-metrics csv and tfevents), the event file in the job's directory and the workers'
Prometheus gauge; the training losses are bit-identical to the same job without eval; and
val_loss equals what one process (dtrain-local --steps=0 --eval_data) computes from the job's
final weights. Early stopping ends a job SUCCEEDED with the typed end reason, keeping the best
evaluation's checkpoint."""

import glob
import json
import os
import subprocess

from harness import Cluster, TestFailure, expect, job_metric, small_job_spec
from metrics_cases import events, expect_scalars_equal


def write_validation_text(c):
    """data/val.txt beside the training corpus: the corpus's lines in reverse order, so its
    batches are text of the same kind that no training batch holds in this order."""
    with open(os.path.join(c.workdir, "data", "demo.txt")) as f:
        lines = f.read().splitlines()
    path = os.path.join(c.workdir, "data", "val.txt")
    with open(path, "w") as f:
        f.write("\n".join(reversed(lines)) + "\n")
    return path


def step_history(c, job_id):
    """The job's steps as `dtrain --json watch` replays them: [{step, loss, ..., val_loss?}]."""
    rc, out, err = c.cli("--json", "watch", job_id, check=True, timeout=60)
    return [u for u in map(json.loads, out.splitlines()) if u["type"] == "step"]


def case_eval_in_the_loop(args):
    """pp=2 x tp=2, 20 steps, eval every 10 steps on 2 batches of data/val.txt."""
    with Cluster(args.binaries, "eval_in_the_loop") as c:
        c.write_corpus()
        val = write_validation_text(c)
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2", "w3", "w4"])
        ckpt = os.path.join(c.workdir, "ckpt")
        base = small_job_spec(ckpt, steps=20, parallel={"pp": 2, "tp": 2})
        evaluated = dict(base, name="with_eval",
                         eval={"dataset": "data/val.txt", "every_steps": 10, "batches": 2})
        jobs = {}
        for name, spec in (("plain", base), ("with_eval", evaluated)):
            rc, out, err = c.cli("submit", c.write_spec(name + ".json", spec), "--watch",
                                 timeout=300)
            expect(rc == 0, "%s: submit --watch exited %d: %s" % (name, rc, err))
            jobs[name] = out.split()[1]
        plain, with_eval = step_history(c, jobs["plain"]), step_history(c, jobs["with_eval"])

        # Training is untouched: every loss and gradient norm bit-identical (shortest round-trip
        # JSON numbers), and val_loss only after steps 10 and 20.
        expect(len(plain) == 20 and len(with_eval) == 20,
               "steps: %d without eval, %d with" % (len(plain), len(with_eval)))
        for a, b in zip(plain, with_eval):
            expect((a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]),
                   "step %d: without eval %r, with eval %r" % (a["step"], a, b))
            expect("val_loss" not in a, "a job without eval reported %r" % a)
            expect(("val_loss" in b) == (b["step"] in (10, 20)), "step %d: %r" % (b["step"], b))
        val_loss = {h["step"]: h["val_loss"] for h in with_eval if "val_loss" in h}
        expect(val_loss[20] != val_loss[10], "val_loss did not move: %r" % val_loss)

        # status: the last and best evaluation, as typed fields and in the text.
        job = c.job(jobs["with_eval"])
        v = job.get("validation", {})
        expect(int(v.get("step", 0)) == 20 and v.get("val_loss") == val_loss[20],
               "status validation %r, history %r" % (v, val_loss))
        best = min(val_loss, key=lambda s: (val_loss[s], s))
        expect(int(v.get("best_step", 0)) == best, "best step %r, history %r" % (v, val_loss))
        expect(job.get("end_reason") == "END_STEPS_DONE", "end_reason %r" % job.get("end_reason"))
        rc, text, err = c.cli("status", jobs["with_eval"], check=True)
        expect("validation: every 10 steps on data/val.txt (2 batches); val_loss " in text, text)

        # The history: export-metrics csv and tfevents, and the event file in the job's dir.
        rc, out, err = c.cli("export-metrics", jobs["with_eval"], check=True)
        rows = [line.split(",") for line in out.splitlines()[1:]]
        got = {int(r[0]): float(r[6]) for r in rows if r[6]}
        expect(got == val_loss, "csv val_loss %r, history %r" % (got, val_loss))
        exported = os.path.join(c.tmp, "eval.tfevents")
        c.cli("export-metrics", jobs["with_eval"], "--format=tfevents", "-o", exported, check=True)
        expect_scalars_equal("export-metrics tfevents", events(exported)[1], with_eval)
        files = glob.glob(os.path.join(ckpt, jobs["with_eval"], "events.out.tfevents.*"))
        expect(len(files) == 1, "event files %r" % files)
        expect_scalars_equal("job directory", events(files[0])[1], with_eval)

        # Prometheus: every rank computed the same val_loss (an all-reduce over the job).
        gauges = [job_metric(c, "worker-" + w, "dtrain_worker_val_loss", jobs["with_eval"])
                  for w in ("w1", "w2", "w3", "w4")]
        expect(all(g is not None and abs(g - val_loss[20]) < 1e-12 for g in gauges),
               "dtrain_worker_val_loss %r, history %r" % (gauges, val_loss[20]))

        # One process, the job's final weights (step 20), the same two batches.
        weights = os.path.join(ckpt, jobs["with_eval"], "model.safetensors")
        run = subprocess.run(
            [args.local, "--init=" + weights, "--steps=0", "--eval_data=" + val,
             "--eval_batches=2", "--batch=8", "--seq=32", "--vocab_size=256", "--context=32",
             "--n_layer=4", "--n_head=4", "--n_embd=32", "--device=cpu", "--threads=1",
             "--log_json=-"], capture_output=True, timeout=120)
        if run.returncode != 0:
            raise TestFailure("dtrain-local exited %d: %s" % (run.returncode, run.stderr.decode()))
        one = json.loads(run.stdout.decode().splitlines()[-1])["val_loss"]
        expect(abs(one - val_loss[20]) <= 1e-5,
               "val_loss: job %r, one process %r (|diff| %.3g)"
               % (val_loss[20], one, abs(one - val_loss[20])))
        print("eval_in_the_loop: losses bit-identical over 20 steps; val_loss %r; one process "
              "%r (|diff| %.2g)" % (val_loss, one, abs(one - val_loss[20])))


def case_eval_early_stopping(args):
    """One worker, 200 steps, eval every 5 with patience 2 and a min_delta no evaluation beats:
    SUCCEEDED at step 15 with end_reason END_EARLY_STOPPED and a reason saying why; the best
    evaluation's step (status's validation.best_step: the lowest val_loss) stays sealed beside
    the last although keep_last is 1 and every step is checkpointed."""
    with Cluster(args.binaries, "eval_early_stopping") as c:
        c.write_corpus()
        write_validation_text(c)
        c.start_coordinator()
        c.start_idle_workers(["w1"])
        ckpt = os.path.join(c.workdir, "ckpt")
        spec = small_job_spec(ckpt, steps=200, eval={
            "dataset": "data/val.txt", "every_steps": 5,
            "early_stopping": {"patience": 2, "min_delta": 100}})
        spec["checkpoint"]["keep_last"] = 1
        spec["checkpoint"]["interval_steps"] = 1
        rc, out, err = c.cli("submit", c.write_spec("job.json", spec), "--watch", timeout=300)
        expect(rc == 0, "submit --watch exited %d: %s" % (rc, err))
        job_id = out.split()[1]
        job = c.job(job_id)
        expect(job["state"] == "SUCCEEDED" and job.get("end_reason") == "END_EARLY_STOPPED",
               "state %s, end_reason %r" % (job["state"], job.get("end_reason")))
        expect(int(job["latest"]["step"]) == 15, "stopped at %r" % job["latest"])
        expect("stopped early at step 15 of 200" in job["reason"], job["reason"])
        best = int(job["validation"]["best_step"])
        expect(best in (5, 10, 15), "validation %r" % job["validation"])
        steps = sorted(d for d in os.listdir(os.path.join(ckpt, job_id)) if d.startswith("step_"))
        want = sorted({"step_%08d" % best, "step_00000015"})
        expect(steps == want, "sealed steps %r, want %r (best %d)" % (steps, want, best))
        expect(os.path.exists(os.path.join(ckpt, job_id, "model.safetensors")), "no weights")
        print("eval_early_stopping: %s; kept %s" % (job["reason"], steps))
