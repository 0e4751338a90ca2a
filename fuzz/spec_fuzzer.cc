// Fuzzes what the coordinator does with a submitted job spec: ReadJobSpecJson (plan/spec_json.h)
// on any bytes, then MakeJobPlan (plan/job_plan.h) on whatever it read. Neither may crash, and
// the plan must answer within a second (job_plan.h caps every size so that it does).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "plan/job_plan.h"
#include "plan/spec_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  dtrain::JobSpec spec;
  std::vector<std::string> problems;
  if (!dtrain::plan::ReadJobSpecJson(json, &spec, &problems).ok()) return 0;
  const absl::Time start = absl::Now();
  absl::StatusOr<dtrain::JobPlan> plan = dtrain::plan::MakeJobPlan(spec);
  if (absl::Now() - start > absl::Seconds(1)) {
    std::fprintf(stderr, "MakeJobPlan took %s on this spec\n",
                 absl::FormatDuration(absl::Now() - start).c_str());
    std::abort();
  }
  if (plan.ok()) {
    // Idempotent (job_plan.h): planning the planned spec again gives a plan too.
    if (!dtrain::plan::MakeJobPlan(plan->spec()).ok()) {
      std::fprintf(stderr, "MakeJobPlan(plan.spec()) failed on a planned spec\n");
      std::abort();
    }
  }
  return 0;
}
