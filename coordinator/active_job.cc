#include "coordinator/active_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "plan/ranks.h"
#include "plan/spec_enums.h"

namespace dtrain::coordinator {

std::string DiagnosisOccasion::Describe() const {
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

bool ActiveJob::WaitsForNextSeal() const {
  return state == RUNNING && !pending_end.has_value() && !cancel.has_value() &&
         (!planned.yield_to.empty() || !planned.drain_at_seal.empty() ||
          planned.pending_cut.has_value() || planned.checkpoint_after.has_value());
}

bool ActiveJob::MovesAtNextSeal() const {
  return state == RUNNING && OpenRecovery() == nullptr && !pending_end.has_value() &&
         !cancel.has_value() && last_step < spec.steps();
}

void ActiveJob::AnswerCheckpointAsk(int64_t step) {
  if (planned.checkpoint_after.has_value() && step > *planned.checkpoint_after) {
    planned.checkpoint_after.reset();
  }
}

Recovery* ActiveJob::OpenRecovery() {
  if (recoveries.empty() || recoveries.back().done()) return nullptr;
  return &recoveries.back();
}

const Recovery* ActiveJob::OpenRecovery() const {
  return const_cast<ActiveJob*>(this)->OpenRecovery();
}

void ActiveJob::SetRanks(std::shared_ptr<const JobAssignment> run) {
  const Placement& placement = run->placement();
  ranks.clear();
  rank_of.clear();
  acked = succeeded = 0;
  for (int i = 0; i < placement.ranks_size(); ++i) {
    ranks.push_back(Rank{placement.ranks(i).worker_id()});
    rank_of[placement.ranks(i).worker_id()] = i;
  }
  reporting_rank = plan::ReportingRank(run->spec().parallel());
  assignment = std::move(run);
}

void ActiveJob::MarkAcked(int rank) {
  if (!ranks[rank].acked) ++acked;
  ranks[rank].acked = true;
}

void ActiveJob::MarkSucceeded(int rank) {
  if (!ranks[rank].succeeded) ++succeeded;
  ranks[rank].succeeded = true;
}

JobRecord RecordOf(const ActiveJob& job, absl::Time now) {
  JobRecord r;
  r.state = job.state;
  r.ranks = static_cast<int>(job.ranks.size());
  r.acked = job.acked;
  r.succeeded = job.succeeded;
  r.cancel_requested = job.cancel.has_value();
  r.pending_end = job.pending_end.has_value();
  if (r.pending_end) r.pending_end_state = job.pending_end->first;
  r.failures = static_cast<int>(job.failures.heard.size());
  absl::flat_hash_set<std::string> failed;
  for (const RankFailure& f : job.failures.heard) {
    failed.insert(f.worker_id);
    r.conclusive_failure |= f.cause != RankFailure::kPeer;
  }
  r.failed_workers = static_cast<int>(failed.size());
  r.decide_failure_at = job.failures.decide_at;
  r.awaits_diagnosis = job.diagnosis.Awaits(now);
  r.awaiting = static_cast<int>(job.restart.awaiting.size());
  r.recover_deadline = job.restart.deadline;
  r.abandoned = !job.restart.abandoned_by.empty();
  r.planned_restart = job.planned.restart.has_value();
  r.phase = job.recovery.phase;
  r.phase_start = job.recovery.phase_start;
  r.shrink = plan::PlannedWorkerLossPolicy(job.spec) == WORKER_LOSS_SHRINK;
  r.wait_for = plan::RecoveryWaitFor(job.spec);
  r.preempted = job.OpenRecovery() != nullptr && !job.OpenRecovery()->preempted_by().empty();
  return r;
}

}  // namespace dtrain::coordinator
