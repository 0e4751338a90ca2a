#include "coordinator/submit_spec.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "plan/spec_bounds.h"
#include "plan/spec_json.h"

namespace dtrain::coordinator {

absl::StatusOr<JobPlan> PlanSubmission(const SubmitJobRequest& request, int64_t max_spec_bytes,
                                       const plan::JobLimits& limits) {
  const bool has_json = !request.spec_json().empty();
  if (has_json == request.has_spec()) {
    return absl::InvalidArgumentError("set exactly one of spec_json and spec");
  }
  const int64_t spec_bytes = has_json ? static_cast<int64_t>(request.spec_json().size())
                                      : static_cast<int64_t>(request.spec().ByteSizeLong());
  if (spec_bytes > max_spec_bytes) {
    return plan::InvalidSpec(absl::StrCat("it is ", spec_bytes,
                                          " bytes, above this coordinator's cap of ",
                                          max_spec_bytes, " (--max_spec_bytes)"));
  }
  if (!has_json) RETURN_IF_ERROR(plan::CheckSpecFieldLengths(request.spec()));
  // The one rule for every part (plan/job_plan.h): `dtrain plan` rejects the same specs with the
  // same words. ReadJobSpecJson checks the JSON's bounds before it parses.
  ASSIGN_OR_RETURN(JobPlan job_plan, has_json ? plan::ParseJobPlanJson(request.spec_json())
                                              : plan::MakeJobPlan(request.spec()));
  RETURN_IF_ERROR(plan::CheckJobLimits(job_plan.spec(), limits));
  return job_plan;
}

}  // namespace dtrain::coordinator
