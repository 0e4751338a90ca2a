// JobManager's failures and recoveries (recovery.h, failure_report.h): failures are recorded,
// job_decision.h decides when the root cause is named and what it means, and a recovery's
// phases (stop, place, load, first step) advance through the same decision.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/recovery.h"
#include "plan/job_plan.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"

namespace dtrain::coordinator {
namespace {

// An idle worker a recovery of `job` may be placed on, and a grow back counts: its device fits
// the job's and it is not `excluded` (failed the job twice, or slow for a straggler replace).
bool UsableFor(const ActiveJob& job, const WorkerInfo& w,
               const absl::flat_hash_set<std::string>& excluded) {
  return DeviceFits(job.spec.device(), w.device().kind()) && !excluded.contains(w.worker_id());
}

}  // namespace

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
  if (fault.kind == WorkerFault::kLost) {
    RankFailure failure;
    failure.cause = RankFailure::kLost;
    failure.rank = job->rank_of.at(fault.worker_id);
    failure.worker_id = fault.worker_id;
    failure.error = absl::StrCat("no heartbeat for ", Seconds(fault.silent));
    failure.silent = fault.silent;
    AddFailure(*job, std::move(failure));
    return;
  }
  Fail(*job, reason, fault.worker_id, /*curable=*/true).IgnoreError();  // logged; retried
}

void JobManager::AddFailure(ActiveJob& job, RankFailure failure) {
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
  const std::string id = job.id;
  const std::string worker = failure.worker_id;
  job.failures.heard.push_back(std::move(failure));
  const bool first = job.failures.decide_at == absl::InfiniteFuture();
  if (first) job.failures.decide_at = Now() + options_.failure_window;
  Reconcile(id).IgnoreError();  // logged; the pass decides again
  const ActiveJob* still = FindActive(id);
  if (first && still != nullptr && !still->failures.heard.empty()) {
    Log(absl::StrCat(id, ": ", worker, " failed because of a peer; waiting up to ",
                     Seconds(options_.failure_window), " for the root cause"));
  }
}

absl::Status JobManager::FailWithRootCause(ActiveJob& job) {
  absl::flat_hash_map<std::string, absl::Duration> heartbeat_age;
  const absl::Time now = Now();
  for (const WorkerInfo& w : registry_.List()) {  // rare: one scan of the registry
    if (job.rank_of.contains(w.worker_id())) {
      heartbeat_age[w.worker_id()] = now - absl::FromUnixMillis(w.last_heartbeat_unix_ms());
    }
  }
  // A lost worker's silence as its lease ran out (it may have registered again since).
  for (const RankFailure& f : job.failures.heard) {
    if (f.cause == RankFailure::kLost) heartbeat_age[f.worker_id] = f.silent;
  }
  const Placement empty;
  const Placement& placement = job.assignment != nullptr ? job.assignment->placement() : empty;
  const RootCause cause = FindRootCause(placement, job.failures.heard, heartbeat_age);
  auto silent = heartbeat_age.find(cause.worker_id);
  bool stopped = false;
  for (const RankFailure& f : job.failures.heard) {
    stopped |= f.cause == RankFailure::kStopped && f.worker_id == cause.worker_id;
  }
  return Fail(job, cause.reason, cause.worker_id, cause.curable,
              silent != heartbeat_age.end() ? silent->second : absl::ZeroDuration(), stopped);
}

bool JobManager::FinalStepSealed(const ActiveJob& job) {
  for (const Recovery& r : job.recoveries) {
    if (r.finishing()) return false;  // tried once: its failure is the job's
  }
  absl::StatusOr<std::vector<CheckpointInfo>> sealed = store_->Checkpoints(job.id);
  return sealed.ok() && !sealed->empty() && sealed->back().step() >= job.spec.steps();
}

