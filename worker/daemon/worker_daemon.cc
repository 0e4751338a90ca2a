#include "worker/daemon/worker_daemon.h"

#include <malloc.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/host_memory.h"
#include "common/job_paths.h"
#include "common/run_record.h"
#include "plan/format_bytes.h"
#include "worker/daemon/job_dir_removal.h"

namespace dtrain::worker {
namespace {

DeviceInfo DeviceToProto(const kernels::DeviceInfo& d) {
  DeviceInfo p;
  p.set_kind(d.kind == kernels::DeviceKind::kCuda ? "cuda" : "cpu");
  p.set_name(d.name);
  p.set_memory_bytes(d.memory_bytes);
  p.set_ordinal(d.ordinal);
  return p;
}

}  // namespace

void LogLine(const std::string& worker_id, const std::string& message) {
  absl::FPrintF(stderr, "%s dtrain-worker[%s]: %s\n",
                absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone()),
                worker_id, message);
}

std::string NewSessionId() {
  std::random_device rd;
  const uint64_t id = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrFormat("%016x", id);
}

namespace {

// options.sample_setup, refusing a sample that would take the worker past its memory budget
// (the memory watch would fail its job for it).
SampleSetup SampleSetupOf(const WorkerOptions& options) {
  SampleSetup setup = options.sample_setup;
  if (options.memory_bytes <= 0 || options.resident_bytes == nullptr) return setup;
  setup.admit = [budget = options.memory_bytes,
                 resident = options.resident_bytes](const model::GptConfig& config) {
    const int64_t need = SampleMemoryBytes(config);
    absl::StatusOr<int64_t> in_use = resident();
    if (!in_use.ok() || *in_use + need <= budget) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat("drawing it takes about ", plan::FormatBytes(need), " beside the ",
                     plan::FormatBytes(*in_use), " this worker holds, past its memory budget of ",
                     plan::FormatBytes(budget),
                     ": ask again when it is idle, or sample the files where they are"));
  };
  return setup;
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerOptions options, CoordinatorClient* client,
                           kernels::Backend* backend)
    : options_(std::move(options)),
      client_(client),
      backend_(backend),
      session_id_(options_.session_id.empty() ? NewSessionId() : options_.session_id),
      reports_({options_.max_buffered_reports},
               [id = options_.worker_id](const std::string& line) { LogLine(id, line); }),
      removals_(
          [](const JobDirRemoval& r) { return r.job_id(); },
          [this](const JobDirRemoval& r, const std::function<bool()>&) { return RemoveDir(r); },
          [this] { HeartbeatSoon(); }),
      samples_(options_.allowed_roots, SampleSetupOf(options_), [this] { HeartbeatSoon(); }) {
  absl::MutexLock lock(&mu_);
  previous_run_ = options_.previous_run;
}

WorkerDaemon::~WorkerDaemon() {
  Stop("worker daemon shut down");
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    if (job_ != nullptr) thread = std::move(job_->thread);
  }
  if (thread.joinable()) thread.join();
  // (removals_ and samples_ wait for their work in progress as they go.)
}

void WorkerDaemon::Stop(const std::string& reason) {
  bool leave;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    removals_.Stop();
    samples_.Stop();
    stop_reason_ = reason;
    drain_deadline_ = absl::Now() + options_.shutdown_grace;
    wake_ = true;
    leave = epoch_ > 0;  // a daemon that never registered has nothing to leave
    if (job_ != nullptr && !job_->finished) {
      WarnLocked(job_->id, absl::StrCat("stopping: ", reason, "; stopping job ", job_->id,
                                        " (last finished step ", job_->runner->last_step(), ")"));
    } else {
      LogLine(options_.worker_id, absl::StrCat("stopping: ", reason));
    }
  }
  // First the coordinator hears why from this worker, then the job stops (aborting its
  // transport): its peers' stream errors come after the cause.
  if (leave) Deregister();
  absl::MutexLock lock(&mu_);
  if (job_ != nullptr && !job_->finished) job_->runner->Cancel(reason);
  wake_ = true;
}

