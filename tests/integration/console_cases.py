"""Integration case: `dtrain console` (client/console.h) in a real browser, Debian's headless
chromium driven over the DevTools protocol (browser.py), against a real coordinator, real
workers and real jobs on a TLS cluster.

Each case_* function is one Bazel test (listed in BUILD) and states what it checks.
"""

import http.client
import json
import os
import re
import signal
import socket

from browser import Browser
from eval_cases import write_validation_text
from harness import Cluster, TestFailure, expect, free_port, losses, small_job_spec

CURVE_STEPS = 30


def request(port, path, method="GET", headers=None, host=None, body=None):
    """(status, headers, body text) of one request to 127.0.0.1:port, redirects not followed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        all_headers = {"Host": host or "127.0.0.1:%d" % port}
        all_headers.update(headers or {})
        conn.request(method, path, body=body, headers=all_headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode(errors="replace")
    finally:
        conn.close()


def start_console(c, name, cert, listen=None, extra=()):
    """`dtrain console` with certificate `cert` on a free loopback port (or `listen`); waits until
    it answers. (process, port)."""
    port = free_port()
    argv = [c.bin["cli"], "--coordinator=" + c.address] + c.tls_flags(cert)
    argv += ["console", "--listen=%s" % (listen or "127.0.0.1:%d" % port)] + list(extra)
    if listen:
        port = int(listen.rsplit(":", 1)[1])
    p = c._spawn("console-" + name, argv)
    c.wait_until(lambda: "dtrain console: http://" in p.log_text(), 30,
                 "the %s console listening" % name, process=p)
    return p, port


def refused_to_start(c, what, args, want, cert="admin"):
    """`dtrain ARGS` (PORT: a free port) exits 2 within seconds saying `want`, and nothing
    listens on that port."""
    port = free_port()
    args = [a.replace("PORT", str(port)) for a in args]
    rc, out, err = c.cli(*args, timeout=30, cert=cert)
    expect(rc == 2, "%s: exit %d, not 2\nstdout: %s\nstderr: %s" % (what, rc, out, err))
    expect(want in err, "%s: the error does not say %r:\n%s" % (what, want, err))
    with socket.socket() as s:
        expect(s.connect_ex(("127.0.0.1", port)) != 0, "%s: something listens on %d"
               % (what, port))
    print("%s -> exit 2: %s" % (what, err.strip().splitlines()[0]))


# The steps of a job's history the console asks for at most (console.js HISTORY_STEPS).
HISTORY_STEPS = 4000


def smoothed(values, weight):
    """TensorBoard's debiased exponential moving average (console_assets/curve.js smooth)."""
    out, m = [], 0.0
    for n, v in enumerate(values, 1):
        m = weight * m + (1 - weight) * v
        out.append(m / (1 - weight ** n))
    return out


def check_smoothing(b, loss):
    """The open job page's loss chart: smoothed at TensorBoard's 0.6 by default, beside the loss
    and val_loss, every drawn step's trend the closed form's over the job's recorded losses; the
    slider at 0 draws the loss alone, the log scale box makes its axis logarithmic (both put
    back)."""
    steps = sorted(loss)
    want = dict(zip(steps, smoothed([loss[s] for s in steps], 0.6)))
    series = b.eval("document.getElementById('loss-chart').dataset.series")
    expect(series == "loss,loss (smoothed 0.60),val_loss", "loss chart series: %r" % series)
    drawn = b.eval("(c => Array.from({length: c.numRows()}, (_, r) => [c.getValue(r, 0), "
                   "c.getValue(r, 2)]))(charts['loss-chart'])")
    worst = max(abs(v - want[int(x)]) / want[int(x)] for x, v in drawn)
    expect(len(drawn) == len(steps) and worst < 1e-5,
           "smoothed loss: %d rows drawn of %d steps, worst relative difference %.3g"
           % (len(drawn), len(steps), worst))
    b.eval("(i => { i.value = '0'; i.oninput(); })(document.getElementById('smoothing'))")
    b.wait("document.getElementById('loss-chart').dataset.series === 'loss,val_loss'", 10,
           "the loss alone with the slider at 0")
    b.eval("(i => { i.value = '0.6'; i.oninput(); })(document.getElementById('smoothing'))")
    b.wait("document.getElementById('loss-chart').dataset.series.includes('smoothed 0.60')", 10,
           "the trend back at 0.6")
    # The log scale box: the loss chart's axis follows it (and it is put back).
    b.eval("(x => { x.checked = true; x.onchange(); })(document.getElementById('log-scale'))")
    b.wait("charts['loss-chart'].getOption('logscale') === true", 10, "a log-scale loss axis")
    b.eval("(x => { x.checked = false; x.onchange(); })(document.getElementById('log-scale'))")
    b.wait("!charts['loss-chart'].getOption('logscale')", 10, "a linear loss axis again")
    print("loss smoothed at 0.6: %d steps, worst relative difference from the closed form %.2g"
          % (len(drawn), worst))


