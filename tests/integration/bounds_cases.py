"""Integration cases: no request can take the coordinator down or break reads for everyone.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks. Every case
runs real daemons and the real CLI (harness.Cluster).
"""

import json
import os
import subprocess
import time

from harness import Cluster, TestFailure, _die_with_parent, expect, latest_step, small_job_spec


def deep_spec(depth):
    """A spec whose parallel.stage_layers nests `depth` arrays: 2 bytes a level."""
    head = '{"name": "deep", "dataset": "data/demo.txt", "parallel": {"stage_layers": '
    return head + "[" * depth + "]" * depth + "}}"


def case_deep_spec_refused_while_training(args):
    """While a job trains on two workers, two submits at once of a 200 KB spec nested 100,000
    deep (protobuf's JSON reader would take minutes over each, holding a gRPC thread) are both
    refused within 100 ms (the CLI's own --timeout: a late answer would be DEADLINE_EXCEEDED)
    naming the depth cap; the job keeps training, no worker is declared lost, and heartbeats
    keep their pace meanwhile. Oversized request fields (a cancel reason, a name looked up) are
    refused naming the field and its cap."""
    with Cluster(args.binaries, "deep_spec") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"])
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, name="training",
                              parallel={"pp": 2})
        job_id = c.submit(c.write_spec("training.json", spec))
        before = latest_step(c.wait_step(job_id, 2, 120))
        deep = c.write_spec("deep.json", deep_spec(100000))
        expect(os.path.getsize(deep) > 200000, "the deep spec is %d bytes" % os.path.getsize(deep))
        argv = [c.bin["cli"], "--coordinator=%s" % c.address] + c.tls_flags("admin")
        argv += ["submit", deep, "--timeout=100ms"]
        t0 = time.monotonic()
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=c.tmp,
                                  stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
                 for _ in range(2)]
        for p in procs:
            try:
                out, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise TestFailure("a deep submit did not return within 30 s")
            err = err.decode(errors="replace")
            print("deep submit: exit %d after %.0f ms: %s"
                  % (p.returncode, (time.monotonic() - t0) * 1000, err.strip()[:200]))
            expect(p.returncode != 0, "the deep spec was accepted: %s" % out.decode())
            expect("nesting depth exceeds 64 at byte" in err,
                   "the refusal does not name the depth cap (a late answer is the 100 ms "
                   "deadline): %s" % err)
        # Oversized fields are refused naming the field and its cap (not gRPC's metadata error).
        rc, _, err = c.cli("cancel", job_id, "--reason=" + "r" * 2000)
        expect(rc != 0 and "field reason is 2000 bytes, above the cap of 1024" in err,
               "cancel with a 2000-byte reason: exit %d: %s" % (rc, err[:500]))
        rc, _, err = c.cli("status", "n" * 100000)
        expect(rc != 0 and "field name is 100000 bytes, above the cap of 4096" in err,
               "status of a 100,000-byte name: exit %d: %s" % (rc, err[:500]))
        # Heartbeats kept their pace: both workers BUSY with a fresh heartbeat, the job trains on.
        time.sleep(2 * c.lease_s)
        for w, info in c.workers_by_id().items():
            expect(info.get("state") == "BUSY", "worker %s is %s after the deep submits: %s"
                   % (w, info.get("state"), info))
        job = c.wait_step(job_id, before + 5, 60)
        expect(job["state"] == "RUNNING", "%s is %s: %s" % (job_id, job["state"], job.get("reason")))
        log = c.coordinator.log_text()
        for sign in ("lost: no heartbeat", " re-registered"):
            expect(sign not in log, "the coordinator log says %r:\n%s" % (sign, log[-2000:]))
        c.cli("cancel", job_id, check=True)


def case_list_with_big_specs(args):
    """A database holding 1,000 jobs whose specs are 1 MiB each (filled through JobStore by
    fill_store_for_testing, as a coordinator that took such specs left it: submitting 1 GB takes
    too long for CI), and one job named "needle" older than all of them. On the real coordinator
    started on that file: `dtrain list` answers within 1 s (the CLI's --timeout) with one page
    of summaries and the command for the next; all 1,000 fit in one answer; `dtrain status
    needle` finds the needle by the name index (it is not among the newest 1,000)."""
    with Cluster(args.binaries, "list_big") as c:
        t0 = time.monotonic()
        r = subprocess.run([args.fill_store, "--db=%s" % c.db, "--jobs=1000",
                            "--spec_bytes=%d" % (1 << 20), "--name=hay", "--first_name=needle"],
                           capture_output=True, timeout=600)
        expect(r.returncode == 0, "fill_store_for_testing: %s" % r.stderr.decode())
        print("filled 1,000 jobs of 1 MiB in %.1f s (db %d MB)"
              % (time.monotonic() - t0, os.path.getsize(c.db) >> 20))
        c.start_coordinator()
        t0 = time.monotonic()
        rc, out, err = c.cli("list", "--timeout=1s")
        print("dtrain list: %.0f ms (process included)" % ((time.monotonic() - t0) * 1000))
        expect(rc == 0, "dtrain list failed: %s" % err)
        expect(out.count(" hay ") == 100, "dtrain list shows %d jobs, not a page of 100:\n%s"
               % (out.count(" hay "), out[:2000]))
        expect("older jobs: dtrain list --page=" in out, "no next-page command:\n%s" % out[-500:])
        t0 = time.monotonic()
        listed = c.cli_json("list", "--limit=1000", "--timeout=1s")
        print("dtrain --json list --limit=1000: %.0f ms" % ((time.monotonic() - t0) * 1000))
        expect(len(listed.get("jobs", [])) == 1000, "%d jobs listed" % len(listed.get("jobs", [])))
        expect(listed.get("next_page_token"), "no next page although the needle is older")
        job = c.cli_json("status", "needle", "--timeout=1s")
        expect(job.get("id") == "job-000001", "status needle found %s" % job.get("id"))


def case_worker_claiming_root_widens_nothing(args):
    """A worker that registers claiming allowed_roots ["/"] (what anyone holding a worker
    certificate could send) does not widen the submit-time path check for the others: a spec
    naming /etc/passwd is refused naming the honest worker and its roots, a spec inside every
    worker's roots is accepted."""
    with Cluster(args.binaries, "root_claim") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_worker("w1")
        c.start_worker("fake", extra=["--allowed_paths=/"])
        c.wait_workers({"w1": "IDLE", "fake": "IDLE"})
        expect("/" in c.workers_by_id()["fake"].get("allowed_roots", []),
               "the fake worker declared %s" % c.workers_by_id()["fake"].get("allowed_roots"))
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 2, name="shadow", dataset="/etc/passwd")
        rc, out, err = c.cli("submit", c.write_spec("shadow.json", spec))
        expect(rc == 2, "a spec naming /etc/passwd exited %d: %s%s" % (rc, out, err))
        expect("dataset /etc/passwd is outside the allowed roots of worker w1: " in err and
               "every such worker must allow it" in err, "the refusal: %s" % err)
        inside = small_job_spec(os.path.join(c.tmp, "ckpt"), 2, name="inside",
                                dataset=os.path.join(c.workdir, "data", "demo.txt"))
        c.submit(c.write_spec("inside.json", inside))
