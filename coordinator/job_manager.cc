#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/job_paths.h"
#include "common/peer_secret.h"
#include "common/run_record.h"
#include "common/status_macros.h"
#include "coordinator/rank_assignment.h"
#include "coordinator/recovery.h"
#include "coordinator/submit_spec.h"
#include "plan/job_plan.h"
#include "plan/placement.h"
#include "plan/ranks.h"
#include "plan/spec_json.h"
#include "plan/spec_paths.h"

namespace dtrain::coordinator {
namespace {

// ListJobs answers at most this many (each job carries its spec and placement).
constexpr int kMaxListedJobs = 1000;

// "job-000042" -> 42; -1 for anything else.
int64_t JobNumber(absl::string_view id) {
  int64_t n = -1;
  if (!absl::ConsumePrefix(&id, "job-") || !absl::SimpleAtoi(id, &n)) return -1;
  return n;
}

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d)); }

// "w1, w2, w3" or "w1, ..., w8 and 504 more".
std::string WorkerList(const std::vector<std::string>& ids) {
  constexpr size_t kShown = 8;
  if (ids.size() <= kShown) return absl::StrJoin(ids, ", ");
  return absl::StrCat(absl::StrJoin(ids.begin(), ids.begin() + kShown, ", "), " and ",
                      ids.size() - kShown, " more");
}

std::string Plural(int64_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// A random 128-bit id in hex: Job.uid, unique across databases.
std::string NewUid() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

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

}  // namespace

// Holds mu_ and, on release, wakes the watchers of the jobs changed meanwhile, so watcher
// callbacks (store reads, stream writes) never run under mu_.
class JobManager::JobsLock {
 public:
  explicit JobsLock(JobManager* m) ABSL_EXCLUSIVE_LOCK_FUNCTION(m->mu_) : m_(m) { m_->mu_.Lock(); }
  ~JobsLock() ABSL_UNLOCK_FUNCTION() {
    std::vector<std::string> notify, forget;
    notify.swap(m_->to_notify_);
    forget.swap(m_->to_forget_);
    m_->mu_.Unlock();
    for (const std::string& id : notify) m_->notifier_.Notify(id);
    for (const std::string& id : forget) m_->notifier_.Forget(id);
  }

 private:
  JobManager* m_;
};

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
  if (CoordinatorMetrics* metrics = manager->options_.metrics) {
    metrics->SetStateSource([m = manager.get()] { return m->StateCounts(); });
  }
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
  }
  counts.now = Now();
  return counts;
}

JobManager::~JobManager() {
  if (options_.metrics != nullptr) options_.metrics->SetStateSource(nullptr);
  Stop();
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<Job> jobs,
                   store_->JobsInStates({QUEUED, PLACING, RUNNING, RECOVERING}));
  JobsLock lock(this);
  const absl::Time now = Now();
  int queued = 0, resumed = 0;
  for (Job& stored : jobs) {
    ActiveJob job;
    job.progress_at = now;  // a stall is counted from the restart
    job.id = stored.id();
    job.spec = stored.spec();
    job.submitted = absl::FromUnixMillis(stored.submitted_unix_ms());
    job.state = stored.state();
    job.reason = stored.reason();
    job.last_step = stored.latest().step();
    job.uid = stored.uid();
    job.recoveries.assign(stored.recoveries().begin(), stored.recoveries().end());
    job.run_spec = CurrentRunSpec(job.spec, job.recoveries);
    if (job.state == QUEUED) {
      ++queued;
    } else if (job.state == RECOVERING) {
      // Its old ranks were told to stop before the restart (those still running it are told
      // again when they re-register); it is placed when enough workers are idle.
      ++resumed;
      job.stopped = true;
      job.phase_start = now;
      Event(job.id, "coordinator restarted; the recovery goes on");
    } else {
      ++resumed;
      auto assignment = std::make_shared<JobAssignment>();
      assignment->set_job_id(job.id);
      assignment->set_job_uid(job.uid);
      assignment->set_attempt(static_cast<int>(job.recoveries.size()));
      *assignment->mutable_spec() = job.run_spec;
      *assignment->mutable_placement() = stored.placement();
      // Each rank's part of the plan is cut from it when (re)sent (rank_assignment.h).
      absl::Status planned = AttachJobPlan(assignment.get());
      if (!planned.ok()) Log(absl::StrCat(job.id, ": cannot plan its spec: ", planned.message()));
      SetRanks(job, std::move(assignment));
      std::vector<std::string> workers;
      for (const Rank& r : job.ranks) workers.push_back(r.worker_id);
      job.awaiting.insert(workers.begin(), workers.end());
      job.recover_deadline = now + options_.lease;
      job.phase_start = now;  // an open recovery's phase times restart here
      if (job.ranks.empty()) {
        job.pending_end = {FAILED, "coordinator restarted and found no placement for the job"};
      }
      Event(job.id, absl::StrCat("coordinator restarted; waiting up to ", Seconds(options_.lease),
                                 " for ", WorkerList(workers), " to re-register"));
    }
    jobs_.emplace(JobNumber(job.id), std::move(job));
  }
  Log(absl::StrCat("store ", store_->path(), ": ", queued, " queued and ", resumed,
                   " placed or running jobs to resume"));
  return absl::OkStatus();
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

void JobManager::DiagnoseStalledJobs() {
  if (!options_.diagnose) return;
  std::vector<Job> asks;
  {
    JobsLock lock(this);
    const absl::Time now = Now();
    for (auto& [n, job] : jobs_) {
      if (job.state != RUNNING || job.stall_diagnosed || job.ranks.size() < 2 ||
          job.assignment == nullptr) {
        continue;
      }
      const bool stalled = options_.diagnose_stall_after > absl::ZeroDuration() &&
                           now - job.progress_at >= options_.diagnose_stall_after;
      if (!job.timeout_due && !stalled) continue;
      job.stall_diagnosed = true;
      if (job.timeout_due) {
        job.diagnosis_until = now + options_.diagnosis_deadline + absl::Milliseconds(250);
      } else {
        job.diagnosed_when = {DiagnosisOccasion::kStalled};
      }
      job.timeout_due = false;
      Job& ask = asks.emplace_back();
      ask.set_id(job.id);
      ask.set_state(RUNNING);
      *ask.mutable_placement() = job.assignment->placement();
    }
  }
  if (asks.empty()) return;
  const ListWorkersResponse workers = ListWorkers();
  for (const Job& ask : asks) {
    {
      absl::MutexLock lock(&wake_mu_);
      if (stop_) return;
      ++diagnosing_;
    }
    options_.diagnose(
        ask, workers, [this, id = ask.id()] { return TimedOutRanks(id); },
        [this, id = ask.id()](std::string summary) {
          RecordStallDiagnosis(id, std::move(summary));
          absl::MutexLock lock(&wake_mu_);
          --diagnosing_;
        });
  }
}

std::string JobManager::DiagnosisOccasion::Describe() const {
  switch (kind) {
    case kStalled:
      return "it stalled";
    case kTimedOut:
      return absl::StrCat("rank ", rank, " (", worker_id, ") timed out");
    case kNone:
      break;
  }
  return "";
}

void JobManager::RecordStallDiagnosis(const std::string& job_id, std::string summary) {
  JobsLock lock(this);
  ActiveJob* job = FindActive(job_id);
  if (job == nullptr || job->state != RUNNING || !job->stall_diagnosed) return;  // moved on
  // The occasion in the events: "no step for 30s: root: ...", "rank 0 (w1) timed out: root:".
  const std::string text = absl::StrCat(
      job->diagnosed_when.kind == DiagnosisOccasion::kStalled
          ? absl::StrCat("no step for ", absl::FormatDuration(options_.diagnose_stall_after))
          : job->diagnosed_when.Describe(),
      ": ", summary);
  Log(absl::StrCat(job_id, ": ", text));
  Event(job_id, text);
  job->stall_summary = std::move(summary);
  job->diagnosis_until = absl::InfinitePast();  // a failure waiting for it goes on
  Wake();
}