void WorkerDaemon::Deregister() {
  DeregisterWorkerRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_session_id(session_id_);
  {
    absl::MutexLock lock(&mu_);
    leaving_ = true;
    request.set_reason(stop_reason_);
    if (job_ != nullptr && !job_->finished) {
      request.set_running_job_id(job_->id);
      request.set_running_step(job_->runner->last_step());
    }
  }
  absl::StatusOr<DeregisterWorkerResponse> response =
      client_->DeregisterWorker(request, options_.deregister_timeout);
  absl::MutexLock lock(&mu_);
  if (response.ok()) {
    deregistered_ = true;
    LogLine(options_.worker_id, absl::StrCat("deregistered from coordinator ", client_->target(),
                                             " (", stop_reason_, ")"));
  } else {
    // The outcome still carries the reason: registering again (if need be) delivers it.
    leaving_ = false;
    LogLine(options_.worker_id,
            absl::StrCat("cannot deregister: ", response.status().message(),
                         "; the running job's outcome will say why it stopped"));
  }
}

bool WorkerDaemon::CanExitLocked() const {
  if (!stopping_ || (job_ != nullptr && !job_->finished)) return false;
  return reports_.empty() || absl::Now() >= drain_deadline_;
}

void WorkerDaemon::WaitFor(absl::Duration d, bool wake_on_reports) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, wake_on_reports]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (wake_on_reports && wake_) || CanExitLocked();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), std::max(d, absl::ZeroDuration()));
  if (wake_on_reports) wake_ = false;
}