def case_console(args):
    """dtrain console on a TLS cluster, in headless chromium: the jobs page lists the jobs; a
    finished pp=2 job's page draws loss and tokens/s curves with one point per step and a
    placement grid of dp x pp x tp cells; the workers page lists every worker, and an admin drains
    an idle one from it (DRAINED at the coordinator) and undrains it; an admin sees a
    cancel button on a running job and gets its diagnosis, plan and the Gantt chart of its newest
    step (both ranks' F and B, arrows from stage to stage) at a click, and sets its priority
    from the page (the coordinator keeps it; the jobs page's column shows it) and has it
    checkpoint now (a step sealed within seconds); both jobs' loss
    curves overlay on the compare page; a viewer sees no cancel button, and the viewer's console passes on the
    coordinator's refusal of a cancel, a resubmit, a priority and a drain (403 PERMISSION_DENIED; the job
    keeps running), and a priority that is no number is refused (400); the admin's page shows the job's log at a click and offers resubmit; the finished
    job's page samples text from its newest checkpoint at a click, the text `dtrain sample JOB`
    prints with the same settings (a sample out of bounds, or a prompt over 4 KiB, is refused naming it). A POST
    without the console's header and a request with a foreign Host are refused; without
    credentials, or on a non-loopback address without --listen_public, it does not start; with
    --listen_public every request needs the printed token."""
    with Cluster(args.binaries, "console", tls=True) as c:
        refused_to_start(c, "no credentials", ["console", "--listen=127.0.0.1:PORT"], "--tls_ca",
                         cert=None)
        refused_to_start(c, "non-loopback address", ["console", "--listen=0.0.0.0:PORT"],
                         "--listen_public")
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2", "w3"])
        ckpt = os.path.join(c.tmp, "ckpt")
        write_validation_text(c)
        curve = c.submit(c.write_spec("curve.json", small_job_spec(
            ckpt, CURVE_STEPS, name="curve", parallel={"pp": 2},
            eval={"dataset": "data/val.txt", "every_steps": 10, "batches": 1})))
        c.wait_state(curve, "SUCCEEDED", 120)
        running = c.submit(c.write_spec("long.json", small_job_spec(
            ckpt, 100000, name="long", parallel={"pp": 2})))
        c.wait_step(running, 1, 60)

        _, admin = start_console(c, "admin", "admin")
        _, viewer = start_console(c, "viewer", "viewer")
        base = "http://127.0.0.1:%d" % admin
        with Browser(c.tmp) as b:
            # Jobs: both rows, with their states.
            b.open(base + "/")
            rows = b.wait("document.querySelectorAll('#jobs tbody tr').length === 2 && "
                          "[...document.querySelectorAll('#jobs tbody tr')].map("
                          "r => [r.dataset.id, r.dataset.state])", 20, "two rows of jobs")
            states = dict(rows)
            expect(states.get(curve) == "SUCCEEDED" and states.get(running) == "RUNNING",
                   "jobs page rows: %s" % rows)

            # A finished job: every step on both curves, one cell per rank.
            b.open("%s/job.html?id=%s" % (base, curve))
            b.wait("document.body.dataset.complete === '1'", 30, "the curve job's history")
            points = b.eval("['loss-chart', 'tps-chart'].map("
                            "id => Number(document.getElementById(id).dataset.points))")
            expect(points == [CURVE_STEPS, CURVE_STEPS],
                   "points on the loss and tokens/s curves: %s, want %d each"
                   % (points, CURVE_STEPS))
            # Evaluated at steps 10, 20 and 30: a val_loss series of 3 points beside the loss.
            val_points = b.eval("Number(document.getElementById('loss-chart').dataset.valPoints)")
            expect(val_points == CURVE_STEPS // 10,
                   "val_loss points on the loss curve: %s, want %d" % (val_points, CURVE_STEPS // 10))
            canvases = b.eval("document.querySelectorAll('#loss-chart canvas').length")
            expect(canvases >= 1, "dygraphs drew no canvas in #loss-chart")
            cells = b.eval("[...document.querySelectorAll('#grid .cell')].map("
                           "e => [e.dataset.dp, e.dataset.pp, e.dataset.tp, e.dataset.worker])")
            expect(sorted(x[:3] for x in cells) == [["0", "0", "0"], ["0", "1", "0"]],
                   "grid of a dp=1 x pp=2 x tp=1 job: %s" % cells)
            check_smoothing(b, losses(c, curve))
            b.screenshot(os.path.join(c.logs, "job.png"))
            # Its log at a click; an admin may resubmit it.
            b.eval("document.getElementById('logs-button').click()")
            entries = b.wait("Number(document.getElementById('logs').dataset.entries)", 20,
                             "the job's log")
            expect(b.eval("!!document.getElementById('resubmit')"),
                   "the admin sees no resubmit button")
            print("curve job: %s points per curve, %d grid cells, %d log lines"
                  % (points, len(cells), entries))
            # Text from its newest checkpoint at a click: what `dtrain sample JOB` prints with
            # the same settings.
            _, want, _ = c.cli("sample", curve, "--prompt=The ", "--tokens=12", "--temperature=0.8",
                               "--top_k=20", "--seed=7", "--device=cpu", "--json", check=True)
            want = json.loads(want)
            b.eval("(set => { set('sample-prompt', 'The '); set('sample-tokens', '12'); "
                   "set('sample-temperature', '0.8'); set('sample-top-k', '20'); "
                   "set('sample-seed', '7'); document.getElementById('sample-button').click(); })"
                   "((id, v) => { document.getElementById(id).value = v; })")
            text = b.wait("(t => !t.hidden && t.textContent)(document.getElementById("
                          "'sample-text'))", 60, "the sample drawn from the page")
            source = b.eval("document.getElementById('sample-source').textContent")
            expect(text == want["text"] and text.startswith("The "),
                   "the page's sample %r, dtrain sample's %r" % (text, want["text"]))
            expect(source.startswith("12 tokens from ") and curve in source,
                   "the sample's source line: %r" % source)
            print("sample from the page: %r (%s)" % (text, source))

            # A running job, as an admin: the cancel button is there.
            c.wait_step(running, HISTORY_STEPS + 500, 120)
            b.open("%s/job.html?id=%s" % (base, running))
            b.wait("document.body.dataset.state === 'RUNNING' && "
                   "Number(document.getElementById('loss-chart').dataset.points) > 0", 20,
                   "the running job's curve")
            # Over HISTORY_STEPS steps recorded: the history came thinned (GetJobSteps), the
            # steps after it on the stream; a zoom into the thinned part fetches its window
            # again, whole.
            thinned = b.wait("Number(document.getElementById('loss-chart').dataset."
                             "thinnedThrough)", 20, "a thinned history")
            held = b.eval("steps.steps().filter(x => x <= %d).length" % thinned)
            expect(held < thinned, "held %d steps of a history thinned through step %d"
                   % (held, thinned))
            lo, hi = thinned // 2, thinned // 2 + 500
            b.eval("(c => { c.updateOptions({dateWindow: [%d, %d]}); "
                   "c.getOption('zoomCallback')(%d, %d); })(charts['loss-chart'])"
                   % (lo, hi, lo, hi))
            fetched = json.loads(b.wait("document.getElementById('loss-chart').dataset."
                                        "zoomFetched", 20, "the zoomed window fetched again"))
            whole = b.eval("Array.from({length: %d}, (_, k) => %d + k).every(x => steps.has(x))"
                           % (hi - lo + 1, lo))
            expect(fetched == [lo - 1, hi, hi - lo + 1] and whole,
                   "zoom to steps %d-%d of a history thinned through %d: fetched %s, every step "
                   "held: %s" % (lo, hi, thinned, fetched, whole))
            print("running job: history thinned through step %d to %d steps; a zoom to %d-%d "
                  "fetched %d steps" % (thinned, held, lo, hi, fetched[2]))
            expect(b.eval("!!document.getElementById('cancel')"),
                   "the admin sees no cancel button on a running job")
            # Its priority from the page (`dtrain priority`): kept by the coordinator, and the
            # jobs page's column shows it.
            b.eval("document.getElementById('priority-input').value = '3'; "
                   "document.getElementById('set-priority').click()")
            b.wait("document.body.dataset.priority === '3'", 20, "the priority set from the page")
            expect(c.job(running)["spec"].get("priority") == 3,
                   "the coordinator's priority after the page set 3: %s"
                   % c.job(running)["spec"].get("priority"))
            # `Checkpoint now`: a step after the last sealed one is sealed within seconds.
            sealed_before = int(c.job(running)["checkpoint"].get("last_sealed_step", 0))
            b.eval("document.getElementById('checkpoint-now').click()")
            c.wait_job(running, lambda j: int(j["checkpoint"].get("last_sealed_step", 0)) >
                       sealed_before, 30, "a checkpoint sealed after the page asked for one")
            # Diagnose and plan at a click.
            b.eval("document.getElementById('diagnose-button').click(); "
                   "document.getElementById('plan-button').click()")
            diagnosed = b.wait("document.querySelectorAll('#diagnosis tbody tr').length === 2 && "
                               "!document.getElementById('plan').hidden && "
                               "[document.getElementById('diagnosis-summary').textContent, "
                               "document.getElementById('plan').textContent]", 30,
                               "the diagnosis (two ranks) and the plan")
            expect(diagnosed[0].startswith("healthy"), "diagnosis: %r" % diagnosed[0])
            expect("layout: dp=1 pp=2 tp=1" in diagnosed[1], "plan: %r" % diagnosed[1][:300])
            # The newest step as a Gantt chart: both ranks' F and B, arrows between stages.
            b.eval("document.getElementById('trace-button').click()")
            gantt = b.wait("(g => g.dataset.slices && [Number(g.dataset.ranks), "
                           "Number(g.dataset.pipelineArrows), "
                           "[...g.querySelectorAll('.slice.op-F')].length, "
                           "[...g.querySelectorAll('.slice.op-B')].length])"
                           "(document.getElementById('gantt'))", 30, "the step's Gantt chart")
            expect(gantt[0] == 2 and gantt[1] >= 2 and gantt[2] >= 2 and gantt[3] >= 2,
                   "Gantt chart of a pp=2 step: [ranks, pipeline arrows, F bars, B bars] = %s"
                   % gantt)

            # Both jobs' loss curves on one chart: every step of the finished one.
            b.open("%s/compare.html?ids=%s,%s" % (base, curve, running))
            compared = b.wait("document.getElementById('compare-chart').dataset.points", 20,
                              "the compared curves")
            b.wait("(p => p[0] === %d && p[1] > 0)(JSON.parse(document.getElementById("
                   "'compare-chart').dataset.points))" % CURVE_STEPS, 20,
                   "%d points of %s and some of %s" % (CURVE_STEPS, curve, running))
            expect(b.eval("document.getElementById('compare-chart').dataset.series") == "2",
                   "the compare chart does not have two series: %s" % compared)
            expect(b.eval("document.getElementById('compare-chart').dataset.smoothing") == "0.6",
                   "the compared curves are not smoothed at the slider's 0.6")

            # Workers: every one, with its state.
            b.open(base + "/workers.html")
            workers = b.wait("document.querySelectorAll('#workers tbody tr').length === 3 && "
                             "[...document.querySelectorAll('#workers tbody tr')].map("
                             "r => r.dataset.id)", 20, "three workers")
            expect(sorted(workers) == ["w1", "w2", "w3"], "workers page: %s" % workers)
            # The idle one drained and undrained from the page (an admin's buttons).
            idle = b.wait("(r => r && r.dataset.id)(document.querySelector("
                          "'#workers tbody tr[data-state=\"IDLE\"]'))", 20, "an idle worker")
            row = "document.querySelector('#workers tbody tr[data-id=\"%s\"]')" % idle
            b.eval("window.confirm = () => true; %s.querySelector('button.drain').click()" % row)
            b.wait("%s.dataset.state === 'DRAINED'" % row, 20, "%s DRAINED" % idle)
            expect(c.workers_by_id()[idle]["state"] == "DRAINED", "the coordinator's %s" % idle)
            b.eval("%s.querySelector('button.undrain').click()" % row)
            b.wait("%s.dataset.state === 'IDLE'" % row, 20, "%s IDLE again" % idle)

            # The jobs page's priority column.
            b.open(base + "/")
            cell = b.wait("(r => r && r.cells[5].textContent)(document.querySelector("
                          "'#jobs tbody tr[data-id=\"%s\"]'))" % running, 20, "the job's row")
            expect(cell == "3", "the jobs page's priority cell of %s: %r" % (running, cell))

            # The same running job, as a viewer: no cancel button.
            b.open("http://127.0.0.1:%d/job.html?id=%s" % (viewer, running))
            b.wait("document.body.dataset.state === 'RUNNING' && "
                   "document.body.dataset.mayCancel === '0'", 20, "the viewer's job page")
            expect(not b.eval("!!document.getElementById('cancel') || "
                              "!!document.getElementById('resubmit')"),
                   "the viewer sees a cancel or resubmit button")
            identity = b.eval("document.getElementById('whoami').textContent")
            expect("OU=viewer" in identity, "the viewer's page says who it is: %r" % identity)

        # The viewer's console forwards a cancel; the coordinator refuses it.
        path = "/api/jobs/%s/cancel" % running
        status, _, body = request(viewer, path, "POST", {"X-Dtrain-Console": "1"})
        answer = json.loads(body)
        expect(status == 403 and answer.get("code") == "PERMISSION_DENIED" and
               "may not call CancelJob" in answer.get("error", ""),
               "viewer cancel through the console: %d %s" % (status, body))
        print("viewer cancel -> %d %s" % (status, answer["error"]))
        expect(c.job(running)["state"] == "RUNNING", "the job stopped after a refused cancel")
        status, _, body = request(viewer, "/api/jobs/%s/resubmit" % running, "POST",
                                  {"X-Dtrain-Console": "1"})
        expect(status == 403 and "may not call SubmitJob" in body,
               "viewer resubmit through the console: %d %s" % (status, body))
        status, _, body = request(viewer, "/api/jobs/%s/priority?value=9" % running, "POST",
                                  {"X-Dtrain-Console": "1"})
        expect(status == 403 and "may not call SetJobPriority" in body,
               "viewer priority through the console: %d %s" % (status, body))
        status, _, body = request(viewer, "/api/workers/w1/drain", "POST", {"X-Dtrain-Console": "1"})
        expect(status == 403 and "may not call DrainWorker" in body,
               "viewer drain through the console: %d %s" % (status, body))
        status, _, body = request(admin, "/api/workers/w1/repaint", "POST", {"X-Dtrain-Console": "1"})
        expect(status == 404 and "no POST /api/workers/w1/repaint" in body,
               "an unknown worker action: %d %s" % (status, body))
        status, _, body = request(admin, "/api/jobs/%s/priority?value=high" % running, "POST",
                                  {"X-Dtrain-Console": "1"})
        expect(status == 400 and "priority 'high' is not a whole number" in body,
               "a priority that is no number through the console: %d %s" % (status, body))
        expect(c.job(running)["spec"].get("priority") == 3, "the priority changed after refusals")
        status, _, body = request(admin, "/api/jobs/%s/sample?tokens=0" % curve, "POST",
                                  {"X-Dtrain-Console": "1"})
        expect(status == 400 and "tokens=0: a whole number from 1 to 1024" in body,
               "a sample of 0 tokens through the console: %d %s" % (status, body))
        status, _, body = request(admin, "/api/jobs/%s/sample" % curve, "POST",
                                  {"X-Dtrain-Console": "1"}, body="x" * 5000)
        expect(status == 400 and "the prompt is longer than 4096 bytes" in body,
               "a 5000-byte prompt through the console: %d %s" % (status, body))
        # Browser-side guards: a POST without the header (a cross-site form), a rebound Host.
        status, _, body = request(admin, path, "POST")
        expect(status == 403 and "X-Dtrain-Console" in body,
               "POST without the header: %d %s" % (status, body))
        status, _, body = request(admin, "/api/jobs", host="attacker.example:%d" % admin)
        expect(status == 403, "a foreign Host header: %d %s" % (status, body))
        expect(c.job(running)["state"] == "RUNNING", "the job stopped after refused requests")

        # Public: the token printed at start, then a cookie.
        p, public = start_console(c, "public", "admin", listen="0.0.0.0:%d" % free_port(),
                                  extra=["--listen_public"])
        m = re.search(r"\?token=([0-9a-f]{32})", p.log_text())
        expect(m, "the public console printed no token:\n%s" % p.log_text())
        token = m.group(1)
        for what, path in (("no token", "/api/jobs"), ("a wrong token", "/?token=" + "0" * 32)):
            status, _, body = request(public, path)
            expect(status == 401, "public console, %s: %d %s" % (what, status, body))
        status, headers, _ = request(public, "/?token=" + token)
        cookie = headers.get("Set-Cookie", "")
        expect(status == 302 and token in cookie and "HttpOnly" in cookie,
               "public console, the token: %d %s" % (status, headers))
        status, _, body = request(public, "/api/jobs", headers={"Cookie": cookie.split(";")[0]})
        expect(status == 200 and running in body, "public console, the cookie: %d %s"
               % (status, body[:200]))
        print("public console: 401 without the token, 302 + cookie with it, 200 with the cookie")


def case_console_worker_killed(args):
    """The console follows a fault live: a pp=2 job (on_worker_loss wait, a checkpoint every 5
    steps) on its page in headless chromium; kill -9 of one of its workers turns that worker's
    cell red; when the worker comes back the job recovers, the recovery is listed and marked on
    the loss curve (R1) and the cell is green again, the log shown follows it; the admin's cancel button (confirmed)
    cancels the job, and its resume button submits a job resuming from it; its delete button is
    refused while that job uses its checkpoint, and once it is cancelled deletes the job and its
    directory."""
    with Cluster(args.binaries, "console_worker_killed") as c:
        c.write_corpus()
        c.start_coordinator()
        c.start_idle_workers(["w1", "w2"])
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, interval=5, name="fault",
                              parallel={"pp": 2},
                              fault_tolerance={"on_worker_loss": "wait", "wait_for": "120s"})
        job_id = c.submit(c.write_spec("fault.json", spec))
        job = c.wait_job(job_id, lambda j: int(j.get("checkpoint", {}).get("last_sealed_step", 0))
                         >= 5, 60, "a sealed checkpoint")
        victim = job["placement"]["ranks"][1]["worker_id"]
        _, port = start_console(c, "admin", None)
        cell = "document.querySelector('#grid .cell[data-worker=%s]')" % json.dumps(victim)
        with Browser(c.tmp) as b:
            b.open("http://127.0.0.1:%d/job.html?id=%s" % (port, job_id))
            b.wait("%s && %s.dataset.health === 'healthy'" % (cell, cell), 20,
                   "%s's cell green" % victim)
            b.eval("document.getElementById('logs-button').click()")
            logged = b.wait("document.getElementById('logs').dataset.entries !== undefined && "
                            "Number(document.getElementById('logs').dataset.entries) + 1", 20,
                            "the job's log") - 1
            c.workers[victim].signal(signal.SIGKILL)
            b.wait("%s && %s.dataset.health === 'lost'" % (cell, cell), 30,
                   "%s's cell red after kill -9" % victim)
            b.screenshot(os.path.join(c.logs, "job-worker-lost.png"))
            print("kill -9 %s: its cell is red; the job is %s" % (
                victim, b.eval("document.body.dataset.state")))
            # The surviving rank stops within seconds of the kill (rank 0 no longer waits its
            # comm timeout for the killed rank's part of a checkpoint, which took 57 s here
            # once; shm_peer_killed_stops_fast bounds it), so the recovery is placed as soon as
            # the worker is back.
            c.start_worker(victim)
            b.wait("document.querySelectorAll('#recoveries tbody tr').length === 1 && "
                   "document.querySelector('#loss-chart .mark-recovery') && "
                   "%s && %s.dataset.health === 'healthy'" % (cell, cell), 120,
                   "the recovery listed, marked R1 on the loss curve, the cell green again")
            mark = b.eval("document.querySelector('#loss-chart .mark-recovery').textContent")
            expect(mark == "R1", "the recovery's mark on the curve reads %r" % mark)
            b.wait("Number(document.getElementById('logs').dataset.entries) > %d" % logged, 20,
                   "the log shown following the job past its %d lines" % logged)
            sealed = b.eval("document.querySelectorAll('#loss-chart .mark-checkpoint').length")
            expect(sealed >= 2, "%d checkpoints marked on the loss curve (one every 5 steps)"
                   % sealed)
            print("worker back: recovery listed, %r and %d checkpoints on the loss curve, cell "
                  "green" % (mark, sealed))
            # The admin cancels from the page, confirming the dialog.
            b.eval("window.confirm = () => true; document.getElementById('cancel').click()")
            b.wait("document.body.dataset.state === 'CANCELLED'", 20, "the job cancelled")
            expect(c.job(job_id)["state"] == "CANCELLED", "the job is %s"
                   % c.job(job_id)["state"])
            # ... and resumes it from its last sealed checkpoint: a new job, its page opened.
            b.eval("window.confirm = () => true; document.getElementById('resume').click()")
            new_id = b.wait("(id => id !== %s && id)(new URLSearchParams(location.search)"
                            ".get('id'))" % json.dumps(job_id), 20, "the resumed job's page")
            # The coordinator resolves resume_from=JOB to that job's last sealed step.
            resumed = c.job(new_id).get("spec", {}).get("resume_from", "")
            expect("/%s/step_" % job_id in resumed,
                   "%s resumes from %r, not from a checkpoint of %s" % (new_id, resumed, job_id))
            print("cancelled from the page, resumed as %s from %s" % (new_id, resumed))
            # The resumed job uses the first one's checkpoint: deleting that is refused, and
            # the page says why. Once the resumed job is cancelled, the first one's delete
            # button removes it and its directory, and the jobs page says so.
            b.open("http://127.0.0.1:%d/job.html?id=%s" % (port, job_id))
            b.wait("!!document.getElementById('delete')", 20, "the delete button of an ended job")
            b.eval("window.confirm = () => true; document.getElementById('delete').click()")
            b.wait("(document.body.dataset.deleteError || '').includes('resumes from')", 20,
                   "the refusal: in use")
            c.cli("cancel", new_id)
            c.wait_state(new_id, "CANCELLED", 60)
            job_dir = os.path.join(c.tmp, "ckpt", job_id)
            expect(os.path.isdir(job_dir), "%s is not there before the delete" % job_dir)
            b.eval("window.confirm = () => true; document.getElementById('delete').click()")
            # (document.body is null for a moment while the jobs page loads)
            said = b.wait("!!document.body && document.body.dataset.page === 'jobs' && "
                          "!!document.getElementById('deleted') && "
                          "!document.getElementById('deleted').hidden && "
                          "document.getElementById('deleted').textContent", 30,
                          "the jobs page after the delete")
            expect("DIR_REMOVED" in said and not os.path.exists(job_dir),
                   "after the page's delete: %r, directory there: %s"
                   % (said, os.path.exists(job_dir)))
            rc, _, _ = c.cli("status", job_id)
            expect(rc == 4, "status of the deleted job exits %d" % rc)
            print("deleted from the page: %s" % said)
