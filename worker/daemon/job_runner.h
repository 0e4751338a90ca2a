// JobRunner: runs one job assignment on this worker's device and says how it ended.
//
// Single-worker layouts (dp * pp * tp == 1) train with LocalTrainer, as dtrain-local does.
// Larger layouts run this worker's rank with ParallelJob (parallel_job.h): a gRPC peer
// transport for the job on this worker's advertised address, streams to every peer, and
// parallel::ParallelTrainer; every rank computes the same global loss.
//
// What it trains is what the coordinator planned (assignment format 2): the JobSpec as the plan
// defaulted it and the rank's RankPlan (proto/plan.proto: layout, schedule, micro-batches, its
// chunks, the device); it never plans a spec (it links no planner: //tests/layers) and checks
// none of the plan's rules again. An assignment without rank_plan (a coordinator of format 1)
// fails at once, FailedPrecondition naming the format (CheckAssignmentFormat).
// From the JobSpec (proto/job.proto), already validated and defaulted by the coordinator:
//   model, dataset, init_checkpoint, resume_from, steps, batch_size (B, the whole batch over all
//   replicas), seq_len (T; 0 means model.context), seed (0 means 1337), optimizer (lr > 0:
//   constant rate, else warmup + cosine from max_lr; the coordinator sets every optional field,
//   and one left unset takes model::OptimizerConfig's default while an explicit 0 stays 0),
//   checkpoint.dir / interval_steps; for several workers the RankPlan and the placement
//   (ParallelPlan). One worker ignores micro_batch_size: it trains the whole
//   batch at once (the same mean gradient as accumulating micro-batches).
//
// Where it writes: only in the job's own directory (common/job_paths.h JobDirectory, made
// absolute once at the start): <checkpoint.dir>/<job id>/, or <data_root>/jobs/<job id>/ when
// the spec has no checkpoint dir (a one-worker job; it checkpoints there like any other). Rank 0
// (or the single worker) claims it with the assignment's job_uid (ClaimJobDirectory) before it
// connects to peers or trains; a directory claimed by another job fails the job with that message,
// and the other ranks write their shards only after connecting, so nothing is written before the
// claim. Final weights: <job dir>/model.safetensors (the outcome's absolute `output`, with this
// worker's host label). Training state: <job dir>/step_NNNNNNNN/ every interval_steps and at
// the end, `latest` moved last. Several workers: checkpoint.dir is required (the job fails at
// once without it, naming it): every rank writes its shard of each step there, rank 0 seals it
// with a manifest and at the end exports the final weights from the shards; the other ranks
// succeed with no output. It must be one filesystem every worker of the job writes and rank 0
// reads: any local path when they share a machine, shared storage in a cluster.
// Relative dataset / init_checkpoint / resume_from paths are resolved from the worker's working
// directory; errors say so ("dataset data/demo.txt (relative, resolved from /srv/w1, the
// worker's working directory) cannot be read on worker w1: No such file or directory").
//
// What rank 0 tells the coordinator besides steps: Callbacks::location once before the first
// step (the job directory, host, and the step it resumed from), Callbacks::checkpoint and an
// event "checkpoint sealed at step N: <step dir>" for every step it sealed (never for a step
// only loaded), and "resumed from <step dir> at step N" when it resumed.
//
// How it ended (JobOutcome.kind): FAILURE_STOPPED after Cancel (SIGTERM, or the coordinator's
// cancel, whose outcome the daemon does not send); FAILURE_PEER when a multi-worker rank failed
// waiting on peers (a stream broke, a deadline passed waiting on one, a peer aborted the job),
// with those peers' worker ids in suspect_workers (ParallelJob::SuspectPeers); FAILURE_LOCAL
// otherwise (data, device, disk, a bug).
//
// Reporting: single-worker jobs report every step; with several workers only the rank the
// coordinator records steps from (ReportingRank: dp 0, last stage, tp 0) calls
// Callbacks::step with report = true, the others with false (log it, do not send it).
//
// Device: the worker's --device decides the hardware (one worker per GPU). The plan's device
// (RankPlan.device) DEVICE_AUTO runs on it; DEVICE_CPU or DEVICE_CUDA must match its kind, else
// the job fails with a message naming both, e.g. a "cuda" job on a CPU worker.
//
// Threading: Run() blocks on the caller's (training) thread; Cancel() may be called from any
// thread. One worker stops the step in progress at its next transformer block
// (GptStage::set_stop_flag: "stopped in the forward pass before layer 3 of 8"), before the
// step's update; a rank of a multi-worker job stops at once (its transport is shut down, so it
// does not wait for peers that stopped too).
#ifndef DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_
#define DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tfevents.h"
#include "common/tls.h"
#include "kernels/backend.h"
#include "proto/coordinator.pb.h"
#include "proto/plan.pb.h"
#include "worker/daemon/parallel_job.h"
#include "worker/daemon/worker_metrics.h"
#include "worker/local_trainer.h"
#include "worker/model/checkpoint_dir.h"
#include "worker/run_of_plan.h"