void JobManager::NoteTimeout(ActiveJob& job, const RankFailure& failure) {
  if (!options_.diagnose || job.state != RUNNING || job.stall_diagnosed || job.ranks.size() < 2 ||
      !IsCommTimeout(failure) || failure.rank < 0) {
    return;
  }
  if (job.timeout_due) return;  // the first timeout names the occasion
  job.timeout_due = true;
  job.diagnosed_when = {DiagnosisOccasion::kTimedOut, failure.rank, failure.worker_id};
  // Until the scheduler starts it (woken now): the failure does not wait without a diagnosis.
  job.diagnosis_until = Now() + options_.diagnosis_deadline + absl::Milliseconds(250);
  Wake();
}

bool JobManager::AwaitsDiagnosis(const ActiveJob& job, absl::Time now) {
  return (job.stall_diagnosed || job.timeout_due) && now < job.diagnosis_until;
}

std::vector<TimedOutRank> JobManager::TimedOutRanks(const std::string& job_id) {
  JobsLock lock(this);
  std::vector<TimedOutRank> timed_out;
  const ActiveJob* job = FindActive(job_id);
  if (job == nullptr) return timed_out;
  for (const RankFailure& f : job->failures) {
    if (!IsCommTimeout(f) || f.rank < 0) continue;
    TimedOutRank& t = timed_out.emplace_back();
    t.rank = f.rank;
    t.error = f.error;
    // The peer it waited for first: its error names it before the others it blames (peers
    // that gave up meanwhile and told it so), as "from rank 3 (worker w4 at ...".
    std::vector<std::pair<size_t, int>> named;
    for (const std::string& w : f.suspects) {
      if (auto it = job->rank_of.find(w); it != job->rank_of.end()) {
        named.push_back({f.error.find(absl::StrCat("worker ", w, " at ")), it->second});
      }
    }
    std::stable_sort(named.begin(), named.end());
    for (const auto& [at, rank] : named) t.on.push_back(rank);
  }
  return timed_out;
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

JobManager::ActiveJob* JobManager::FindActive(absl::string_view job_id) {
  auto it = jobs_.find(JobNumber(job_id));
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobManager::SetRanks(ActiveJob& job, std::shared_ptr<const JobAssignment> assignment) {
  const Placement& placement = assignment->placement();
  job.ranks.clear();
  job.rank_of.clear();
  for (int i = 0; i < placement.ranks_size(); ++i) {
    job.ranks.push_back(Rank{placement.ranks(i).worker_id()});
    job.rank_of[placement.ranks(i).worker_id()] = i;
  }
  job.reporting_rank = plan::ReportingRank(assignment->spec().parallel());
  job.assignment = std::move(assignment);
}

void JobManager::Event(const std::string& job_id, const std::string& text,
                       const LineSource& source) {
  absl::Status status = store_->AppendEvent(job_id, text, NowMs(), source).status();
  if (!status.ok()) Log(absl::StrCat(job_id, ": cannot record event: ", status.ToString()));
  to_notify_.push_back(job_id);
}

absl::Status JobManager::Transition(ActiveJob& job, JobState state, const std::string& reason,
                                    const Placement* placement) {
  RETURN_IF_ERROR(store_->UpdateState(job.id, state, reason, NowMs(), placement));
  Log(absl::StrCat(job.id, ": ", JobState_Name(job.state), " -> ", JobState_Name(state), ": ",
                   reason));
  job.state = state;
  job.reason = reason;
  if (state == RUNNING) {  // a new run: its stall clock starts now
    job.progress_at = Now();
    job.stall_diagnosed = false;
    job.stall_summary.clear();
    job.timeout_due = false;
    job.diagnosis_until = absl::InfinitePast();
  }
  to_notify_.push_back(job.id);
  return absl::OkStatus();
}

absl::Status JobManager::EndJob(const std::string& job_id, JobState state,
                                const std::string& reason) {
  auto it = jobs_.find(JobNumber(job_id));
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no active job ", job_id));
  ActiveJob& job = it->second;
  const std::string* output = state == SUCCEEDED ? &job.output : nullptr;
  absl::Status status = store_->UpdateState(job_id, state, reason, NowMs(), nullptr, output);
  // FailedPrecondition: the store already has it final; memory catches up below.
  if (!status.ok() && status.code() != absl::StatusCode::kFailedPrecondition) {
    job.pending_end = {state, reason};
    Log(absl::StrCat(job_id, ": cannot record ", JobState_Name(state),
                     " (will retry): ", status.ToString()));
    return status;
  }
  Log(absl::StrCat(job_id, ": ", JobState_Name(job.state), " -> ", JobState_Name(state), ": ",
                   reason));
  std::vector<std::string> workers;
  for (const Rank& r : job.ranks) workers.push_back(r.worker_id);
  registry_.CancelJob(job_id, workers);
  to_notify_.push_back(job_id);
  to_forget_.push_back(job_id);
  if (options_.metrics != nullptr) options_.metrics->ClearStragglerScores(job_id);
  jobs_.erase(it);
  Wake();  // its workers may be free for queued jobs
  return absl::OkStatus();
}

void JobManager::HandleFault(const WorkerFault& fault) {
  std::string reason;
  switch (fault.kind) {
    case WorkerFault::kLost:
      reason = absl::StrCat("worker ", fault.worker_id, " lost: no heartbeat for ",
                            Seconds(fault.silent));
      Log(fault.job_id.empty() ? reason : absl::StrCat(reason, " (it held ", fault.job_id, ")"));
      break;
    case WorkerFault::kDropped:
      reason = absl::StrCat("worker ", fault.worker_id,
                            " stopped running the job without reporting an outcome");
      break;
    case WorkerFault::kNotAccepted:
      reason = absl::StrCat("worker ", fault.worker_id, " did not accept its assignment within ",
                            Seconds(options_.lease));
      break;
  }
  ActiveJob* job = fault.job_id.empty() ? nullptr : FindActive(fault.job_id);
  // Not a rank of the job's current run: of a run a recovery already replaced.
  if (job == nullptr || !job->rank_of.contains(fault.worker_id)) return;
  if (fault.kind == WorkerFault::kLost && job->rank_of.contains(fault.worker_id)) {
    RankFailure failure;
    failure.cause = RankFailure::kLost;
    failure.rank = job->rank_of.at(fault.worker_id);
    failure.worker_id = fault.worker_id;
    failure.error = absl::StrCat("no heartbeat for ", Seconds(fault.silent));
    failure.silent = fault.silent;
    AddFailure(*job, std::move(failure));
    return;
  }
  Fail(*job, reason, fault.worker_id, /*curable=*/true);
}

void JobManager::AddFailure(ActiveJob& job, RankFailure failure) {
  const bool conclusive = failure.cause != RankFailure::kPeer;
  if (failure.rank >= 0 && !failure.error.empty()) {
    const std::string who =
        job.assignment == nullptr
            ? ""
            : absl::StrCat(" (", plan::RankLabel(job.assignment->placement().ranks(failure.rank)),
                           ")");
    Event(job.id, absl::StrCat("worker ", failure.worker_id, who, ": ", failure.error),
          {failure.rank, failure.worker_id, LOG_ERROR});
  }
  NoteTimeout(job, failure);
  job.failures.push_back(std::move(failure));
  absl::flat_hash_set<std::string> failed;
  for (const RankFailure& f : job.failures) failed.insert(f.worker_id);
  const bool all_failed = failed.size() >= job.ranks.size();
  if (conclusive || all_failed || job.ranks.size() <= 1) {
    FailWithRootCause(job);
    return;
  }
  if (job.decide_failure_at == absl::InfiniteFuture()) {
    job.decide_failure_at = Now() + options_.failure_window;
    Log(absl::StrCat(job.id, ": ", job.failures.back().worker_id,
                     " failed because of a peer; waiting up to ", Seconds(options_.failure_window),
                     " for the root cause"));
  }
}

void JobManager::FailWithRootCause(ActiveJob& job) {
  absl::flat_hash_map<std::string, absl::Duration> heartbeat_age;
  const absl::Time now = Now();
  for (const WorkerInfo& w : registry_.List()) {  // rare: one scan of the registry
    if (job.rank_of.contains(w.worker_id())) {
      heartbeat_age[w.worker_id()] = now - absl::FromUnixMillis(w.last_heartbeat_unix_ms());
    }
  }
  // A lost worker's silence as its lease ran out (it may have registered again since).
  for (const RankFailure& f : job.failures) {
    if (f.cause == RankFailure::kLost) heartbeat_age[f.worker_id] = f.silent;
  }
  const Placement empty;
  const Placement& placement = job.assignment != nullptr ? job.assignment->placement() : empty;
  const RootCause cause = FindRootCause(placement, job.failures, heartbeat_age);
  auto silent = heartbeat_age.find(cause.worker_id);
  bool stopped = false;
  for (const RankFailure& f : job.failures) {
    stopped |= f.cause == RankFailure::kStopped && f.worker_id == cause.worker_id;
  }
  Fail(job, cause.reason, cause.worker_id, cause.curable,
       silent != heartbeat_age.end() ? silent->second : absl::ZeroDuration(), stopped);
}

bool JobManager::FinalStepSealed(const ActiveJob& job) {
  for (const Recovery& r : job.recoveries) {
    if (r.finishing()) return false;  // tried once: its failure is the job's
  }
  absl::StatusOr<std::vector<CheckpointInfo>> sealed = store_->Checkpoints(job.id);
  return sealed.ok() && !sealed->empty() && sealed->back().step() >= job.spec.steps();
}

void JobManager::Fail(ActiveJob& job, const std::string& cause, const std::string& worker,
                      bool curable, absl::Duration silent, bool stopped) {
  // Where the run was stuck before it failed, when its stall was diagnosed: on the first line,
  // which a RECOVERING reason keeps.
  std::string reason = cause;
  if (!job.stall_summary.empty()) {
    reason.insert(std::min(reason.find('\n'), reason.size()),
                  absl::StrCat(" (diagnosed when ", job.diagnosed_when.Describe(), ": ",
                               job.stall_summary, ")"));
  }
  const int max_restarts = job.spec.fault_tolerance().max_restarts();
  const int used = FailureCount(job.recoveries);
  if (FinalStepSealed(job)) {
    // Done is done: whatever failed after the last seal, the weights are exported from it.
    Recovery finish;
    finish.set_finishing(true);
    finish.set_cause(reason);
    finish.set_failed_worker(worker);
    finish.set_detect_ms(absl::ToInt64Milliseconds(silent));
    BeginRecovery(job, std::move(finish),
                  absl::StrCat("step ", job.spec.steps(),
                               ", the last, is sealed: finishing the job from it (not a failure) "
                               "after ",
                               reason.substr(0, reason.find('\n'))),
                  worker);
    return;
  }
  if (stopped && curable) {
    // Maintenance: a worker stopped on purpose is not a failure (a planned restart).
    Recovery maintenance;
    maintenance.set_maintenance(true);
    maintenance.set_cause(reason);
    maintenance.set_failed_worker(worker);
    BeginRecovery(job, std::move(maintenance),
                  absl::StrCat("maintenance (not counted against max_restarts): ",
                               reason.substr(0, reason.find('\n'))),
                  worker);
    return;
  }
  if (!curable || used >= max_restarts) {
    std::string why = reason;
    if (used > 0) {
      why = ReasonNamingEveryFailure(
          absl::StrCat(curable
                           ? absl::StrCat("failed again after ", Plural(used, "recovery"),
                                          " (fault_tolerance.max_restarts=", max_restarts, "): ")
                           : "",
                       reason),
          job.recoveries);
    }
    EndJob(job.id, FAILED, why).IgnoreError();  // logged; retried when it failed
    return;
  }
  Recovery recovery;
  recovery.set_cause(reason);
  recovery.set_failed_worker(worker);
  recovery.set_detect_ms(absl::ToInt64Milliseconds(silent));
  BeginRecovery(job, std::move(recovery),
                absl::StrCat("restart ", used + 1, " of ", max_restarts, ": ",
                             reason.substr(0, reason.find('\n'))),
                worker);
}

void JobManager::BeginRecovery(ActiveJob& job, Recovery recovery, const std::string& why,
                               const std::string& failed_worker) {
  if (options_.metrics != nullptr) options_.metrics->JobRecoveryStarted(RecoveryKind(recovery));
  recovery.set_number(static_cast<int>(job.recoveries.size()) + 1);
  recovery.set_started_unix_ms(NowMs());
  recovery.set_last_step(job.last_step);
  job.recoveries.push_back(std::move(recovery));
  // Stop every rank of the run now: the survivors would otherwise wait on the failed one until
  // their own communication timeout.
  std::vector<std::string> workers;
  job.stopping.clear();
  for (const Rank& r : job.ranks) {
    workers.push_back(r.worker_id);
    if (r.worker_id != failed_worker) job.stopping.push_back(r.worker_id);
  }
  registry_.CancelJob(job.id, workers);
  job.ranks.clear();
  job.rank_of.clear();
  job.failures.clear();
  job.decide_failure_at = absl::InfiniteFuture();
  job.awaiting.clear();
  job.recover_deadline = absl::InfiniteFuture();
  job.stopped = false;
  job.pending_cut.reset();    // a rebalance not begun yet: the new run is measured again
  job.drain_at_seal.clear();  // the new placement leaves drained workers out anyway
  job.phase_start = Now();
  SaveRecoveries(job);
  absl::Status status =
      Transition(job, RECOVERING,
                 absl::StrCat(why, job.stopping.empty()
                                       ? ""
                                       : absl::StrCat("; stopping ",
                                                      failed_worker.empty() ? "its " : "the other ",
                                                      Plural(job.stopping.size(), "rank"))));
  if (!status.ok()) Log(absl::StrCat(job.id, ": ", status.ToString()));
  Wake();
}

void JobManager::MaybeGrowBack(ActiveJob& job, int64_t sealed_step) {
  if (job.state != RUNNING || OpenRecovery(job) != nullptr ||
      job.spec.fault_tolerance().on_worker_loss() != "shrink" || sealed_step >= job.spec.steps()) {
    return;  // (the last step's checkpoint: nothing left to train)
  }
  const int64_t full = plan::WorkersNeeded(job.spec.parallel());
  const int64_t running_on = static_cast<int64_t>(job.ranks.size());
  if (running_on >= full) return;
  // Rare (a shrunk job's checkpoint): one scan of the idle workers.
  const absl::flat_hash_set<std::string> excluded = WorkersFailedTwice(job.recoveries);
  int64_t idle = 0;
  for (const WorkerInfo& w : registry_.IdleWorkers()) {
    // (A rank of this run that already finished is idle too, and counted as running.)
    if (DeviceFits(job.spec.device(), w.device().kind()) && !excluded.contains(w.worker_id()) &&
        !job.rank_of.contains(w.worker_id())) {
      ++idle;
    }
  }
  if (running_on + idle < full) return;
  const ParallelLayout& p = job.spec.parallel();
  Recovery grow;
  grow.set_grow(true);
  grow.set_cause(absl::StrFormat(
      "growing back to dp=%d pp=%d tp=%d at the checkpoint of step %d: %s idle again", p.dp(),
      p.pp(), p.tp(), sealed_step, Plural(idle, "worker")));
  const std::string why = grow.cause();
  BeginRecovery(job, std::move(grow), why, "");
}

Recovery* JobManager::OpenRecovery(ActiveJob& job) {
  if (job.recoveries.empty() || job.recoveries.back().done()) return nullptr;
  return &job.recoveries.back();
}

void JobManager::SaveRecoveries(ActiveJob& job) {
  absl::Status status = store_->SetRecoveries(job.id, job.recoveries);
  if (!status.ok()) {
    Log(absl::StrCat(job.id, ": cannot record its recoveries: ", status.ToString()));
  }
  to_notify_.push_back(job.id);
}

int64_t JobManager::EndPhase(ActiveJob& job) {
  const absl::Time now = Now();
  const int64_t ms = absl::ToInt64Milliseconds(now - job.phase_start);
  job.phase_start = now;
  return std::max<int64_t>(ms, 0);
}

void JobManager::AdvanceRecovery(ActiveJob& job, std::vector<plan::Candidate>* idle,
                                 WorkerCounts* counts) {
  Recovery* r = OpenRecovery(job);
  if (r == nullptr) return;
  const std::string label = absl::StrCat("recovery ", r->number());
  if (!job.stopped) {
    // Stop phase: every old rank's worker reported the run gone (or is lost), at most a lease.
    const bool waited_enough = Now() - job.phase_start >= options_.lease;
    for (const std::string& w : job.stopping) {
      NoteOldRunStep(job, registry_.RunningStep(w, job.id));
    }
    for (const std::string& w : job.stopping) {
      if (!waited_enough && registry_.JobOf(w) == job.id) return;
    }
    r->set_stop_ms(EndPhase(job));
    job.stopped = true;
    SaveRecoveries(job);
    Event(job.id, job.stopping.empty()
                      ? absl::StrCat(label, ": no other rank to stop")
                      : absl::StrFormat("%s: the other %s stopped in %.1fs", label,
                                        Plural(job.stopping.size(), "rank"), r->stop_ms() / 1e3));
  }
  // Place phase: the same layout on idle workers, or fewer replicas ("shrink"), or wait.
  absl::flat_hash_set<std::string> excluded = WorkersFailedTwice(job.recoveries);
  if (!r->replaced_worker().empty()) excluded.insert(r->replaced_worker());  // the straggler
  std::vector<plan::Candidate> candidates;
  for (const plan::Candidate& w : *idle) {
    if (DeviceFits(job.spec.device(), w.worker->device().kind()) &&
        !excluded.contains(w.worker->worker_id())) {
      candidates.push_back(w);
    }
  }
  // The submitted layout when the workers are there (after a shrink too), else the current one.
  const int64_t usable = static_cast<int64_t>(candidates.size());
  JobSpec spec =
      KeepCut(*r, job.run_spec,
              usable >= plan::WorkersNeeded(job.spec.parallel()) ? job.spec : job.run_spec);
  int64_t needed = plan::WorkersNeeded(spec.parallel());
  std::string shrink_note;
  const bool settling = Now() - job.phase_start < options_.shrink_settle;
  if (usable < needed && job.spec.fault_tolerance().on_worker_loss() == "shrink" && !settling) {
    absl::StatusOr<JobPlan> smaller = plan::ShrinkPlan(spec, usable);
    if (smaller.ok()) {
      const ParallelLayout& from = spec.parallel();
      const ParallelLayout& to = smaller->spec().parallel();
      shrink_note = absl::StrFormat(
          "; shrunk from dp=%d pp=%d tp=%d to dp=%d pp=%d tp=%d (batch_size %d: %d "
          "micro-batches per replica)",
          from.dp(), from.pp(), from.tp(), to.dp(), to.pp(), to.tp(), spec.batch_size(),
          smaller->micro_batches());
      spec = smaller->spec();
      needed = plan::WorkersNeeded(spec.parallel());
    }
  }
  if (usable >= needed) {
    absl::Status status = Place(job, spec, candidates, idle, counts);
    if (status.ok()) {
      r = OpenRecovery(job);
      r->set_place_ms(EndPhase(job));
      *r->mutable_layout() = spec.parallel();
      for (const Rank& rank : job.ranks) r->add_workers(rank.worker_id);
      job.run_spec = spec;
      SaveRecoveries(job);
      Event(job.id, absl::StrFormat("%s: placed on %s (dp=%d pp=%d tp=%d)%s; resuming from the "
                                    "job's latest sealed checkpoint",
                                    label, WorkerList({r->workers().begin(), r->workers().end()}),
                                    spec.parallel().dp(), spec.parallel().pp(),
                                    spec.parallel().tp(), shrink_note));
      return;
    }
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      Fail(job, absl::StrCat("cannot place the job: ", status.message()), "", false);
      return;
    }
    Log(absl::StrCat(job.id, ": recovery placement deferred: ", status.ToString()));
  }
  const absl::Duration wait_for = plan::RecoveryWaitFor(job.spec);
  std::string waiting =
      absl::StrCat("waiting up to ", Seconds(wait_for), " (fault_tolerance.wait_for) for ",
                   Plural(needed, "idle worker"), "; ", usable, " usable idle");
  if (usable < needed && settling && job.spec.fault_tolerance().on_worker_loss() == "shrink") {
    waiting = absl::StrCat("waiting ", Seconds(options_.shrink_settle), " for ",
                           Plural(needed, "idle worker"), " (", usable,
                           " usable idle) before shrinking: workers may be coming back");
  }
  if (!excluded.empty()) {
    std::vector<std::string> names(excluded.begin(), excluded.end());
    std::sort(names.begin(), names.end());
    absl::StrAppend(&waiting, " (not ", WorkerList(names), ": failed this job twice)");
  }
  if (Now() - job.phase_start >= wait_for) {
    EndJob(job.id, FAILED,
           ReasonNamingEveryFailure(absl::StrCat(label, " found no workers: ", waiting),
                                    job.recoveries))
        .IgnoreError();
    return;
  }
  const std::string reason =
      r->grow()          ? absl::StrCat("growing back: ", waiting)
      : r->finishing()   ? absl::StrCat("finishing from the sealed last step: ", waiting)
      : r->maintenance() ? absl::StrCat("maintenance restart: ", waiting)
      : !r->replaced_worker().empty()
          ? absl::StrCat("replacing straggler ", r->replaced_worker(), ": ", waiting)
          : absl::StrCat("restart ", FailureCount(job.recoveries), " of ",
                         job.spec.fault_tolerance().max_restarts(), ": ", waiting);
  if (reason != job.reason) {
    absl::Status status = Transition(job, RECOVERING, reason);
    if (!status.ok()) Log(absl::StrCat(job.id, ": ", status.ToString()));
  }
}

void JobManager::NotePause(absl::Duration paused) {
  const std::string text =
      absl::StrCat("the coordinator's own process did not run for ", Seconds(paused),
                   " (a VM stall, swap, SIGSTOP?); every worker has ", Seconds(options_.lease),
                   " (the lease) to report again before any is declared lost");
  Log(text);
  const absl::Time now = Now();
  for (auto& [n, job] : jobs_) {
    Event(job.id, text);
    if (!job.awaiting.empty()) {
      job.recover_deadline = std::max(job.recover_deadline, now + options_.lease);
    }
  }
}

void JobManager::NoteOldRunStep(ActiveJob& job, int64_t step) {
  Recovery* r = OpenRecovery(job);
  if (r == nullptr || step <= r->last_step()) return;
  r->set_last_step(step);
  if (r->workers_size() > 0 && job.run_located) {
    r->set_steps_redone(std::max<int64_t>(0, step - r->resumed_from_step()));
  }
  SaveRecoveries(job);
}

void JobManager::SweepLocked(absl::Time now) {
  for (const WorkerFault& fault : registry_.Sweep(now)) HandleFault(fault);
  std::vector<std::pair<std::string, std::pair<JobState, std::string>>> to_end;
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> not_returned;
  std::vector<std::string> to_fail;
  for (auto& [n, job] : jobs_) {
    if (job.pending_end.has_value()) {
      to_end.push_back({job.id, *job.pending_end});
    } else if (now >= job.decide_failure_at && !AwaitsDiagnosis(job, now)) {
      to_fail.push_back(job.id);
    } else if (!job.awaiting.empty() && now > job.recover_deadline) {
      std::vector<std::string> missing(job.awaiting.begin(), job.awaiting.end());
      std::sort(missing.begin(), missing.end());
      not_returned.push_back(
          {job.id,
           {absl::StrCat("coordinator restarted and ", missing.size() == 1 ? "worker " : "workers ",
                         WorkerList(missing), " did not return within the lease (",
                         Seconds(options_.lease), ")"),
            missing.front()}});
    }
  }
  for (const auto& [id, end] : to_end) EndJob(id, end.first, end.second).IgnoreError();
  for (const auto& [id, why] : not_returned) {
    if (ActiveJob* job = FindActive(id)) Fail(*job, why.first, why.second, /*curable=*/true);
  }
  for (const std::string& id : to_fail) {
    if (ActiveJob* job = FindActive(id)) FailWithRootCause(*job);
  }
}

std::string JobManager::WaitingReason(const JobSpec& spec, const WorkerCounts& counts) {
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  const std::string& device = spec.device();
  if (DeviceFits(device, "cpu") && DeviceFits(device, "cuda")) {
    return absl::StrCat("waiting for ", Plural(needed, "idle worker"), "; ", counts.idle, " idle, ",
                        counts.busy, " busy, ", counts.lost, " lost");
  }
  // A job for one kind of device: count that kind (a scan; only for such jobs).
  const std::string kind = DeviceFits(device, "cuda") ? "cuda" : "cpu";
  WorkerCounts fit;
  for (const WorkerInfo& w : registry_.List()) {
    if (w.device().kind() != kind) continue;
    (w.state() == IDLE ? fit.idle : w.state() == BUSY ? fit.busy : fit.lost)++;
  }
  return absl::StrCat("waiting for ", Plural(needed, absl::StrCat("idle ", kind, " worker")), "; ",
                      kind, " workers: ", fit.idle, " idle, ", fit.busy, " busy, ", fit.lost,
                      " lost (", counts.idle + counts.busy, " live workers in all)");
}

void JobManager::RunSchedulerPass() {
  DiagnoseStalledJobs();  // under its own lock: the diagnoses start outside it
  JobsLock lock(this);
  SweepLocked(Now());
  if (const std::optional<absl::Duration> paused = registry_.TakePause()) NotePause(*paused);
  ScoreStragglers();
  std::vector<ActiveJob*> queued, recovering;
  for (auto& [n, job] : jobs_) {
    if (job.pending_end.has_value()) continue;
    if (job.state == QUEUED) queued.push_back(&job);
    if (job.state == RECOVERING) recovering.push_back(&job);
  }
  if (queued.empty() && recovering.empty()) return;
  WorkerCounts counts = registry_.Counts();
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (const ActiveJob* job : queued) {
    smallest = std::min(smallest, plan::WorkersNeeded(job->spec.parallel()));
  }
  // The idle workers (shared, not copied) only when some job can use them. Recovering jobs go
  // first: they hold checkpoints and their users' time.
  std::vector<plan::Candidate> idle;
  if (!recovering.empty() || counts.idle >= smallest) idle = registry_.IdleCandidates();
  for (ActiveJob* job : recovering) AdvanceRecovery(*job, &idle, &counts);
  // Submission order; a job that does not fit does not hold back smaller ones behind it.
  for (ActiveJob* job : queued) {
    const int64_t needed = plan::WorkersNeeded(job->spec.parallel());
    // The idle workers as they are when the job takes any device (no copy of 50,000 workers).
    std::vector<plan::Candidate> filtered;
    const bool any_device =
        DeviceFits(job->spec.device(), "cpu") && DeviceFits(job->spec.device(), "cuda");
    if (!any_device) {
      for (const plan::Candidate& w : idle) {
        if (DeviceFits(job->spec.device(), w.worker->device().kind())) filtered.push_back(w);
      }
    }
    const std::vector<plan::Candidate>& candidates = any_device ? idle : filtered;
    if (static_cast<int64_t>(candidates.size()) >= needed) {
      absl::Status status = Place(*job, job->spec, candidates, &idle, &counts);
      if (status.ok()) continue;
      if (status.code() == absl::StatusCode::kInvalidArgument) {
        EndJob(job->id, FAILED, absl::StrCat("cannot place the job: ", status.message()))
            .IgnoreError();
        continue;
      }
      Log(absl::StrCat(job->id, ": placement deferred: ", status.ToString()));
      // Enough workers, but some rank fits on none of them: that is what it waits for.
      if (status.code() == absl::StatusCode::kResourceExhausted) {
        const std::string reason = absl::StrCat("waiting for memory: ", status.message());
        if (reason != job->reason) {
          absl::Status s = Transition(*job, QUEUED, reason);
          if (!s.ok()) Log(absl::StrCat(job->id, ": ", s.ToString()));
        }
        continue;
      }
    }
    const std::string reason = WaitingReason(job->spec, counts);
    if (reason != job->reason) {
      absl::Status status = Transition(*job, QUEUED, reason);
      if (!status.ok()) Log(absl::StrCat(job->id, ": ", status.ToString()));
    }
  }
}

absl::Status JobManager::Place(ActiveJob& job, const JobSpec& spec,
                               const std::vector<plan::Candidate>& candidates,
                               std::vector<plan::Candidate>* idle, WorkerCounts* counts) {
  const absl::Time start = absl::Now();  // the real clock: this times computation
  // Planned from the stored spec (pure and bounded), once per spec (ActiveJob::plan): a spec an
  // older coordinator accepted that the plan now rejects fails with the plan's words
  // (InvalidArgument).
  std::string spec_key = spec.SerializeAsString();
  if (job.plan == nullptr || job.plan_spec != spec_key) {
    ASSIGN_OR_RETURN(JobPlan planned, plan::MakeJobPlan(spec));
    job.plan = std::make_shared<const JobPlan>(std::move(planned));
    job.plan_spec = std::move(spec_key);
  }
  const JobPlan& job_plan = *job.plan;
  absl::StatusOr<plan::PlacementResult> computed = plan::PlaceJobOnCandidates(job_plan, candidates);
  if (options_.metrics != nullptr) options_.metrics->PlacementComputed(absl::Now() - start);
  ASSIGN_OR_RETURN(plan::PlacementResult placed, std::move(computed));
  // Every run its own secret: a worker of an earlier run (or of another job) cannot open a
  // peer stream into this one. Stored with the placement below.
  ASSIGN_OR_RETURN(*placed.placement.mutable_peer_secret(), NewPeerSecret());
  auto assignment = std::make_shared<JobAssignment>();
  assignment->set_job_id(job.id);
  assignment->set_job_uid(job.uid);
  assignment->set_attempt(static_cast<int>(job.recoveries.size()));
  // The planned spec (every default set: workers plan nothing) and the plan, of which each rank
  // is sent its part (rank_assignment.h).
  *assignment->mutable_spec() = job_plan.spec();
  *assignment->mutable_placement() = placed.placement;
  *assignment->mutable_job_plan() = job_plan;
  RETURN_IF_ERROR(registry_.Assign(assignment, Now()));

  std::vector<std::string> workers;
  for (const RankAssignment& r : placed.placement.ranks()) workers.push_back(r.worker_id());
  const std::string reason =
      absl::StrCat("placed on ", Plural(workers.size(), "worker"), " (", WorkerList(workers),
                   "); waiting for ", workers.size() == 1 ? "it" : "them", " to start");
  absl::Status status = Transition(job, PLACING, reason, &placed.placement);
  if (!status.ok()) {
    registry_.CancelJob(job.id, workers);  // undelivered: frees them at once
    return status;
  }
  if (options_.metrics != nullptr && job.recoveries.empty()) {
    options_.metrics->JobPlaced(Now() - job.submitted);
  }
  SetRanks(job, std::move(assignment));
  job.run_located = false;

  std::vector<std::string> stages;
  const Placement& p = placed.placement;
  for (int s = 0; s < p.stage_costs_size(); ++s) {
    const RankAssignment& r = p.ranks(s * spec.parallel().tp());
    stages.push_back(absl::StrFormat("pp%d layers [%d, %d) cost %.2f", s, r.first_layer(),
                                     r.first_layer() + r.num_layers(), p.stage_costs(s)));
  }
  Event(job.id, absl::StrCat("stages: ", absl::StrJoin(stages, "; ")));
  if (placed.split_tp_groups > 0) {
    Event(job.id, absl::StrCat(Plural(placed.split_tp_groups, "tensor-parallel group"),
                               " span more than one host"));
  }
  // `candidates` may be *idle itself: it is not read after this.
  const absl::flat_hash_set<std::string> used(workers.begin(), workers.end());
  idle->erase(std::remove_if(
                  idle->begin(), idle->end(),
                  [&](const plan::Candidate& w) { return used.contains(w.worker->worker_id()); }),
              idle->end());
  counts->idle -= static_cast<int>(workers.size());
  counts->busy += static_cast<int>(workers.size());
  return absl::OkStatus();
}

void JobManager::MarkAcked(ActiveJob& job, const std::string& worker_id) {
  auto it = job.rank_of.find(worker_id);
  if (it == job.rank_of.end()) return;
  job.ranks[it->second].acked = true;
  if (job.state != PLACING) return;
  for (const Rank& r : job.ranks) {
    if (!r.acked) return;
  }
  const std::string reason = job.ranks.size() == 1
                                 ? absl::StrCat("worker ", job.ranks[0].worker_id, " running")
                                 : absl::StrCat("all ", job.ranks.size(), " workers running");
  absl::Status status = Transition(job, RUNNING, reason);
  if (!status.ok()) Log(absl::StrCat(job.id, ": ", status.ToString()));
}

// --- RPCs ---

absl::StatusOr<RegisterWorkerResponse> JobManager::RegisterWorker(
    const RegisterWorkerRequest& request) {
  const std::string& worker_id = request.worker_id();
  JobsLock lock(this);
  const absl::Time now = Now();
  // No sweep here (O(workers): a registration storm of 50,000 workers would be quadratic): an
  // expired old session that still holds a job is reported by Register (`replaced`) and fails
  // that job below, before the id is reused.

  std::string attach;
  std::optional<Delivery> resend;
  std::string resend_job, abandoned_job;
  if (!request.running_job_id().empty()) {
    ActiveJob* job = FindActive(request.running_job_id());
    if (job != nullptr && job->state != QUEUED && job->state != RECOVERING &&
        job->rank_of.contains(worker_id)) {
      attach = job->id;
    } else {
      Log(absl::StrCat("worker ", worker_id, " registers running ", request.running_job_id(),
                       ", which is not its job; it will be told to stop"));
      if (job != nullptr) NoteOldRunStep(*job, request.running_step());
    }
  } else {
    for (auto& [n, job] : jobs_) {
      if (!job.awaiting.contains(worker_id)) continue;
      auto rank = job.rank_of.find(worker_id);
      if (job.state == PLACING && rank != job.rank_of.end()) {
        resend = Delivery{job.assignment, rank->second};
        resend_job = job.id;
      } else {
        abandoned_job = job.id;
      }
      break;
    }
  }
  ASSIGN_OR_RETURN(WorkerRegistry::RegisterResult result,
                   registry_.Register(request, now, attach, resend ? &*resend : nullptr));
  if (result.replaced.has_value()) HandleFault(*result.replaced);
  Log(absl::StrCat("worker ", worker_id, result.new_session ? " registered" : " re-registered",
                   " (session ", request.session_id(), ", ", request.address(), ", host \"",
                   request.host_label(), "\", ", request.device().kind(), " ",
                   request.device().name(), ")", attach.empty() ? "" : " running " + attach));

  if (!request.previous_run().job_id().empty()) {
    // Its previous process died running that job (common/run_record.h): say how, in the job's
    // log (the job may have moved on or ended since).
    const std::string line = DescribePreviousRun(worker_id, request.previous_run());
    Log(line);
    if (IsJobId(request.previous_run().job_id()) &&
        store_->GetJob(request.previous_run().job_id(), /*with_history=*/false).ok()) {
      Event(request.previous_run().job_id(), line);
    }
  }
  auto returned = [&](ActiveJob& job, const std::string& what) {
    if (job.awaiting.erase(worker_id) == 0) return;
    Event(job.id, absl::StrCat("worker ", worker_id, " ", what, " after the coordinator restart"));
    if (job.awaiting.empty()) job.recover_deadline = absl::InfiniteFuture();
  };
  if (ActiveJob* job = attach.empty() ? nullptr : FindActive(attach)) {
    returned(*job, absl::StrCat("re-attached at step ", request.running_step()));
    MarkAcked(*job, worker_id);
  }
  if (ActiveJob* job = resend_job.empty() ? nullptr : FindActive(resend_job)) {
    returned(*job, "came back without the job; assignment sent again");
  }
  if (ActiveJob* job = abandoned_job.empty() ? nullptr : FindActive(abandoned_job)) {
    Fail(*job,
         absl::StrCat("coordinator restarted and worker ", worker_id, " re-registered without ",
                      abandoned_job),
         worker_id, /*curable=*/true);
  }
  Wake();
  RegisterWorkerResponse response;
  const HeartbeatPace pace = registry_.pace();
  response.set_lease_ms(absl::ToInt64Milliseconds(pace.lease));
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(pace.interval));
  return response;
}

