// What SubmitJob checks of a request before it touches the store or the workers, in the order
// that keeps each step bounded: the size (--max_spec_bytes), the strings' lengths and the
// JSON's nesting depth (plan/spec_bounds.h, before any parse), the JSON read, the plan
// (plan/job_plan.h) and this coordinator's job limits. Pure: the fuzz target
// fuzz/submit_fuzzer.cc runs it on any bytes.
//
//   ASSIGN_OR_RETURN(JobPlan plan, PlanSubmission(request, options.max_spec_bytes, limits));
#ifndef DTRAIN_COORDINATOR_SUBMIT_SPEC_H_
#define DTRAIN_COORDINATOR_SUBMIT_SPEC_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "plan/job_plan.h"
#include "proto/coordinator.pb.h"
#include "proto/plan.pb.h"

namespace dtrain::coordinator {

// The plan of the request's spec (spec_json or spec, exactly one set), or InvalidArgument naming
// the first bound it breaks ("invalid job spec: it is 2000000 bytes, above this coordinator's
// cap of 1048576 (--max_spec_bytes)", "invalid job spec: nesting depth exceeds 64 at byte 71")
// or every rule (MakeJobPlan, CheckJobLimits). Time linear in the spec's size.
absl::StatusOr<JobPlan> PlanSubmission(const SubmitJobRequest& request, int64_t max_spec_bytes,
                                       const plan::JobLimits& limits);

}  // namespace dtrain::coordinator

#endif  // DTRAIN_COORDINATOR_SUBMIT_SPEC_H_
