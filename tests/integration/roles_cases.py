"""Integration case: roles on the coordinator (coordinator/roles.h) and the per-job peer secret
(common/peer_secret.h), on a cluster with mutual TLS and the certificates of `dtrain certs init`.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import base64
import json
import os
import re
import sqlite3
import subprocess
import urllib.request

from harness import Cluster, TestFailure, expect, losses, small_job_spec

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
STEPS_B = 400  # job B runs a few seconds: still running when the intruder dials


def _varint(buf, i):
    value, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def _fields(buf):
    """(field number, value) of one protobuf message, on the wire format."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise TestFailure("unexpected wire type %d in a stored placement" % wire)
        yield number, value


def stored_peer_secret(db, job_id):
    """The peer secret of `job_id`'s current run (Placement.peer_secret, field 3), as the
    coordinator stored it. Every worker of that run holds it; the case reads it here to act as
    one of them (no client can get it: the service strips it)."""
    con = sqlite3.connect(db, timeout=10)
    try:
        row = con.execute("SELECT placement FROM jobs WHERE id = ?", (job_id,)).fetchone()
    finally:
        con.close()
    expect(row and row[0], "%s has no stored placement" % job_id)
    secrets = [bytes(v) for n, v in _fields(bytes(row[0])) if n == 3]
    expect(len(secrets) == 1 and len(secrets[0]) == 16,
           "%s: want one 16-byte peer secret in its placement, got %r" % (job_id, secrets))
    return secrets[0]


def refused(c, name, what, rc, out, err, method, needs):
    """A call refused for its role: exit 6, one line naming the certificate, method and role."""
    want = "certificate '%s' (role %s) may not call %s: it needs role %s" % (name, name, method,
                                                                              needs)
    expect(rc == 6, "%s: exit %d, not 6\nstdout: %s\nstderr: %s" % (what, rc, out, err))
    expect(want in err, "%s: the error does not say %r:\n%s" % (what, want, err))
    expect(len(err.strip().splitlines()) == 1, "%s: not one line:\n%s" % (what, err))
    print("%s -> exit %d: %s" % (what, rc, err.strip()))


