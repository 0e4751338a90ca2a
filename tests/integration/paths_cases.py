"""Integration cases: a job reads and writes only inside its workers' allowed roots (the worker's
--data_root and --allowed_paths; common/path_policy.h), and what a request may cost is capped.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks. The harness
starts every worker with --allowed_paths=<the cluster's folder>; "outside" here is a folder of
its own next to it, listed before and after to show that nothing appeared there.
"""

import json
import os
import shutil
import tempfile

from harness import Cluster, expect, small_job_spec

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def listing(path):
    """Every file and directory below `path`, relative, sorted."""
    found = []
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            found.append(os.path.relpath(os.path.join(root, name), path))
    return sorted(found)


def submit_refused(c, name, spec, *words):
    """`dtrain submit` of `spec` exits 2 and its error says every one of `words`."""
    rc, out, err = c.cli("submit", c.write_spec(name, spec))
    expect(rc == 2, "%s: submit exited %d, not 2 (bad input)\nstdout: %s\nstderr: %s"
           % (name, rc, out, err))
    for word in words:
        expect(word in err, "%s: the error does not say %r:\n%s" % (name, word, err))
    return err


def failed_naming(c, name, spec, *words):
    """`spec` is accepted, then FAILED on the worker with a reason saying every one of `words`."""
    job_id = c.submit(c.write_spec(name, spec))
    job = c.wait_state(job_id, FINAL, 30)
    expect(job["state"] == "FAILED", "%s: %s ended %s, not FAILED: %s"
           % (name, job_id, job["state"], job.get("reason")))
    for word in words:
        expect(word in job.get("reason", ""), "%s: the reason does not say %r: %s"
               % (name, word, job.get("reason")))
    expect(not job.get("recoveries"), "%s: a path outside the roots was retried" % name)
    return job_id