namespace dtrain::worker {

struct JobRunnerOptions {
  std::string worker_id;
  std::string host_label;  // this worker's host: JobLocation.host and JobOutcome.output_host
  std::string data_root = "./dtrain-data";
  // Where the job may read and write (common/path_policy.h), absolute and resolved: the
  // worker's --data_root and --allowed_paths. Empty: data_root alone. Every path of the spec
  // and the job's directory are checked (after symlinks) before anything is read or written;
  // one outside fails the job (FAILED_PRECONDITION, not retried) naming the path and the roots.
  std::vector<std::string> allowed_roots;
  // Multi-worker jobs (ParallelJobOptions): where the job's peer service listens (empty: every
  // interface, on the port of this worker's placement address), how long to wait for every
  // peer to answer, and the deadline of every send, receive and collective.
  std::string peer_listen_address;
  absl::Duration connect_timeout = absl::Seconds(60);
  absl::Duration comm_timeout = absl::Seconds(60);
  // Multi-worker jobs: peers on this host through shared memory (ParallelJobOptions).
  bool shared_memory = true;
  // Multi-worker jobs: TLS data connections per pair of ranks on different hosts
  // (ParallelJobOptions).
  int data_connections = -1;
  int data_port = 0;  // their listener's port (ParallelJobOptions)
  // Multi-worker jobs: mutual TLS between peers (ParallelJobOptions::tls).
  TlsFiles peer_tls = TlsFiles::Insecure();
  // The worker's Prometheus metrics (worker_metrics.h); null: none. Must outlive the runner.
  WorkerMetrics* metrics = nullptr;
  // Multi-worker jobs: told every peer stream this rank refused (ParallelJobOptions::on_refused),
  // on a gRPC thread, while the job's transport is up; must not block (the daemon logs it).
  std::function<void(const absl::Status&)> on_peer_refused;
  // Multi-worker jobs: told the data path set up with each peer (ParallelJobOptions::
  // on_data_path); the metrics are told too. On a gRPC thread; may be empty; must not block.
  std::function<void(const comm::DataPathEvent&)> on_data_path;
  // Test seam: called on the training thread after each step's metrics are reported and
  // before the cancel flag is checked.
  std::function<void(int64_t step)> after_step;
  // Test-only fault injection for multi-worker jobs (the --test_only_* flags); off by default.
  parallel::TestOnlyFaults test_only;
};

class JobRunner {
 public:
  struct Callbacks {
    // After every step, in order. `report`: this rank's steps are the job's (see the top).
    std::function<void(const StepMetrics&, bool report)> step;
    std::function<void(const std::string&)> event;  // "loaded dataset ...", "checkpoint ..."
    // Rank 0 only; may be empty. Where the job writes, once before its first step.
    std::function<void(const JobLocation&)> location;
    // Rank 0 only; may be empty. After every step it sealed (a complete checkpoint).
    std::function<void(const CheckpointSealed&)> checkpoint;
    // Rank 0: a checkpoint step every rank skipped (a full disk), after its event. May be empty.
    std::function<void(const CheckpointSkipped&)> checkpoint_skipped;
    // Rank 0 only; may be empty. The last step waits for disk space, or the wait ended.
    std::function<void(const CheckpointWait&)> checkpoint_wait;
  };

  JobRunner(JobAssignment assignment, kernels::Backend* backend, JobRunnerOptions options,
            Callbacks callbacks);

  // Trains the job to its end. The outcome: succeeded with the absolute output path and host;
  // or the error naming the file/field/step at fault, with its kind (see the top); or, after
  // Cancel(reason), "<reason> after step N" (FAILURE_STOPPED).
  JobOutcome Run();

