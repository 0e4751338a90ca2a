#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/recovery.h"

namespace dtrain::coordinator {
namespace {

// A running job's reason while its last step waits for disk space (CheckpointWait).
std::string SpaceWaitReason(const std::string& job_id, const CheckpointWait& wait) {
  // One clause per rank short of space: a large job's is cut (its log has them all).
  constexpr size_t kMaxWhy = 600;
  const std::string why = wait.why().size() <= kMaxWhy
                              ? wait.why()
                              : absl::StrCat(wait.why().substr(0, kMaxWhy), " ... (`dtrain logs ",
                                             job_id, "` has it all)");
  const std::string what =
      wait.weights_file() ? absl::StrCat("the weights file of step ", wait.step())
                          : absl::StrCat("the checkpoint of step ", wait.step(), ", the last,");
  return absl::StrCat(
      "waiting for disk space: ", what, " does not fit in ", wait.dir(), " (", why,
      "); it is written again until ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(wait.until_unix_ms()),
                       absl::UTCTimeZone()),
      ", then the job fails: free space there or `dtrain cancel ", job_id, "`");
}

// ListJobs answers at most this many (each job carries its spec and placement).
constexpr int kMaxListedJobs = 1000;

void LogToStderr(absl::string_view line) {
  const std::string time =
      absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone());
  std::fprintf(stderr, "%s dtrain-coordinator: %.*s\n", time.c_str(), static_cast<int>(line.size()),
               line.data());
}

JobManager::Options Normalized(JobManager::Options o) {
  if (!o.clock) {
    o.clock = [] { return absl::Now(); };
    if (!o.monotonic_clock) o.monotonic_clock = SteadyNow;
  }
  if (o.shrink_settle <= absl::ZeroDuration()) {
    o.shrink_settle = std::min(2 * o.heartbeat_interval, o.lease / 2);
  }
  if (!o.log) o.log = LogToStderr;
  if (o.tick <= absl::ZeroDuration()) {
    o.tick = std::clamp(o.lease / 8, absl::Milliseconds(10), absl::Milliseconds(200));
  }
  if (o.failure_window <= absl::ZeroDuration()) {
    o.failure_window = std::clamp(2 * o.heartbeat_interval, absl::Milliseconds(200),
                                  std::max(absl::Milliseconds(200), o.lease / 2));
  }
  return o;
}

// A running job's reason while the coordinator's database refuses writes: its steps arrive but
// cannot be recorded, which is no stall of the job.
std::string UnrecordedReason(const JobStore::WriteFailure& failing, int64_t last_step,
                             absl::Time now) {
  return absl::StrCat(
      "steps not recorded ",
      last_step > 0 ? absl::StrCat("after step ", last_step) : std::string("since the start"),
      ": the coordinator cannot write its database for ",
      absl::FormatDuration(absl::Trunc(now - failing.since, absl::Seconds(1))), " (", failing.error,
      "); the workers train on and deliver their reports once it can");
}

}  // namespace

JobManager::JobManager(std::unique_ptr<JobStore> store, Options options)
    : options_(Normalized(std::move(options))),
      store_(std::move(store)),
      // A gap above a heartbeat interval (and above two ticks: the scheduler's own rhythm).
      registry_(options_.lease, options_.monotonic_clock,
                std::max(options_.heartbeat_interval, 2 * options_.tick)) {
  registry_.SetPacing({options_.heartbeat_interval, options_.lease}, options_.max_heartbeat_rate);
}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(std::unique_ptr<JobStore> store,
                                                               Options options) {
  std::unique_ptr<JobManager> manager(new JobManager(std::move(store), std::move(options)));
  RETURN_IF_ERROR(manager->Recover());
  RETURN_IF_ERROR(manager->RestoreDirRemovals());
  if (CoordinatorMetrics* metrics = manager->options_.metrics) {
    metrics->SetStateSource([m = manager.get()] { return m->StateCounts(); });
    metrics->SetDatabaseErrorSource(DatabaseErrorCounts);
  }
  SetDatabaseErrorLog(manager->options_.log);
  return manager;
}