absl::Status JobManager::Fail(ActiveJob& job, const std::string& cause, const std::string& worker,
                              bool curable, absl::Duration silent, bool stopped) {
  // Where the run was stuck before it failed, when its stall was diagnosed: on the first line,
  // which a RECOVERING reason keeps.
  std::string reason = cause;
  if (!job.diagnosis.summary.empty()) {
    reason.insert(std::min(reason.find('\n'), reason.size()),
                  absl::StrCat(" (diagnosed when ", job.diagnosis.occasion.Describe(), ": ",
                               job.diagnosis.summary, ")"));
  }
  const std::string first_line = reason.substr(0, reason.find('\n'));
  FailureFacts facts;
  facts.state = job.state;
  facts.curable = curable;
  facts.stopped = stopped;
  facts.final_step_sealed = FinalStepSealed(job);
  facts.failures_used = FailureCount(job.recoveries);
  facts.max_restarts = job.spec.fault_tolerance().max_restarts();
  const Decision d = DecideAfterFailure(facts);
  Recovery r;
  r.set_cause(reason);
  r.set_failed_worker(worker);
  switch (d.restart) {
    case RestartKind::kFinishing:  // whatever failed after the last seal: export from it
      r.set_finishing(true);
      r.set_detect_ms(absl::ToInt64Milliseconds(silent));
      return BeginRecovery(
          job, std::move(r),
          absl::StrCat("step ", job.spec.steps(),
                       ", the last, is sealed: finishing the job from it (not a failure) after ",
                       first_line),
          worker);
    case RestartKind::kMaintenance:
      r.set_maintenance(true);
      return BeginRecovery(
          job, std::move(r),
          absl::StrCat("maintenance (not counted against max_restarts): ", first_line), worker);
    case RestartKind::kFailure:
      r.set_detect_ms(absl::ToInt64Milliseconds(silent));
      return BeginRecovery(job, std::move(r),
                           absl::StrCat("restart ", facts.failures_used + 1, " of ",
                                        facts.max_restarts, ": ", first_line),
                           worker);
    case RestartKind::kNone:
    case RestartKind::kPlanned:
      break;
  }
  std::string why = reason;
  if (facts.failures_used > 0) {
    why = ReasonNamingEveryFailure(
        absl::StrCat(
            curable ? absl::StrCat("failed again after ", Plural(facts.failures_used, "recovery"),
                                   " (fault_tolerance.max_restarts=", facts.max_restarts, "): ")
                    : "",
            reason),
        job.recoveries);
  }
  return EndJob(job.id, FAILED, why);  // logged; retried when it failed
}

void JobManager::ProposeRestart(ActiveJob& job, Recovery recovery, const std::string& why) {
  if (job.planned.restart.has_value()) return;  // one restart at a time
  job.planned.restart = ActiveJob::PlannedRestart{std::move(recovery), why};
}

std::optional<int64_t> JobManager::IdleToGrowBack(const ActiveJob& job) {
  if (!job.MovesAtNextSeal() || job.planned.restart.has_value() ||
      plan::PlannedWorkerLossPolicy(job.spec) != WORKER_LOSS_SHRINK) {
    return std::nullopt;
  }
  const int64_t full = plan::WorkersNeeded(job.spec.parallel());
  const int64_t running_on = static_cast<int64_t>(job.ranks.size());
  if (running_on >= full || running_on + registry_.Counts().idle < full) return std::nullopt;
  // Rare (a shrunk job, and idle workers): one scan of the idle workers.
  const absl::flat_hash_set<std::string> excluded = WorkersFailedTwice(job.recoveries);
  std::vector<std::string> ids;  // its own workers and the idle ones it would grow onto
  for (const auto& [worker_id, rank] : job.rank_of) ids.push_back(worker_id);
  int64_t idle = 0;
  for (const WorkerInfo& w : registry_.IdleWorkers()) {
    // (A rank of this run that already finished is idle too, and counted as running.)
    if (UsableFor(job, w, excluded) && !job.rank_of.contains(w.worker_id())) {
      ++idle;
      ids.push_back(w.worker_id());
    }
  }
  if (running_on + idle < full) return std::nullopt;
  std::sort(ids.begin(), ids.end());
  if (!job.grow_refused_on.empty() && absl::StrJoin(ids, ",") == job.grow_refused_on) {
    return std::nullopt;  // its submitted layout did not fit these workers
  }
  return idle;
}

