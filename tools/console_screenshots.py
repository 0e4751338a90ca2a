#!/usr/bin/env python3
"""The console's screenshots in docs/ (client/README.md, "dtrain console"), taken again:

    bazel build //coordinator:dtrain-coordinator //worker:dtrain-worker //client:dtrain
    python3 tools/console_screenshots.py [--out docs] [--bin bazel-bin]

A TLS cluster of five CPU workers on this machine (tests/integration/harness.py) runs the Quick
start's job (deploy/examples/quickstart-pp2-tp2.json, a checkpoint every 20 steps) undisturbed,
again with one of its workers killed (kill -9) after step 100 and recovered on the spare, and
once at twice the learning rate; then a fourth copy is left running for its Gantt chart, and
the idle fifth worker is drained. Headless chromium (tests/integration/browser.py) on
`dtrain console` then takes console-job.png (the recovered run), console-compare.png (the three
runs), console-gantt.png (one step of the running job), console-jobs.png and
console-workers.png. A few minutes on two cores.
"""

import argparse
import base64
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from browser import Browser  # noqa: E402
from console_cases import start_console  # noqa: E402
from harness import Cluster, expect  # noqa: E402

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
WIDTH = 1200


def shot(b, path, selector=None, height=None):
    """A PNG of the page: the element `selector` alone, else its top `height` pixels."""
    if selector:
        x, y, w, h = b.eval("(r => [r.left + scrollX, r.top + scrollY, r.width, r.height])("
                            "document.querySelector(%s).getBoundingClientRect())"
                            % json.dumps(selector))
    else:
        x, y, w, h = 0, 0, WIDTH, height
    data = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                  clip={"x": x, "y": y, "width": w, "height": h, "scale": 1})
    with open(path, "wb") as f:
        f.write(base64.b64decode(data["data"]))
    print("wrote %s (%dx%d)" % (path, w, h))


def run(c, spec, name, steps=None):
    """Submits the Quick start's spec as `name` (changes in `spec`); its id."""
    s = dict(spec, name=name)
    if steps:
        s["steps"] = steps
    return c.submit(c.write_spec(name + ".json", s))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs"))
    parser.add_argument("--bin", default=os.path.join(HERE, "..", "bazel-bin"))
    args = parser.parse_args()
    binaries = {"coordinator": os.path.join(args.bin, "coordinator/dtrain-coordinator"),
                "worker": os.path.join(args.bin, "worker/dtrain-worker"),
                "cli": os.path.join(args.bin, "client/dtrain")}
    with open(os.path.join(HERE, "..", "deploy", "examples", "quickstart-pp2-tp2.json")) as f:
        spec = json.load(f)
    with Cluster(binaries, "screenshots", tls=True) as c:
        spec["checkpoint"] = {"dir": os.path.join(c.tmp, "ckpt"), "interval_steps": 20}
        c.write_corpus()
        c.start_coordinator()
        ids = ["w1", "w2", "w3", "w4", "w5"]
        c.start_idle_workers(ids)

        plain = run(c, spec, "quickstart-pp2-tp2")
        done = c.wait_state(plain, FINAL, 600)
        expect(done["state"] == "SUCCEEDED", "%s: %s" % (plain, done))
        c.wait_workers({w: "IDLE" for w in ids})

        killed = run(c, spec, "quickstart-pp2-tp2")
        job = c.wait_step(killed, 100, 600)
        victim = job["placement"]["ranks"][3]["worker_id"]
        c.workers[victim].signal(signal.SIGKILL)
        done = c.wait_state(killed, FINAL, 600)
        expect(done["state"] == "SUCCEEDED" and done.get("recoveries"),
               "%s after kill -9 of %s: %s" % (killed, victim, done))
        c.start_worker(victim)
        c.wait_workers({w: "IDLE" for w in ids})

        faster = run(c, dict(spec, optimizer=dict(spec["optimizer"], max_lr=0.003)),
                     "quickstart-lr-2x")
        done = c.wait_state(faster, FINAL, 600)
        expect(done["state"] == "SUCCEEDED", "%s: %s" % (faster, done))
        c.wait_workers({w: "IDLE" for w in ids})
        running = run(c, spec, "quickstart-running", steps=100000)
        c.wait_step(running, 20, 300)
        idle = [w for w, info in c.workers_by_id().items() if info.get("state") == "IDLE"]
        expect(len(idle) == 1, "one idle worker beside the running job: %s" % idle)
        c.cli("workers", "drain", idle[0], check=True)

        _, port = start_console(c, "admin", "admin")
        base = "http://127.0.0.1:%d" % port
        with Browser(c.tmp, width=WIDTH, height=757) as b:
            b.open("%s/job.html?id=%s" % (base, killed))
            b.wait("document.body.dataset.complete === '1'", 60, "the recovered job's page")
            shot(b, os.path.join(args.out, "console-job.png"), height=1180)
            b.open("%s/compare.html?ids=%s,%s,%s" % (base, killed, plain, faster))
            b.wait("document.body.dataset.complete === '1'", 60, "the compared curves")
            shot(b, os.path.join(args.out, "console-compare.png"), height=640)
            b.open("%s/job.html?id=%s" % (base, running))
            b.wait("document.body.dataset.ready === '1'", 60, "the running job's page")
            b.eval("document.getElementById('trace-button').click()")
            b.wait("document.getElementById('gantt').dataset.slices", 60, "its Gantt chart")
            shot(b, os.path.join(args.out, "console-gantt.png"), selector="#gantt")
            b.open(base + "/")
            b.wait("document.querySelectorAll('#jobs tbody tr').length === 4", 30, "four jobs")
            shot(b, os.path.join(args.out, "console-jobs.png"), height=757)
            b.open(base + "/workers.html")
            b.wait("document.querySelectorAll('#workers tbody tr').length === 5", 30,
                   "five workers")
            shot(b, os.path.join(args.out, "console-workers.png"), height=757)
        c.cli("cancel", running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