absl::Status WorkerDaemon::Run() {
  LogLine(options_.worker_id, absl::StrCat("starting: coordinator ", client_->target(), ", device ",
                                           backend_->info().name, ", session ", session_id_,
                                           ", data root ", options_.data_root));
  Backoff backoff(absl::Milliseconds(100), options_.max_backoff);
  absl::Time next_heartbeat = absl::InfinitePast();
  // Registration errors are logged when their code changes and every 30th attempt, not per
  // attempt (gRPC's message text varies from one connection attempt to the next).
  absl::StatusCode last_code = absl::StatusCode::kOk;
  int failures = 0;
  absl::Time id_conflict_since = absl::InfiniteFuture();
  std::thread memory_watch;
  if (options_.resident_bytes != nullptr && options_.memory_bytes > 0) {
    memory_watch = std::thread([this] { WatchMemory(); });
  }
  // Every return (a stop, or a first registration refused) ends the watch.
  struct EndWatchOnReturn {
    WorkerDaemon* d;
    std::thread* t;
    ~EndWatchOnReturn() {
      {
        absl::MutexLock lock(&d->mu_);
        d->run_returned_ = true;
      }
      if (t->joinable()) t->join();
    }
  } end_memory_watch{this, &memory_watch};
  while (true) {
    // A job left (its transport and peer service gone): say so at once, the coordinator holds
    // this worker busy until a heartbeat no longer names the job.
    if (ReapJob()) next_heartbeat = absl::Now();
    bool registered, leaving;
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      if (CanExitLocked()) break;
      registered = registered_;
      leaving = leaving_;
      interval = heartbeat_interval_;
      if (heartbeat_now_) next_heartbeat = absl::Now();
      heartbeat_now_ = false;
    }
    if (leaving) {
      // Deregistered (or deregistering): no registration or heartbeat any more, only the
      // job's last reports.
      const absl::Time until = absl::Now() + interval;
      SendReports(until);
      WaitFor(until - absl::Now(), /*wake_on_reports=*/true);
      continue;
    }
    if (!registered) {
      absl::Status s = Register();
      if (!s.ok()) {
        {
          absl::MutexLock lock(&mu_);
          const bool first = epoch_ == 0 && job_ == nullptr;
          // Bad flags, or a certificate whose role may not register (roles.h): no retry cures
          // either.
          if ((absl::IsInvalidArgument(s) || absl::IsPermissionDenied(s)) && first) return s;
          if (absl::IsAlreadyExists(s) && first) {
            // Another process with this --worker_id, or the session of a previous process of
            // this worker that died and whose lease has not run out yet.
            const absl::Time now = absl::Now();
            if (id_conflict_since == absl::InfiniteFuture()) {
              id_conflict_since = now;
              LogLine(options_.worker_id,
                      absl::StrCat("cannot register: ", s.message(), "; retrying for up to ",
                                   absl::FormatDuration(options_.id_conflict_wait),
                                   " in case it is a previous process of this worker that died"));
              last_code = s.code();
            }
            if (now - id_conflict_since >= options_.id_conflict_wait) {
              return absl::AlreadyExistsError(
                  absl::StrCat(s.message(), " The id was still held after ",
                               absl::FormatDuration(options_.id_conflict_wait),
                               ": every worker process needs its own --worker_id."));
            }
          }
        }
        if (options_.explain_refusal != nullptr &&
            (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s))) {
          bool idle;
          {
            absl::MutexLock lock(&mu_);
            idle = job_ == nullptr;
          }
          // A handshake the coordinator refuses looks like an unreachable one to gRPC; no retry
          // cures an expired certificate or another CA (until the files are replaced, and a
          // supervisor restarts the worker then).
          if (idle) {
            const std::string why = options_.explain_refusal();
            if (!why.empty()) return absl::FailedPreconditionError(why);
          }
        }
        if (s.code() != last_code || ++failures % 30 == 0) {
          LogLine(options_.worker_id,
                  absl::StrCat("cannot register: ", s.message(), "; retrying (backoff up to ",
                               absl::FormatDuration(options_.max_backoff), ")"));
          last_code = s.code();
        }
        WaitFor(backoff.Next(), /*wake_on_reports=*/false);
        continue;
      }
      backoff.Reset();
      last_code = absl::StatusCode::kOk;
      failures = 0;
      next_heartbeat = absl::Now();  // heartbeat at once: it may carry work
      continue;                      // unless a Stop meanwhile made it leave
    }
    if (absl::Now() >= next_heartbeat) {
      bool started_job = false;
      absl::Status s = Heartbeat(&started_job);
      {
        absl::MutexLock lock(&mu_);
        interval = heartbeat_interval_;
        if (!s.ok() && !leaving_) registered_ = false;
        registered = registered_;
      }
      next_heartbeat = absl::Now() + interval;
      if (!s.ok()) {
        LogLine(options_.worker_id, absl::StrCat(s.message(), "; registering again"));
        WaitFor(backoff.Next(), /*wake_on_reports=*/false);
        continue;
      }
      if (!registered) continue;  // register_again
      if (started_job) {
        // Acknowledge the assignment (running_job_id) before sending any report of the job.
        next_heartbeat = absl::Now();
        continue;
      }
    }
    SendReports(next_heartbeat);
    WaitFor(next_heartbeat - absl::Now(), /*wake_on_reports=*/true);
  }
  // Stopping, and the job (if any) has finished.
  ReapJob();
  absl::MutexLock lock(&mu_);
  if (!reports_.empty()) {
    LogLine(options_.worker_id, absl::StrCat("exiting with ", reports_.size(),
                                             " undelivered reports (coordinator unreachable)"));
  }
  LogLine(options_.worker_id, "stopped");
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Register() {
  RegisterWorkerRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_session_id(session_id_);
  request.set_previous_session_id(options_.previous_session_id);
  request.set_address(options_.advertise_address);
  request.set_host_label(options_.host_label);
  for (const std::string& root :
       options_.declared_roots.empty() ? options_.allowed_roots : options_.declared_roots) {
    request.add_allowed_roots(root);
  }
  *request.mutable_device() = DeviceToProto(backend_->info());
  if (options_.memory_bytes > 0) request.mutable_device()->set_memory_bytes(options_.memory_bytes);
  request.set_host_id(options_.host_id);
  request.set_host_memory_bytes(options_.host_memory_bytes);
  {
    absl::MutexLock lock(&mu_);
    if (previous_run_.has_value()) *request.mutable_previous_run() = *previous_run_;
    if (job_ != nullptr) {
      request.set_running_job_id(job_->id);
      request.set_running_step(job_->runner->last_step());
    }
  }
  absl::StatusOr<RegisterWorkerResponse> response = client_->RegisterWorker(request);
  if (!response.ok()) return response.status();
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  // Stopped while this registration was on its way (so Stop did not deregister this session,
  // or did so before the coordinator saw it), or registered again to deliver the outcome after
  // a failed deregistration: leave now.
  if (stopping) Deregister();
  absl::MutexLock lock(&mu_);
  registered_ = true;
  previous_run_.reset();  // delivered
  ++epoch_;
  const int64_t ms =
      response->heartbeat_interval_ms() > 0 ? response->heartbeat_interval_ms() : 1000;
  heartbeat_interval_ = absl::Milliseconds(std::clamp<int64_t>(ms, 10, 60000));
  reports_retry_at_ = absl::InfinitePast();
  std::string line = absl::StrCat(
      epoch_ == 1 ? "registered" : "registered again", " with coordinator ", client_->target(),
      " (session ", session_id_, ", device ", request.device().name(), ", heartbeat every ",
      absl::FormatDuration(heartbeat_interval_), ", lease ", response->lease_ms(), " ms)");
  if (!request.running_job_id().empty()) {
    absl::StrAppend(&line, "; running job ", request.running_job_id(), " at step ",
                    request.running_step());
  }
  if (!reports_.empty()) absl::StrAppend(&line, "; ", reports_.size(), " reports to deliver");
  LogLine(options_.worker_id, line);
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Heartbeat(bool* started_job) {
  HeartbeatRequest request;
  request.set_worker_id(options_.worker_id);
  request.set_session_id(session_id_);
  {
    absl::MutexLock lock(&mu_);
    if (job_ != nullptr) {
      request.set_running_job_id(job_->id);
      request.set_running_step(job_->runner->last_step());
      // (Lost with the heartbeat if it fails: the scores wait for the next full window.)
      for (RankTiming& t : job_->runner->TakeTimings()) *request.add_timings() = std::move(t);
    }
  }
  for (JobDirRemoved& answer : removals_.Answers()) *request.add_dirs_removed() = std::move(answer);
  for (SampleDrawn& drawn : samples_.Answers()) *request.add_samples_drawn() = std::move(drawn);
  absl::StatusOr<HeartbeatResponse> response = client_->Heartbeat(request);
  if (!response.ok()) return response.status();
  removals_.Delivered(request.dirs_removed_size());
  samples_.Delivered(request.samples_drawn_size());
  for (const JobDirRemoval& removal : response->remove_dirs()) removals_.Queue(removal);
  for (const SampleAsk& ask : response->samples()) {
    LogLine(options_.worker_id,
            absl::StrCat("drawing a sample of ", ask.job_id(), " from ", ask.path(), " (",
                         ask.parameters().tokens(), " tokens)"));
    samples_.Queue(ask);
  }
  absl::MutexLock lock(&mu_);
  if (response->register_again()) {
    // A heartbeat in flight while Stop deregistered this session: the coordinator is right not
    // to know it, and a leaving worker only sends its job's last reports (which the coordinator
    // still takes from that session), so it must not turn to registering again.
    if (leaving_) return absl::OkStatus();
    LogLine(options_.worker_id, "the coordinator does not know this session; registering again");
    registered_ = false;
    return absl::OkStatus();
  }
  if (response->heartbeat_interval_ms() > 0) {
    // The coordinator paces its cluster (it lengthens the interval as the cluster grows).
    const absl::Duration interval =
        absl::Milliseconds(std::clamp<int64_t>(response->heartbeat_interval_ms(), 10, 60000));
    if (interval != heartbeat_interval_) {
      LogLine(options_.worker_id,
              absl::StrCat("heartbeat every ", absl::FormatDuration(interval), " from now on (was ",
                           absl::FormatDuration(heartbeat_interval_), ")"));
      heartbeat_interval_ = interval;
    }
  }
  for (const std::string& id : response->cancel_job_ids()) {
    CancelByCoordinatorLocked(id, "cancelled by the coordinator");
  }
  for (const CheckpointRequest& wanted : response->checkpoint_requests()) {
    if (job_ != nullptr && job_->id == wanted.job_id() && !job_->finished) {
      job_->runner->RequestCheckpoint(wanted.after_step());
    }
  }
  if (!response->assignment().job_id().empty()) {
    const std::string before = job_ != nullptr ? job_->id : "";
    StartJobLocked(response->assignment());
    *started_job = job_ != nullptr && job_->id != before;
  }
  return absl::OkStatus();
}

void WorkerDaemon::StartJobLocked(const JobAssignment& assignment) {
  const std::string& id = assignment.job_id();
  if (job_ != nullptr && job_->id == id) return;  // the same assignment again
  if (stopping_ || job_ != nullptr) {
    const std::string why =
        stopping_
            ? absl::StrCat("worker ", options_.worker_id, " is shutting down (", stop_reason_, ")")
            : absl::StrCat("worker ", options_.worker_id, " is still running job ", job_->id);
    LogLine(options_.worker_id, absl::StrCat("refusing job ", id, ": ", why));
    JobOutcome outcome;
    outcome.set_error(why);
    ReportProgressRequest r;
    r.set_job_id(id);
    r.set_attempt(assignment.attempt());
    *r.mutable_outcome() = outcome;
    EnqueueLocked(std::move(r));
    return;
  }
  const JobSpec& spec = assignment.spec();
  LogLine(
      options_.worker_id,
      absl::StrFormat("assigned job %s (%s): %d steps, dataset %s, layout dp=%d pp=%d tp=%d", id,
                      spec.name(), spec.steps(), spec.dataset(), std::max(1, spec.parallel().dp()),
                      std::max(1, spec.parallel().pp()), std::max(1, spec.parallel().tp())));
  auto job = std::make_unique<ActiveJob>();
  job->id = id;
  job->attempt = assignment.attempt();
  job->total_steps = spec.steps();
  JobRunnerOptions runner_options;
  runner_options.worker_id = options_.worker_id;
  runner_options.host_label = options_.host_label;
  runner_options.data_root = options_.data_root;
  runner_options.allowed_roots = options_.allowed_roots;
  runner_options.peer_listen_address = options_.peer_listen_address;
  runner_options.connect_timeout = options_.connect_timeout;
  runner_options.comm_timeout = options_.comm_timeout;
  runner_options.shared_memory = options_.shared_memory;
  runner_options.data_connections = options_.data_connections;
  runner_options.data_port = options_.data_port;
  runner_options.peer_tls = options_.peer_tls;
  runner_options.after_step = options_.after_step;
  runner_options.test_only = options_.test_only;
  // Straight to stderr: a refusal comes on a gRPC thread, which must not wait for mu_ (the job's
  // transport shuts down, waiting for that thread, while mu_ is held).
  runner_options.on_peer_refused = [worker = options_.worker_id, id](const absl::Status& s) {
    LogLine(worker, absl::StrCat("job ", id, ": the peer service refused a stream: ", s.message()));
  };
  runner_options.on_data_path = [worker = options_.worker_id, id](const comm::DataPathEvent& e) {
    LogLine(worker, absl::StrCat("job ", id, ": data ", e.incoming ? "from" : "to", " rank ",
                                 e.peer, " goes through ", comm::DataPathName(e.path),
                                 e.why.empty() ? "" : absl::StrCat(" (", e.why, ")")));
  };
  runner_options.metrics = options_.metrics;
  ActiveJob* raw = job.get();
  JobRunner::Callbacks callbacks;
  callbacks.step = [this, raw](const StepMetrics& m, bool report) {
    absl::MutexLock lock(&mu_);
    // Every log_every-th step, and every step with an evaluation.
    if (options_.log_every > 0 &&
        (m.step() == 1 || m.step() % options_.log_every == 0 || m.has_val_loss())) {
      LogLine(
          options_.worker_id,
          absl::StrFormat("job %s step %d/%d loss %.4f grad_norm %.4f lr %.3e %.0f tok/s%s",
                          raw->id, m.step(), raw->total_steps, m.loss(), m.grad_norm(),
                          m.learning_rate(), m.tokens_per_s(),
                          m.has_val_loss() ? absl::StrFormat(" val_loss %.4f", m.val_loss()) : ""));
    }
    if (!report || raw->cancelled_by_coordinator) return;
    ReportProgressRequest r;
    *r.mutable_step() = m;
    EnqueueOfLocked(*raw, std::move(r));
  };
  callbacks.event = [this, raw](const std::string& event) {
    LogLine(options_.worker_id, absl::StrCat("job ", raw->id, ": ", event));
    ReportProgressRequest r;
    r.set_event(event);
    Report(raw, std::move(r));
  };
  callbacks.location = [this, raw](const JobLocation& location) {
    ReportProgressRequest r;
    *r.mutable_location() = location;
    Report(raw, std::move(r));
  };
  callbacks.checkpoint = [this, raw](const CheckpointSealed& sealed) {
    ReportProgressRequest r;
    *r.mutable_checkpoint() = sealed;
    Report(raw, std::move(r));
  };
  callbacks.checkpoint_skipped = [this, raw](const CheckpointSkipped& skipped) {
    ReportProgressRequest r;
    *r.mutable_checkpoint_skipped() = skipped;
    Report(raw, std::move(r));
  };
  callbacks.checkpoint_wait = [this, raw](const CheckpointWait& wait) {
    ReportProgressRequest r;
    *r.mutable_checkpoint_wait() = wait;
    Report(raw, std::move(r));
  };
  job->runner = std::make_unique<JobRunner>(assignment, backend_, std::move(runner_options),
                                            std::move(callbacks));
  job_ = std::move(job);
  if (!options_.run_record.empty()) {
    // Until the job ends in this process: if this process dies first, its successor finds it.
    int rank = 0;
    for (int r = 0; r < assignment.placement().ranks_size(); ++r) {
      if (assignment.placement().ranks(r).worker_id() == options_.worker_id) rank = r;
    }
    const absl::Status written = WriteRunRecord(options_.run_record, id, rank, ReadOomKillCount());
    if (!written.ok()) LogLine(options_.worker_id, std::string(written.message()));
  }
  job_->thread = std::thread([this, raw] { RunJob(raw); });
}

void WorkerDaemon::Report(ActiveJob* job, ReportProgressRequest request) {
  absl::MutexLock lock(&mu_);
  if (job->cancelled_by_coordinator) return;
  EnqueueOfLocked(*job, std::move(request));
}

void WorkerDaemon::RunJob(ActiveJob* job) {
  const JobOutcome outcome = job->runner->Run();
  if (!options_.run_record.empty()) {
    const absl::Status removed = RemoveRunRecord(options_.run_record);
    if (!removed.ok()) LogLine(options_.worker_id, std::string(removed.message()));
  }
  absl::MutexLock lock(&mu_);
  job->finished = true;
  wake_ = true;
  if (stopping_) drain_deadline_ = std::max(drain_deadline_, absl::Now() + options_.shutdown_grace);
  if (job->cancelled_by_coordinator) {
    LogLine(options_.worker_id, absl::StrCat("job ", job->id, " stopped: ", outcome.error()));
    return;
  }
  LogLine(options_.worker_id,
          outcome.succeeded()
              ? (outcome.output().empty()
                     ? absl::StrCat("job ", job->id, " succeeded (rank 0 writes the weights)")
                     : absl::StrCat("job ", job->id, " succeeded: weights at ", outcome.output()))
              : absl::StrCat("job ", job->id, " failed: ", outcome.error()));
  ReportProgressRequest r;
  *r.mutable_outcome() = outcome;
  EnqueueOfLocked(*job, std::move(r));
}

bool WorkerDaemon::ReapJob() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    if (job_ == nullptr || !job_->finished) return false;
    thread = std::move(job_->thread);
  }
  if (thread.joinable()) thread.join();
  absl::MutexLock lock(&mu_);
  if (reports_.HasJob(job_->id)) return false;  // still running for the coordinator
  if (options_.test_only_linger_after_job > absl::ZeroDuration()) {
    const absl::Time now = absl::Now();
    if (job_->linger_until == absl::InfiniteFuture()) {
      job_->linger_until = now + options_.test_only_linger_after_job;
    }
    if (now < job_->linger_until) return false;
  }
  LogLine(options_.worker_id, absl::StrCat("job ", job_->id, " done; idle"));
  job_.reset();  // closes the job's transport: its peer service no longer answers
  // The job's weights, optimizer state, activations and messages were freed, much of it by
  // threads that are gone; glibc keeps such memory in its per-thread arenas, so an idle worker
  // would stay at its largest job's size. Give it back (docs/PERFORMANCE.md "Worker memory").
  malloc_trim(0);
  return true;
}

