// A job spec planned (plan/job_plan.h MakeJobPlan, the one rule every part applies), then the
// TrainingRun of the planned spec (run_of_plan.h TrainingRunOf, what the worker daemon uses on
// the spec the coordinator planned): for tests of a spec's run. The worker daemon never links it.
#ifndef DTRAIN_WORKER_PLAN_FROM_SPEC_H_
#define DTRAIN_WORKER_PLAN_FROM_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/run_of_plan.h"  // JobDir, TrainingRunOf
#include "worker/training_run.h"

namespace dtrain::worker {

// MakeJobPlan(spec), then TrainingRunOf its spec for a job whose directory is `job_dir`
// (JobDir). InvalidArgument naming every bad field.
absl::StatusOr<TrainingRun> PlanFromSpec(const JobSpec& spec, const std::string& job_dir);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_PLAN_FROM_SPEC_H_