void JobManager::MaybeGrowBack(ActiveJob& job, int64_t sealed_step) {
  if (sealed_step >= job.spec.steps()) return;  // the last step's: nothing left to train
  const std::optional<int64_t> idle = IdleToGrowBack(job);
  if (!idle.has_value()) return;
  const ParallelLayout& p = job.spec.parallel();
  Recovery grow;
  grow.set_grow(true);
  grow.set_cause(absl::StrFormat(
      "growing back to dp=%d pp=%d tp=%d at the checkpoint of step %d: %s idle again", p.dp(),
      p.pp(), p.tp(), sealed_step, Plural(*idle, "worker")));
  const std::string why = grow.cause();
  ProposeRestart(job, std::move(grow), why);
}

void JobManager::AdvanceRecovery(ActiveJob& job, std::vector<plan::Candidate>* idle,
                                 WorkerCounts* counts) {
  if (job.OpenRecovery() == nullptr) return;
  Placing placing;
  placing.idle = idle;
  placing.counts = counts;
  bool deferred = false;
  for (int round = 0; round < 3; ++round) {  // stop, place (again when deferred)
    ClusterView view = RecoveryView(job, &placing);
    view.placement_deferred = deferred;
    const Decision d = Decide(RecordOf(job, Now()), view, Now(), Limits());
    switch (d.action) {
      case Action::kEndStopPhase:
        EndStopPhase(job);
        continue;
      case Action::kPlace:
      case Action::kPlaceShrunk:
        if (PlaceRecovery(job, d.action == Action::kPlaceShrunk, placing)) return;
        // A shrunk job whose submitted layout does not fit resumes on the one it ran on.
        if (d.action == Action::kPlace && RefuseSubmittedLayout(job, placing)) continue;
        deferred = true;
        continue;
      case Action::kWait:
      case Action::kFailRecovery:
        if (job.recovery.phase == RecoveryPhase::kPlace) {
          // A shrunk placement that was deferred waits for the shrunk layout's workers.
          const bool shrunk = deferred && view.usable_idle < view.needed && view.shrunk_needed > 0;
          RecoveryWaits(job, placing, shrunk ? view.shrunk_needed : view.needed, d.settling,
                        d.action == Action::kFailRecovery);
        }
        return;
      default:
        Apply(job, d, &placing).IgnoreError();  // logged; retried
        return;
    }
  }
}

ClusterView JobManager::RecoveryView(ActiveJob& job, Placing* placing) {
  ClusterView view;
  view.known = true;
  if (job.recovery.phase == RecoveryPhase::kStop) {
    // Every old rank's worker reported the run gone (or is lost), at most a lease.
    for (const std::string& w : job.recovery.stopping) {
      NoteOldRunStep(job, registry_.RunningStep(w, job.id));
    }
    for (const std::string& w : job.recovery.stopping) {
      if (registry_.JobOf(w) == job.id) ++view.old_ranks_running;
    }
    return view;
  }
  const Recovery& r = *job.OpenRecovery();
  // A straggler replace (this one's straggler among them) takes no worker found slow before.
  placing->excluded = r.replaced_worker().empty() ? WorkersFailedTwice(job.recoveries)
                                                  : NotSparesForReplace(job.recoveries);
  placing->candidates.clear();
  for (const plan::Candidate& w : *placing->idle) {
    if (UsableFor(job, *w.worker, placing->excluded)) {
      placing->candidates.push_back(w);
    }
  }
  // The submitted layout when the workers are there (after a shrink too), else the current one.
  const int64_t usable = static_cast<int64_t>(placing->candidates.size());
  placing->spec = KeepCut(
      r, job.run_spec,
      usable >= plan::WorkersNeeded(job.spec.parallel()) && !job.recovery.submitted_layout_refused
          ? job.spec
          : job.run_spec);
  view.usable_idle = static_cast<int>(usable);
  view.needed = static_cast<int>(plan::WorkersNeeded(placing->spec.parallel()));
  if (!r.preempted_by().empty()) {  // back in the queue, in effect: no shrinking
    view.queued_ahead = QueuedAheadOfPreempted(job);
    return view;
  }
  if (usable < view.needed && plan::PlannedWorkerLossPolicy(job.spec) == WORKER_LOSS_SHRINK) {
    absl::StatusOr<JobPlan> smaller = plan::ShrinkPlan(placing->spec, usable);
    if (smaller.ok()) {
      const ParallelLayout& from = placing->spec.parallel();
      const ParallelLayout& to = smaller->spec().parallel();
      placing->shrink_note = absl::StrFormat(
          "; shrunk from dp=%d pp=%d tp=%d to dp=%d pp=%d tp=%d (batch_size %d: %d "
          "micro-batches per replica)",
          from.dp(), from.pp(), from.tp(), to.dp(), to.pp(), to.tp(), placing->spec.batch_size(),
          smaller->micro_batches());
      placing->shrunk = smaller->spec();
      view.shrunk_needed = static_cast<int>(plan::WorkersNeeded(placing->shrunk.parallel()));
    }
  }
  return view;
}

