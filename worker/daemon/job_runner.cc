#include "worker/daemon/job_runner.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/job_paths.h"
#include "common/path_policy.h"
#include "common/status_macros.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"
#include "plan/spec_paths.h"
#include "worker/model/checkpoint_dir.h"
#include "worker/parallel/checkpoint_export.h"
#include "worker/parallel/checkpoint_writer.h"
#include "worker/run_of_plan.h"

namespace dtrain::worker {
namespace {

// Tokens in a dataset LocalTrainer has already validated: an llm.c .bin holds uint16 tokens
// after a 1024-byte header; any other file is one token per byte.
int64_t DatasetTokens(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  if (absl::EndsWith(path, ".bin")) return (st.st_size - 1024) / 2;
  return st.st_size;
}

enum class Want { kFile, kAny };

// OK when the spec's `path` (field `what`) exists on this worker (and is a file for kFile).
absl::Status RequirePath(const std::string& what, const std::string& path, Want want,
                         const std::string& worker_id) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return absl::Status(
        err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kFailedPrecondition,
        absl::StrCat(what, " ", DescribeSpecPath(path), " cannot be read on worker ", worker_id,
                     ": ", std::strerror(err)));
  }
  if (want == Want::kFile && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", DescribeSpecPath(path), " is a directory, not a file (worker ", worker_id, ")"));
  }
  return absl::OkStatus();
}

// Every path of the spec and the job's own directory inside this worker's roots, after symlinks
// (common/path_policy.h): checked before anything of the job is read or written.
absl::Status CheckAllowedPaths(const JobSpec& spec, const std::string& job_dir,
                               const JobRunnerOptions& options) {
  std::vector<std::string> roots = options.allowed_roots;
  if (roots.empty()) {
    absl::StatusOr<std::vector<std::string>> data_root = ResolveRoots({options.data_root});
    roots = data_root.ok() ? *data_root : std::vector<std::string>{AbsolutePath(options.data_root)};
  }
  for (const plan::SpecPath& p : plan::SpecPaths(spec)) {
    RETURN_IF_ERROR(Annotate(CheckPathResolved(p.field, p.path, roots),
                             absl::StrCat("worker ", options.worker_id)));
  }
  return Annotate(CheckPathResolved("job directory", job_dir, roots),
                  absl::StrCat("worker ", options.worker_id));
}

}  // namespace

absl::Status CheckDevice(JobDevice job, const kernels::DeviceInfo& worker) {
  const JobDevice kind = worker.kind == kernels::DeviceKind::kCuda ? DEVICE_CUDA : DEVICE_CPU;
  if (plan::DeviceFits(job, kind)) return absl::OkStatus();
  const std::string name = plan::DeviceText(kind);
  const std::string device = absl::StartsWith(worker.name, name)
                                 ? worker.name
                                 : absl::StrCat(name, " (", worker.name, ")");
  return absl::FailedPreconditionError(absl::StrCat(
      "the job asks for device \"", plan::DeviceText(job), "\" but this worker runs on ", device,
      "; the worker's --device decides the hardware: submit the job with device \"auto\" or \"",
      name, "\", or use a worker started with --device=", job == DEVICE_CUDA ? "cuda:N" : "cpu"));
}

absl::Status CheckAssignmentFormat(const JobAssignment& assignment) {
  if (assignment.has_rank_plan()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the assignment of job ", assignment.job_id(),
      " has no rank_plan: it comes from a coordinator of assignment format 1; this worker takes "
      "assignment format 2 only (the coordinator's plan of each rank): deploy the coordinator "
      "and workers of one release together"));
}

JobRunner::JobRunner(JobAssignment assignment, kernels::Backend* backend, JobRunnerOptions options,
                     Callbacks callbacks)
    : assignment_(std::move(assignment)),
      backend_(backend),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {
  const ParallelLayout& layout = assignment_.spec().parallel();
  if (plan::WorkersNeeded(layout) > 1) {
    absl::StatusOr<int> rank = FindRank(assignment_, options_.worker_id);
    rank_ = rank.ok() ? *rank : -1;  // Train() reports the error
    reports_steps_ = rank_ == plan::ReportingRank(layout);
  }
}

void JobRunner::Cancel(const std::string& reason) { Stop(reason, /*failure=*/false); }

void JobRunner::Fail(const std::string& reason) { Stop(reason, /*failure=*/true); }

