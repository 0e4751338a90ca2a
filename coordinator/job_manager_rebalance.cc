// JobManager's rebalance (the straggler policy "rebalance", `dtrain rebalance`): re-cut a running
// pipeline from its stages' measured compute times (coordinator/policy/rebalance.h) and restart it
// on the new cut at its next sealed checkpoint, through the recovery path (a Recovery with
// rebalance_to: planned, not a failure). Apart from job_manager.cc so the job life cycle there
// stays readable; the same class (RebalanceJob, which takes the lock, is in job_manager.cc).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_manager.h"
#include "coordinator/recovery.h"
#include "plan/job_plan.h"

namespace dtrain::coordinator {

absl::StatusOr<RebalanceDecision> JobManager::RebalanceLocked(
    ActiveJob& job, absl::Span<const double> stage_compute_s, const std::string& why) {
  if (job.state != RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat(job.id, " is ", JobState_Name(job.state),
                                                      ": only a running job can be rebalanced"));
  }
  if (const Recovery* r = job.OpenRecovery(); r != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(job.id, " is still in recovery ", r->number(),
                                                      " (no step trained since): try again "
                                                      "once it trains"));
  }
  if (job.planned.pending_cut.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(job.id, " already moves to cut ",
                                                      CutText(*job.planned.pending_cut),
                                                      " at its next sealed checkpoint"));
  }
  ASSIGN_OR_RETURN(const JobPlan plan, plan::MakeJobPlan(job.run_spec));
  std::vector<double> window;
  if (stage_compute_s.empty()) {  // the latest straggler window's (`dtrain rebalance`)
    if (job.stragglers.scores.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          job.id, " has no straggler window scored yet: every rank reports its compute for ",
          job.spec.stragglers().window_steps(), " steps first (stragglers.window_steps)"));
    }
    window =
        StageComputeSeconds(job.assignment->placement(), plan.stages_size(), job.stragglers.scores);
    stage_compute_s = window;
  }
  ASSIGN_OR_RETURN(RebalanceDecision d,
                   DecideRebalance(plan, stage_compute_s,
                                   StageWorkers(job.assignment->placement(), plan.stages_size())));
  if (!d.move) {
    Event(job.id, absl::StrCat("rebalance (", why, "): not re-cut: ", d.summary));
    return d;
  }
  job.planned.pending_cut = d.to;
  job.planned.pending_cut_summary = d.summary;
  if (job.MovesAtNextSeal()) {
    // The checkpoint its ranks are asked for (within a step or two) is the cheapest restart:
    // no step is trained twice.
    Event(job.id, absl::StrCat("rebalance (", why, "): ", d.summary,
                               "; restarting on the new cut at the checkpoint its ranks are "
                               "asked for now"));
    return d;
  }
  // It cannot wait for a seal: restart now from the latest sealed one (or the start).
  Event(job.id, absl::StrCat("rebalance (", why, "): ", d.summary,
                             "; restarting on the new cut now, from the latest sealed checkpoint"));
  MaybeRebalanceAt(job, job.last_step);
  return d;
}

void JobManager::MaybeRebalanceAt(ActiveJob& job, int64_t step) {
  if (!job.planned.pending_cut.has_value() || job.state != RUNNING ||
      job.OpenRecovery() != nullptr || job.planned.restart.has_value()) {
    return;
  }
  if (step >= job.spec.steps()) {  // the last step's checkpoint: nothing left to train
    job.planned.pending_cut.reset();
    return;
  }
  Recovery rebalance;
  for (int layers : *job.planned.pending_cut) rebalance.add_rebalance_to(layers);
  rebalance.set_cause(
      absl::StrCat("rebalance: ", job.planned.pending_cut_summary, " at step ", step));
  job.planned.pending_cut.reset();
  const std::string why = rebalance.cause();
  ProposeRestart(job, std::move(rebalance), why);
}

}  // namespace dtrain::coordinator