absl::StatusOr<CoordinatorMetrics::StateCounts> JobManager::StateCounts() {
  CoordinatorMetrics::StateCounts counts;
  const WorkerCounts workers = registry_.Counts();
  counts.idle = workers.idle;
  counts.busy = workers.busy;
  counts.lost = workers.lost;
  ASSIGN_OR_RETURN(counts.jobs, store_->CountByState());
  ASSIGN_OR_RETURN(const std::vector<Job> active,
                   store_->JobsInStates({QUEUED, PLACING, RUNNING, RECOVERING}));
  for (const Job& job : active) {
    CoordinatorMetrics::StateCounts::ActiveJob& a = counts.active.emplace_back();
    a.id = job.id();
    a.name = job.spec().name();
    a.state = job.state();
    a.submitted = absl::FromUnixMillis(job.submitted_unix_ms());
    if (job.checkpoint().sealed_unix_ms() > 0) {
      a.sealed = absl::FromUnixMillis(job.checkpoint().sealed_unix_ms());
    }
    a.dir_bytes = job.checkpoint().dir_bytes();
    a.owner = job.owner();
    if (job.state() != QUEUED) a.workers = job.placement().ranks_size();
  }
  counts.dir_removals_pending = removals_.pending();
  counts.now = Now();
  return counts;
}

JobManager::~JobManager() {
  SetDatabaseErrorLog(nullptr);
  if (options_.metrics != nullptr) {
    options_.metrics->SetStateSource(nullptr);
    options_.metrics->SetDatabaseErrorSource(nullptr);
  }
  Stop();
}

void JobManager::Start() {
  if (scheduler_.joinable()) return;
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void JobManager::Stop() {
  {
    absl::MutexLock lock(&wake_mu_);
    stop_ = true;
    // A stall diagnosis answers within its deadline (2 s); its answer touches this manager.
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return diagnosing_ == 0; };
    wake_mu_.AwaitWithTimeout(absl::Condition(&answered), absl::Seconds(10));
  }
  if (scheduler_.joinable()) scheduler_.join();
}

void JobManager::Wake() {
  absl::MutexLock lock(&wake_mu_);
  wake_ = true;
}

void JobManager::SchedulerLoop() {
  while (true) {
    {
      absl::MutexLock lock(&wake_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return wake_ || stop_; };
      wake_mu_.AwaitWithTimeout(absl::Condition(&woken), options_.tick);
      if (stop_) return;
      wake_ = false;
    }
    RunSchedulerPass();
  }
}

