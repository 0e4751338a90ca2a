#include "worker/plan_from_spec.h"

#include "plan/job_plan.h"

namespace dtrain::worker {

absl::StatusOr<TrainingRun> PlanFromSpec(const JobSpec& submitted, const std::string& job_dir) {
  absl::StatusOr<JobPlan> job = dtrain::plan::MakeJobPlan(submitted);
  if (!job.ok()) return job.status();
  return TrainingRunOf(job->spec(), job_dir);
}

}  // namespace dtrain::worker