def case_paths_confined(args):
    """The issue's specs: "dataset": "/etc/passwd" and a checkpoint.dir outside the roots exit 2 at
    submit naming the path and the worker's roots ("../" climbing out too, even before any worker
    registered); a symlink inside a root that points outside (as the dataset's folder, as
    checkpoint.dir) fails the job FAILED naming the path and where it resolves, before anything
    is read or written, and is not retried; a FIFO as the dataset fails the job at once (not
    waited on) and leaves its worker IDLE. The folder outside holds the same files after; the
    workers declare their roots (`dtrain workers --json`); a job inside them still succeeds."""
    outside = os.path.realpath(tempfile.mkdtemp(prefix="dtrain-outside-"))
    try:
        with open(os.path.join(outside, "secret.txt"), "w") as f:
            f.write("not training data\n" * 200)
        before = listing(outside)
        with Cluster(args.binaries, "paths_confined") as c:
            c.write_corpus()
            c.start_coordinator()
            base = small_job_spec("", 3, name="paths", fault_tolerance={"max_restarts": 2})
            del base["checkpoint"]
            submit_refused(c, "climb.json", dict(base, dataset="../../../etc/passwd"),
                           "dataset ../../../etc/passwd climbs above")
            c.start_worker("w1")
            c.wait_workers({"w1": "IDLE"})
            root = os.path.realpath(c.tmp)
            declared = c.workers_by_id()["w1"].get("allowed_roots", [])
            expect(declared == [os.path.realpath(os.path.join(c.tmp, "data-w1")), root],
                   "w1 declared the roots %s" % declared)

            submit_refused(c, "passwd.json", dict(base, dataset="/etc/passwd"),
                           "dataset /etc/passwd is outside the allowed roots of every "
                           "registered worker", root, "--allowed_paths")
            ckpt_outside = os.path.join(outside, "ckpt")
            submit_refused(c, "ckpt.json", dict(base, checkpoint={"dir": ckpt_outside}),
                           "checkpoint.dir %s is outside" % ckpt_outside, root)
            submit_refused(c, "dotdot.json", dict(base, checkpoint={"dir": c.tmp + "/../x"}),
                           "checkpoint.dir %s/../x is outside" % c.tmp)

            # Symlinks inside the root that lead out of it: the coordinator cannot see them.
            os.symlink(outside, os.path.join(c.workdir, "leak"))
            leaked = os.path.join(c.workdir, "leak", "secret.txt")
            failed_naming(c, "leak.json", dict(base, dataset=leaked),
                          "dataset %s resolves to %s" % (leaked, os.path.join(outside,
                                                                             "secret.txt")),
                          "outside this worker's allowed roots", root)
            workdir = os.path.realpath(c.workdir)
            ckpt_id = failed_naming(
                c, "leak_ckpt.json", dict(base, checkpoint={"dir": "leak/ckpt"}),
                "checkpoint.dir leak/ckpt (relative, resolved from %s" % workdir,
                "resolves to %s" % ckpt_outside)
            expect(not os.path.exists(os.path.join(c.tmp, "data-w1", "jobs", ckpt_id)),
                   "%s wrote in the worker's data root" % ckpt_id)

            # A FIFO as the dataset is refused at once: open(2) of a FIFO with no writer waits
            # forever, and its worker stayed busy with the job, cancelled or not, until kill -9.
            fifo = os.path.join(c.workdir, "corpus.fifo")
            os.mkfifo(fifo)
            failed_naming(c, "fifo.json", dict(base, dataset=fifo),
                          "corpus.fifo is a FIFO, not a regular file")
            c.wait_workers({"w1": "IDLE"})

            # Inside the roots it trains, through a symlink that stays inside too.
            os.makedirs(os.path.join(c.tmp, "shared"))
            os.symlink(os.path.join(c.tmp, "shared"), os.path.join(c.workdir, "ckpt"))
            ok_id = c.submit(c.write_spec("ok.json", dict(base, checkpoint={"dir": "ckpt"})))
            job = c.wait_state(ok_id, FINAL, 60)
            expect(job["state"] == "SUCCEEDED", "%s inside the roots ended %s: %s"
                   % (ok_id, job["state"], job.get("reason")))
            expect(os.path.exists(os.path.join(c.tmp, "shared", ok_id, "model.safetensors")),
                   "%s wrote no weights in its directory" % ok_id)
        after = listing(outside)
        expect(after == before, "files appeared outside the roots: %s"
               % sorted(set(after) - set(before)))
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def case_request_limits(args):
    """What a request may cost is capped, each refusal exit 2 naming the cap and its flag, and the
    coordinator stays up: a spec over --max_spec_bytes (1 MiB), steps over --max_job_steps (10M,
    below the plan's own 1e9), a model over --max_job_parameters; a normal job still succeeds
    after them."""
    with Cluster(args.binaries, "request_limits") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.wait_workers({"w1": "IDLE"})
        base = small_job_spec("", 3, name="limits")
        del base["checkpoint"]
        big = dict(base, name="x" * (1 << 20))
        submit_refused(c, "big.json", big, "above this coordinator's cap of 1048576",
                       "--max_spec_bytes")
        submit_refused(c, "steps.json", dict(base, steps=20000000),
                       "steps=20000000 exceeds this coordinator's cap of 10000000",
                       "--max_job_steps")
        huge = dict(base, model={"vocab_size": 50257, "context": 1024, "n_layer": 1024,
                                 "n_head": 64, "n_embd": 8192})
        submit_refused(c, "huge.json", huge, "model parameters=", "--max_job_parameters")
        expect(c.coordinator.popen.poll() is None, "the coordinator exited")
        ok_id = c.submit(c.write_spec("ok.json", base))
        job = c.wait_state(ok_id, FINAL, 60)
        expect(job["state"] == "SUCCEEDED", "%s after the refusals ended %s: %s"
               % (ok_id, job["state"], job.get("reason")))