ActiveJob* JobManager::FindActive(absl::string_view job_id) {
  auto it = jobs_.find(JobNumber(job_id));
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobManager::Event(const std::string& job_id, const std::string& text,
                       const LineSource& source) {
  absl::Status status = store_->AppendEvent(job_id, text, NowMs(), source).status();
  if (!status.ok()) Log(absl::StrCat(job_id, ": cannot record event: ", status.ToString()));
  to_notify_.push_back(job_id);
}

void JobManager::SweepLocked(absl::Time now) {
  for (const WorkerFault& fault : registry_.Sweep(now)) HandleFault(fault);
  // Level-triggered: whatever is due (a final state to retry, a failure window over, workers
  // not back after a restart, a restart that could not be saved) is decided again from the
  // record. Queued and recovering jobs are decided below, with the idle workers in view.
  std::vector<std::string> ids;
  for (const auto& [n, job] : jobs_) ids.push_back(job.id);
  for (const std::string& id : ids) Reconcile(id).IgnoreError();  // logged; retried
}

absl::StatusOr<HeartbeatResponse> JobManager::Heartbeat(const HeartbeatRequest& request) {
  ASSIGN_OR_RETURN(WorkerRegistry::HeartbeatResult result, registry_.Heartbeat(request, Now()));
  if (request.timings_size() > 0 && !result.response.register_again()) QueueTimings(request);
  if (!result.acked_job.empty()) {
    JobsLock lock(this);
    if (ActiveJob* job = FindActive(result.acked_job)) MarkAcked(*job, request.worker_id());
  }
  if (result.released) Wake();
  if (!request.running_job_id().empty() && !result.response.register_again()) {
    AddCheckpointRequest(request.running_job_id(), &result.response);
  }
  if (request.dirs_removed_size() > 0 || !removals_.empty()) {
    TakeDirRemovals(request, &result.response);
  }
  for (const SampleDrawn& drawn : request.samples_drawn()) {
    samples_.Answer(request.worker_id(), drawn);
  }
  if (!samples_.empty() && !result.response.register_again()) {
    for (SampleAsk& ask : samples_.ForWorker(request.worker_id())) {
      *result.response.add_samples() = std::move(ask);
    }
  }
  return std::move(result.response);
}

void JobManager::PublishCheckpointsWanted() {
  absl::flat_hash_map<std::string, int64_t> wanted;
  for (const auto& [n, job] : jobs_) {
    // A shrunk job that could grow back is asked too: it grows back at that seal (MaybeGrowBack)
    // rather than at the next multiple of its interval, or never with interval 0.
    if (job.WaitsForNextSeal() || IdleToGrowBack(job).has_value()) {
      wanted[job.id] = job.sealed_step;
    }
  }
  if (options_.metrics != nullptr) options_.metrics->SetJobsAwaitingCheckpoint(wanted.size());
  absl::MutexLock lock(&wanted_mu_);
  checkpoints_wanted_ = std::move(wanted);
}

void JobManager::AddCheckpointRequest(const std::string& job_id, HeartbeatResponse* response) {
  absl::MutexLock lock(&wanted_mu_);
  auto it = checkpoints_wanted_.find(job_id);
  if (it == checkpoints_wanted_.end()) return;
  CheckpointRequest* wanted = response->add_checkpoint_requests();
  wanted->set_job_id(job_id);
  wanted->set_after_step(it->second);
}

absl::StatusOr<Job> JobManager::GetJob(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id, /*with_history=*/true));
  JobsLock lock(this);
  AddStragglerScores(&job);
  AddLiveState(&job);
  return job;
}

void JobManager::AddLiveState(Job* job,
                              const absl::flat_hash_map<std::string, int32_t>* positions) {
  const ActiveJob* active = FindActive(job->id());
  if (active == nullptr) return;
  if (job->state() == QUEUED && active->state == QUEUED) {
    std::optional<absl::flat_hash_map<std::string, int32_t>> mine;
    if (positions == nullptr) positions = &mine.emplace(QueuePositions());
    auto it = positions->find(job->id());
    if (it != positions->end()) job->set_queue_position(it->second);
  }
  if (job->state() != RUNNING) return;
  // A last step waiting for disk space, steps that the database cannot record, or a run that
  // made no step for longer than two heartbeats says so instead of its start's "all N workers
  // running" (a partition between workers shows no other way until a timeout). Nothing is
  // stored: the history keeps its transitions.
  const absl::Duration quiet = Now() - active->diagnosis.progress_at;
  if (active->space_wait.has_value()) {
    job->set_reason(SpaceWaitReason(job->id(), *active->space_wait));
  } else if (quiet <= 2 * options_.heartbeat_interval) {
    return;
  } else if (std::optional<JobStore::WriteFailure> failing = store_->FailingWrites()) {
    job->set_reason(UnrecordedReason(*failing, active->last_step, Now()));
  } else {
    job->set_reason(absl::StrFormat(
        "stalled? no step for %.1fs %s (its workers heartbeat every %s; `dtrain diagnose %s` "
        "shows where each rank waits)",
        absl::ToDoubleSeconds(quiet),
        active->last_step > 0 ? absl::StrCat("after step ", active->last_step)
                              : std::string("since the run started"),
        absl::FormatDuration(options_.heartbeat_interval), job->id()));
  }
}

absl::flat_hash_map<std::string, int32_t> JobManager::QueuePositions() {
  // The scheduler tries queued jobs in the queue's order (PlaceQueued): a job's position counts
  // those before it that could take the same workers (recovery.h SameWorkers: a kind of worker
  // both fit), by the kinds each fits.
  int32_t cpu_only = 0, cuda_only = 0, both = 0;
  absl::flat_hash_map<std::string, int32_t> positions;
  for (const ActiveJob* job : QueueInOrder()) {
    const bool cpu = DeviceFits(job->spec.device(), "cpu");
    const bool cuda = DeviceFits(job->spec.device(), "cuda");
    if (job->reason != kPlacingNow) {
      positions[job->id] =
          1 + (cpu || cuda ? both : 0) + (cpu ? cpu_only : 0) + (cuda ? cuda_only : 0);
    }
    if (cpu && cuda) {
      ++both;
    } else if (cpu) {
      ++cpu_only;
    } else if (cuda) {
      ++cuda_only;
    }
  }
  return positions;
}

