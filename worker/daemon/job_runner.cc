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
#include "common/status_macros.h"
#include "worker/model/config_proto.h"
#include "worker/pipeline/schedule.h"

namespace dtrain::worker {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Tokens in a dataset LocalTrainer has already validated: an llm.c .bin holds uint16 tokens
// after a 1024-byte header; any other file is one token per byte.
int64_t DatasetTokens(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  if (absl::EndsWith(path, ".bin")) return (st.st_size - 1024) / 2;
  return st.st_size;
}

absl::Status RequireFile(const std::string& what, const std::string& path,
                         const std::string& worker_id) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return absl::Status(err == ENOENT ? absl::StatusCode::kNotFound
                                      : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat(what, " ", path, " cannot be read on worker ", worker_id,
                                     ": ", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is a directory, not a file (worker ", worker_id, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDevice(const std::string& spec_device, const kernels::DeviceInfo& worker) {
  const std::string kind = worker.kind == kernels::DeviceKind::kCuda ? "cuda" : "cpu";
  if (spec_device.empty() || spec_device == "auto") return absl::OkStatus();
  std::string want;
  if (spec_device == "cpu") {
    want = "cpu";
  } else if (spec_device == "cuda" || absl::StartsWith(spec_device, "cuda:")) {
    want = "cuda";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job asks for unknown device \"", spec_device, "\": expected cpu, cuda or auto"));
  }
  if (want == kind) return absl::OkStatus();
  const std::string device =
      absl::StartsWith(worker.name, kind) ? worker.name : absl::StrCat(kind, " (", worker.name, ")");
  return absl::FailedPreconditionError(absl::StrCat(
      "the job asks for device \"", spec_device, "\" but this worker runs on ", device,
      "; the worker's --device decides the hardware: submit the job with device \"auto\" or \"",
      kind, "\", or use a worker started with --device=", want == "cuda" ? "cuda:N" : "cpu"));
}

absl::StatusOr<LocalTrainingOptions> PlanFromSpec(const std::string& job_id, const JobSpec& spec,
                                          const std::string& data_root) {
  std::vector<std::string> errors;
  LocalTrainingOptions plan;
  absl::StatusOr<model::GptConfig> config = model::GptConfigFromProto(spec.model());
  if (config.ok()) {
    plan.model = *config;
  } else {
    errors.push_back(absl::StrCat("model: ", config.status().message()));
  }
  if (spec.dataset().empty()) errors.push_back("dataset is empty: the spec must name a file");
  if (spec.steps() <= 0) errors.push_back(absl::StrCat("steps=", spec.steps(), " must be > 0"));
  if (spec.batch_size() <= 0) {
    errors.push_back(absl::StrCat("batch_size=", spec.batch_size(), " must be > 0"));
  }
  plan.seq = spec.seq_len() == 0 ? spec.model().context() : spec.seq_len();
  if (config.ok() && (plan.seq <= 0 || plan.seq > plan.model.context)) {
    errors.push_back(absl::StrCat("seq_len=", spec.seq_len(), " must be in [1, model.context=",
                                  plan.model.context, "]"));
  }
  const OptimizerConfig& p = spec.optimizer();
  model::OptimizerConfig& o = plan.optimizer;
  o.lr = p.lr();
  o.warmup_steps = p.warmup_steps();
  if (p.has_max_lr()) o.max_lr = p.max_lr();
  if (p.has_min_lr_ratio()) o.min_lr_ratio = p.min_lr_ratio();
  if (p.has_weight_decay()) o.weight_decay = p.weight_decay();
  if (p.has_beta1()) o.beta1 = p.beta1();
  if (p.has_beta2()) o.beta2 = p.beta2();
  if (p.has_eps()) o.eps = p.eps();
  if (p.has_grad_clip()) o.grad_clip = p.grad_clip();
  if (absl::Status s = model::Validate(o); !s.ok()) {
    errors.push_back(absl::StrCat("optimizer: ", s.message()));
  }
  if (spec.checkpoint().interval_steps() < 0) {
    errors.push_back(absl::StrCat("checkpoint.interval_steps=", spec.checkpoint().interval_steps(),
                                  " must be >= 0"));
  }
  if (spec.checkpoint().dir().empty() &&
      (job_id.empty() || job_id == "." || job_id == ".." || absl::StrContains(job_id, '/'))) {
    errors.push_back(absl::StrCat("job id \"", job_id, "\" cannot name a directory"));
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));

  plan.data_path = spec.dataset();
  plan.init_path = spec.init_checkpoint();
  plan.resume_from = spec.resume_from();
  plan.seed = spec.seed() == 0 ? 1337 : spec.seed();
  plan.steps = spec.steps();
  plan.batch = spec.batch_size();
  if (!spec.checkpoint().dir().empty()) {
    plan.checkpoint_dir = spec.checkpoint().dir();
    plan.checkpoint_every = spec.checkpoint().interval_steps();
    plan.save_path = plan.checkpoint_dir + "/model.safetensors";
  } else {
    plan.save_path = absl::StrCat(data_root, "/jobs/", job_id, "/model.safetensors");
  }
  return plan;
}

