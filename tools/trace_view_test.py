#!/usr/bin/env python3
"""Specification of tools/trace_view.py (the docs' trace renderer); Python standard library."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import trace_view  # noqa: E402


def meta(name, pid, tid, value):
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": value}}


def slice_(name, cat, pid, tid, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"dur_ns": int(dur * 1000)}}


# Two ranks of a pp=2 job, as `dtrain trace` writes them: an F, its activation sent from rank 0
# to rank 1 (an arrow), and a collective message's arrow (not drawn).
TRACE = {
    "displayTimeUnit": "ms",
    "metadata": {"job_id": "job-000001", "step": 4, "schedule": "1f1b", "micro_batches": 1,
                 "clock_offsets": [{"rank": 0, "offset_ns": 0}, {"rank": 1, "offset_ns": -2500}]},
    "traceEvents": [
        meta("process_name", 1, 0, "rank 0 (w1, dp0 pp0 tp0)"),
        meta("process_name", 2, 0, "rank 1 (w2, dp0 pp1 tp0)"),
        meta("thread_name", 1, 100, "F / B / W"), meta("thread_name", 1, 400, "sends"),
        meta("thread_name", 2, 100, "F / B / W"), meta("thread_name", 2, 300, "receives"),
        slice_("F mb0 vs0", "F / B / W", 1, 100, 0.0, 900.0),
        slice_("send activation mb0 to rank 1", "sends", 1, 400, 900.0, 1.0),
        slice_("recv activation mb0 from rank 0", "receives", 2, 300, 100.0, 810.0),
        slice_("F mb0 vs0", "F / B / W", 2, 100, 910.0, 1000.0),
        {"ph": "s", "id": 1, "name": "activation", "cat": "message", "pid": 1, "tid": 400,
         "ts": 900.5},
        {"ph": "f", "bp": "e", "id": 1, "name": "activation", "cat": "message", "pid": 2,
         "tid": 300, "ts": 909.5},
        {"ph": "s", "id": 2, "name": "collective", "cat": "message", "pid": 1, "tid": 400,
         "ts": 900.5},
        {"ph": "f", "bp": "e", "id": 2, "name": "collective", "cat": "message", "pid": 2,
         "tid": 300, "ts": 909.5},
    ],
}


class TraceView(unittest.TestCase):
    def test_every_process_and_track_is_named_and_every_slice_drawn(self):
        page = trace_view.render(TRACE)
        for name in ("rank 0 (w1, dp0 pp0 tp0)", "rank 1 (w2, dp0 pp1 tp0)", "F / B / W",
                     "sends", "receives"):
            self.assertIn(">%s</text>" % name, page)
        self.assertEqual(len(re.findall(r"<rect [^>]*><title>", page)), 4)

    def test_pipeline_arrows_only(self):
        page = trace_view.render(TRACE)
        self.assertEqual(page.count('marker-end="url(#head)"'), 1)

    def test_the_page_says_which_renderer_drew_it(self):
        page = trace_view.render(TRACE)
        self.assertIn("Drawn by tools/trace_view.py", page)
        self.assertIn("job-000001, step 4, schedule 1f1b", page)
        self.assertIn("offsets within 0.00 ms", page)  # 2.5 us

    def test_command_line_writes_the_page(self):
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "t.json"), os.path.join(tmp, "t.html")
            with open(src, "w") as f:
                json.dump(TRACE, f)
            subprocess.run([sys.executable, os.path.join(HERE, "trace_view.py"), src, "-o", out],
                           check=True)
            with open(out) as f:
                self.assertTrue(f.read().startswith("<!DOCTYPE html>"))


if __name__ == "__main__":
    unittest.main()