void WorkerDaemon::WatchMemory() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&run_returned_), options_.memory_check_interval)) {
    if (job_ == nullptr || job_->finished || job_->runner->cancel_requested()) continue;
    absl::StatusOr<int64_t> resident = options_.resident_bytes();
    if (!resident.ok() || *resident <= options_.memory_bytes) continue;
    const std::string reason =
        absl::StrCat("out of memory budget: worker ", options_.worker_id, " holds ",
                     plan::FormatBytes(*resident), " resident, above its ",
                     plan::FormatBytes(options_.memory_bytes),
                     " (--memory, or the smaller of its cgroup limit and the host's memory)");
    WarnLocked(job_->id, reason);
    job_->runner->Fail(reason);
  }
}

JobDirRemoved WorkerDaemon::RemoveDir(JobDirRemoval removal) const {
  if (removal.dir().empty()) {
    // The job ended before its rank 0 reported where its directory is: where it would be here.
    removal.set_dir(AbsolutePath(
        JobDirectory(removal.spec_checkpoint_dir(), removal.job_id(), options_.data_root)));
  }
  JobDirRemoved answer =
      RemoveJobDirectory(removal, options_.allowed_roots, options_.worker_id, options_.host_label);
  LogLine(options_.worker_id, DescribeJobDirRemoved(answer));
  return answer;
}

void WorkerDaemon::HeartbeatSoon() {
  absl::MutexLock lock(&mu_);
  heartbeat_now_ = true;
  wake_ = true;
}

void WorkerDaemon::CancelByCoordinatorLocked(const std::string& job_id, const std::string& why) {
  if (job_ == nullptr || job_->id != job_id) {
    DropReportsLocked(job_id);  // e.g. the outcome of a job we refused
    return;
  }
  if (job_->cancelled_by_coordinator) return;
  job_->cancelled_by_coordinator = true;
  if (!job_->finished) {
    job_->runner->Cancel(why);
    LogLine(options_.worker_id,
            absl::StrCat("job ", job_id, " ", why, "; stopping the step in progress"));
  } else {
    DropReportsLocked(job_id);
  }
}

}  // namespace dtrain::worker
