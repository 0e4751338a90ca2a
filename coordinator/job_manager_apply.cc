// JobManager's reconcile loop: a job's record and the cluster view go into job_decision.h's
// Decide, and Apply is the one place its answer takes effect. The rule of every application:
// check the transition against job_transitions.h, save it to the store, and only then change
// memory and tell the workers; a failed save leaves memory as it was, so the next pass decides
// (and tries) again.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_manager_internal.h"
#include "coordinator/job_transitions.h"
#include "coordinator/recovery.h"

namespace dtrain::coordinator {

DecisionLimits JobManager::Limits() const {
  DecisionLimits limits;
  limits.lease = options_.lease;
  limits.shrink_settle = options_.shrink_settle;
  return limits;
}

absl::Status JobManager::Reconcile(std::string job_id, const ClusterView& cluster,
                                   Placing* placing) {
  // Each applied decision moves the job on (a state, a phase): a few rounds at most.
  for (int round = 0; round < 4; ++round) {
    ActiveJob* job = FindActive(job_id);
    if (job == nullptr) return absl::OkStatus();  // ended
    const Decision d = Decide(RecordOf(*job, Now()), cluster, Now(), Limits());
    if (d.action == Action::kWait) return absl::OkStatus();
    RETURN_IF_ERROR(Apply(*job, d, placing));
    if (d.action == Action::kPlace || d.action == Action::kPlaceShrunk) break;  // its view is spent
  }
  return absl::OkStatus();
}

absl::Status JobManager::Apply(ActiveJob& job, const Decision& d, Placing* placing) {
  switch (d.action) {
    case Action::kWait:
      return absl::OkStatus();
    case Action::kRetryEnd: {
      const auto [state, reason] = *job.pending_end;
      return EndJob(job.id, state, reason);
    }
    case Action::kCancel: {
      const std::string reason = *job.cancel;
      job.cancel.reset();  // a refused save leaves a pending end to retry instead
      return EndJob(job.id, CANCELLED, reason);
    }
    case Action::kPlace:
    case Action::kPlaceShrunk:
      if (placing == nullptr || job.state != RECOVERING) {
        return absl::InternalError(absl::StrCat(job.id, ": a placement without the pass's view"));
      }
      PlaceRecovery(job, d.action == Action::kPlaceShrunk, *placing);
      return absl::OkStatus();
    case Action::kMarkRunning:
      return MarkRunning(job);
    case Action::kEndSucceeded:
      return Succeed(job);
    case Action::kDecideFailure:
      return FailWithRootCause(job);
    case Action::kWorkersNotReturned:
      return WorkersNotReturned(job);
    case Action::kBeginRecovery: {
      const ActiveJob::PlannedRestart planned = *job.planned.restart;
      return BeginRecovery(job, planned.recovery, planned.why, "");
    }
    case Action::kEndStopPhase:
      EndStopPhase(job);
      return absl::OkStatus();
    case Action::kFailRecovery:
    case Action::kEndFailed:
      break;  // the recovery's own step words these (AdvanceRecovery, Fail)
  }
  return absl::InternalError(
      absl::StrCat(job.id, ": ", ActionName(d.action), " applied out of turn"));
}

absl::Status JobManager::Transition(ActiveJob& job, JobState state, const std::string& reason,
                                    const Placement* placement) {
  RETURN_IF_ERROR(CheckTransition(job.state, state));
  RETURN_IF_ERROR(store_->UpdateState(job.id, state, reason, NowMs(), placement));
  Log(absl::StrCat(job.id, ": ", JobState_Name(job.state), " -> ", JobState_Name(state), ": ",
                   reason));
  job.state = state;
  job.reason = reason;
  if (state == RUNNING) {  // a new run: its stall clock starts now
    job.run_started = Now();
    job.diagnosis = ActiveJob::DiagnosisState();
    job.diagnosis.progress_at = Now();
  }
  to_notify_.push_back(job.id);
  return absl::OkStatus();
}

absl::Status JobManager::EndJob(const std::string& job_id, JobState state,
                                const std::string& reason) {
  auto it = jobs_.find(JobNumber(job_id));
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no active job ", job_id));
  ActiveJob& job = it->second;
  RETURN_IF_ERROR(CheckTransition(job.state, state));
  const std::string* output = state == SUCCEEDED ? &job.output : nullptr;
  absl::Status status = store_->UpdateState(job_id, state, reason, NowMs(), nullptr, output);
  // FailedPrecondition: the store already has it final; memory catches up below.
  if (!status.ok() && status.code() != absl::StatusCode::kFailedPrecondition) {
    // Retried at every pass (kRetryEnd) while the database refuses: said once, not each time.
    const std::pair<JobState, std::string> end = {state, reason};
    if (job.pending_end != end) {
      Log(absl::StrCat(job_id, ": cannot record ", JobState_Name(state),
                       " (retried until it can): ", status.ToString()));
    }
    job.pending_end = end;
    return status;
  }
  Log(absl::StrCat(job_id, ": ", JobState_Name(job.state), " -> ", JobState_Name(state), ": ",
                   reason));
  std::vector<std::string> workers;
  for (const ActiveJob::Rank& r : job.ranks) workers.push_back(r.worker_id);
  registry_.CancelJob(job_id, workers);
  to_notify_.push_back(job_id);
  to_forget_.push_back(job_id);
  if (options_.metrics != nullptr) options_.metrics->ClearStragglerScores(job_id);
  jobs_.erase(it);
  Wake();  // its workers may be free for queued jobs
  return absl::OkStatus();
}

absl::Status JobManager::MarkRunning(ActiveJob& job) {
  const std::string reason = job.ranks.size() == 1
                                 ? absl::StrCat("worker ", job.ranks[0].worker_id, " running")
                                 : absl::StrCat("all ", job.ranks.size(), " workers running");
  return Transition(job, RUNNING, reason);
}

absl::Status JobManager::Succeed(ActiveJob& job) {
  if (Recovery* r = job.OpenRecovery()) {  // a finishing run: no step, only the export
    r->set_first_step_ms(EndPhase(job));
    r->set_done(true);
    job.recovery.phase = RecoveryPhase::kNone;
    SaveRecoveries(job);
    Event(job.id, absl::StrCat("recovery ", r->number(), " done: ", PhaseSummary(*r)));
  }
  std::string reason = absl::StrCat("finished ", Plural(job.last_step, "step"));
  const EndReason end = job.end_reason == END_EARLY_STOPPED ? END_EARLY_STOPPED : END_STEPS_DONE;
  if (end == END_EARLY_STOPPED) {
    const EarlyStopping& stop = job.spec.eval().early_stopping();
    reason = absl::StrCat("stopped early at step ", job.last_step, " of ", job.spec.steps(),
                          ": val_loss did not improve by more than ", stop.min_delta(), " in ",
                          Plural(stop.patience(), "evaluation"));
  }
  RETURN_IF_ERROR(store_->SetEndReason(job.id, end));
  if (!job.output.empty()) absl::StrAppend(&reason, "; weights at ", job.output);
  return EndJob(job.id, SUCCEEDED, reason);
}

absl::Status JobManager::WorkersNotReturned(ActiveJob& job) {
  if (!job.restart.abandoned_by.empty()) {
    const std::string worker = job.restart.abandoned_by;
    return Fail(job,
                absl::StrCat("coordinator restarted and worker ", worker, " re-registered without ",
                             job.id),
                worker, /*curable=*/true);
  }
  std::vector<std::string> missing(job.restart.awaiting.begin(), job.restart.awaiting.end());
  std::sort(missing.begin(), missing.end());
  return Fail(job,
              absl::StrCat("coordinator restarted and ",
                           missing.size() == 1 ? "worker " : "workers ", WorkerList(missing),
                           " did not return within the lease (", Seconds(options_.lease), ")"),
              missing.front(), /*curable=*/true);
}

absl::Status JobManager::BeginRecovery(ActiveJob& job, Recovery recovery, const std::string& why,
                                       const std::string& failed_worker) {
  recovery.set_number(static_cast<int>(job.recoveries.size()) + 1);
  recovery.set_started_unix_ms(NowMs());
  recovery.set_last_step(job.last_step);
  const std::string kind(RecoveryKind(recovery));
  std::vector<Recovery> recoveries = job.recoveries;
  recoveries.push_back(std::move(recovery));
  std::vector<std::string> workers, stopping;
  for (const ActiveJob::Rank& r : job.ranks) {
    workers.push_back(r.worker_id);
    if (r.worker_id != failed_worker) stopping.push_back(r.worker_id);
  }
  const std::string reason = absl::StrCat(
      why, stopping.empty()
               ? ""
               : absl::StrCat("; stopping ", failed_worker.empty() ? "its " : "the other ",
                              Plural(stopping.size(), "rank")));
  // Save first: the recovery (idempotent: the same number again on a retry), then the state.
  RETURN_IF_ERROR(CheckTransition(job.state, RECOVERING));
  absl::Status saved = store_->SetRecoveries(job.id, recoveries);
  if (saved.ok()) saved = Transition(job, RECOVERING, reason);
  if (!saved.ok()) {
    Log(absl::StrCat(
        job.id, ": cannot record its recovery (the next pass tries again): ", saved.ToString()));
    return saved;
  }
  // Then act: stop every rank of the run now (the survivors would otherwise wait on the failed
  // one until their own communication timeout), and forget the run.
  if (options_.metrics != nullptr) options_.metrics->JobRecoveryStarted(kind);
  job.recoveries = std::move(recoveries);
  registry_.CancelJob(job.id, workers);
  job.recovery.stopped_rank_of = std::move(job.rank_of);
  job.recovery.stopped_reporting_rank = job.reporting_rank;
  job.ranks.clear();
  job.rank_of.clear();
  job.acked = job.succeeded = 0;
  job.failures = ActiveJob::Failures();
  job.restart = ActiveJob::RestartWait();
  // A rebalance not begun yet is forgotten (the new run is measured again), a preemption's or a
  // drain's yield is this restart; a checkpoint someone asked for (CheckpointJob) is still
  // wanted of the new run.
  const std::optional<int64_t> checkpoint_after = job.planned.checkpoint_after;
  job.planned = ActiveJob::Planned();
  job.planned.checkpoint_after = checkpoint_after;
  job.recovery.phase = RecoveryPhase::kStop;
  job.recovery.submitted_layout_refused = false;
  job.recovery.stopping = std::move(stopping);
  job.recovery.phase_start = Now();
  Wake();
  return absl::OkStatus();
}

}  // namespace dtrain::coordinator