def case_roles(args):
    """On a TLS cluster: a viewer lists and reads but its cancel is refused (PERMISSION_DENIED
    in one line, the job keeps running); a worker certificate cannot submit; a worker started
    with the viewer certificate cannot register and exits saying why; a worker of job A that
    dials a rank of job B with job A's secret is refused (the tool says the peer refused its
    secret, B's rank logs the refusal naming job B, never a secret), and B trains to the same
    losses, bit for bit, as its undisturbed rerun; no client answer carries a peer secret; a
    certificate issued for worker w9 registers as w9 and is refused as w10."""
    with Cluster(args.binaries, "roles", tls=True) as c:
        c.write_corpus()
        c.start_coordinator()
        for w in ("w1", "w2", "w3"):
            c.start_worker(w)
        c.wait_workers({"w1": "IDLE", "w2": "IDLE", "w3": "IDLE"})
        ckpt = os.path.join(c.tmp, "ckpt")

        # Job A: one worker, long enough to outlive the case.
        a = c.submit(c.write_spec("a.json", small_job_spec(ckpt, 100000, name="a")))
        c.wait_step(a, 1, 60)

        # --- roles ---
        for what in (("list",), ("status", a), ("workers",)):
            rc, out, err = c.cli(*what, cert="viewer")
            expect(rc == 0, "viewer %s: exit %d: %s" % (" ".join(what), rc, err))
        rc, out, err = c.cli("cancel", a, cert="viewer")
        refused(c, "viewer", "viewer cancel", rc, out, err, "CancelJob", "admin")
        expect(c.job(a)["state"] == "RUNNING", "job A stopped after a refused cancel: %s"
               % c.job(a)["state"])
        rc, out, err = c.cli("submit", c.write_spec("w.json", small_job_spec(
            ckpt, 5, name="from-a-worker")), cert="worker")
        refused(c, "worker", "worker submit", rc, out, err, "SubmitJob", "admin")

        # A worker with a client certificate cannot register.
        intruder = c.start_worker("wv", extra=c.tls_flags("viewer"))
        status = intruder.wait(30)
        log = intruder.log_text()
        want = ("certificate 'viewer' (role viewer) may not call RegisterWorker: it needs role "
                "worker")
        expect(status not in (None, 0), "the worker with the viewer certificate did not exit "
               "with an error (status %s):\n%s" % (status, log[-2000:]))
        expect(want in log, "its log does not say %r:\n%s" % (want, log[-2000:]))
        expect("wv" not in c.workers_by_id(), "wv registered with a viewer certificate")
        print("worker with the viewer certificate: exit %s: %s"
              % (status, [l for l in log.splitlines() if want in l][0]))

        # --- the peer secret ---
        # Job B: dp=2 on w2 and w3; long enough to be running when the intruder dials.
        b_spec = small_job_spec(ckpt, STEPS_B, name="b", parallel={"dp": 2})
        b = c.submit(c.write_spec("b.json", b_spec))
        job_b = c.wait_step(b, 2, 60)
        rank1 = job_b["placement"]["ranks"][1]
        secret_a = stored_peer_secret(c.db, a)
        secret_b = stored_peer_secret(c.db, b)
        expect(secret_a != secret_b, "jobs A and B have the same peer secret")
        argv = [args.peer_dial, "--address=%s" % rank1["worker_address"], "--job_id=%s" % b,
                "--src_rank=0", "--dst_rank=1", "--size=2", "--secret_hex=%s" % secret_a.hex(),
                "--timeout_s=10"] + c.tls_flags("worker")
        r = subprocess.run(argv, capture_output=True, timeout=30)
        out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
        expect(r.returncode == 1 and "refused this rank's job secret" in out,
               "dialling job B's rank 1 with job A's secret: exit %d (want 1, refused):\n%s"
               % (r.returncode, out))
        print("a worker of %s dialling %s's rank 1: %s" % (a, b, out.strip()))
        victim = c.workers[rank1["worker_id"]]
        line = "job %s: the peer service refused a stream: refused a stream from rank 0 for job '%s'" \
            % (b, b)
        c.wait_until(lambda: line in victim.log_text(), 10,
                     "%s's log to record the refused stream" % rank1["worker_id"])
        expect(secret_a.hex() not in victim.log_text() and secret_b.hex() not in victim.log_text(),
               "a secret appears in %s's log" % rank1["worker_id"])

        expect(c.job(b)["state"] == "RUNNING", "job B was not running any more when dialled; "
               "the refusal above was not from its rank")
        rc, out, err = c.cli("cancel", a)
        expect(rc == 0, "admin cancel of job A: exit %d: %s" % (rc, err))

        done = c.wait_state(b, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "job B ended %s: %s" % (done["state"],
                                                                      done.get("reason")))
        # B's numbers are those of the same job run again undisturbed (dp=2 on two other
        # workers): bit for bit, nothing reached its ranks from the intruder.
        ref = c.submit(c.write_spec("ref.json", dict(b_spec, name="b-again")))
        ref_done = c.wait_state(ref, FINAL, 120)
        expect(ref_done["state"] == "SUCCEEDED", "the rerun ended %s" % ref_done["state"])
        got, want_losses = losses(c, b), losses(c, ref)
        expect(sorted(got) == list(range(1, STEPS_B + 1)), "job B's steps: %s" % sorted(got)[:5])
        differ = [s for s in got if got[s] != want_losses[s]]
        expect(not differ, "job B's losses differ from the undisturbed rerun's at steps %s"
               % differ[:10])
        print("job B: %d steps, losses identical to the undisturbed rerun's" % STEPS_B)

        # No client answer carries a secret: status, list and watch, as JSON.
        for job_id in (a, b):
            shown = c.job(job_id)["placement"].get("peer_secret", "")
            expect(shown == "", "status --json of %s shows a peer secret: %r" % (job_id, shown))
        texts = [json.dumps(c.job(a)), json.dumps(c.job(b)), json.dumps(c.cli_json("list"))]
        rc, out, err = c.cli("--json", "watch", b, timeout=60)
        texts.append(out)
        for secret in (secret_a, secret_b):
            for form in (secret.hex(), base64.b64encode(secret).decode()):
                expect(not any(form in text for text in texts),
                       "a client answer carries a peer secret (%s)" % form)

        # A certificate issued for one worker acts only as that worker.
        rc, out, err = c.cli("certs", "issue", c.tls_dir, "w9", "--role=worker", cert=None)
        expect(rc == 0, "certs issue w9: exit %d: %s" % (rc, err))
        impostor = c.start_worker("w10", extra=c.tls_flags("w9"))
        status = impostor.wait(30)
        want = "certificate 'w9' (role worker) may not act as worker w10 (RegisterWorker)"
        expect(status not in (None, 0) and want in impostor.log_text(),
               "worker w10 with w9's certificate: exit %s, log:\n%s"
               % (status, impostor.log_text()[-2000:]))
        c.start_worker("w9", extra=c.tls_flags("w9"))
        c.wait_workers({"w9": "IDLE"}, timeout=30)
        print("w9's certificate: registers as w9, refused as w10")


