// A planned job spec as a worker runs it: the job's directory on this worker and the
// TrainingRun (training_run.h) of a spec the job plan (plan/job_plan.h MakeJobPlan) already
// defaulted. No planning here: the worker daemon trains what the coordinator planned
// (JobAssignment.spec and rank_plan) and links no planner; dtrain-local plans first
// (plan_from_spec.h).
#ifndef DTRAIN_WORKER_RUN_OF_PLAN_H_
#define DTRAIN_WORKER_RUN_OF_PLAN_H_

#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "worker/training_run.h"

namespace dtrain::worker {

// The job's own directory on this worker, absolute (common/job_paths.h JobDirectory from the
// spec's checkpoint.dir and `data_root`). InvalidArgument when `job_id` is not a job id.
absl::StatusOr<std::string> JobDir(const std::string& job_id, const JobSpec& spec,
                                   const std::string& data_root);

// The TrainingRun of `planned` (MakeJobPlan's spec: every default set) for a job whose
// directory is `job_dir` (JobDir): training state there every checkpoint.interval_steps, final
// weights at <job_dir>/model.safetensors, dataset / init_checkpoint / resume_from made absolute
// (relative paths resolve from the process's working directory; worker/daemon/job_runner.h says
// what a worker writes where). InvalidArgument when the model config cannot be built.
absl::StatusOr<TrainingRun> TrainingRunOf(const JobSpec& planned, const std::string& job_dir);

// The backend's precision of a planned MatmulPrecision (UNSPECIFIED, from a coordinator before
// the field: fp32).
kernels::MatmulPrecision MatmulPrecisionOf(MatmulPrecision planned);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_RUN_OF_PLAN_H_
