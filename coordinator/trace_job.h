// `dtrain trace JOB [--step N]`: one step of a running job on every rank. The coordinator
// gathers every rank's flight recorder the way `dtrain diagnose` does (diagnose_job.h, same
// deadline), after a few clock probes per rank (RankState.clock_offset_ns and clock_error_ns:
// NTP-style, the best of the probes), and keeps the operations of one step; the CLI turns that
// into a Chrome / Perfetto trace (client/trace.h) on the coordinator's clock.
//
// Which operations are a rank's step N: every record carrying step N (F / B / W, activation and
// gradient messages, a checkpoint snapshot), and the records without a step (collectives, their
// messages, a checkpoint seal) recorded between its first record of step N and its first record
// of a later step (the data-parallel gradient all-reduce after the last W is step N's).
// A step is complete on a rank when its recorder holds it from its start (the ring has not
// wrapped, or holds a record of an earlier step), a later step has begun, and each of the step's
// operations has ended.
//
//   RETURN_IF_ERROR(StartTrace(job, workers.workers(), options, /*step=*/std::nullopt,
//                              [](absl::StatusOr<JobTrace> trace) { ... }));
#ifndef DTRAIN_COORDINATOR_TRACE_JOB_H_
#define DTRAIN_COORDINATOR_TRACE_JOB_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_limits.h"
#include "coordinator/diagnose_job.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace dtrain::coordinator {

// Clock probes per rank before its recorder is asked.
inline constexpr int kTraceClockProbes = 3;

// The steps `rank` holds completely (see the top), oldest first.
std::vector<int64_t> CompleteSteps(const RankDiagnosis& rank);

// Pure: from a gathering (StartGathering's output: every rank's whole recorder) the trace of
// `step`, or of the newest step complete on every rank that answered when unset. OutOfRange
// naming the steps that are complete everywhere when `step` is not one of them (or when none
// is); FailedPrecondition when no rank answered, with each rank's error (not Unavailable: the
// CLI reads that as the coordinator being unreachable). The schedule fields are left
// to the caller.
absl::StatusOr<JobTrace> CutStep(const JobDiagnosis& gathered, std::optional<int64_t> step);

// The answer goes back in one message of at most kMaxCoordinatorMessageBytes, less room for
// gRPC's framing: a bigger one would fail on the client as "Received message larger than max".
// ResourceExhausted saying how big it is when `trace` does not fit in `limit` bytes.
inline constexpr size_t kMaxTraceBytes = kMaxCoordinatorMessageBytes - (64 << 10);
absl::StatusOr<JobTrace> FitsOneMessage(JobTrace trace, size_t limit = kMaxTraceBytes);

// Checks like StartDiagnosis (FailedPrecondition for a job with no run to ask), then gathers
// with kTraceClockProbes probes per rank and calls `done` with CutStep's result, the job's
// schedule (its plan's) and each rank's pipeline stage filled in; ResourceExhausted, saying
// how big it is, when that answer would not fit in a coordinator message (common/grpc_limits.h:
// a step of very many ranks).
absl::Status StartTrace(const Job& job,
                        const google::protobuf::RepeatedPtrField<WorkerInfo>& workers,
                        const GatherOptions& options, std::optional<int64_t> step,
                        std::function<void(absl::StatusOr<JobTrace>)> done);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_TRACE_JOB_H_