def owner_gauges(c):
    """{(metric, owner): value} of the coordinator's dtrain_coordinator_owner_* series."""
    url = "http://127.0.0.1:%d/metrics" % c.metrics_ports["coordinator"]
    with urllib.request.urlopen(url, timeout=10) as r:
        found = re.findall(r'^(dtrain_coordinator_owner_\w+)\{owner="([^"]*)"\} (\S+)$',
                           r.read().decode(), re.M)
    return {(name, owner): float(value) for name, owner, value in found}


def case_owners(args):
    """Two people share a TLS cluster, each with a certificate of role user (`dtrain certs issue
    DIR alice --role=user`): a job records who submitted it (status, --json, list --mine and
    --owner); bob's cancel and delete of alice's job are refused in one line naming her, and
    her job keeps running; each cancels and deletes their own; an admin cancels anyone's; the
    reason says who cancelled; a user's job above priority 0 is refused; fair share: bob's first job, submitted while alice's burst holds
    every worker and queues more, goes ahead of her queued one (and the coordinator's
    dtrain_coordinator_owner_workers / _owner_queued_jobs say so); a viewer still may not submit; each one's console offers the
    cancel button only on their own job (Coordinator.Access through /api/jobs/ID/access)."""
    from console_cases import request, start_console

    with Cluster(args.binaries, "owners", tls=True) as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2", "w3"])
        ckpt = os.path.join(c.tmp, "ckpt")
        for name in ("alice", "bob"):
            rc, out, err = c.cli("certs", "issue", c.tls_dir, name, "--role=user", cert=None)
            expect(rc == 0, "certs issue %s: exit %d: %s" % (name, rc, err))

        def submit_as(who, name, steps):
            spec = c.write_spec(name + ".json", small_job_spec(ckpt, steps, name=name))
            rc, out, err = c.cli("--json", "submit", spec, cert=who)
            expect(rc == 0, "%s's submit: exit %d: %s" % (who, rc, err))
            job = json.loads(out)
            expect(job.get("owner") == who, "%s's job's owner: %r" % (who, job.get("owner")))
            return job["id"]

        # A priority above the others' would pass the fair share: an admin's only.
        rc, out, err = c.cli("submit", c.write_spec("urgent.json", small_job_spec(
            ckpt, 5, name="urgent", priority=50)), cert="alice")
        expect(rc == 6 and "certificate 'alice' (role user) may not give a job priority 50: "
               "role user's jobs may have at most 0 (--max_user_priority; role admin any)" in err,
               "alice's submit of priority 50: exit %d: %s" % (rc, err))
        a = submit_as("alice", "alices", 100000)
        c.wait_step(a, 1, 60)
        rc, out, err = c.cli("status", a, cert="bob")
        expect(rc == 0 and "ago) by alice" in out, "bob's status of %s does not say whose it "
               "is (exit %d):\n%s%s" % (a, rc, out, err))

        # bob may look at alice's job but not change it.
        rc, out, err = c.cli("cancel", a, cert="bob")
        want = ("certificate 'bob' (role user) may not call CancelJob on %s: it was submitted by "
                "alice; role user acts only on its own jobs (role admin on any)" % a)
        expect(rc == 6 and want in err and len(err.strip().splitlines()) == 1,
               "bob's cancel of alice's job: exit %d: %s" % (rc, err))
        print("bob cancels %s -> exit 6: %s" % (a, err.strip()))
        # Nor by another spelling of its id ("job-3" for job-000003).
        short = "job-%d" % int(a.split("-")[1])
        rc, out, err = c.cli("cancel", short, cert="bob")
        expect(rc == 6 and want in err, "bob's cancel of %s: exit %d: %s" % (short, rc, err))
        expect(c.job(a)["state"] == "RUNNING", "alice's job stopped after bob's refused cancel")

        # Fair share: alice's burst holds every worker and queues one more; bob's first job,
        # submitted after it, goes ahead of it and takes the next worker freed.
        a2, a3, a4 = (submit_as("alice", "alices-%d" % i, 100000) for i in (2, 3, 4))
        c.wait_step(a3, 1, 60)
        b = submit_as("bob", "bobs", 5)
        held = owner_gauges(c)
        expect(held.get(("dtrain_coordinator_owner_workers", "alice")) == 3 and
               held.get(("dtrain_coordinator_owner_queued_jobs", "alice")) == 1 and
               held.get(("dtrain_coordinator_owner_queued_jobs", "bob")) == 1,
               "the coordinator's per-owner gauges: %s" % held)
        expect(c.job(b)["queue_position"] == 1 and c.job(a4)["queue_position"] == 2,
               "bob's job is not ahead of alice's fourth: %s, %s" % (c.job(b).get(
                   "queue_position"), c.job(a4).get("queue_position")))
        rc, out, err = c.cli("cancel", a2, cert="alice")
        expect(rc == 0, "alice's cancel of %s: exit %d: %s" % (a2, rc, err))
        done = c.wait_state(b, FINAL, 120)
        expect(done["state"] == "SUCCEEDED", "bob's job did not succeed")
        # alice's fourth may have taken the worker once bob's ended, not before.
        a4_started = int(c.job(a4).get("started_unix_ms", 0))
        expect(a4_started == 0 or a4_started >= int(done["ended_unix_ms"]),
               "alice's fourth job started before bob's ended")
        print("fair share: bob's %s went ahead of alice's queued %s (she held 3 workers)"
              % (b, a4))
        rc, out, err = c.cli("delete", b, cert="alice")
        expect(rc == 6 and "may not call DeleteJob on %s: it was submitted by bob" % b in err,
               "alice's delete of bob's job: exit %d: %s" % (rc, err))
        expect(c.job(b)["state"] == "SUCCEEDED", "bob's job is gone after a refused delete")

        # Listing by owner.
        def listed(*flags, cert="admin"):
            rc, out, err = c.cli("--json", "list", *flags, cert=cert)
            expect(rc == 0, "list %s as %s: exit %d: %s" % (" ".join(flags), cert, rc, err))
            return [j["id"] for j in json.loads(out).get("jobs", [])]

        alices = [a4, a3, a2, a]
        expect(listed("--mine", cert="alice") == alices, "alice's --mine: %s" % listed(
            "--mine", cert="alice"))
        expect(listed("--mine", cert="bob") == [b], "bob's --mine")
        expect(listed("--owner=alice", cert="viewer") == alices, "the viewer's --owner=alice")
        expect(listed("--mine") == [], "the admin submitted nothing, yet --mine lists jobs")
        rc, out, err = c.cli("list", "--mine", cert="viewer")
        expect(rc == 0 and out.strip() == "no jobs of that owner match",
               "the viewer's list --mine: exit %d: %r" % (rc, out))
        rc, out, err = c.cli("submit", c.write_spec("v.json", small_job_spec(ckpt, 5)),
                             cert="viewer")
        refused(c, "viewer", "viewer submit", rc, out, err, "SubmitJob", "admin or user")

        for job in (a3, a4):
            expect(c.cli("cancel", job, cert="alice")[0] == 0, "alice's cancel of %s" % job)
        # The consoles: the cancel is offered on one's own job only.
        _, alice_port = start_console(c, "alice", "alice")
        _, bob_port = start_console(c, "bob", "bob")
        for port, who, may in ((alice_port, "alice", True), (bob_port, "bob", False)):
            status, _, body = request(port, "/api/jobs/%s/access" % a)
            access = json.loads(body)
            expect(status == 200 and access.get("name") == who,
                   "%s's console's access: %d %s" % (who, status, body))
            expect(("CancelJob" in access.get("methods", [])) == may and
                   ("CancelJob" in access.get("refused", {})) != may,
                   "%s's console on %s: %s" % (who, a, body))
        print("the consoles: alice may cancel %s, bob is refused: %s"
              % (a, json.loads(request(bob_port, "/api/jobs/%s/access" % a)[2])["refused"]
                 ["CancelJob"]))
        # In bob's browser: alice's job page has no cancel button, and "only mine" on the jobs
        # page shows his job alone.
        from browser import Browser
        with Browser(c.tmp) as browser:
            browser.open("http://127.0.0.1:%d/job.html?id=%s" % (bob_port, a))
            browser.wait("!!document.body && document.body.dataset.state === 'RUNNING' && "
                         "document.body.dataset.refused.includes('CancelJob')", 20,
                         "bob's page of alice's job")
            expect(not browser.eval("!!document.getElementById('cancel')"),
                   "bob's page of alice's job has a cancel button")
            browser.open("http://127.0.0.1:%d/" % bob_port)
            browser.wait("!!document.body && document.body.dataset.ready === '1' && "
                         "!document.getElementById('mine-label').hidden", 20, "bob's jobs page")
            browser.eval("document.getElementById('mine-filter').click()")
            shown = browser.wait("[...document.querySelectorAll('#jobs tbody tr')].map("
                                 "r => r.dataset.id).join(',')", 10, "bob's jobs only")
            expect(shown == b, "bob's jobs page with 'only mine': %s (want %s)" % (shown, b))

        # Each acts on their own; an admin on anyone's.
        rc, out, err = c.cli("delete", b, "--files", cert="bob")
        expect(rc == 0 and "deleted %s" % b in out, "bob's delete of his job: exit %d: %s%s"
               % (rc, out, err))
        rc, out, err = c.cli("cancel", a, cert="alice")
        expect(rc == 0, "alice's cancel of her job: exit %d: %s" % (rc, err))
        expect(c.job(a)["reason"] == "cancelled by alice", "the reason: %r" % c.job(a)["reason"])
        b2 = submit_as("bob", "bobs-long", 100000)
        rc, out, err = c.cli("cancel", b2, "--reason=the cluster is needed", cert="admin")
        expect(rc == 0, "the admin's cancel of bob's job: exit %d: %s" % (rc, err))
        expect(c.job(b2)["reason"] == "cancelled by admin: the cluster is needed",
               "the reason: %r" % c.job(b2)["reason"])
        print("owners: alice %s, bob %s and %s; each cancelled by its owner or an admin"
              % (", ".join(alices), b, b2))