absl::Status MakeDirs(const std::string& dir) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      return absl::ErrnoToStatus(err, absl::StrCat("cannot create directory ", prefix));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

JobRunner::JobRunner(JobAssignment assignment, kernels::Backend* backend,
                     JobRunnerOptions options, Callbacks callbacks)
    : assignment_(std::move(assignment)),
      backend_(backend),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {
  const ParallelLayout& layout = assignment_.spec().parallel();
  if (WorkersNeeded(layout) > 1) {
    absl::StatusOr<int> rank = FindRank(assignment_, options_.worker_id);
    rank_ = rank.ok() ? *rank : -1;  // Train() reports the error
    reports_steps_ = rank_ == ReportingRank(layout);
  }
}

void JobRunner::Cancel(const std::string& reason) {
  std::shared_ptr<ParallelJob> parallel;
  {
    absl::MutexLock lock(&mu_);
    if (cancel_) return;  // the first reason wins
    cancel_ = true;
    cancel_reason_ = reason;
    parallel = parallel_;
  }
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

JobOutcome JobRunner::Run() {
  absl::StatusOr<std::string> output = Train();
  if (options_.metrics != nullptr) options_.metrics->EndJob();
  JobOutcome outcome;
  if (output.ok()) {
    outcome.set_succeeded(true);
    outcome.set_output(*output);
    return outcome;
  }
  absl::MutexLock lock(&mu_);
  if (cancel_ && absl::IsCancelled(output.status())) {
    outcome.set_error(last_step_ == 0
                          ? absl::StrCat(cancel_reason_, " before the first step")
                          : absl::StrCat(cancel_reason_, " after step ", last_step_));
  } else {
    outcome.set_error(std::string(output.status().message()));
  }
  return outcome;
}

absl::StatusOr<std::string> JobRunner::Train() {
  const JobSpec& spec = assignment_.spec();
  const bool several = WorkersNeeded(spec.parallel()) > 1;
  if (several) {
    ASSIGN_OR_RETURN(rank_, FindRank(assignment_, options_.worker_id));
  }
  RETURN_IF_ERROR(CheckDevice(spec.device(), backend_->info()));
  ASSIGN_OR_RETURN(plan_, PlanFromSpec(job_id(), spec, options_.data_root));
  if (several && plan_.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job on ", WorkersNeeded(spec.parallel()),
        " workers needs checkpoint.dir in its spec: a directory every worker of the job can "
        "write (any local path when they share a machine, shared storage in a cluster); each "
        "rank writes its shard of the training state there and rank 0 exports the final "
        "weights from the shards to <checkpoint.dir>/model.safetensors"));
  }
  RETURN_IF_ERROR(RequireFile("dataset", plan_.data_path, options_.worker_id));
  if (!plan_.init_path.empty()) {
    RETURN_IF_ERROR(RequireFile("init_checkpoint", plan_.init_path, options_.worker_id));
  }
  if (!plan_.checkpoint_dir.empty()) RETURN_IF_ERROR(MakeDirs(plan_.checkpoint_dir));
  if (rank_ == 0) RETURN_IF_ERROR(MakeDirs(DirName(plan_.save_path)));
  if (cancel_requested()) return absl::CancelledError("cancelled before the first step");
  if (several) return TrainParallel(rank_);

  if (options_.metrics != nullptr) options_.metrics->StartJob({assignment_.job_id(), 0, 0, 0, 0});
  absl::StatusOr<std::unique_ptr<LocalTrainer>> run = LocalTrainer::Create(backend_, plan_);
  if (!run.ok()) return Annotate(run.status(), "cannot start training");
  callbacks_.event(absl::StrCat("loaded dataset ", plan_.data_path, " (",
                                DatasetTokens(plan_.data_path), " tokens)"));
  callbacks_.event(absl::StrFormat(
      "training %s (%d parameters) on %s: %d steps of %d x %d tokens", plan_.model.DebugString(),
      plan_.model.num_parameters(), backend_->info().name, plan_.steps, plan_.batch, plan_.seq));

  absl::Status status = (*run)->Run([this](const TrainStepMetrics& r) { return OnStep(r); });
  const int64_t last = last_step();
  const bool checkpointed = !plan_.checkpoint_dir.empty() && last > 0 &&
                            (last == plan_.steps ||
                             (plan_.checkpoint_every > 0 && last % plan_.checkpoint_every == 0));
  if (absl::IsCancelled(status) && cancel_requested()) {
    if (checkpointed) {
      callbacks_.event(absl::StrFormat("checkpoint written to %s/step_%08d at step %d",
                                       plan_.checkpoint_dir, last, last));
    }
    return status;
  }
  if (!status.ok()) return Annotate(status, absl::StrCat("training failed after step ", last));
  if (checkpointed) {
    callbacks_.event(absl::StrFormat("checkpoint written to %s/step_%08d at step %d",
                                     plan_.checkpoint_dir, last, last));
  }
  callbacks_.event(absl::StrCat("weights written to ", plan_.save_path));
  return plan_.save_path;
}

