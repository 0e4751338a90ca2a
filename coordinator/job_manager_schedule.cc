// JobManager's scheduler pass: the queued jobs in their order (priority, owners' shares,
// quotas), each placed on idle workers or given the reason it waits, and the placement itself
// (reserve, save, publish).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/peer_secret.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/rank_assignment.h"
#include "coordinator/recovery.h"
#include "plan/job_plan.h"
#include "plan/placement.h"
#include "plan/ranks.h"

namespace dtrain::coordinator {

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
  samples_.Expire(absl::Now(), [this](const std::string& id) { return registry_.IsLive(id); });
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

}  // namespace dtrain::coordinator