void JobRunner::Stop(const std::string& reason, bool failure) {
  std::shared_ptr<ParallelJob> parallel;
  {
    absl::MutexLock lock(&mu_);
    if (cancel_) return;  // the first reason wins
    cancel_ = true;
    cancel_reason_ = reason;
    cancel_is_failure_ = failure;
    parallel = parallel_;
  }
  stop_.store(true);
  // The other ranks get the same cancel from the coordinator, each at its own time: waiting
  // for a step boundary would leave them waiting on this rank until their deadline.
  if (parallel != nullptr) parallel->Abort();
}

bool JobRunner::cancel_requested() const {
  absl::MutexLock lock(&mu_);
  return cancel_;
}

int64_t JobRunner::last_step() const {
  absl::MutexLock lock(&mu_);
  return last_step_;
}

std::vector<RankTiming> JobRunner::TakeTimings() {
  absl::MutexLock lock(&mu_);
  return std::exchange(timings_, {});
}

JobOutcome JobRunner::Run() {
  absl::StatusOr<std::string> output = Train();
  if (options_.metrics != nullptr) options_.metrics->EndJob();
  JobOutcome outcome;
  if (output.ok()) {
    outcome.set_succeeded(true);
    outcome.set_output(*output);
    absl::MutexLock lock(&mu_);
    outcome.set_end_reason(stopped_early_ ? END_EARLY_STOPPED : END_STEPS_DONE);
    if (!output->empty()) outcome.set_output_host(options_.host_label);
    return outcome;
  }
  absl::MutexLock lock(&mu_);
  if (cancel_ && cancel_is_failure_) {
    outcome.set_kind(FAILURE_LOCAL);
    outcome.set_error_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
    outcome.set_error(absl::StrCat(cancel_reason_, " during step ", last_step_ + 1));
    return outcome;
  }
  if (cancel_ && absl::IsCancelled(output.status())) {
    outcome.set_kind(FAILURE_STOPPED);
    outcome.set_error(last_step_ == 0 ? absl::StrCat(cancel_reason_, " before the first step")
                                      : absl::StrCat(cancel_reason_, " after step ", last_step_));
    if (absl::StartsWith(output.status().message(), "stopped in the ")) {  // GptStage's stop
      absl::StrAppend(outcome.mutable_error(), "; step ", last_step_ + 1, " ",
                      output.status().message());
    }
    return outcome;
  }
  outcome.set_error(std::string(output.status().message()));
  outcome.set_error_code(static_cast<int>(output.status().code()));
  outcome.set_kind(suspect_workers_.empty() ? FAILURE_LOCAL : FAILURE_PEER);
  for (const std::string& w : suspect_workers_) outcome.add_suspect_workers(w);
  return outcome;
}