absl::StatusOr<HeartbeatResponse> JobManager::Heartbeat(const HeartbeatRequest& request) {
  ASSIGN_OR_RETURN(WorkerRegistry::HeartbeatResult result, registry_.Heartbeat(request, Now()));
  if (request.timings_size() > 0 && !result.response.register_again()) QueueTimings(request);
  if (!result.acked_job.empty()) {
    JobsLock lock(this);
    if (ActiveJob* job = FindActive(result.acked_job)) MarkAcked(*job, request.worker_id());
  }
  if (result.released) Wake();
  return std::move(result.response);
}

absl::StatusOr<ReportProgressResponse> JobManager::ReportProgress(
    const ReportProgressRequest& request) {
  if (request.worker_id().empty() || request.job_id().empty()) {
    return absl::InvalidArgumentError("worker_id and job_id must not be empty");
  }
  ReportProgressResponse response;
  JobsLock lock(this);
  const absl::Time now = Now();
  ActiveJob* job = FindActive(request.job_id());
  if (job == nullptr) {
    // Unknown: NotFound. Ended (cancelled, or failed by another rank): stop.
    RETURN_IF_ERROR(store_->GetJob(request.job_id(), /*with_history=*/false).status());
    response.set_cancelled(true);
    return response;
  }
  auto rank_it = job->rank_of.find(request.worker_id());
  if (rank_it == job->rank_of.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(job->id, " has no rank on worker ", request.worker_id()));
  }
  const int rank = rank_it->second;
  ASSIGN_OR_RETURN(bool first,
                   registry_.Report(request.worker_id(), request.session_id(), job->id, now));
  if (first) MarkAcked(*job, request.worker_id());
  const RankAssignment& where = job->assignment->placement().ranks(rank);
  const std::string who =
      absl::StrCat("worker ", request.worker_id(), " (", plan::RankLabel(where), ")");
  const LineSource source{rank, request.worker_id(), LOG_INFO};

  switch (request.report_case()) {
    case ReportProgressRequest::kStep: {
      if (rank != job->reporting_rank) break;  // one rank speaks for the job
      StepMetrics step = request.step();
      if (step.time_unix_ms() == 0) step.set_time_unix_ms(absl::ToUnixMillis(now));
      Recovery* r = OpenRecovery(*job);
      // The first step of a recovery's run replaces the old run's rows from it on: the steps
      // after it are redone, and watchers are sent them again (coordinator_service.cc).
      RETURN_IF_ERROR(store_->AppendMetrics(job->id, step, /*drop_later=*/r != nullptr));
      job->last_step = std::max(job->last_step, step.step());
      job->progress_at = now;
      job->stall_diagnosed = false;
      job->stall_summary.clear();
      if (r != nullptr) {
        // The recovery is done. Rank 0's location (the step it resumed from) may come later,
        // from another worker: the run resumed from the step before its first.
        if (!job->run_located) {
          r->set_resumed_from_step(step.step() - 1);
          r->set_steps_redone(std::max<int64_t>(0, r->last_step() - r->resumed_from_step()));
          r->set_load_ms(EndPhase(*job));
        }
        r->set_first_step_ms(EndPhase(*job));
        r->set_done(true);
        job->last_step = step.step();
        SaveRecoveries(*job);
        const int64_t total =
            r->detect_ms() + r->stop_ms() + r->place_ms() + r->load_ms() + r->first_step_ms();
        if (options_.metrics != nullptr) {
          options_.metrics->JobRecovered(absl::Milliseconds(total));
        }
        Event(job->id, absl::StrCat("recovery ", r->number(), " done: training again at step ",
                                    step.step(), "; ", PhaseSummary(*r)));
      }
      to_notify_.push_back(job->id);
      break;
    }
    case ReportProgressRequest::kEvent:
      RETURN_IF_ERROR(store_
                          ->AppendEvent(job->id, absl::StrCat(who, ": ", request.event()),
                                        absl::ToUnixMillis(now), source)
                          .status());
      to_notify_.push_back(job->id);
      break;
    case ReportProgressRequest::kLog: {
      LineSource line = source;
      line.severity = request.log().severity();
      RETURN_IF_ERROR(store_
                          ->AppendEvent(job->id, absl::StrCat(who, ": ", request.log().text()),
                                        absl::ToUnixMillis(now), line)
                          .status());
      to_notify_.push_back(job->id);
      break;
    }
    case ReportProgressRequest::kCheckpoint: {
      CheckpointInfo sealed;
      sealed.set_step(request.checkpoint().step());
      sealed.set_path(request.checkpoint().path());
      sealed.set_time_unix_ms(absl::ToUnixMillis(now));
      sealed.set_dir_bytes(request.checkpoint().dir_bytes());
      RETURN_IF_ERROR(store_->AddCheckpoint(job->id, sealed));
      to_notify_.push_back(job->id);
      MaybeGrowBack(*job, sealed.step());
      MaybeRebalanceAt(*job, sealed.step());
      MaybeMoveOffDrained(*job);
      break;
    }
    case ReportProgressRequest::kLocation: {
      const JobLocation& at = request.location();
      Recovery* r = job->recoveries.empty() || job->run_located ? nullptr : &job->recoveries.back();
      job->run_located = true;
      int64_t resumed_from_step = at.resumed_from_step();
      if (!job->recoveries.empty()) {
        // Job.resumed_from_step stays the first run's (a resume_from of the spec).
        ASSIGN_OR_RETURN(Job stored, store_->GetJob(job->id, /*with_history=*/false));
        resumed_from_step = stored.resumed_from_step();
      }
      RETURN_IF_ERROR(store_->SetLocation(job->id, at.dir(), at.host(),
                                          job->spec.checkpoint().interval_steps(),
                                          resumed_from_step));
      if (r != nullptr && r->workers_size() > 0) {
        // The new run loaded its checkpoint: the steps after it are trained again.
        r->set_resumed_from_step(at.resumed_from_step());
        r->set_steps_redone(std::max<int64_t>(0, r->last_step() - at.resumed_from_step()));
        // The run found the last step sealed (its seal was not reported before the failure):
        // it only finishes the job, which is no failure either.
        if (at.resumed_from_step() >= job->spec.steps()) r->set_finishing(true);
        if (!r->done()) {
          r->set_load_ms(EndPhase(*job));
          job->last_step = at.resumed_from_step();
        }
        SaveRecoveries(*job);
        Event(job->id, absl::StrCat("recovery ", r->number(), ": resumed from ",
                                    at.resumed_from_step() > 0
                                        ? absl::StrCat("step ", at.resumed_from_step(), " (",
                                                       at.resumed_from(), ")")
                                        : "the start (no checkpoint sealed yet)",
                                    r->steps_redone() > 0 ? absl::StrCat("; redoing steps ",
                                                                         at.resumed_from_step() + 1,
                                                                         "-", r->last_step())
                                                          : ""));
      }
      break;
    }
    case ReportProgressRequest::kOutcome: {
      const JobOutcome& outcome = request.outcome();
      registry_.Release(request.worker_id(), job->id, now);
      Wake();
      if (!outcome.succeeded()) {
        RankFailure failure;
        failure.cause = CauseOf(outcome.kind());
        failure.rank = rank;
        failure.worker_id = request.worker_id();
        failure.error = outcome.error().empty() ? "no error message" : outcome.error();
        failure.error_code = outcome.error_code();
        failure.suspects.assign(outcome.suspect_workers().begin(), outcome.suspect_workers().end());
        AddFailure(*job, std::move(failure));
        break;
      }
      job->ranks[rank].succeeded = true;
      if (rank == job->reporting_rank) job->end_reason = outcome.end_reason();
      if (!outcome.output().empty() && (rank == job->reporting_rank || job->output.empty())) {
        job->output = outcome.output();
        if (!outcome.output_host().empty()) {
          RETURN_IF_ERROR(store_->SetOutputHost(job->id, outcome.output_host()));
        }
      }
      for (const Rank& r : job->ranks) {
        if (!r.succeeded) return response;
      }
      if (Recovery* r = OpenRecovery(*job)) {  // a finishing run: no step, only the export
        r->set_first_step_ms(EndPhase(*job));
        r->set_done(true);
        SaveRecoveries(*job);
        Event(job->id, absl::StrCat("recovery ", r->number(), " done: ", PhaseSummary(*r)));
      }
      std::string reason = absl::StrCat("finished ", Plural(job->last_step, "step"));
      const EndReason end =
          job->end_reason == END_EARLY_STOPPED ? END_EARLY_STOPPED : END_STEPS_DONE;
      if (end == END_EARLY_STOPPED) {
        const EarlyStopping& stop = job->spec.eval().early_stopping();
        reason = absl::StrCat("stopped early at step ", job->last_step, " of ", job->spec.steps(),
                              ": val_loss did not improve by more than ", stop.min_delta(), " in ",
                              Plural(stop.patience(), "evaluation"));
      }
      RETURN_IF_ERROR(store_->SetEndReason(job->id, end));
      if (!job->output.empty()) absl::StrAppend(&reason, "; weights at ", job->output);
      RETURN_IF_ERROR(EndJob(job->id, SUCCEEDED, reason));
      break;
    }
    case ReportProgressRequest::REPORT_NOT_SET:
      return absl::InvalidArgumentError("report carries none of step, event, outcome");
  }
  return response;
}