absl::StatusOr<std::string> JobRunner::TrainParallel(int rank) {
  const JobSpec& spec = assignment_.spec();
  ASSIGN_OR_RETURN(parallel::ParallelTrainingOptions options,
                   ParallelPlan(assignment_, rank, plan_, options_.comm_timeout));
  ParallelJobOptions job_options;
  job_options.listen_address = options_.peer_listen_address;
  job_options.connect_timeout = options_.connect_timeout;
  if (WorkerMetrics* metrics = options_.metrics; metrics != nullptr) {
    const RankAssignment& me = assignment_.placement().ranks(rank);
    metrics->StartJob({assignment_.job_id(), rank, me.dp_rank(), me.pp_rank(), me.tp_rank()});
    job_options.observer = metrics;
    options.on_collective = [metrics](const char* op, int64_t bytes, double seconds) {
      metrics->OnCollective(op, bytes, seconds);
    };
    options.on_checkpoint = [metrics](const CheckpointWritten& c) {
      metrics->OnCheckpoint(c.seconds);
    };
  }
  auto job = std::make_shared<ParallelJob>(assignment_, rank, job_options);
  {
    absl::MutexLock lock(&mu_);
    if (cancel_) return absl::CancelledError("cancelled before the first step");
    parallel_ = job;
  }
  std::vector<std::string> layers;
  for (const parallel::ChunkRange& c : options.chunks) {
    layers.push_back(absl::StrFormat("[%d, %d)", c.first_layer, c.first_layer + c.num_layers));
  }
  const absl::Time start = absl::Now();
  absl::Status status = job->Connect();
  if (status.ok()) {
    // The coordinator prefixes events with the worker and its (dp, pp, tp).
    callbacks_.event(absl::StrFormat(
        "rank %d of %d, layers %s: connected to %d peers in %.2fs", rank, job->size(),
        layers.empty() ? "(even split)" : absl::StrJoin(layers, " "), job->size() - 1,
        absl::ToDoubleSeconds(absl::Now() - start)));
    if (rank == 0) {
      callbacks_.event(absl::StrCat("loaded dataset ", plan_.data_path, " (",
                                    DatasetTokens(plan_.data_path), " tokens)"));
      callbacks_.event(absl::StrFormat(
          "training %s (%d parameters) on %d workers (dp=%d pp=%d tp=%d, schedule %s): %d steps "
          "of %d x %d tokens, micro-batches of %d",
          plan_.model.DebugString(), plan_.model.num_parameters(), job->size(), options.dp,
          options.pp, options.tp, pipeline::ScheduleName(options.schedule), plan_.steps,
          plan_.batch, plan_.seq,
          spec.micro_batch_size() > 0 ? spec.micro_batch_size() : plan_.batch / options.dp));
    }
    status = job->Train(backend_, std::move(options),
                        [this](const TrainStepMetrics& r) { return OnStep(r); });
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
    // The transport stays up until this runner is destroyed, after the failure is reported
    // (parallel_job.h): peers waiting on this rank learn of the failure from the coordinator.
    if (last == 0) return status;
    return Annotate(status, absl::StrCat("training failed after step ", last));
  }
  job->Close(absl::Seconds(5));
  if (rank != 0) return std::string();
  if (!plan_.checkpoint_dir.empty() && last > 0) {
    callbacks_.event(absl::StrFormat("checkpoint written to %s/step_%08d at step %d",
                                     plan_.checkpoint_dir, last, last));
  }
  callbacks_.event(absl::StrCat("weights written to ", plan_.save_path));
  return plan_.save_path;
}

absl::Status JobRunner::OnStep(const TrainStepMetrics& r) {
  // LocalTrainer writes a step's checkpoint after this callback returns, so the checkpoint of
  // the previous step is announced now.
  const int64_t prev = r.step - 1;
  if (rank_ == 0 && !plan_.checkpoint_dir.empty() && prev > 0 && plan_.checkpoint_every > 0 &&
      prev % plan_.checkpoint_every == 0) {
    callbacks_.event(absl::StrFormat("checkpoint written to %s/step_%08d at step %d",
                                     plan_.checkpoint_dir, prev, prev));
  }
  {
    absl::MutexLock lock(&mu_);
    last_step_ = r.step;
  }
  if (options_.metrics != nullptr) options_.metrics->OnStep(r);
  StepMetrics m;
  m.set_step(r.step);
  m.set_loss(r.loss);
  m.set_grad_norm(r.grad_norm);
  m.set_learning_rate(r.lr);
  m.set_tokens_per_s(r.tokens_per_s);
  m.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  callbacks_.step(m, reports_steps_);
  if (options_.after_step) options_.after_step(r.step);
  absl::MutexLock lock(&mu_);
  if (cancel_) return absl::CancelledError(cancel_reason_);
  return absl::OkStatus();
}

}  // namespace dtrain::worker