absl::StatusOr<std::string> JobRunner::Train() {
  const JobSpec& spec = assignment_.spec();
  const bool several = plan::WorkersNeeded(spec.parallel()) > 1;
  if (several) {
    ASSIGN_OR_RETURN(rank_, FindRank(assignment_, options_.worker_id));
  }
  RETURN_IF_ERROR(CheckAssignmentFormat(assignment_));
  RETURN_IF_ERROR(CheckDevice(assignment_.rank_plan().device(), backend_->info()));
  // The job's GEMM precision, on this worker's backend for the job's run (the CPU refuses tf32
  // and bf16, naming them; the coordinator plans such jobs for CUDA workers only).
  RETURN_IF_ERROR(Annotate(
      backend_->SetMatmulPrecision(MatmulPrecisionOf(assignment_.rank_plan().matmul_precision())),
      absl::StrCat("worker ", options_.worker_id)));
  ASSIGN_OR_RETURN(job_dir_, JobDir(job_id(), spec, options_.data_root));
  RETURN_IF_ERROR(CheckAllowedPaths(spec, job_dir_, options_));
  // The spec as the coordinator planned it (every default set; rank_plan: this rank's part).
  ASSIGN_OR_RETURN(plan_, TrainingRunOf(spec, job_dir_));
  plan_.attempt = assignment_.attempt();
  if (assignment_.attempt() > 0) {
    // A recovery's run: from the job's own newest intact sealed step when there is one (every
    // rank resolves the same directory, after the previous run's ranks stopped; a missing or
    // damaged `latest` is no reason to start afresh), else as the first run started.
    if (model::HasSealedStep(job_dir_)) {
      plan_.resume_from = job_dir_;
      plan_.init_path.clear();
    }
  }
  RETURN_IF_ERROR(RequirePath("dataset", spec.dataset(), Want::kFile, options_.worker_id));
  if (!spec.init_checkpoint().empty()) {
    RETURN_IF_ERROR(
        RequirePath("init_checkpoint", spec.init_checkpoint(), Want::kFile, options_.worker_id));
  }
  if (!spec.resume_from().empty()) {
    RETURN_IF_ERROR(RequirePath("resume_from", spec.resume_from(), Want::kAny, options_.worker_id));
  }
  // Before any peer is connected or anything trained: the other ranks write only after they
  // connected to this one.
  if (rank_ == 0) RETURN_IF_ERROR(ClaimJobDirectory(job_dir_, job_id(), assignment_.job_uid()));
  if (cancel_requested()) return absl::CancelledError("cancelled before the first step");
  if (assignment_.attempt() > 0 && plan_.resume_from == job_dir_) {
    // Done is done: a recovery of a job whose last step is sealed (the previous run died after
    // sealing it) trains nothing; it finishes the job as its end would have.
    absl::StatusOr<model::CheckpointStep> sealed =
        model::ResolveCheckpoint(job_dir_, parallel::VerifySealedStep);
    if (sealed.ok() && sealed->step >= plan_.steps) return FinishFromSeal(*sealed);
  }
  // Both trainers report through the same callbacks.
  TrainingCallbacks callbacks;
  callbacks.step = [this](const TrainStepMetrics& m) { return OnStep(m); };
  callbacks.checkpoint = [this](const CheckpointWritten& c) { OnCheckpoint(c); };
  callbacks.checkpoint_requested = [this] { return checkpoint_after_.load(); };
  callbacks.warning = [this](const std::string& w) {
    if (rank_ == 0) callbacks_.event(absl::StrCat("warning: ", w));
  };
  callbacks.note = [this](const std::string& n) {
    if (rank_ == 0) callbacks_.event(n);
  };
  callbacks.space_wait = [this](const parallel::SpaceWait& w) {
    if (rank_ != 0 || !callbacks_.checkpoint_wait) return;
    CheckpointWait wait;
    wait.set_step(plan_.steps);
    wait.set_weights_file(w.weights_file);
    wait.set_dir(w.dir);
    wait.set_why(w.why);
    wait.set_until_unix_ms(absl::ToUnixMillis(w.until));
    wait.set_ended(w.ended);
    callbacks_.checkpoint_wait(wait);
  };
  RETURN_IF_ERROR(several ? TrainParallel(rank_, callbacks) : TrainLocal(callbacks));
  if (rank_ != 0) return std::string();  // rank 0 exports the final weights
  callbacks_.event(absl::StrCat("weights written to ", plan_.save_path));
  return plan_.save_path;
}

absl::StatusOr<std::string> JobRunner::FinishFromSeal(const model::CheckpointStep& sealed) {
  {
    absl::MutexLock lock(&mu_);
    last_step_ = sealed.step;
  }
  OnStarted(sealed.step, sealed.step_dir);
  if (rank_ != 0) return std::string();  // rank 0 exports the final weights
  callbacks_.event(absl::StrCat("step ", sealed.step,
                                ", the job's last, is sealed: nothing to train; exporting its "
                                "weights"));
  absl::StatusOr<model::CheckpointStep> exported =
      parallel::ExportSafetensors(sealed.step_dir, plan_.save_path);
  if (!exported.ok()) {
    return Annotate(exported.status(), "cannot export the weights of the sealed last step");
  }
  callbacks_.event(
      absl::StrCat("weights written to ", plan_.save_path, " (step ", exported->step, ")"));
  return plan_.save_path;
}

absl::Status JobRunner::TrainLocal(const TrainingCallbacks& callbacks) {
  if (options_.metrics != nullptr) options_.metrics->StartJob({assignment_.job_id(), 0, 0, 0, 0});
  absl::StatusOr<std::unique_ptr<LocalTrainer>> run = LocalTrainer::Create(backend_, plan_);
  if (!run.ok()) return Annotate(run.status(), "cannot start training");
  (*run)->set_stop_flag(&stop_);
  OnStarted((*run)->start_step(), (*run)->resumed_from());
  AnnounceTraining(backend_->info().name, "");
  absl::Status status = (*run)->Run(callbacks);
  if (absl::IsCancelled(status) && cancel_requested()) return status;
  if (!status.ok()) {
    return Annotate(status, absl::StrCat("training failed after step ", last_step()));
  }
  return absl::OkStatus();
}