  void Cancel(const std::string& reason);
  // Stops the job as Cancel does, but it ends as this rank's failure (FAILURE_LOCAL,
  // RESOURCE_EXHAUSTED, "<reason> during step N"): the worker's memory watch ("out of memory
  // budget: ...").
  void Fail(const std::string& reason);
  bool cancel_requested() const;
  // The coordinator wants a checkpoint of a step after `after_step` soon (its heartbeat's
  // checkpoint_requests): the ranks checkpoint the next step they all begin after hearing it
  // (TrainingCallbacks::checkpoint_requested). Any thread.
  void RequestCheckpoint(int64_t after_step) { checkpoint_after_.store(after_step); }
  int64_t last_step() const;  // last finished step; 0 before the first
  // Multi-worker jobs: this rank's timing of each step finished since the last call (at most
  // kMaxPendingTimings, the newest), oldest first; the daemon sends them in its next heartbeat
  // (HeartbeatRequest.timings: the coordinator's straggler scores). Empty for one worker.
  std::vector<RankTiming> TakeTimings();
  static constexpr int kMaxPendingTimings = 64;
  const std::string& job_id() const { return assignment_.job_id(); }

 private:
  void Stop(const std::string& reason, bool failure);
  absl::StatusOr<std::string> Train();  // returns the output path ("" on ranks other than 0)
  absl::Status TrainLocal(const TrainingCallbacks& callbacks);
  // A recovery's run when the job's last step is already sealed: reports where it resumed,
  // and rank 0 exports that step's weights to the job's model.safetensors. The output path.
  absl::StatusOr<std::string> FinishFromSeal(const model::CheckpointStep& sealed);
  absl::Status TrainParallel(int rank, const TrainingCallbacks& callbacks);
  // The events that open a job (rank 0): the dataset, and "training <model> on <on>: N steps of
  // B x T tokens<detail>".
  void AnnounceTraining(const std::string& on, const std::string& detail);
  absl::Status OnStep(const TrainStepMetrics& result);
  // The reporting rank: `step` appended to the job's event file.
  void WriteEvents(const StepMetrics& step);
  void OnCheckpoint(const CheckpointWritten& written);
  // Rank 0: the location report and the "resumed from" event, once the trainer has loaded.
  void OnStarted(int64_t start_step, const std::string& resumed_from);

  const JobAssignment assignment_;
  kernels::Backend* const backend_;
  const JobRunnerOptions options_;
  const Callbacks callbacks_;
  TrainingRun plan_;           // set by Train() before the first step
  std::string job_dir_;        // absolute; set by Train() first
  int rank_ = 0;               // this worker's rank of the job (0 for one worker)
  bool reports_steps_ = true;  // see Callbacks::step
  // The reporting rank's TensorBoard event file in job_dir_ (common/tfevents.h), opened at the
  // first step; a failure to write it is one event, not a failed job.
  std::optional<TfEventsWriter> events_file_;
  bool events_file_failed_ = false;
  // Set by TrainParallel on a failure owed to peers (training thread only).
  std::vector<std::string> suspect_workers_;

  mutable absl::Mutex mu_;
  bool cancel_ ABSL_GUARDED_BY(mu_) = false;
  // Set with cancel_: read by a one-worker step in progress between transformer blocks
  // (GptStage::set_stop_flag), so a cancel does not wait for the end of a long step.
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> checkpoint_after_{-1};  // RequestCheckpoint's; -1: none
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  bool cancel_is_failure_ ABSL_GUARDED_BY(mu_) = false;  // Fail, not Cancel
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_early_ ABSL_GUARDED_BY(mu_) = false;             // the last step ended the run early
  std::vector<RankTiming> timings_ ABSL_GUARDED_BY(mu_);        // see TakeTimings
  std::shared_ptr<ParallelJob> parallel_ ABSL_GUARDED_BY(mu_);  // several workers
};

// OK when a job planned for `job` can run on `worker` (plan/spec_enums.h DeviceFits); else
// FailedPrecondition naming both.
absl::Status CheckDevice(JobDevice job, const kernels::DeviceInfo& worker);

// OK when `assignment` carries its rank's plan (JobAssignment.rank_plan, assignment format 2);
// FailedPrecondition naming the format otherwise (a coordinator of an earlier release).
absl::Status CheckAssignmentFormat(const JobAssignment& assignment);

}  // namespace dtrain::worker

#endif  // DTRAIN_WORKER_DAEMON_JOB_RUNNER_H_