absl::Status JobManager::ResolveResumeFrom(JobSpec* spec, std::vector<std::string>* notes) {
  const std::string from = spec->resume_from();
  if (!IsJobId(from)) return absl::OkStatus();  // a path on the workers: they check it
  absl::StatusOr<Job> source = store_->GetJob(from, /*with_history=*/false);
  if (absl::IsNotFound(source.status())) {
    return plan::InvalidSpec(absl::StrCat("resume_from=\"", from, "\": there is no such job"));
  }
  RETURN_IF_ERROR(source.status());
  ASSIGN_OR_RETURN(std::vector<CheckpointInfo> sealed, store_->Checkpoints(from));
  if (sealed.empty()) {
    return plan::InvalidSpec(absl::StrCat(
        "resume_from=\"", from, "\": ", from, " has no sealed checkpoint to resume from (",
        source->spec().checkpoint().dir().empty()
            ? "its spec has no checkpoint.dir"
            : absl::StrCat("none was sealed in ", source->checkpoint().dir().empty()
                                                      ? source->spec().checkpoint().dir()
                                                      : source->checkpoint().dir()),
        ")"));
  }
  const CheckpointInfo& latest = sealed.back();
  if (spec->steps() <= latest.step()) {
    return plan::InvalidSpec(
        absl::StrCat("steps=", spec->steps(), " is not beyond step ", latest.step(), " of ", from,
                     "'s latest sealed checkpoint (", latest.path(),
                     "): there is nothing to train (set steps above ", latest.step(), ")"));
  }
  spec->set_resume_from(latest.path());
  notes->push_back(absl::StrCat("resume_from ", from, " is its latest sealed checkpoint: step ",
                                latest.step(), " at ", latest.path(),
                                source->checkpoint().host().empty()
                                    ? ""
                                    : absl::StrCat(" on ", source->checkpoint().host())));
  return absl::OkStatus();
}

