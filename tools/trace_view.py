#!/usr/bin/env python3
"""Draws a `dtrain trace` file (Chrome / Perfetto JSON) as one self-contained HTML page with an
SVG timeline, for the docs' screenshot: Perfetto's UI needs the network and chrome://tracing does
not load in headless Chromium, so this small renderer stands in for them. It draws what the file
holds the way those viewers do: a process per rank, its tracks (F / B / W, collectives, receives,
sends, checkpoint) as rows of slices on one time axis, and the flow arrows from each send to its
receive of a pipeline activation or gradient (the collectives' messages have arrows in the file
too; drawn, hundreds of them would hide the rest).

    python3 tools/trace_view.py trace.json -o trace.html
    chromium --headless --screenshot=docs/trace.png --window-size=1600,760 file://$PWD/trace.html

Standard library only; the output depends on the input alone.
"""

import argparse
import html
import json
import math
import sys

LABEL_W = 230  # px: the track names
PLOT_W = 1340  # px: the time axis
ROW_H = 20
PROCESS_H = 22
TOP = 64
COLORS = {"F": "#4e79a7", "B": "#59a14f", "W": "#76b7b2", "collectives": "#b07aa1",
          "receives": "#9c9c9c", "sends": "#f28e2b", "checkpoint": "#e15759"}


def color_of(event):
    if event.get("cat") == "F / B / W":
        return COLORS.get(event["name"][:1], "#4e79a7")
    return COLORS.get(event.get("cat"), "#888888")


def nice_step(span, ticks=10):
    """A round tick interval (1, 2 or 5 x 10^k) giving about `ticks` ticks over `span`."""
    raw = span / ticks
    k = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * k >= raw:
            return m * k
    return 10 * k


def render(trace):
    events = trace["traceEvents"]
    meta = trace.get("metadata", {})
    process_names, thread_names = {}, {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            process_names[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
    slices = [e for e in events if e["ph"] == "X"]
    end_us = max([e["ts"] + e["dur"] for e in slices] or [1.0])
    scale = PLOT_W / end_us

    def x_of(ts):
        return LABEL_W + ts * scale

    # Rows: each process's header, then its tracks in tid order.
    rows, y = {}, TOP
    parts = []
    for pid in sorted(process_names):
        parts.append('<text x="6" y="%d" class="proc">%s</text>'
                     % (y + 15, html.escape(process_names[pid])))
        parts.append('<line x1="0" x2="%d" y1="%d" y2="%d" class="sep"/>'
                     % (LABEL_W + PLOT_W + 10, y, y))
        y += PROCESS_H
        for (p, tid) in sorted(k for k in thread_names if k[0] == pid):
            rows[(p, tid)] = y
            parts.append('<text x="18" y="%d" class="track">%s</text>'
                         % (y + 14, html.escape(thread_names[(p, tid)])))
            y += ROW_H
    height = y + 40

    # Time axis: ticks in ms.
    step = nice_step(end_us)
    t = 0.0
    while t <= end_us:
        x = x_of(t)
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" class="grid"/>'
                     % (x, x, TOP - 6, height - 36))
        parts.append('<text x="%.1f" y="%d" class="tick">%g ms</text>' % (x, TOP - 10, t / 1000))
        t += step

    for e in slices:
        row = rows.get((e["pid"], e["tid"]))
        if row is None:
            continue
        x, w = x_of(e["ts"]), max(e["dur"] * scale, 0.6)
        title = "%s: %.3f ms" % (e["name"], e["args"].get("dur_ns", e["dur"] * 1000) / 1e6)
        parts.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s</title>'
                     '</rect>' % (x, row + 2, w, ROW_H - 4, color_of(e), html.escape(title)))
        label = e["name"].replace(" vs0", "")
        if w > 7 * len(label) + 6:
            parts.append('<text x="%.2f" y="%d" class="label">%s</text>'
                         % (x + 3, row + 14, html.escape(label)))

    # Flow arrows of pipeline messages (activations, gradients).
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    for f in (e for e in events if e["ph"] == "f"):
        s = starts.get(f["id"])
        if s is None or (s["pid"], s["tid"]) not in rows or (f["pid"], f["tid"]) not in rows:
            continue
        if s["name"] not in ("activation", "gradient"):
            continue
        parts.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" class="flow" '
                     'marker-end="url(#head)"/>'
                     % (x_of(s["ts"]), rows[(s["pid"], s["tid"])] + ROW_H // 2, x_of(f["ts"]),
                        rows[(f["pid"], f["tid"])] + ROW_H // 2))

    legend = [("F", COLORS["F"]), ("B (input grad; fused with W)", COLORS["B"]),
              ("W", COLORS["W"]), ("collective", COLORS["collectives"]),
              ("receive", COLORS["receives"]), ("send", COLORS["sends"]),
              ("checkpoint", COLORS["checkpoint"])]
    lx = LABEL_W
    for name, color in legend:
        parts.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                     '<text x="%d" y="%d" class="tick">%s</text>'
                     % (lx, height - 28, color, lx + 16, height - 18, html.escape(name)))
        lx += 34 + 6 * len(name)
    parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" class="flow"/><text x="%d" y="%d" '
                 'class="tick">activation / gradient arrow</text>'
                 % (lx, height - 22, lx + 24, height - 22, lx + 30, height - 18))

    title = ("dtrain trace: %s, step %s, schedule %s, %s micro-batches; clocks aligned to the "
             "coordinator's (offsets within %.2f ms). Drawn by tools/trace_view.py from the "
             "trace's JSON, not by Perfetto."
             % (meta.get("job_id", "?"), meta.get("step", "?"), meta.get("schedule", "?"),
                meta.get("micro_batches", "?"),
                max([abs(o["offset_ns"]) for o in meta.get("clock_offsets", [])] or [0]) / 1e6))
    width = LABEL_W + PLOT_W + 20
    return """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>dtrain trace</title><style>
body {{ margin: 0; background: #fff; font-family: sans-serif; }}
.proc {{ font-size: 13px; font-weight: bold; fill: #222; }}
.track {{ font-size: 12px; fill: #444; }}
.tick {{ font-size: 11px; fill: #555; }}
.label {{ font-size: 11px; fill: #fff; }}
.grid {{ stroke: #e4e4e4; stroke-width: 1; }}
.sep {{ stroke: #bbb; stroke-width: 1; }}
.flow {{ stroke: #222; stroke-width: 1.3; }}
.title {{ font-size: 14px; fill: #111; }}
</style></head><body>
<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">
<defs><marker id="head" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6"
 orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#222"/></marker></defs>
<text x="6" y="22" class="title">{title}</text>
{body}
</svg></body></html>
""".format(w=width, h=height, title=html.escape(title), body="\n".join(parts))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a dtrain trace file (JSON)")
    parser.add_argument("-o", "--output", required=True, help="the HTML file to write")
    args = parser.parse_args(argv)
    with open(args.trace) as f:
        trace = json.load(f)
    page = render(trace)
    with open(args.output, "w") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
