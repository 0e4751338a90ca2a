// JobRunner: runs one job assignment on this worker's device and says how it ended.
//
// Single-worker layouts (dp * pp * tp == 1) train with LocalTrainer, as dtrain-local does.
// Larger layouts run this worker's rank with ParallelJob (parallel_job.h): a gRPC peer
// transport for the job on this worker's advertised address, streams to every peer, and
// parallel::ParallelTrainer; every rank computes the same global loss.
//
// From the JobSpec (proto/job.proto), already validated and defaulted by the coordinator:
//   model, dataset, init_checkpoint, steps, batch_size (B, the whole batch over all replicas),
//   seq_len (T; 0 means model.context), seed (0 means 1337), optimizer (lr > 0: constant rate,
//   else warmup + cosine from max_lr; the coordinator sets every optional field, and one left
//   unset takes model::OptimizerConfig's default while an explicit 0 stays 0),
//   checkpoint.dir / interval_steps; for several workers also micro_batch_size, parallel.*
//   and the placement (ParallelPlan). One worker ignores micro_batch_size: it trains the whole
//   batch at once (the same mean gradient as accumulating micro-batches).
// Output: the final weights go to <checkpoint.dir>/model.safetensors, or, when the spec has no
// checkpoint dir, to <data_root>/jobs/<job_id>/model.safetensors. Training state (weights +
// AdamW moments) goes to <checkpoint.dir>/step_NNNNNNNN/ every interval_steps and at the end.
// Every file is written to a temporary name and renamed (worker/model/checkpoint.h).
// Several workers: checkpoint.dir is required (the job fails at once without it, naming it):
// every rank writes its shard of the training state to <checkpoint.dir>/step_NNNNNNNN/, rank 0
// seals each step with a manifest and at the end exports the final weights from the shards to
// <checkpoint.dir>/model.safetensors (one GPT-2 file), which it reports as the output; the
// other ranks succeed with no output. The directory must be one filesystem every worker of the
// job writes and rank 0 reads: any local path when they share a machine, shared storage (NFS,
// a shared volume) in a cluster.
//
// Reporting: single-worker jobs report every step; with several workers only the rank the
// coordinator records steps from (ReportingRank: dp 0, last stage, tp 0) calls
// Callbacks::step with report = true, the others with false (log it, do not send it).
//
// Device: the worker's --device decides the hardware (one worker per GPU). spec.device "" or
// "auto" runs on it; "cpu" or "cuda" (or "cuda:N") must match its kind, else the job fails
// with a message naming both, e.g. a "cuda" job on a CPU worker.
//
// Threading: Run() blocks on the caller's (training) thread; Cancel() may be called from any
// thread. One worker stops at the next step boundary; a rank of a multi-worker job stops at
// once (its transport is shut down, so it does not wait for peers that stopped too).
#ifndef DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_
#define DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/backend.h"
#include "proto/coordinator.pb.h"
#include "worker/daemon/parallel_job.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/local_trainer.h"

namespace dtrain::worker {

struct JobRunnerOptions {
  std::string worker_id;
  std::string data_root = "./dtrain-data";
  // Multi-worker jobs (ParallelJobOptions): where the job's peer service listens (empty: every
  // interface, on the port of this worker's placement address), how long to wait for every
  // peer to answer, and the deadline of every send, receive and collective.
  std::string peer_listen_address;
  absl::Duration connect_timeout = absl::Seconds(60);
  absl::Duration comm_timeout = absl::Seconds(60);
  // The worker's Prometheus metrics (worker_metrics.h); null: none. Must outlive the runner.
  WorkerMetrics* metrics = nullptr;
  // Test seam: called on the training thread after each step's metrics are reported and
  // before the cancel flag is checked.
  std::function<void(int64_t step)> after_step;
};

class JobRunner {
 public:
  struct Callbacks {
    // After every step, in order. `report`: this rank's steps are the job's (see the top).
    std::function<void(const StepMetrics&, bool report)> step;
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
  absl::StatusOr<std::string> TrainParallel(int rank);
  absl::Status OnStep(const TrainStepMetrics& result);

  const JobAssignment assignment_;
  kernels::Backend* const backend_;
  const JobRunnerOptions options_;
  const Callbacks callbacks_;
  LocalTrainingOptions plan_;  // set by Train() before the first step
  int rank_ = 0;               // this worker's rank of the job (0 for one worker)
  bool reports_steps_ = true;  // see Callbacks::step

  mutable absl::Mutex mu_;
  bool cancel_ ABSL_GUARDED_BY(mu_) = false;
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<ParallelJob> parallel_ ABSL_GUARDED_BY(mu_);  // several workers
};

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