std::optional<std::string> JobManager::NoWorkerCanHold(const JobPlan& job_plan) const {
  // Fast answer first (no copies): as many live workers with room for the largest rank as the
  // job has ranks means every rank fits.
  int64_t largest = 0;
  for (const StagePlan& stage : job_plan.stages()) {
    largest = std::max(largest, stage.memory().total());
  }
  const std::string& device = job_plan.spec().device();
  if (registry_.CountWithRoom(largest, [&](const WorkerInfo& w) {
        return DeviceFits(device, w.device().kind());
      }) >= plan::WorkersNeeded(job_plan.spec().parallel())) {
    return std::nullopt;
  }
  // Every live worker of the job's device kind as if idle, with the memory it would have with
  // nothing running on its host (MemoryShare, not idle).
  std::vector<WorkerInfo> able;
  absl::flat_hash_map<std::string, HostShare> hosts;
  for (const WorkerInfo& w : registry_.List()) {
    if (w.state() == LOST || !DeviceFits(job_plan.spec().device(), w.device().kind())) continue;
    able.push_back(w);
    HostShare& host = hosts[w.host_id()];
    host.host_bytes = std::max(host.host_bytes, w.host_memory_bytes());
    ++host.live;
  }
  if (static_cast<int64_t>(able.size()) < plan::WorkersNeeded(job_plan.spec().parallel())) {
    return std::nullopt;  // too few workers: SubmitJob warns about that
  }
  for (WorkerInfo& w : able) {
    if (w.device().kind() != "cpu" || w.host_id().empty()) continue;
    w.mutable_device()->set_memory_bytes(
        MemoryShare(w.offered_memory_bytes(), hosts.at(w.host_id()), /*idle=*/false));
    w.set_state(IDLE);
  }
  absl::StatusOr<plan::PlacementResult> placed = plan::PlaceJob(job_plan, able);
  if (placed.ok() || !absl::IsResourceExhausted(placed.status())) return std::nullopt;
  std::string message(placed.status().message());
  absl::StrReplaceAll({{"idle worker", "worker"}}, &message);
  return message;
}

