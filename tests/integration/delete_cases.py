"""`dtrain delete`: an ended job's records go, and with --files its directory, removed by the
worker that ran its rank 0; nothing that is not the job's own is touched."""

import json
import os
import time
import urllib.request

from harness import Cluster, expect, small_job_spec


def _metric(c, line_prefix):
    url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(line_prefix):
                return float(line.rsplit(" ", 1)[1])
    return None


def case_delete_job(args):
    """Mutual TLS, two workers. A viewer may not delete (exit 6, "needs role admin"); a running
    job is refused (cancel it first) and keeps running. `delete --files` of a SUCCEEDED job:
    its directory (checkpoints, model.safetensors) is gone, the CLI says how many bytes and
    which worker, `status` then exits 4 and `list` no longer shows it, the checkpoint parent and
    the other job's directory are intact. Without --files the directory stays. A directory whose
    job.json claim names another uid (a copy, a hand edit) is left in place: exit 6 naming it.
    A removal asked while no worker is up is kept across a coordinator restart and done when
    the worker comes back. The coordinator's counters agree."""
    with Cluster(args.binaries, "delete_job", tls=True) as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"])
        ckpt = os.path.join(c.workdir, "ckpt")
        done = []
        for name in ("a", "b", "c"):
            spec = small_job_spec(ckpt, 6, interval=3, name=name)
            done.append(c.submit(c.write_spec(name + ".json", spec)))
        running = c.submit(c.write_spec("long.json", small_job_spec(ckpt, 100000, name="long")))
        for job_id in done:
            c.wait_state(job_id, "SUCCEEDED", 120)
        c.wait_state(running, "RUNNING", 60)
        dirs = {j: os.path.join(ckpt, j) for j in done}
        for j, d in dirs.items():
            expect(os.path.exists(os.path.join(d, "model.safetensors")), "%s: no weights" % j)

        rc, out, err = c.cli("delete", done[0], "--files", cert="viewer")
        expect(rc == 6 and "needs role admin" in err, "viewer delete: exit %d: %s" % (rc, err))
        rc, out, err = c.cli("delete", running, "--files")
        expect(rc == 6 and "is RUNNING: cancel it first" in err,
               "delete of a running job: exit %d: %s" % (rc, err))
        expect(c.job(running)["state"] == "RUNNING", "the refused delete stopped the job")

        t0 = time.monotonic()
        rc, out, err = c.cli("delete", done[0], "--files")
        took = time.monotonic() - t0
        expect(rc == 0, "delete --files: exit %d: %s" % (rc, err))
        expect(out.startswith('deleted %s (SUCCEEDED, "a"): removed %s on testhost ('
                              % (done[0], dirs[done[0]])) and "iB, worker" in out,
               "delete --files said: %r" % out)
        expect(not os.path.exists(dirs[done[0]]), "%s is still there" % dirs[done[0]])
        expect(os.path.isdir(dirs[done[1]]) and os.path.isdir(ckpt), "more than the job went")
        rc, _, err = c.cli("status", done[0])
        expect(rc == 4, "status of a deleted job: exit %d: %s" % (rc, err))
        listed = [j["id"] for j in c.cli_json("list").get("jobs", [])]
        expect(done[0] not in listed, "list still shows %s: %s" % (done[0], listed))

        rc, out, err = c.cli("delete", done[1])
        expect(rc == 0 and "stays (`--files` removes it)" in out, "records only: %r %r" % (out, err))
        expect(os.path.isdir(dirs[done[1]]), "the directory went without --files")

        claim = os.path.join(dirs[done[2]], "job.json")
        with open(claim) as f:
            text = json.load(f)
        text["job_uid"] = "someone-else"
        with open(claim, "w") as f:
            json.dump(text, f)
        rc, out, err = c.cli("delete", done[2], "--files")
        expect(rc == 6 and "belongs to" in err + out and "directory was not" in err,
               "a claim of another uid: exit %d: %r %r" % (rc, out, err))
        expect(os.path.exists(os.path.join(dirs[done[2]], "model.safetensors")),
               "a directory of another uid lost files")

        # No worker up: the removal waits, across a coordinator restart.
        c.cli("cancel", running)
        c.wait_state(running, "CANCELLED", 60)
        running_dir = os.path.join(ckpt, running)
        for w in ("w1", "w2"):
            c.workers[w].stop()
        rc, out, err = c.cli("delete", running, "--files", timeout=60)
        expect(rc == 0 and "at its next heartbeat" in out, "pending: exit %d: %r %r"
               % (rc, out, err))
        expect(os.path.isdir(running_dir), "removed with no worker up?")
        pending = _metric(c, "dtrain_coordinator_job_dir_removals_pending ")
        expect(pending == 1, "pending removals gauge with no worker up: %s" % pending)
        c.coordinator.stop()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"])
        c.wait_until(lambda: not os.path.exists(running_dir), 30,
                     "%s removed after the restart" % running_dir)
        c.wait_until(lambda: "removed %s" % running_dir in c.coordinator.log_text(), 10,
                     "the coordinator logging the removal")
        removed = _metric(c, 'dtrain_coordinator_job_dirs_removed_total{result="removed"}')
        expect(removed == 1, "removed counter after the restart: %s" % removed)
        pending = _metric(c, "dtrain_coordinator_job_dir_removals_pending ")
        expect(pending == 0, "pending removals gauge once done: %s" % pending)
        print("delete --files answered in %.2fs; a pending removal was done after a coordinator "
              "restart" % took)
