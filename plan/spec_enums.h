// The spec's choice strings as types: JobSpec keeps the user-facing text (the JSON format), the
// plan carries proto enums (proto/plan.proto), and code branches only on the enums. One parser
// per enum, which MakeJobPlan uses to accept a spec and everybody else to read a stored one;
// one name per value, the spec's own text, for messages.
//
//   std::optional<PipelineSchedule> s = ParseSchedule("zb-h1");  // SCHEDULE_ZB_H1
//   ScheduleText(SCHEDULE_1F1B);                                 // "1f1b"
//   PlannedWorkerLossPolicy(planned_spec) == WORKER_LOSS_SHRINK;      // a spec MakeJobPlan
//   defaulted
//
// Parsers take the exact text and return nullopt for anything else ("" included: MakeJobPlan
// fills the defaults first). The Planned* functions read a planned spec (MakeJobPlan's output) and
// answer its default for a field that does not parse (a spec a coordinator stored before).
#ifndef DTRAIN_PLAN_SPEC_ENUMS_H_
#define DTRAIN_PLAN_SPEC_ENUMS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "plan/schedule.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::plan {

// parallel.schedule: "gpipe", "1f1b", "interleaved", "zb-h1".
std::optional<PipelineSchedule> ParseSchedule(absl::string_view text);
std::string ScheduleText(PipelineSchedule schedule);
// The executor's kind (plan/schedule.h) of a planned schedule (1F1B for UNSPECIFIED).
pipeline::ScheduleKind ScheduleKindOf(PipelineSchedule schedule);

// device: "cpu", "cuda", "auto". Also a worker's DeviceInfo.kind ("cpu" or "cuda").
std::optional<JobDevice> ParseDevice(absl::string_view text);
std::string DeviceText(JobDevice device);
// Whether a worker whose device is `worker` (DEVICE_CPU or DEVICE_CUDA) can run a job asking
// for `job`: DEVICE_AUTO (and UNSPECIFIED) runs anywhere.
bool DeviceFits(JobDevice job, JobDevice worker);

// matmul_precision: "fp32", "tf32", "bf16".
std::optional<MatmulPrecision> ParseMatmulPrecision(absl::string_view text);
std::string MatmulPrecisionText(MatmulPrecision precision);

// fault_tolerance.on_worker_loss: "wait", "shrink".
std::optional<WorkerLossPolicy> ParseWorkerLossPolicy(absl::string_view text);
// stragglers.policy: "report", "replace", "rebalance".
std::optional<StragglerPolicy> ParseStragglerPolicy(absl::string_view text);

// A planned spec's choices (the plan's defaults when a field does not parse).
PipelineSchedule PlannedSchedule(const JobSpec& planned);
JobDevice PlannedDevice(const JobSpec& planned);
WorkerLossPolicy PlannedWorkerLossPolicy(const JobSpec& planned);
StragglerPolicy PlannedStragglerPolicy(const JobSpec& planned);
MatmulPrecision PlannedMatmulPrecision(const JobSpec& planned);

}  // namespace dtrain::plan

#endif  // DTRAIN_PLAN_SPEC_ENUMS_H_