absl::Status JobRunner::TrainParallel(int rank, const TrainingCallbacks& callbacks) {
  ASSIGN_OR_RETURN(parallel::ParallelTrainingOptions options,
                   ParallelPlan(assignment_, rank, plan_, options_.comm_timeout));
  options.test_only = options_.test_only;
  options.stop = &stop_;
  ParallelJobOptions job_options;
  job_options.listen_address = options_.peer_listen_address;
  job_options.connect_timeout = options_.connect_timeout;
  job_options.shared_memory = options_.shared_memory;
  job_options.data_connections = options_.data_connections;
  job_options.data_port = options_.data_port;
  job_options.on_refused = options_.on_peer_refused;
  job_options.on_data_path = [log = options_.on_data_path,
                              metrics = options_.metrics](const comm::DataPathEvent& e) {
    if (metrics != nullptr) metrics->OnDataPath(e.peer, e.incoming, comm::DataPathName(e.path));
    if (log) log(e);
  };
  job_options.tls = options_.peer_tls;
  if (WorkerMetrics* metrics = options_.metrics; metrics != nullptr) {
    const RankAssignment me = RankCoordinates(options.plan.layout(), rank);
    metrics->StartJob({assignment_.job_id(), rank, me.dp_rank(), me.pp_rank(), me.tp_rank()});
    job_options.observer = metrics;
    options.on_collective = [metrics](const char* op, int64_t bytes, double seconds) {
      metrics->OnCollective(op, bytes, seconds);
    };
  }
  auto job = std::make_shared<ParallelJob>(assignment_, rank, job_options);
  {
    absl::MutexLock lock(&mu_);
    if (cancel_) return absl::CancelledError("cancelled before the first step");
    parallel_ = job;
  }
  std::vector<std::string> layers;
  for (const LayerRange& c : options.plan.chunks()) {
    layers.push_back(
        absl::StrFormat("[%d, %d)", c.first_layer(), c.first_layer() + c.num_layers()));
  }
  const absl::Time start = absl::Now();
  absl::Status status = job->Connect();
  if (status.ok()) {
    // The coordinator prefixes events with the worker and its (dp, pp, tp).
    callbacks_.event(absl::StrFormat(
        "rank %d of %d, layers %s: connected to %d %s in %.2fs", rank, job->size(),
        layers.empty() ? "(even split)" : absl::StrJoin(layers, " "), job->peers().size(),
        job->peers().size() == 1 ? "peer" : "peers", absl::ToDoubleSeconds(absl::Now() - start)));
    if (rank == 0) {
      const ParallelLayout& layout = options.plan.layout();
      AnnounceTraining(
          absl::StrFormat("%d workers (dp=%d pp=%d tp=%d, schedule %s)", job->size(), layout.dp(),
                          layout.pp(), layout.tp(), plan::ScheduleText(options.plan.schedule())),
          absl::StrCat(", micro-batches of ", options.plan.micro_batch_size()));
    }
    status = job->Train(
        backend_, std::move(options),
        [this](int64_t start_step, const std::string& from) { OnStarted(start_step, from); },
        callbacks);
  } else if (!cancel_requested()) {
    status = Annotate(status, "cannot connect to the job's peers");
  }
  const int64_t last = last_step();
  if (cancel_requested()) {
    // Whatever the trainer saw (a peer gone, the transport shut down): the job was stopped.
    job->Close(absl::ZeroDuration());
    return absl::CancelledError(status.ok() ? "cancelled" : status.message());
  }
  if (!status.ok()) {
    // Blamed while the transport still knows which peers failed. The transport stays up until
    // this runner is destroyed, after the failure is reported (parallel_job.h): peers waiting
    // on this rank learn of the failure from the coordinator.
    for (int peer : job->SuspectPeers(status)) {
      suspect_workers_.push_back(job->WorkerOf(peer));
    }
    if (last == 0) return status;
    return Annotate(status, absl::StrCat("training failed after step ", last));
  }
  job->Close(absl::Seconds(5));
  return absl::OkStatus();
}