absl::StatusOr<SubmitJobResponse> JobManager::SubmitJob(const SubmitJobRequest& request,
                                                        absl::Time deadline) {
  ASSIGN_OR_RETURN(JobPlan job_plan,
                   PlanSubmission(request, options_.max_spec_bytes, options_.job_limits));
  std::optional<std::string> too_big = NoWorkerCanHold(job_plan);
  if (too_big.has_value() && !request.allow_waiting()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no registered worker can ever hold this job: ", *too_big,
                     " (submit with --allow_waiting to queue it for workers that may join)"));
  }
  JobSpec spec = std::move(*job_plan.mutable_spec());
  std::vector<std::string> notes;
  RETURN_IF_ERROR(ResolveResumeFrom(&spec, &notes));
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  SubmitJobResponse response;
  JobsLock lock(this);
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(
        "the client's deadline passed while the spec was checked; no job was created");
  }
  const WorkerCounts counts = registry_.Counts();
  // Live workers that could ever run it (its device kind), to warn when there are too few, and
  // for the paths rule the roots of those that declared any: each must allow every path.
  const WorkerRegistry::LiveRoots live = registry_.RootsOfLive(
      [&](const WorkerInfo& w) { return DeviceFits(spec.device(), w.device().kind()); });
  const int64_t able = live.count;
  // Paths outside any such worker's roots, or climbing out with "..": refused now rather than
  // failing on the worker (which checks them again after symlinks).
  RETURN_IF_ERROR(plan::CheckSpecPaths(spec, live.roots));
  if (able < needed) {
    const bool any_device = DeviceFits(spec.device(), "cpu") && DeviceFits(spec.device(), "cuda");
    const std::string worker =
        any_device ? "worker"
                   : absl::StrCat(DeviceFits(spec.device(), "cuda") ? "cuda" : "cpu", " worker");
    response.add_warnings(absl::StrCat("the job needs ", Plural(needed, worker), " and ",
                                       Plural(able, worker), able == 1 ? " is" : " are",
                                       " registered: it stays QUEUED until enough register"));
  }
  if (std::optional<std::string> off = plan::CheckpointsOffWarning(spec)) {
    response.add_warnings(*off);
  }
  if (too_big.has_value()) {
    response.add_warnings(absl::StrCat("no registered worker can hold this job: ", *too_big,
                                       "; it stays QUEUED until workers with room register"));
  }
  const std::string reason =
      counts.idle >= needed ? "queued; placing it now" : WaitingReason(spec, counts);
  ASSIGN_OR_RETURN(Job job, store_->CreateJob(spec, reason, NowMs(), NewUid()));
  for (const std::string& note : notes) Event(job.id(), note);
  for (const std::string& warning : response.warnings()) Event(job.id(), warning);
  ActiveJob active;
  active.id = job.id();
  active.uid = job.uid();
  active.spec = spec;
  active.run_spec = spec;
  active.submitted = absl::FromUnixMillis(job.submitted_unix_ms());
  active.state = QUEUED;
  active.reason = reason;
  jobs_.emplace(JobNumber(job.id()), std::move(active));
  Log(absl::StrCat(job.id(), ": submitted \"", spec.name(), "\" needing ", Plural(needed, "worker"),
                   ": ", reason));
  if (options_.metrics != nullptr) options_.metrics->JobSubmitted();
  Wake();
  *response.mutable_job() = std::move(job);
  return response;
}

