#include "coordinator/job_manager.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/peer_secret.h"
#include "common/status_macros.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/rank_assignment.h"
#include "coordinator/recovery.h"
#include "coordinator/submit_spec.h"
#include "plan/job_plan.h"
#include "plan/placement.h"
#include "plan/ranks.h"
#include "plan/spec_paths.h"

namespace dtrain::coordinator {

// The reason of a job submitted while idle workers can run it: the next pass places it.
constexpr absl::string_view kPlacingNow = "queued; placing it now";

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

std::string JobManager::WaitingReason(const JobSpec& spec, const WorkerCounts& counts) {
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  const std::string& device = spec.device();
  if (AnyDevice(device)) {
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
  DeleteExpiredLocked(Now());
  removals_.ExpireWaiters(absl::Now());  // DeleteJob's calls that waited long enough
  // A removal whose worker is gone goes to another live worker on its host.
  removals_.Reassign(
      Now(), [this](const std::string& id) { return registry_.IsLive(id); },
      [this](const std::string& host) { return registry_.LiveWorkerOnHost(host); });
  if (const std::optional<absl::Duration> paused = registry_.TakePause()) NotePause(*paused);
  ScoreStragglers();
  std::vector<std::string> planned;  // restarts the straggler policies proposed
  for (const auto& [n, job] : jobs_) {
    if (job.planned.restart.has_value()) planned.push_back(job.id);
  }
  for (const std::string& id : planned) Reconcile(id).IgnoreError();  // logged; retried
  PublishCheckpointsWanted();
  const std::vector<ActiveJob*> queued = QueueInOrder();
  std::vector<ActiveJob*> recovering;
  for (auto& [n, job] : jobs_) {
    if (!job.pending_end.has_value() && job.state == RECOVERING) recovering.push_back(&job);
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
  PlaceQueued(queued, &idle, &counts);
  AnnounceQueuePositions();
}

void JobManager::PlaceQueued(const std::vector<ActiveJob*>& queued,
                             std::vector<plan::Candidate>* idle_workers, WorkerCounts* counts_now) {
  std::vector<plan::Candidate>& idle = *idle_workers;
  WorkerCounts& counts = *counts_now;
  // The queue's order (QueueOrder); a job that does not fit does not hold back smaller ones
  // behind it, unless it has waited past Options::queue_reservation (then `holder`).
  const ActiveJob* holder = nullptr;
  bool holder_preempts = false;  // it holds the workers of the jobs it preempted
  absl::flat_hash_map<std::string, int64_t> held = WorkersHeldByOwner();  // grows as jobs go
  for (ActiveJob* job : queued) {
    const int64_t needed = plan::WorkersNeeded(job->spec.parallel());
    // A job over its owner's share waits, holding back nobody.
    if (std::optional<std::string> over = OwnerQuotaWait(job->owner, needed, held[job->owner])) {
      SetQueuedReason(*job, *over);
      continue;
    }
    if (holder != nullptr && SameWorkers(holder->spec.device(), job->spec.device())) {
      SetQueuedReason(*job, HeldBackReason(job->spec, *holder, counts, holder_preempts));
      continue;
    }
    // The idle workers as they are when the job takes any device (no copy of 50,000 workers).
    std::vector<plan::Candidate> filtered;
    const bool any_device = AnyDevice(job->spec.device());
    if (!any_device) {
      for (const plan::Candidate& w : idle) {
        if (DeviceFits(job->spec.device(), w.worker->device().kind())) filtered.push_back(w);
      }
    }
    const std::vector<plan::Candidate>& candidates = any_device ? idle : filtered;
    ClusterView view;
    view.known = true;
    view.usable_idle = static_cast<int>(candidates.size());
    view.needed = static_cast<int>(needed);
    if (Decide(RecordOf(*job, Now()), view, Now(), Limits()).action == Action::kPlace) {
      absl::Status status = Place(*job, job->spec, candidates, &idle, &counts);
      if (status.ok()) {
        held[job->owner] += needed;
        continue;
      }
      if (status.code() == absl::StatusCode::kInvalidArgument) {
        EndJob(job->id, FAILED, absl::StrCat("cannot place the job: ", status.message()))
            .IgnoreError();
        continue;
      }
      Log(absl::StrCat(job->id, ": placement deferred: ", status.ToString()));
      // Enough workers, but some rank fits on none of them: that is what it waits for.
      if (status.code() == absl::StatusCode::kResourceExhausted) {
        SetQueuedReason(*job, absl::StrCat("waiting for memory: ", status.message()));
        continue;
      }
    }
    // Its preemptions (begun now or earlier) free workers for it: they go to it first.
    const Preemption preemption = MaybePreempt(*job, candidates);
    if (holder == nullptr && (preemption.holds || ReservesWorkers(*job, counts))) {
      holder = job;
      holder_preempts = preemption.holds;
    }
    SetQueuedReason(*job,
                    absl::StrCat(WaitingReason(job->spec, counts), PreemptionNote(preemption)));
  }
}

void JobManager::SetQueuedReason(ActiveJob& job, const std::string& reason) {
  if (reason == job.reason) return;  // every change is a write and a log line
  absl::Status status = Transition(job, QUEUED, reason);
  if (!status.ok()) Log(absl::StrCat(job.id, ": ", status.ToString()));
}

absl::flat_hash_map<std::string, int64_t> JobManager::WorkersHeldByOwner() {
  absl::flat_hash_map<std::string, int64_t> held;
  for (const auto& [n, job] : jobs_) {
    if (job.state != QUEUED) held[job.owner] += static_cast<int64_t>(job.ranks.size());
  }
  return held;
}

QueueOrder JobManager::QueueOrderNow() { return QueueOrder(WorkersHeldByOwner()); }

std::optional<std::string> JobManager::OwnerQuotaWait(const std::string& owner, int64_t needed,
                                                      int64_t held) const {
  const int64_t cap = options_.max_workers_per_owner;
  if (cap <= 0 || owner.empty() || held + needed <= cap) return std::nullopt;
  if (needed > cap) {
    return absl::StrCat("it needs ", Plural(needed, "worker"), ", more than the ", cap,
                        " one owner may hold (--max_workers_per_owner)");
  }
  return absl::StrCat("waiting for ", owner, "'s jobs to free workers: they hold ", held,
                      " and this one needs ", needed, ", more than the ", cap,
                      " one owner may hold (--max_workers_per_owner)");
}

std::vector<ActiveJob*> JobManager::QueueInOrder() {
  std::vector<ActiveJob*> queued;
  for (auto& [n, job] : jobs_) {
    if (job.state == QUEUED && !job.pending_end.has_value()) queued.push_back(&job);
  }
  std::stable_sort(queued.begin(), queued.end(), QueueOrderNow());
  return queued;
}

std::string JobManager::HeldBackReason(const JobSpec& spec, const ActiveJob& holder,
                                       const WorkerCounts& counts, bool by_preemption) {
  // Without enough idle workers it would wait anyway: the reservation is not why.
  if (plan::WorkersNeeded(spec.parallel()) > counts.idle) return WaitingReason(spec, counts);
  if (by_preemption) {
    return absl::StrCat("waiting behind ", holder.id, " (priority ", holder.spec.priority(),
                        "), which preempted jobs of a lower priority: the workers freed go to it "
                        "first");
  }
  return absl::StrCat("waiting behind ", holder.id, ", queued for ",
                      Plural(plan::WorkersNeeded(holder.spec.parallel()), "worker"),
                      " for longer than --queue_reservation (",
                      absl::FormatDuration(options_.queue_reservation),
                      "): the workers freed go to it first");
}

const ActiveJob* JobManager::HolderFor(const JobSpec& spec, const WorkerCounts& counts) {
  // The scheduler's order (PlaceQueued): the first queued job that will not fit the idle
  // workers now and reserves them (one over its owner's share reserves nothing).
  absl::flat_hash_map<std::string, int64_t> held = WorkersHeldByOwner();
  for (const ActiveJob* job : QueueInOrder()) {
    const int64_t needed = plan::WorkersNeeded(job->spec.parallel());
    if (needed <= counts.idle || OwnerQuotaWait(job->owner, needed, held[job->owner])) continue;
    if (PreemptionsOf(*job).holds || ReservesWorkers(*job, counts)) {
      return SameWorkers(job->spec.device(), spec.device()) ? job : nullptr;
    }
  }
  return nullptr;
}

bool JobManager::ReservesWorkers(const ActiveJob& job, const WorkerCounts& counts) {
  if (options_.queue_reservation <= absl::ZeroDuration() ||
      Now() - job.submitted < options_.queue_reservation) {
    return false;
  }
  // Only a job that the live workers could run: one waiting for workers that may never come
  // holds back nobody.
  return LiveWorkersCouldRun(job.spec, counts);
}

bool JobManager::LiveWorkersCouldRun(const JobSpec& spec, const WorkerCounts& counts) {
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  if (counts.idle + counts.busy < needed) return false;
  if (AnyDevice(spec.device())) return true;
  return registry_
             .RootsOfLive(
                 [&](const WorkerInfo& w) { return DeviceFits(spec.device(), w.device().kind()); })
             .count >= needed;
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
  // The reconciler's rule (job_manager_apply.cc): check, save, then tell the workers. The
  // workers are reserved (held: no heartbeat delivers it yet), PLACING is saved, and only then
  // are the assignments published. A failed save frees them again: no worker saw the job, which
  // stays as it was (QUEUED or RECOVERING) for a later pass to place.
  RETURN_IF_ERROR(registry_.Assign(assignment, Now()));
  std::vector<std::string> workers;
  for (const RankAssignment& r : placed.placement.ranks()) workers.push_back(r.worker_id());
  const std::string reason =
      absl::StrCat("placed on ", Plural(workers.size(), "worker"), " (", WorkerList(workers),
                   "); waiting for ", workers.size() == 1 ? "it" : "them", " to start");
  absl::Status status = Transition(job, PLACING, reason, &placed.placement);
  if (!status.ok()) {
    registry_.CancelJob(job.id, workers);  // held, never delivered: frees them at once
    return status;
  }
  registry_.Publish(*assignment);
  if (options_.metrics != nullptr && job.recoveries.empty()) {
    options_.metrics->JobPlaced(Now() - job.submitted);
  }
  job.SetRanks(std::move(assignment));
  job.run_located = false;
  job.space_wait.reset();

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

std::string JobManager::ReasonAtSubmit(const JobSpec& spec, const std::string& owner,
                                       const WorkerCounts& counts) {
  const int64_t needed = plan::WorkersNeeded(spec.parallel());
  const ActiveJob* holder = HolderFor(spec, counts);
  const std::optional<std::string> over =
      OwnerQuotaWait(owner, needed, WorkersHeldByOwner()[owner]);
  return over.has_value()    ? *over
         : holder != nullptr ? HeldBackReason(spec, *holder, counts, PreemptionsOf(*holder).holds)
         : counts.idle >= needed ? std::string(kPlacingNow)
                                 : WaitingReason(spec, counts);
}

absl::StatusOr<SubmitJobResponse> JobManager::SubmitJob(
    const SubmitJobRequest& request, absl::Time deadline, const std::string& owner,
    const std::function<absl::Status(const JobSpec&)>& may_submit) {
  ASSIGN_OR_RETURN(JobPlan job_plan,
                   PlanSubmission(request, options_.max_spec_bytes, options_.job_limits));
  std::optional<std::string> too_big = NoWorkerCanHold(job_plan);
  if (too_big.has_value() && !request.allow_waiting()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no registered worker can ever hold this job: ", *too_big,
                     " (submit with --allow_waiting to queue it for workers that may join)"));
  }
  JobSpec spec = std::move(*job_plan.mutable_spec());
  if (may_submit != nullptr) RETURN_IF_ERROR(may_submit(spec));
  if (std::optional<std::string> over =
          OwnerQuotaWait(owner, plan::WorkersNeeded(spec.parallel()), /*held=*/0)) {
    return absl::FailedPreconditionError(absl::StrCat(owner, "'s job cannot run here: ", *over));
  }
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
    const bool any_device = AnyDevice(spec.device());
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
  const std::string reason = ReasonAtSubmit(spec, owner, counts);
  ASSIGN_OR_RETURN(Job job, store_->CreateJob(spec, reason, NowMs(), NewUid(), owner));
  for (const std::string& note : notes) Event(job.id(), note);
  for (const std::string& warning : response.warnings()) Event(job.id(), warning);
  ActiveJob active;
  active.id = job.id();
  active.uid = job.uid();
  active.owner = job.owner();
  active.spec = spec;
  active.run_spec = spec;
  active.submitted = absl::FromUnixMillis(job.submitted_unix_ms());
  active.state = QUEUED;
  active.reason = reason;
  jobs_.emplace(JobNumber(job.id()), std::move(active));
  Log(absl::StrCat(job.id(), ": submitted \"", spec.name(), "\"",
                   owner.empty() ? "" : absl::StrCat(" by ", owner), " needing ",
                   Plural(needed, "worker"), ": ", reason));
  if (options_.metrics != nullptr) options_.metrics->JobSubmitted();
  Wake();
  AddLiveState(&job);
  *response.mutable_job() = std::move(job);
  return response;
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
