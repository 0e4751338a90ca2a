"""Resuming a job's checkpoint on another layout (issue 12, "Resume on any layout"): the
checkpoint format is layout-free, so a new job with `resume_from` may change dp, pp, tp (and
virtual stages, schedule, ZeRO-1). The in-process matrix of layouts is
worker/parallel/sharded_checkpoint_reshard_test.cc; this is the same through the CLI, with real
processes over gRPC.
"""

import os

from harness import Cluster, expect, losses
from recovery_cases import FINAL, compare, recovery_spec, start

RESHARD_RTOL = 1e-5


def case_resume_other_layout(args):
    """A (2,2,1) job of 20 steps with a checkpoint every 10; new jobs with `resume_from` its
    step 10 directory on (1,2,2) (four workers) and on (1,1,1) (one worker) continue it: each
    starts at step 10, and steps 11..20 have the uninterrupted run's losses within 1e-5
    relative."""
    with Cluster(args.binaries, "resume_other_layout") as c:
        ids = ["w1", "w2", "w3", "w4"]
        start(c, ids)
        ckpt = os.path.join(c.tmp, "ckpt")
        spec = recovery_spec(ckpt, steps=20, interval=10, parallel={"dp": 2, "pp": 2})
        ref_id = c.submit(c.write_spec("reference.json", dict(spec, name="reference")))
        done = c.wait_state(ref_id, FINAL, 180)
        expect(done["state"] == "SUCCEEDED", "reference: %s: %s"
               % (done["state"], done.get("reason")))
        want = losses(c, ref_id)
        expect(sorted(want) == list(range(1, 21)), "the reference recorded steps %s"
               % sorted(want))
        job_dir = done.get("checkpoint", {}).get("dir") or os.path.join(ckpt, ref_id)
        step10 = os.path.join(job_dir, "step_00000010")
        expect(os.path.exists(os.path.join(step10, "manifest.json")),
               "no sealed step 10 in %s: %s" % (job_dir, sorted(os.listdir(job_dir))))
        want_after = {s: want[s] for s in range(11, 21)}

        for name, parallel in (("tp2", {"pp": 2, "tp": 2}), ("one_worker", {})):
            c.wait_workers({w: "IDLE" for w in ids})
            resumed = recovery_spec(ckpt, steps=20, interval=10, name=name, resume_from=step10)
            if parallel:
                resumed["parallel"] = parallel
            job_id = c.submit(c.write_spec(name + ".json", resumed))
            done = c.wait_state(job_id, FINAL, 180)
            expect(done["state"] == "SUCCEEDED", "%s: %s: %s"
                   % (name, done["state"], done.get("reason")))
            expect(int(done.get("resumed_from_step", 0)) == 10, "%s resumed from %r, want 10"
                   % (name, done.get("resumed_from_step")))
            worst = compare(losses(c, job_id), want_after, RESHARD_RTOL,
                            "(2,2,1) step 10 resumed as %s" % name)
            print("(2,2,1) step 10 resumed on %s (%s): steps 11-20 within %.2g of the "
                  "uninterrupted run" % (parallel or "one worker", job_id, worst))
