// `dtrain trace JOB [--step N] -o trace.json`: one step of every rank (the coordinator's
// TraceJob, coordinator/trace_job.h) as a Chrome / Perfetto trace in the JSON object format
// ({"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}), which ui.perfetto.dev
// and chrome://tracing open.
//
// Layout: a process per rank, named "rank 3 (w4, dp0 pp1 tp1)" and sorted by rank (pid = rank
// + 1), with one track (thread) per kind of operation: "F / B / W" (blocks "F mb3 vs0"),
// "collectives" (the op, group and seq), "receives", "sends" (peer, kind, bytes) and
// "checkpoint" phases; operations of one kind that overlap in time go on a second track of
// that kind ("receives 2"), so every track's slices nest. Each operation is a complete event
// (ph "X", ts / dur in microseconds on the coordinator's clock: each rank's times minus its
// estimated clock offset, from the step's first operation on any rank). A send is an instant
// and an operation under 1 µs is drawn 1 µs wide (its true length is in args.dur_ns), so it
// can be seen and arrows bind to it. A flow arrow (ph "s" then "f", one id, bound to the
// enclosing slice) goes from each send to the receive of the same message on its peer
// (matched by kind, step, micro-batch, virtual stage, group, seq and part).
//
// metadata: the job, step, steps available, schedule, each rank's clock offset and its error
// bound, ranks that did not answer, and per rank the F / B / W order the schedule defines
// (plan/schedule.h StageActions, in this file's names: "F0", "B0", "W0", fused
// backward "B0", with ".v" for a virtual stage v > 0) beside the order recorded, and whether
// they match ("ok", "ok: reordered by ready work ..." for an order plan/ready_work.h allows,
// or CheckTrace's words).
#ifndef DTRAIN_CLIENT_TRACE_H_
#define DTRAIN_CLIENT_TRACE_H_

#include <string>

#include "proto/coordinator.pb.h"

namespace dtrain::client {

// The whole trace file's text (compact JSON, one event per line).
std::string ChromeTraceJson(const JobTrace& trace);

// What `dtrain trace -o FILE` prints: "wrote trace.json: step 12 of job-000003, 4 ranks (clock
// offsets within 0.3 ms, each known to +-0.1 ms); F / B / W order as the schedule (1f1b)
// defines on every rank; open it in ui.perfetto.dev or chrome://tracing", naming ranks that
// did not answer or ran another order.
std::string TraceSummary(const JobTrace& trace, const std::string& path);

}  // namespace dtrain::client

#endif  // DTRAIN_CLIENT_TRACE_H_
