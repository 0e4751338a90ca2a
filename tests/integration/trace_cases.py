"""`dtrain trace JOB -o FILE` on real processes: the coordinator gathers every rank's flight
recorder (after clock probes) over gRPC, and the CLI writes one step as a Chrome / Perfetto trace.

A pp=2 x tp=2 job on four workers over mutual TLS (the coordinator probes and asks the workers'
peer services with its certificate; the CLI asks with the viewer's), 1f1b with 4 micro-batches
per step and a checkpoint every step: the file is loaded as JSON and its structure checked the
way Perfetto's JSON importer reads it (every event has the fields its ph needs, durations >= 0,
every flow start has one finish, a process per rank), and each rank's F / B / W blocks, in time
order, equal the 1f1b schedule's definition (computed here from the rule, and the same as the
list the trace's metadata carries from plan/schedule.h).
"""

import json
import os
import re

from harness import Cluster, expect, small_job_spec


def one_f_one_b(stages, stage, micro_batches):
    """The 1f1b schedule's actions of `stage` (PipeDream-flush): stages - stage - 1 warm-up
    forwards, then one forward and one backward in turn, then the remaining backwards."""
    warmup = min(stages - stage - 1, micro_batches)
    order = ["F%d" % i for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order += ["F%d" % (warmup + i), "B%d" % i]
    order += ["B%d" % i for i in range(micro_batches - warmup, micro_batches)]
    return order


def check_structure(trace):
    """Perfetto's JSON object format: the fields each ph needs; returns the events by ph."""
    expect(isinstance(trace.get("traceEvents"), list), "no traceEvents list")
    expect(trace.get("displayTimeUnit") == "ms",
           "displayTimeUnit %r" % trace.get("displayTimeUnit"))
    expect(isinstance(trace.get("metadata"), dict), "no metadata object")
    by_ph = {}
    for e in trace["traceEvents"]:
        ph = e.get("ph")
        expect(ph in ("X", "M", "s", "f"), "unexpected ph in %s" % e)
        expect(isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int),
               "pid and tid must be integers: %s" % e)
        expect(isinstance(e.get("name"), str) and e["name"], "an event without a name: %s" % e)
        if ph == "X":
            expect(isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, "bad ts: %s" % e)
            expect(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, "bad dur: %s" % e)
            expect(isinstance(e.get("args"), dict), "X without args: %s" % e)
        elif ph == "M":
            expect(e["name"] in ("process_name", "process_sort_index", "thread_name",
                                 "thread_sort_index"), "unknown metadata event %s" % e)
            expect(isinstance(e.get("args"), dict), "M without args: %s" % e)
        else:
            expect("id" in e and isinstance(e.get("ts"), (int, float)),
                   "flow without id/ts: %s" % e)
            if ph == "f":
                expect(e.get("bp") == "e",
                       "a flow finish should bind to its enclosing slice: %s" % e)
        by_ph.setdefault(ph, []).append(e)
    starts = [e["id"] for e in by_ph.get("s", [])]
    finishes = [e["id"] for e in by_ph.get("f", [])]
    expect(len(set(starts)) == len(starts), "flow ids repeat")
    expect(sorted(starts) == sorted(finishes), "flow starts %d and finishes %d do not pair"
           % (len(starts), len(finishes)))
    # A flow point binds to the slice around it on its own track: check there is one.
    slices = {}
    for x in by_ph.get("X", []):
        slices.setdefault((x["pid"], x["tid"]), []).append((x["ts"], x["ts"] + x["dur"]))
    for e in by_ph.get("s", []) + by_ph.get("f", []):
        around = [s for s in slices.get((e["pid"], e["tid"]), []) if s[0] <= e["ts"] <= s[1]]
        expect(around, "flow point with no slice around it on its track: %s" % e)
    # Slices of one track nest (here: never overlap), as a track's stack needs.
    for key, spans in slices.items():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            expect(b0 >= a1 - 1e-6, "overlapping slices on track %s: %s and %s"
                   % (key, (a0, a1), (b0, b1)))
    return by_ph