void JobManager::EndStopPhase(ActiveJob& job) {
  Recovery* r = job.OpenRecovery();
  r->set_stop_ms(EndPhase(job));
  job.recovery.phase = RecoveryPhase::kPlace;
  SaveRecoveries(job);
  const std::string label = absl::StrCat("recovery ", r->number());
  const size_t stopping = job.recovery.stopping.size();
  Event(job.id, stopping == 0 ? absl::StrCat(label, ": no other rank to stop")
                              : absl::StrFormat("%s: the other %s stopped in %.1fs", label,
                                                Plural(stopping, "rank"), r->stop_ms() / 1e3));
}

bool JobManager::RefuseSubmittedLayout(ActiveJob& job, const Placing& placing) {
  const int64_t submitted = plan::WorkersNeeded(job.spec.parallel());
  if (job.recovery.submitted_layout_refused ||
      plan::WorkersNeeded(placing.spec.parallel()) != submitted ||
      plan::WorkersNeeded(job.run_spec.parallel()) >= submitted) {
    return false;  // not the submitted layout of a shrunk job
  }
  job.recovery.submitted_layout_refused = true;
  std::vector<std::string> ids;
  for (const plan::Candidate& c : placing.candidates) ids.push_back(c.worker->worker_id());
  std::sort(ids.begin(), ids.end());
  job.grow_refused_on = absl::StrJoin(ids, ",");
  const ParallelLayout& p = job.run_spec.parallel();
  Event(job.id, absl::StrFormat("the submitted layout does not fit the %d usable idle workers "
                                "(%s): resuming on the layout it ran on, dp=%d pp=%d tp=%d; it "
                                "grows back when other workers are idle",
                                ids.size(), placing.deferred_because, p.dp(), p.pp(), p.tp()));
  return true;
}

bool JobManager::PlaceRecovery(ActiveJob& job, bool shrunk, Placing& placing) {
  const JobSpec spec = shrunk ? placing.shrunk : placing.spec;
  absl::Status status = Place(job, spec, placing.candidates, placing.idle, placing.counts);
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    Fail(job, absl::StrCat("cannot place the job: ", status.message()), "", false).IgnoreError();
    return true;
  }
  if (!status.ok()) {
    Log(absl::StrCat(job.id, ": recovery placement deferred: ", status.ToString()));
    placing.deferred_because = std::string(status.message());
    return false;
  }
  Recovery* r = job.OpenRecovery();
  r->set_place_ms(EndPhase(job));
  *r->mutable_layout() = spec.parallel();
  for (const ActiveJob::Rank& rank : job.ranks) r->add_workers(rank.worker_id);
  job.run_spec = spec;
  // On its submitted layout again: a later shrink may try any workers to grow back onto.
  if (plan::WorkersNeeded(spec.parallel()) == plan::WorkersNeeded(job.spec.parallel())) {
    job.grow_refused_on.clear();
  }
  job.recovery.phase = RecoveryPhase::kLoad;
  SaveRecoveries(job);
  Event(job.id, absl::StrFormat("recovery %d: placed on %s (dp=%d pp=%d tp=%d)%s; resuming from "
                                "the job's latest sealed checkpoint",
                                r->number(), WorkerList({r->workers().begin(), r->workers().end()}),
                                spec.parallel().dp(), spec.parallel().pp(), spec.parallel().tp(),
                                shrunk ? placing.shrink_note : ""));
  return true;
}