void JobManager::AnnounceQueuePositions() {
  const absl::flat_hash_map<std::string, int32_t> positions = QueuePositions();
  for (auto& [n, job] : jobs_) {
    if (job.state != QUEUED) continue;
    auto it = positions.find(job.id);
    const int32_t position = it == positions.end() ? 0 : it->second;
    if (position == job.announced_position) continue;
    job.announced_position = position;
    to_notify_.push_back(job.id);
  }
}

void JobManager::FillQueuePosition(Job* job) {
  if (job->state() != QUEUED) return;
  JobsLock lock(this);
  const absl::flat_hash_map<std::string, int32_t> positions = QueuePositions();
  auto it = positions.find(job->id());
  job->set_queue_position(it == positions.end() ? 0 : it->second);
}

absl::StatusOr<ListJobsResponse> JobManager::ListJobs(const ListJobsRequest& request) {
  std::vector<JobState> states;
  for (int state : request.states()) states.push_back(static_cast<JobState>(state));
  int64_t before_seq = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &before_seq) || before_seq <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token \"", request.page_token(), "\" is not one this coordinator gave"));
  }
  std::optional<absl::string_view> name, owner;
  if (!request.name().empty()) name = request.name();
  if (!request.owner().empty()) owner = request.owner();
  ASSIGN_OR_RETURN(JobPage page, store_->ListJobs(std::min(request.limit(), kMaxListedJobs), states,
                                                  before_seq, name, owner));
  ListJobsResponse response;
  for (Job& job : page.jobs) *response.add_jobs() = std::move(job);
  JobsLock lock(this);
  const absl::flat_hash_map<std::string, int32_t> positions = QueuePositions();
  for (Job& job : *response.mutable_jobs()) AddLiveState(&job, &positions);
  if (page.next_before_seq > 0) response.set_next_page_token(absl::StrCat(page.next_before_seq));
  return response;
}

absl::StatusOr<Job> JobManager::CancelJob(const std::string& job_id, const std::string& reason,
                                          const std::string& by) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  JobsLock lock(this);
  ActiveJob* job = FindActive(job_id);
  if (job == nullptr) {
    ASSIGN_OR_RETURN(Job ended, store_->GetJob(job_id, /*with_history=*/false));
    return absl::FailedPreconditionError(absl::StrCat(
        job_id, " already ended ", JobState_Name(ended.state()), ": ", ended.reason()));
  }
  const std::string who = by.empty() ? "" : absl::StrCat(" by ", by);
  job->cancel = reason.empty() ? absl::StrCat("cancelled", by.empty() ? " by user" : who)
                               : absl::StrCat("cancelled", who, ": ", reason);
  absl::Status ended = Reconcile(job_id);  // CANCELLED now, before the answer
  const ActiveJob* still = FindActive(job_id);
  if (!ended.ok() && still != nullptr && still->pending_end.has_value()) {
    // The database refused the end: the cancel stands, retried at every pass (kRetryEnd).
    return absl::Status(
        ended.code(),
        absl::StrCat(job_id, " is cancelled but its end cannot be recorded yet (", ended.message(),
                     "): the coordinator records it, and stops its workers, once its database "
                     "can be written"));
  }
  RETURN_IF_ERROR(ended);
  return store_->GetJob(job_id, /*with_history=*/true);
}

absl::StatusOr<RebalanceDecision> JobManager::RebalanceJob(
    const std::string& job_id, const std::vector<double>& stage_compute_s, const std::string& why) {
  JobsLock lock(this);
  ActiveJob* job = FindActive(job_id);
  if (job == nullptr) {
    ASSIGN_OR_RETURN(Job ended, store_->GetJob(job_id, /*with_history=*/false));
    return absl::FailedPreconditionError(absl::StrCat(
        job_id, " already ended ", JobState_Name(ended.state()), ": ", ended.reason()));
  }
  absl::StatusOr<RebalanceDecision> decided = RebalanceLocked(*job, stage_compute_s, why);
  Reconcile(job_id).IgnoreError();  // a restart now, when no checkpoint comes before the end
  return decided;
}

