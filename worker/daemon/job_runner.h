// JobRunner: runs one job assignment on this worker's device and says how it ended.
//
// This worker version trains only single-worker layouts (dp * pp * tp == 1) with LocalTrainer;
// an assignment for a larger layout fails at once with "layouts with more than one worker
// (dp*pp*tp=N) are not supported by this worker version" (the peer service and the parallel
// schedules come with the next issue).
//
// From the JobSpec (proto/job.proto), already validated and defaulted by the coordinator:
//   model, dataset, init_checkpoint, steps, batch_size (B, the whole batch: dp is 1),
//   seq_len (T; 0 means model.context), seed (0 means 1337), optimizer (lr > 0: constant rate,
//   else warmup + cosine from max_lr; the coordinator sets every optional field, and one left
//   unset takes model::OptimizerConfig's default while an explicit 0 stays 0),
//   checkpoint.dir / interval_steps.
//   micro_batch_size is ignored: one worker trains the whole batch at once (the same mean
//   gradient as accumulating micro-batches).
// Output: the final weights go to <checkpoint.dir>/model.safetensors, or, when the spec has no
// checkpoint dir, to <data_root>/jobs/<job_id>/model.safetensors. Training state (weights +
// AdamW moments) goes to <checkpoint.dir>/step_NNNNNNNN/ every interval_steps and at the end.
// Every file is written to a temporary name and renamed (worker/model/checkpoint.h).
//
// Device: the worker's --device decides the hardware (one worker per GPU). spec.device "" or
// "auto" runs on it; "cpu" or "cuda" (or "cuda:N") must match its kind, else the job fails
// with a message naming both, e.g. a "cuda" job on a CPU worker.
//
// Threading: Run() blocks on the caller's (training) thread; Cancel() may be called from any
// thread and takes effect at the next step boundary.
#ifndef DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_
#define DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"
#include "proto/coordinator.pb.h"
#include "worker/local_trainer.h"

namespace dtrain::worker {

struct JobRunnerOptions {
  std::string worker_id;
  std::string data_root = "./dtrain-data";
  // Test seam: called on the training thread after each step's metrics are reported and
  // before the cancel flag is checked.
  std::function<void(int64_t step)> after_step;
};

class JobRunner {
 public:
  struct Callbacks {
    std::function<void(const StepMetrics&)> step;    // after every step, in order
    std::function<void(const std::string&)> event;  // "loaded dataset ...", "checkpoint ..."
  };

  JobRunner(JobAssignment assignment, kernels::Backend* backend, JobRunnerOptions options,
            Callbacks callbacks);

  // Trains the job to its end. The outcome: succeeded with the output path; or the error,
  // naming the file/field/step at fault; or, after Cancel(reason), "<reason> at step N".
  JobOutcome Run();

  void Cancel(const std::string& reason);
  bool cancel_requested() const;
  int64_t last_step() const;  // last finished step; 0 before the first
  const std::string& job_id() const { return assignment_.job_id(); }

 private:
  absl::StatusOr<std::string> Train();  // returns the output path
  absl::Status OnStep(const TrainStepMetrics& result);

  const JobAssignment assignment_;
  kernels::Backend* const backend_;
  const JobRunnerOptions options_;
  const Callbacks callbacks_;
  LocalTrainingOptions plan_;  // set by Train() before the first step

  mutable absl::Mutex mu_;
  bool cancel_ ABSL_GUARDED_BY(mu_) = false;
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
};

// OK when dp * pp * tp == 1 (0 counts as 1); else the "not supported by this worker version"
// error (Unimplemented).
absl::Status CheckSingleWorkerLayout(const ParallelLayout& layout);

// OK when `spec_device` ("", "auto", "cpu", "cuda", "cuda:N") can run on `worker`; else
// FailedPrecondition naming both.
absl::Status CheckDevice(const std::string& spec_device, const kernels::DeviceInfo& worker);

// The LocalTrainingOptions of a spec (see the top of this file); InvalidArgument naming every bad field.
absl::StatusOr<LocalTrainingOptions> PlanFromSpec(const std::string& job_id, const JobSpec& spec,
                                          const std::string& data_root);

// Creates `dir` and its missing parents (mkdir -p).
absl::Status MakeDirs(const std::string& dir);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_