absl::StatusOr<Job> JobManager::GetJob(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id, /*with_history=*/true));
  JobsLock lock(this);
  AddStragglerScores(&job);
  // A run that made no step for longer than two heartbeats says so instead of its start's
  // "all N workers running" (a partition between workers shows no other way until a timeout).
  // Live only: nothing is stored, so the history keeps its transitions.
  const ActiveJob* active = FindActive(job_id);
  const absl::Duration quiet =
      active != nullptr ? Now() - active->progress_at : absl::ZeroDuration();
  if (active != nullptr && job.state() == RUNNING && quiet > 2 * options_.heartbeat_interval) {
    job.set_reason(absl::StrFormat(
        "stalled? no step for %.1fs %s (its workers heartbeat every %s; `dtrain diagnose %s` "
        "shows where each rank waits)",
        absl::ToDoubleSeconds(quiet),
        active->last_step > 0 ? absl::StrCat("after step ", active->last_step)
                              : std::string("since the run started"),
        absl::FormatDuration(options_.heartbeat_interval), job_id));
  }
  return job;
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
  std::optional<absl::string_view> name;
  if (!request.name().empty()) name = request.name();
  ASSIGN_OR_RETURN(JobPage page, store_->ListJobs(std::min(request.limit(), kMaxListedJobs), states,
                                                  before_seq, name));
  ListJobsResponse response;
  for (Job& job : page.jobs) *response.add_jobs() = std::move(job);
  if (page.next_before_seq > 0) response.set_next_page_token(absl::StrCat(page.next_before_seq));
  return response;
}

absl::StatusOr<Job> JobManager::CancelJob(const std::string& job_id, const std::string& reason) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  JobsLock lock(this);
  if (FindActive(job_id) == nullptr) {
    ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id, /*with_history=*/false));
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " already ended ", JobState_Name(job.state()), ": ", job.reason()));
  }
  RETURN_IF_ERROR(
      EndJob(job_id, CANCELLED,
             reason.empty() ? "cancelled by user" : absl::StrCat("cancelled: ", reason)));
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
  return RebalanceLocked(*job, stage_compute_s, why);
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

absl::Status JobManager::ForgetWorker(const std::string& worker_id) {
  if (worker_id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  RETURN_IF_ERROR(registry_.Forget(worker_id));
  Log(absl::StrCat("worker ", worker_id, " forgotten"));
  return absl::OkStatus();
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