ListWorkersResponse JobManager::ListWorkers() {
  ListWorkersResponse response;
  for (WorkerInfo& w : registry_.List()) *response.add_workers() = std::move(w);
  return response;
}

absl::Status JobManager::DeregisterWorker(const DeregisterWorkerRequest& request) {
  if (request.worker_id().empty()) return absl::InvalidArgumentError("worker_id is empty");
  JobsLock lock(this);
  absl::StatusOr<std::string> held =
      registry_.Deregister(request.worker_id(), request.session_id());
  if (absl::IsNotFound(held.status())) return absl::OkStatus();  // already gone: nothing to do
  RETURN_IF_ERROR(held.status());
  const std::string why = request.reason().empty() ? "worker stopped" : request.reason();
  Log(absl::StrCat("worker ", request.worker_id(), " deregistered: ", why));
  Wake();
  std::string job_id = *held;
  if (job_id.empty()) job_id = request.running_job_id();
  ActiveJob* job = job_id.empty() ? nullptr : FindActive(job_id);
  if (job == nullptr || !job->rank_of.contains(request.worker_id())) return absl::OkStatus();
  RankFailure failure;
  failure.cause = RankFailure::kStopped;
  failure.rank = job->rank_of.at(request.worker_id());
  failure.worker_id = request.worker_id();
  failure.error = request.running_step() > 0
                      ? absl::StrCat(why, " after step ", request.running_step())
                      : absl::StrCat(why, " before its first step");
  AddFailure(*job, std::move(failure));
  return absl::OkStatus();
}

absl::StatusOr<DrainWorkerResponse> JobManager::DrainWorker(const DrainWorkerRequest& request) {
  JobsLock lock(this);
  return DrainLocked(request);
}

absl::StatusOr<ForgetWorkerResponse> JobManager::ForgetWorker(const std::string& worker_id) {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  ASSIGN_OR_RETURN(const WorkerInfo info, registry_.Get(worker_id));
  RETURN_IF_ERROR(registry_.Forget(worker_id));
  Log(absl::StrCat("worker ", worker_id, " forgotten"));
  // A drain saved for it goes too: the next session of the id is a worker like any other.
  const absl::Status undrained = store_->SetDrained(worker_id, "", false, NowMs());
  if (!undrained.ok()) Log(absl::StrCat("worker ", worker_id, ": ", undrained.ToString()));
  ForgetWorkerResponse response;
  const std::string& host = info.host_label();
  if (host.empty() || registry_.AnyWorkerOnHost(host)) return response;
  // Its host has no worker left to remove deleted jobs' directories there: they end, each
  // left for the operator (the answer a worker would give, through the same path).
  for (const PendingDirRemoval& removal : removals_.OnHost(host)) {
    JobDirRemoved answer;
    answer.set_job_id(removal.job_id);
    answer.set_dir(removal.dir);
    answer.set_state(DIR_REMOVAL_ABANDONED);
    answer.set_host(host);
    answer.set_worker_id(worker_id);
    answer.set_error(absl::StrCat("no worker of host ", host, " is registered any more (its last, ",
                                  worker_id, ", was forgotten)"));
    if (FinishDirRemoval(answer)) *response.add_abandoned() = std::move(answer);
  }
  return response;
}

absl::StatusOr<ListCheckpointsResponse> JobManager::ListCheckpoints(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id, /*with_history=*/false));
  ASSIGN_OR_RETURN(std::vector<CheckpointInfo> sealed, store_->Checkpoints(job_id));
  ListCheckpointsResponse response;
  *response.mutable_status() = job.checkpoint();
  if (response.status().interval_steps() == 0) {
    response.mutable_status()->set_interval_steps(job.spec().checkpoint().interval_steps());
  }
  for (CheckpointInfo& c : sealed) *response.add_checkpoints() = std::move(c);
  return response;
}

}  // namespace dtrain::coordinator
