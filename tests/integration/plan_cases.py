"""Integration cases for the job plan (plan/job_plan.h): `dtrain plan` and `dtrain submit`
against a real coordinator reject the same specs with the same sentence (exit 2), answer any
spec in well under a second, and a job that no idle worker has memory for stays QUEUED saying
which rank needs how much.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import json
import time

from harness import Cluster, expect

# A valid two-stage spec; each rule below changes it so that exactly one rule breaks.
BASE = {
    "name": "plan-rules",
    "model": {"vocab_size": 256, "context": 32, "n_layer": 4, "n_head": 4, "n_embd": 32},
    "dataset": "data/demo.txt",
    "steps": 5,
    "batch_size": 8,
    "checkpoint": {"dir": "ckpt"},
    "parallel": {"pp": 2},
}

# (what changes, the sentence both paths must print). Top-level keys replace BASE's.
RULES = [
    ({"parallel": {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}, "batch_size": 3,
      "micro_batch_size": 1},
     'parallel.schedule="interleaved": interleaved needs micro_batches (3) to be a multiple of '
     'stages (2)'),
    ({"batch_size": 2147483647, "micro_batch_size": 1}, "batch_size=2147483647 exceeds 1048576"),
    ({"batch_size": 1048576, "micro_batch_size": 1},
     "micro_batch_size=1 makes 1048576 micro-batches per replica per step"),
    ({"steps": 9999999999}, "steps=9999999999 exceeds 1000000000"),
    ({"model": {"vocab_size": 2147483647, "context": 2147483647, "n_layer": 2147483647,
                "n_head": 1, "n_embd": 2147483647}},
     "model.vocab_size=2147483647 exceeds 16777216"),
    ({"parallel": {"dp": 65536, "pp": 2, "tp": 2}, "batch_size": 65536},
     "exceeds 65536 workers"),
    ({"parallel": {"pp": 2, "tp": 3}}, "parallel.tp=3 does not divide model.n_head=4"),
    ({"parallel": {"pp": 5}}, "parallel.pp=5 exceeds model.n_layer=4"),
    ({"parallel": {"pp": 2, "schedule": "zigzag"}}, 'parallel.schedule="zigzag" is not one of'),
    ({"parallel": {"pp": 2, "virtual_stages": 2}}, 'needs schedule "interleaved", not "1f1b"'),
    ({"parallel": {"pp": 2, "stage_layers": [1, 2]}},
     "parallel.stage_layers=[1, 2] sums to 3 layers, model.n_layer=4"),
    ({"micro_batch_size": 3}, "micro_batch_size=3 does not divide the per-replica batch"),
    ({"seq_len": 33}, "seq_len=33 exceeds model.context=32"),
    ({"checkpoint": {}}, "checkpoint.dir is required for a job on 2 workers"),
    ({"device": "tpu"}, 'device="tpu" is not one of cpu, cuda, auto'),
    ({"optimizer": {"beta2": 1.5}}, "optimizer.beta2=1.5 must be in [0, 1)"),
    ({"optimizer": {"lr": "Infinity"}}, "optimizer.lr=inf exceeds 10"),
    ({"optimizer": {"max_lr": 9.2e18}}, "optimizer.max_lr=9.2e+18 exceeds 10"),
    ({"steps": 0}, "steps=0 must be positive"),
    ({"dataset": ""}, "dataset is required"),
    ({"fault_tolerance": {"on_worker_loss": "pray"}},
     'fault_tolerance.on_worker_loss="pray" is not one of wait, shrink'),
    ({"fault_tolerance": {"wait_for": "soon"}}, 'fault_tolerance.wait_for="soon" is not a duration'),
]


def case_plan_rules_both_paths(args):
    """Every rule of the plan through `dtrain plan` and `dtrain submit` against a real
    coordinator: both exit 2 with the same sentence, each answer within a second (the
    2147483647/1 spec kept `dtrain plan` busy for minutes before the plan was bounded), nothing
    is queued, and the coordinator still answers afterwards."""
    with Cluster(args.binaries, "plan_rules_both_paths") as c:
        c.write_corpus()
        c.start_coordinator()
        for i, (change, sentence) in enumerate(RULES):
            spec = dict(BASE)
            spec.update(change)
            path = c.write_spec("rule%02d.json" % i, spec)
            for command in ("plan", "submit"):
                start = time.monotonic()
                rc, out, err = c.cli(command, path)
                took = time.monotonic() - start
                expect(rc == 2, "%s of %s: exit %d, want 2\n%s\n%s" % (command, spec, rc, out, err))
                expect(sentence in err, "%s of %s does not say %r:\n%s" % (command, spec, sentence,
                                                                          err))
                expect(took < 1.0, "%s of %s took %.2fs" % (command, spec, took))
        rc, out, err = c.cli("list", "--json")
        expect(rc == 0 and not json.loads(out).get("jobs"), "a rejected spec was queued: %s" % out)


def case_plan_memory_keeps_job_queued(args):
    """A job whose rank needs more memory than any registered worker has is refused at submit;
    with --allow_waiting it stays QUEUED with the reason naming the rank, its need and the
    largest worker; `dtrain plan` prints the same need per rank."""
    with Cluster(args.binaries, "plan_memory_keeps_job_queued") as c:
        c.write_corpus()
        # The model (69e9 parameters) is above the default --max_job_parameters (20e9): this
        # case is about placement by memory, so the operator's cap is raised past it.
        c.start_coordinator(extra=["--max_job_parameters=100000000000"])
        # The CPU worker registers the host's RAM; a model with a large vocabulary needs more
        # than any machine of this test has (its embedding alone is 256 GiB, times four).
        spec = dict(BASE, parallel={"pp": 1}, batch_size=1,
                    model={"vocab_size": 16777216, "context": 64, "n_layer": 1, "n_head": 1,
                           "n_embd": 4096})
        path = c.write_spec("huge.json", spec)
        rc, out, err = c.cli("plan", path)
        expect(rc == 0, "plan: exit %d\n%s" % (rc, err))
        expect("MEMORY" in out and "GiB" in out, "plan shows no memory per rank:\n%s" % out)
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        rc, out, err = c.cli("submit", path, "--json")
        expect(rc != 0 and "no registered worker can ever hold this job" in err,
               "submit of a job no worker can hold: exit %d\n%s" % (rc, err))
        rc, out, err = c.cli("submit", path, "--json", "--allow_waiting")
        expect(rc == 0, "submit --allow_waiting: exit %d\n%s" % (rc, err))
        job = json.loads(out.splitlines()[-1])["id"]
        deadline = time.monotonic() + 20
        reason = ""
        while time.monotonic() < deadline:
            rc, out, err = c.cli("status", job, "--json")
            status = json.loads(out)
            reason = status.get("reason", "")
            if "needs" in reason:
                break
            time.sleep(0.5)
        expect(status.get("state") == "QUEUED", "job is %s, want QUEUED" % status.get("state"))
        expect("rank 0 (dp0 pp0 tp0) needs" in reason and "the largest idle worker has" in reason
               and "(w1)" in reason, "QUEUED reason does not name the memory: %r" % reason)
        c.cli("cancel", job)