def case_trace(args):
    """pp=2 x tp=2, 4 micro-batches: `dtrain trace` writes a trace that loads as Perfetto's JSON
    (structure above), with 4 rank processes named 'rank N (wK, dpA ppB tpC)', sends, receives,
    collectives, the step's checkpoint snapshot (a checkpoint every step) and arrows from each
    send to its receive on the other rank; each rank's F / B / W
    order equals 1f1b's definition; the clock offsets (one host: truly 0) lie within their error
    bounds; a step no longer recorded is refused naming the steps that are."""
    with Cluster(args.binaries, "trace", tls=True) as c:
        ids = ["w1", "w2", "w3", "w4"]
        c.write_corpus()
        c.start_coordinator()
        for w in ids:
            c.start_worker(w)
        c.wait_workers({w: "IDLE" for w in ids})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, interval=1, name="trace",
                              micro_batch_size=2, parallel={"pp": 2, "tp": 2},
                              fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("trace.json", spec))
        job = c.wait_step(job_id, 3, 120)
        placement = job["placement"]["ranks"]

        out_path = os.path.join(c.tmp, "trace.json")
        rc, out, err = c.cli("trace", job_id, "-o", out_path, timeout=30, cert="viewer")
        expect(rc == 0, "dtrain trace exited %d: %s" % (rc, err))
        print(out.strip())
        expect(out.startswith("wrote %s: step " % out_path), "summary: %r" % out)
        expect("F / B / W order as the schedule (1f1b) defines on every rank" in out,
               "summary: %r" % out)
        with open(out_path) as f:
            trace = json.load(f)
        by_ph = check_structure(trace)
        meta = trace["metadata"]
        step = meta["step"]
        expect(step == max(meta["available_steps"]), "default step %s, available %s"
               % (step, meta["available_steps"]))
        expect(meta["schedule"] == "1f1b" and meta["micro_batches"] == 4, "metadata %s" % meta)

        # A process per rank, named after its worker and place.
        names = {e["pid"]: e["args"]["name"] for e in by_ph["M"] if e["name"] == "process_name"}
        expect(len(names) == 4, "want 4 rank processes, got %s" % names)
        for rank, a in enumerate(placement):
            want = "rank %d (%s, dp%d pp%d tp%d)" % (rank, a["worker_id"], a.get("dp_rank", 0),
                                                     a.get("pp_rank", 0), a.get("tp_rank", 0))
            expect(names.get(rank + 1) == want, "process %d is %r, want %r"
                   % (rank + 1, names.get(rank + 1), want))

        xs = by_ph["X"]
        cats = {}
        for x in xs:
            cats.setdefault(x["pid"], set()).add(x["cat"])
            expect(x["args"].get("step", step) == step, "an operation of another step: %s" % x)
        for pid in names:
            expect({"F / B / W", "collectives", "sends", "receives", "checkpoint"}
                   <= cats.get(pid, set()), "rank %d's tracks: %s" % (pid - 1, cats.get(pid)))
            # A checkpoint every step: the step's snapshot, after its last backward.
            snapshots = [x for x in xs if x["pid"] == pid and x["name"] == "checkpoint snapshot"]
            last_block = max(x["ts"] for x in xs if x["pid"] == pid and x["cat"] == "F / B / W")
            expect(len(snapshots) == 1 and snapshots[0]["ts"] > last_block,
                   "rank %d's snapshot of step %d: %s" % (pid - 1, step, snapshots))
        collectives = [x for x in xs if x["cat"] == "collectives"]
        expect(all("group" in x["args"] and "seq" in x["args"] for x in collectives),
               "collectives name their group and seq")
        messages = [x for x in xs if x["cat"] in ("sends", "receives")]
        expect(all("peer" in x["args"] and "kind" in x["args"] and x["args"].get("bytes", 0) > 0
                   for x in messages), "sends and receives name peer, kind and bytes")
        pid_of_flow = {}
        for e in by_ph["s"]:
            pid_of_flow[e["id"]] = e["pid"]
        pp_flows = [e for e in by_ph["f"] if e["name"] in ("activation", "gradient")]
        expect(len(pp_flows) == 2 * 4 * 2, "want an arrow per activation and gradient (2 tp "
               "ranks x 4 micro-batches x 2 kinds), got %d" % len(pp_flows))
        expect(all(pid_of_flow[e["id"]] != e["pid"] for e in by_ph["f"]),
               "an arrow must go to another rank")

        # Each rank's F / B / W order, in time, equals the schedule's definition.
        for rank, a in enumerate(placement):
            blocks = sorted((x for x in xs if x["pid"] == rank + 1 and x["cat"] == "F / B / W"),
                            key=lambda x: x["ts"])
            recorded = []
            for x in blocks:
                m = re.match(r"([FBW]) mb(\d+) vs0$", x["name"])
                expect(m, "block name %r" % x["name"])
                recorded.append(m.group(1) + m.group(2))
            want = one_f_one_b(2, a.get("pp_rank", 0), 4)
            expect(recorded == want, "rank %d ran %s, 1f1b defines %s" % (rank, recorded, want))
            listed = meta["schedule_order"][rank]
            expect(listed["expected"] == want and listed["check"] == "ok",
                   "rank %d's metadata: %s" % (rank, listed))

        # One host, one clock: each estimated offset is 0 within its bound (+ 0.2 ms of reading).
        offsets = meta["clock_offsets"]
        expect(len(offsets) == 4, "clock offsets of 4 ranks: %s" % offsets)
        for o in offsets:
            expect(0 <= o["error_bound_ns"] < 100e6, "error bound %s" % o)
            expect(abs(o["offset_ns"]) <= o["error_bound_ns"] + 200e3,
                   "offset outside its bound: %s" % o)
        print("step %d: %d slices, %d arrows, clock error bounds %s ms"
              % (step, len(xs), len(by_ph["s"]),
                 [round(o["error_bound_ns"] / 1e6, 3) for o in offsets]))

        # A step no longer (or not yet) in every recorder: refused, naming those that are.
        rc, out, err = c.cli("trace", job_id, "--step", "99999999", "-o", out_path, timeout=30,
                             cert="viewer")
        expect(rc == 6 and "OUT_OF_RANGE" in err and "step 99999999 is not complete" in err
               and "are: pass one with --step" in err,
               "dtrain trace --step 99999999 exited %d: %s" % (rc, err))
        rc, out, err = c.cli("trace", job_id, "--step", str(step), timeout=30, cert="viewer")
        expect(rc == 0 and json.loads(out)["metadata"]["step"] == step,
               "dtrain trace --step %d to standard output exited %d: %s" % (step, rc, err))


