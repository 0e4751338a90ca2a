#include "coordinator/job_decision.h"

namespace dtrain::coordinator {
namespace {

Decision Do(Action action, JobState to, RestartKind restart = RestartKind::kNone) {
  Decision d;
  d.action = action;
  d.to = to;
  d.restart = restart;
  return d;
}

// Enough usable idle workers for the run, and no placement just deferred.
bool Fits(const ClusterView& cluster) {
  return cluster.usable_idle >= cluster.needed && !cluster.placement_deferred;
}

// RECOVERING: stop the old run, then place the new one (or shrink it, or give up).
Decision DecideRecovering(const JobRecord& job, const ClusterView& cluster, absl::Time now,
                          const DecisionLimits& limits) {
  const absl::Duration in_phase = now - job.phase_start;
  if (job.phase == RecoveryPhase::kStop) {
    if (cluster.old_ranks_running > 0 && in_phase < limits.lease)
      return Do(Action::kWait, RECOVERING);
    return Do(Action::kEndStopPhase, RECOVERING);
  }
  if (job.preempted) {  // a queued job of its priority, in effect
    return cluster.queued_ahead == 0 && Fits(cluster) ? Do(Action::kPlace, PLACING)
                                                      : Do(Action::kWait, RECOVERING);
  }
  const bool settling = job.shrink && in_phase < limits.shrink_settle;
  if (!cluster.placement_deferred) {
    if (cluster.usable_idle >= cluster.needed) return Do(Action::kPlace, PLACING);
    if (job.shrink && !settling && cluster.shrunk_needed > 0 &&
        cluster.usable_idle >= cluster.shrunk_needed) {
      return Do(Action::kPlaceShrunk, PLACING);
    }
  }
  if (in_phase >= job.wait_for) return Do(Action::kFailRecovery, FAILED);
  Decision wait = Do(Action::kWait, RECOVERING);
  wait.settling = settling && cluster.usable_idle < cluster.needed;
  return wait;
}

// PLACING or RUNNING: a run on its ranks.
Decision DecideRun(const JobRecord& job, absl::Time now) {
  if (job.ranks > 0 && job.succeeded >= job.ranks) return Do(Action::kEndSucceeded, SUCCEEDED);
  if (job.failures > 0) {
    const bool known = job.conclusive_failure || job.failed_workers >= job.ranks || job.ranks <= 1;
    if (known || (now >= job.decide_failure_at && !job.awaits_diagnosis)) {
      return Do(Action::kDecideFailure, job.state);
    }
  }
  if (job.abandoned || (job.awaiting > 0 && now > job.recover_deadline)) {
    return Do(Action::kWorkersNotReturned, job.state);
  }
  if (job.planned_restart) {
    return Do(Action::kBeginRecovery, RECOVERING, RestartKind::kPlanned);
  }
  if (job.state == PLACING && job.ranks > 0 && job.acked >= job.ranks) {
    return Do(Action::kMarkRunning, RUNNING);
  }
  return Do(Action::kWait, job.state);
}

}  // namespace

absl::string_view RecoveryPhaseName(RecoveryPhase phase) {
  switch (phase) {
    case RecoveryPhase::kNone:
      return "none";
    case RecoveryPhase::kStop:
      return "stop";
    case RecoveryPhase::kPlace:
      return "place";
    case RecoveryPhase::kLoad:
      return "load";
    case RecoveryPhase::kFirstStep:
      return "first step";
  }
  return "?";
}

absl::string_view ActionName(Action action) {
  switch (action) {
    case Action::kWait:
      return "wait";
    case Action::kRetryEnd:
      return "retry end";
    case Action::kCancel:
      return "cancel";
    case Action::kPlace:
      return "place";
    case Action::kPlaceShrunk:
      return "place shrunk";
    case Action::kMarkRunning:
      return "mark running";
    case Action::kEndSucceeded:
      return "end succeeded";
    case Action::kDecideFailure:
      return "decide failure";
    case Action::kWorkersNotReturned:
      return "workers not returned";
    case Action::kBeginRecovery:
      return "begin recovery";
    case Action::kEndStopPhase:
      return "end stop phase";
    case Action::kFailRecovery:
      return "fail recovery";
    case Action::kEndFailed:
      return "end failed";
  }
  return "?";
}

Decision Decide(const JobRecord& job, const ClusterView& cluster, absl::Time now,
                const DecisionLimits& limits) {
  if (job.pending_end) return Do(Action::kRetryEnd, job.pending_end_state);
  if (job.cancel_requested) return Do(Action::kCancel, CANCELLED);
  switch (job.state) {
    case QUEUED:
      return cluster.known && Fits(cluster) ? Do(Action::kPlace, PLACING)
                                            : Do(Action::kWait, QUEUED);
    case RECOVERING:
      if (!cluster.known) return Do(Action::kWait, RECOVERING);
      return DecideRecovering(job, cluster, now, limits);
    case PLACING:
    case RUNNING:
      return DecideRun(job, now);
    default:  // ended (or unknown): nothing follows
      return Do(Action::kWait, job.state);
  }
}

Decision DecideAfterFailure(const FailureFacts& facts) {
  // Done is done: whatever failed after the last seal, the weights are exported from it.
  if (facts.final_step_sealed)
    return Do(Action::kBeginRecovery, RECOVERING, RestartKind::kFinishing);
  // A worker stopped on purpose is not a failure (a planned restart).
  if (facts.stopped && facts.curable) {
    return Do(Action::kBeginRecovery, RECOVERING, RestartKind::kMaintenance);
  }
  if (!facts.curable || facts.failures_used >= facts.max_restarts) {
    return Do(Action::kEndFailed, FAILED);
  }
  return Do(Action::kBeginRecovery, RECOVERING, RestartKind::kFailure);
}

}  // namespace dtrain::coordinator
