#!/usr/bin/env python3
"""How long a `dtrain console` page takes to show a whole job in Debian's headless chromium: from
navigation until the page says its job's stream ended and its curves are drawn
(`document.body.dataset.complete`), with the steps held and the rows each curve drew, and the
page's JavaScript heap. For the console's cost on a long job (docs/PERFORMANCE.md "The console
and a long job").

    dtrain console --listen=127.0.0.1:18080 &
    python3 tools/console_page_time.py http://127.0.0.1:18080/job.html?id=job-000001
    python3 tools/console_page_time.py --follow 600 http://127.0.0.1:18080/job.html?id=job-000002
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from browser import Browser  # noqa: E402


CHART = "document.getElementById('loss-chart').dataset"
HEAP = "performance.memory ? performance.memory.usedJSHeapSize : 0"


def follow(b, url, seconds):
    """Samples an open page of a running job every 10 s: the newest step held, the steps held,
    the rows drawn, the step through which the held steps are thinned, the JS heap."""
    b.open(url)
    b.wait("Number(%s.points) > 0" % CHART, 60, "the job's curve")
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        newest, held, drawn, thinned, heap = b.eval(
            "[steps.steps()[steps.size - 1], steps.size, Number(%s.drawn), "
            "Number(%s.thinnedThrough || 0), %s]" % (CHART, CHART, HEAP))
        print("%5.0f s: newest step %d, %d steps held, %d rows drawn, thinned through step %d, "
              "JS heap %.0f MB" % (elapsed, newest, held, drawn, thinned, float(heap) / 1e6),
              flush=True)
        if elapsed >= seconds:
            return
        time.sleep(10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a job page of a running console (job.html?id=JOB)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds to wait for the page (and for each DevTools answer)")
    parser.add_argument("--screenshot", help="write a PNG of the page here")
    parser.add_argument("--follow", type=float, default=0,
                        help="a running job: keep the page open this many seconds instead, and "
                             "print every 10 s what it holds (a page left open on a long job)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Browser(tmp, timeout=args.timeout) as b:
        if args.follow > 0:
            follow(b, args.url, args.follow)
            return
        start = time.monotonic()
        b.open(args.url)
        b.wait("document.body.dataset.complete === '1'", args.timeout, "the job's stream ended")
        took = time.monotonic() - start
        chart = "document.getElementById('loss-chart').dataset"
        held = b.eval(chart + ".points")
        drawn = b.eval(chart + ".drawn || " + chart + ".points")
        heap = b.eval("performance.memory ? performance.memory.usedJSHeapSize : 0")
        if args.screenshot:
            b.screenshot(args.screenshot)
    print("complete after %.1f s: %s steps held, %s rows drawn on the loss curve, JS heap %.0f MB"
          % (took, held, drawn, float(heap) / 1e6))


if __name__ == "__main__":
    main()