def case_trace_ready_work(args):
    """pp=2 (tp=1) zb-h1 on two workers, 8 micro-batches a step: the stages run as ready work
    (plan/ready_work.h) over real gRPC processes. `dtrain trace` of a step shows each rank's
    F / B / W blocks in the order they ran (the metadata's recorded list equals the blocks in
    time order), and that order keeps ready work's rules: every action of the schedule once,
    each kind (F, B, W) in the schedule's order, B after its F and W after its B; the check is
    "ok" or "ok: reordered by ready work ...", and the summary says the order is the schedule's
    (naming the ranks that ran a reordering)."""
    with Cluster(args.binaries, "trace_ready_work", tls=True) as c:
        ids = ["w1", "w2"]
        c.write_corpus()
        c.start_coordinator()
        for w in ids:
            c.start_worker(w)
        c.wait_workers({w: "IDLE" for w in ids})
        spec = small_job_spec(os.path.join(c.tmp, "ckpt"), 100000, name="ready",
                              micro_batch_size=1, parallel={"pp": 2, "schedule": "zb-h1"},
                              fault_tolerance={"max_restarts": 0})
        job_id = c.submit(c.write_spec("ready.json", spec))
        c.wait_step(job_id, 3, 120)
        out_path = os.path.join(c.tmp, "trace.json")
        rc, out, err = c.cli("trace", job_id, "-o", out_path, timeout=30, cert="viewer")
        expect(rc == 0, "dtrain trace exited %d: %s" % (rc, err))
        print(out.strip())
        expect("F / B / W order as the schedule (zb-h1) defines on every rank" in out,
               "summary: %r" % out)
        with open(out_path) as f:
            trace = json.load(f)
        meta = trace["metadata"]
        expect(meta["schedule"] == "zb-h1" and meta["micro_batches"] == 8, "metadata %s" % meta)
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        for rank in range(2):
            blocks = sorted((x for x in xs if x["pid"] == rank + 1 and x["cat"] == "F / B / W"),
                            key=lambda x: x["ts"])
            recorded = []
            for x in blocks:
                m = re.match(r"([FBW]) mb(\d+) vs0$", x["name"])
                expect(m, "block name %r" % x["name"])
                recorded.append(m.group(1) + m.group(2))
            listed = meta["schedule_order"][rank]
            expected = listed["expected"]
            expect(listed["recorded"] == recorded, "rank %d: metadata's recorded %s, blocks %s"
                   % (rank, listed["recorded"], recorded))
            expect(sorted(recorded) == sorted(expected) and len(expected) == 24,
                   "rank %d ran %s, zb-h1 lists %s" % (rank, recorded, expected))
            for kind in "FBW":
                expect([a for a in recorded if a[0] == kind] == [a for a in expected
                                                                 if a[0] == kind],
                       "rank %d: %s's out of the schedule's order: %s" % (rank, kind, recorded))
            for i, a in enumerate(recorded):
                before = {"B": "F", "W": "B"}.get(a[0])
                expect(before is None or before + a[1:] in recorded[:i],
                       "rank %d: %s before its %s: %s" % (rank, a, before, recorded))
            expect(listed["check"] == "ok" or listed["check"].startswith("ok: reordered by ready"),
                   "rank %d's check: %s" % (rank, listed["check"]))
            print("rank %d ran %s (%s)" % (rank, " ".join(recorded), listed["check"]))