void JobRunner::AnnounceTraining(const std::string& on, const std::string& detail) {
  callbacks_.event(absl::StrCat("loaded dataset ", plan_.data_path, " (",
                                DatasetTokens(plan_.data_path), " tokens)"));
  callbacks_.event(absl::StrFormat(
      "training %s (%d parameters) on %s%s: %d steps of %d x %d tokens%s",
      plan_.model.DebugString(), plan_.model.num_parameters(), on,
      backend_->matmul_precision() == kernels::MatmulPrecision::kFp32
          ? ""
          : absl::StrCat(", matmul ", kernels::MatmulPrecisionName(backend_->matmul_precision())),
      plan_.steps, plan_.batch, plan_.seq, detail));
}

void JobRunner::OnStarted(int64_t start_step, const std::string& resumed_from) {
  if (rank_ != 0) return;
  JobLocation location;
  location.set_dir(job_dir_);
  location.set_host(options_.host_label);
  location.set_resumed_from_step(start_step);
  location.set_resumed_from(resumed_from);
  if (callbacks_.location) callbacks_.location(location);
  if (start_step > 0) {
    callbacks_.event(absl::StrCat("resumed from ", resumed_from, " at step ", start_step));
  }
}

void JobRunner::OnCheckpoint(const CheckpointWritten& c) {
  if (options_.metrics != nullptr) options_.metrics->OnCheckpoint(c.seconds);
  if (c.skipped) {
    // Several ranks skip a step together: rank 0's reason names every rank that could not
    // hold its part (parallel/checkpoint_writer.h).
    if (rank_ != 0) return;
    if (options_.metrics != nullptr) options_.metrics->OnCheckpointSkipped();
    callbacks_.event(absl::StrCat("checkpoint at step ", c.step, " skipped: ", c.skip_reason,
                                  "; training goes on"));
    if (callbacks_.checkpoint_skipped) {
      CheckpointSkipped skipped;
      skipped.set_step(c.step);
      skipped.set_reason(c.skip_reason);
      callbacks_.checkpoint_skipped(skipped);
    }
    return;
  }
  if (!c.sealed) return;
  callbacks_.event(absl::StrCat("checkpoint sealed at step ", c.step, ": ", c.dir));
  if (callbacks_.checkpoint) {
    CheckpointSealed sealed;
    sealed.set_step(c.step);
    sealed.set_path(c.dir);
    sealed.set_dir_bytes(DirectoryBytes(job_dir_));  // after the seal's retention
    for (int64_t step : model::SealedStepsIn(job_dir_)) sealed.add_kept_steps(step);
    callbacks_.checkpoint(sealed);
  }
}

void JobRunner::WriteEvents(const StepMetrics& step) {
  if (events_file_failed_) return;
  absl::Status written;
  if (!events_file_.has_value()) {
    absl::StatusOr<TfEventsWriter> created = TfEventsWriter::Create(job_dir_);
    if (created.ok()) events_file_.emplace(*std::move(created));
    written = created.status();
  }
  if (written.ok()) written = events_file_->Append(step);
  if (!written.ok()) {
    events_file_failed_ = true;
    callbacks_.event(
        absl::StrCat("warning: no TensorBoard events from here on: ", written.message()));
  }
}

absl::Status JobRunner::OnStep(const TrainStepMetrics& r) {
  {
    absl::MutexLock lock(&mu_);
    last_step_ = r.step;
    stopped_early_ = r.stopped_early;
    if (parallel_ != nullptr) {
      if (timings_.size() >= kMaxPendingTimings) timings_.erase(timings_.begin());
      RankTiming& t = timings_.emplace_back();
      t.set_step(r.step);
      t.set_compute_s(r.compute_seconds);
      t.set_comm_wait_s(r.communication_seconds);
      t.set_bubble_s(r.bubble_seconds);
    }
  }
  if (options_.metrics != nullptr) options_.metrics->OnStep(r);
  StepMetrics m;
  m.set_step(r.step);
  m.set_loss(r.loss);
  m.set_grad_norm(r.grad_norm);
  m.set_learning_rate(r.lr);
  m.set_tokens_per_s(r.tokens_per_s);
  if (r.val_loss.has_value()) m.set_val_loss(*r.val_loss);
  m.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  callbacks_.step(m, reports_steps_);
  if (reports_steps_) WriteEvents(m);
  if (options_.after_step) options_.after_step(r.step);
  absl::MutexLock lock(&mu_);
  if (cancel_) return absl::CancelledError(cancel_reason_);
  return absl::OkStatus();
}

}  // namespace dtrain::worker