void JobManager::RecoveryWaits(ActiveJob& job, const Placing& placing, int needed, bool settling,
                               bool expired) {
  const Recovery& r = *job.OpenRecovery();
  const int usable = static_cast<int>(placing.candidates.size());
  if (!r.preempted_by().empty()) {
    const int ahead = QueuedAheadOfPreempted(job);
    SetRecoveringReason(
        job, absl::StrCat("preempted by ", r.preempted_by(), ": waiting for ",
                          Plural(needed, "idle worker"), " (", usable, " usable idle)",
                          ahead == 0 ? ""
                                     : absl::StrCat(" behind ", Plural(ahead, "queued job"),
                                                    " of a higher priority"),
                          "; it resumes from its latest sealed checkpoint"));
    return;
  }
  const absl::Duration wait_for = plan::RecoveryWaitFor(job.spec);
  std::string waiting =
      absl::StrCat("waiting up to ", Seconds(wait_for), " (fault_tolerance.wait_for) for ",
                   Plural(needed, "idle worker"), "; ", usable, " usable idle");
  if (settling) {
    waiting = absl::StrCat("waiting ", Seconds(options_.shrink_settle), " for ",
                           Plural(needed, "idle worker"), " (", usable,
                           " usable idle) before shrinking: workers may be coming back");
  }
  if (!placing.excluded.empty()) {
    std::vector<std::string> names(placing.excluded.begin(), placing.excluded.end());
    std::sort(names.begin(), names.end());
    absl::StrAppend(&waiting, " (not ", WorkerList(names), ": failed this job twice)");
  }
  const std::string label = absl::StrCat("recovery ", r.number());
  if (expired) {
    EndJob(job.id, FAILED,
           ReasonNamingEveryFailure(absl::StrCat(label, " found no workers: ", waiting),
                                    job.recoveries))
        .IgnoreError();
    return;
  }
  const std::string reason =
      r.grow()          ? absl::StrCat("growing back: ", waiting)
      : r.finishing()   ? absl::StrCat("finishing from the sealed last step: ", waiting)
      : r.maintenance() ? absl::StrCat("maintenance restart: ", waiting)
      : !r.replaced_worker().empty()
          ? absl::StrCat("replacing straggler ", r.replaced_worker(), ": ", waiting)
          : absl::StrCat("restart ", FailureCount(job.recoveries), " of ",
                         job.spec.fault_tolerance().max_restarts(), ": ", waiting);
  SetRecoveringReason(job, reason);
}

void JobManager::SetRecoveringReason(ActiveJob& job, const std::string& reason) {
  if (reason == job.reason) return;  // every change is a write and a log line
  absl::Status status = Transition(job, RECOVERING, reason);
  if (!status.ok()) Log(absl::StrCat(job.id, ": ", status.ToString()));
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
  const int64_t ms = absl::ToInt64Milliseconds(now - job.recovery.phase_start);
  job.recovery.phase_start = now;
  return std::max<int64_t>(ms, 0);
}

void JobManager::NoteOldRunStep(ActiveJob& job, int64_t step) {
  Recovery* r = job.OpenRecovery();
  if (r == nullptr || step <= r->last_step()) return;
  r->set_last_step(step);
  if (r->workers_size() > 0 && job.run_located) {
    r->set_steps_redone(std::max<int64_t>(0, step - r->resumed_from_step()));
  }
  SaveRecoveries(job);
}

}  // namespace dtrain::coordinator
