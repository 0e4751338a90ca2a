// A job spec as a worker runs it: the job's directory on this worker and the TrainingRun
// (training_run.h) of a spec that the job plan (plan/job_plan.h) accepted. One function for every
// trainer: the worker daemon's JobRunner and dtrain-local plan a spec the same way, so names,
// defaults and errors are the service's; dtrain-local links it without any daemon code.
#ifndef DTRAIN_WORKER_PLAN_FROM_SPEC_H_
#define DTRAIN_WORKER_PLAN_FROM_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/training_run.h"

namespace dtrain::worker {

// The job's own directory on this worker, absolute (common/job_paths.h JobDirectory from the
// spec's checkpoint.dir and `data_root`). InvalidArgument when `job_id` is not a job id.
absl::StatusOr<std::string> JobDir(const std::string& job_id, const JobSpec& spec,
                                   const std::string& data_root);

// The TrainingRun of a spec for a job whose directory is `job_dir` (JobDir): training
// state there every checkpoint.interval_steps (plan/checkpoint_plan.h: every job checkpoints,
// by default every 100 steps), final weights at <job_dir>/model.safetensors,
// dataset / init_checkpoint / resume_from made absolute (relative paths resolve from the process's
// working directory; worker/daemon/job_runner.h says what a worker writes where).
// InvalidArgument naming every bad field.
absl::StatusOr<TrainingRun> PlanFromSpec(const JobSpec& spec, const std::string& job_dir);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_PLAN_FROM_SPEC_H_
